//! What a collection is made of, part by part (for operators and the web
//! console): each immutable part's rows, dead keys, bytes and index, and
//! when its file was written.

use super::commit::Change;
use super::{Collection, Inner};
use std::time::{SystemTime, UNIX_EPOCH};

/// Changes kept in [`Collection::history`].
pub const HISTORY: usize = 256;

/// A change to the part list: what the background optimizer (or `seal`,
/// `optimize`, `compact`) did, as [`Collection::history`] lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct PartEvent {
    /// When it was committed, milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// `seal` (a frozen part written as a segment file), `build` (a
    /// segment's index built), `merge` (segments merged into one) or
    /// `compact` (a segment rewritten without its dead rows).
    pub what: &'static str,
    /// Ids of the parts it replaced.
    pub inputs: Vec<u64>,
    /// Id of the part it wrote (none when every row was dead).
    pub output: Option<u64>,
    /// Rows of that part.
    pub rows: usize,
}

/// One immutable part of a collection, as [`Collection::parts`] lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct PartSummary {
    /// Part id (segment ids grow: a merge's output has a larger id than
    /// its inputs).
    pub id: u64,
    /// The segment file, or `None` for a frozen part still in memory.
    pub file: Option<String>,
    /// Rows stored (live, replaced and deleted).
    pub rows: usize,
    /// Live rows.
    pub live: usize,
    /// Keys replaced or deleted since the part was written (tombstones).
    pub dead: usize,
    /// `flat`, `hnsw` or `ivf_rq`: the index its rows are searched with.
    pub kind: &'static str,
    /// Whether the part is searched through the collection's index kind
    /// (false: exact scan, waiting for the optimizer or under the index
    /// threshold).
    pub indexed: bool,
    /// Bytes of the segment file (0 for a frozen part).
    pub file_bytes: u64,
    /// Bytes held in memory (frozen parts).
    pub memory_bytes: u64,
    /// When the file was written, milliseconds since the Unix epoch (its
    /// modification time; `None` for a frozen part).
    pub written_ms: Option<u64>,
}

impl Inner {
    /// Adds a committed change to the history.
    pub(super) fn record(&self, what: &'static str, change: &Change) {
        let out = change.add.first();
        let e = PartEvent {
            at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            what,
            inputs: change.remove.clone(),
            output: out.map(|p| p.id),
            rows: out.map_or(0, |p| p.slot_count()),
        };
        let mut h = self.history.lock();
        if h.len() == HISTORY {
            h.pop_front();
        }
        h.push_back(e);
    }
}

impl Collection {
    /// The latest changes to the part list since the collection was
    /// opened (at most [`HISTORY`]), oldest first.
    pub fn history(&self) -> Vec<PartEvent> {
        self.inner.history.lock().iter().cloned().collect()
    }

    /// The immutable parts as they are now: sealed segments by id, then
    /// frozen parts, oldest first. The mutable part is
    /// [`stats`](Collection::stats)`().active_vectors`.
    pub fn parts(&self) -> Vec<PartSummary> {
        let c = &*self.inner;
        let st = c.snapshot();
        st.parts
            .iter()
            .map(|p| {
                let (memory_bytes, file_bytes) = p.bytes();
                let written_ms = p.file().and_then(|f| {
                    let m = std::fs::metadata(c.dir.join(f)).ok()?.modified().ok()?;
                    let d = m.duration_since(UNIX_EPOCH).ok()?;
                    Some(d.as_millis() as u64)
                });
                let kind = p.kind();
                PartSummary {
                    id: p.id,
                    file: p.file().map(str::to_string),
                    rows: p.slot_count(),
                    live: p.live_len(),
                    dead: p.dead().keys.len(),
                    kind: kind.name(),
                    indexed: c.config.is_built(kind),
                    file_bytes,
                    memory_bytes,
                    written_ms,
                }
            })
            .collect()
    }
}
