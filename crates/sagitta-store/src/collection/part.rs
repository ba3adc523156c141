//! An immutable part of a collection: a sealed, memory-mapped segment, or
//! a frozen mutable part still in memory (waiting to be flushed). Both
//! keep a dead set: keys replaced or deleted after the part stopped
//! taking writes, which searches turn into a filter bitmap.

use super::active::ActiveRows;
use crate::error::Result;
use crate::filter::SegmentPayload;
use crate::payload::{FieldType, Row, Schema, Value};
use crate::segment::Segment;
use parking_lot::RwLock;
use sagitta_index::{Bitset, GraphView, Index, IndexKind, IndexRead};
use std::collections::HashSet;
use std::sync::Arc;

/// Keys deleted from one part, and the matching filter.
#[derive(Debug, Default)]
pub(crate) struct Dead {
    pub keys: HashSet<u64>,
    /// Slots still allowed (None while no key is dead).
    pub allowed: Option<Bitset>,
}

/// Where a part's rows live.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per part, never moved in a hot path
pub(crate) enum Body {
    /// A segment file named by the manifest.
    Sealed { file: String, seg: Segment },
    /// A frozen mutable part (Flat, in memory) holding the WAL records up
    /// to `last_seq`; the optimizer flushes it to a segment file.
    Frozen {
        index: Arc<Index>,
        rows: Arc<ActiveRows>,
        last_seq: u64,
    },
}

#[derive(Debug)]
pub(crate) struct Part {
    pub id: u64,
    pub body: Body,
    dead: RwLock<Arc<Dead>>,
}

impl Part {
    pub fn new(id: u64, body: Body) -> Part {
        Part {
            id,
            body,
            dead: RwLock::new(Arc::new(Dead::default())),
        }
    }

    /// A part with the same dead set as `from` (whose slots it shares).
    pub fn with_dead_of(id: u64, body: Body, from: &Part) -> Part {
        Part {
            id,
            body,
            dead: RwLock::new(from.dead()),
        }
    }

    pub fn dead(&self) -> Arc<Dead> {
        self.dead.read().clone()
    }

    /// The part as an index to search.
    pub fn read(&self) -> &dyn IndexRead {
        match &self.body {
            Body::Sealed { seg, .. } => seg,
            Body::Frozen { index, .. } => &**index,
        }
    }

    pub fn segment(&self) -> Option<&Segment> {
        match &self.body {
            Body::Sealed { seg, .. } => Some(seg),
            Body::Frozen { .. } => None,
        }
    }

    pub fn file(&self) -> Option<&str> {
        match &self.body {
            Body::Sealed { file, .. } => Some(file),
            Body::Frozen { .. } => None,
        }
    }

    /// The index kind the part's rows are searched with.
    pub fn kind(&self) -> IndexKind {
        match &self.body {
            Body::Sealed { seg, .. } => seg.info().kind,
            Body::Frozen { .. } => IndexKind::Flat,
        }
    }

    pub fn is_frozen(&self) -> bool {
        matches!(self.body, Body::Frozen { .. })
    }

    /// Slots (live, deleted and dead).
    pub fn slot_count(&self) -> usize {
        self.read().slot_count()
    }

    pub fn live_len(&self) -> usize {
        self.read().len().saturating_sub(self.dead().keys.len())
    }

    pub fn has_live(&self, key: u64) -> bool {
        self.read().contains(key) && !self.dead().keys.contains(&key)
    }

    /// Marks live keys of this part dead (copy-on-write, so searches in
    /// flight keep the set they started with).
    pub fn kill(&self, keys: &[u64]) {
        if keys.is_empty() {
            return;
        }
        let read = self.read();
        let mut guard = self.dead.write();
        let mut set = guard.keys.clone();
        let mut allowed = guard
            .allowed
            .clone()
            .unwrap_or_else(|| Bitset::full(read.slot_count()));
        for &k in keys {
            if let Some(slot) = read.slot_of(k) {
                if set.insert(k) {
                    allowed.remove(slot as usize);
                }
            }
        }
        *guard = Arc::new(Dead {
            keys: set,
            allowed: Some(allowed),
        });
    }

    /// Calls `f(slot, key, row)` for every live row from slot `from` on, in
    /// slot order, until `f` returns false: the one walk over a part's rows
    /// (iteration, bloom rebuilds, builds and merges use it). `row` is the
    /// vector in the collection's space: the full-precision row of a
    /// segment that keeps them beside graph codes, else the stored vector.
    pub fn walk_live(&self, from: u32, mut f: impl FnMut(u32, u64, &[u8]) -> bool) {
        let dead = self.dead();
        let mut walk = |g: &dyn GraphView| {
            for slot in from..g.slots() as u32 {
                if !g.is_live(slot) {
                    continue;
                }
                let key = g.key(slot);
                let row = g.full(slot).unwrap_or_else(|| g.vector(slot));
                if !dead.keys.contains(&key) && !f(slot, key, row) {
                    return;
                }
            }
        };
        match &self.body {
            Body::Sealed { seg, .. } => walk(seg),
            Body::Frozen { index, .. } => walk(&index.view()),
        }
    }

    /// The row of `key` in the collection's space (see
    /// [`Part::walk_live`]), its first `bytes` bytes; `None` when the part
    /// does not hold it.
    pub fn row_of(&self, key: u64, bytes: usize) -> Option<Vec<u8>> {
        let slot = self.read().slot_of(key)?;
        Some(self.with_view(|g| {
            let row = g.full(slot).unwrap_or_else(|| g.vector(slot));
            row[..bytes.min(row.len())].to_vec()
        }))
    }

    /// `f` of this part's rows as a graph view.
    pub fn with_view<R>(&self, f: impl FnOnce(&dyn GraphView) -> R) -> R {
        match &self.body {
            Body::Sealed { seg, .. } => f(seg),
            Body::Frozen { index, .. } => f(&index.view()),
        }
    }

    /// [`Part::walk_live`] over every live row.
    pub fn for_each_live(&self, mut f: impl FnMut(u32, u64, &[u8])) {
        self.walk_live(0, |slot, key, v| {
            f(slot, key, v);
            true
        });
    }

    /// Up to `max` live (slot, key, first `vectors` bytes) from slot
    /// `start` on (for lazy iteration without holding a lock between
    /// calls).
    pub fn live_keys_from(
        &self,
        start: u32,
        max: usize,
        vectors: usize,
    ) -> Vec<(u32, u64, Vec<u8>)> {
        let mut out = Vec::new();
        self.walk_live(start, |slot, key, v| {
            out.push((slot, key, v[..vectors.min(v.len())].to_vec()));
            out.len() < max
        });
        out
    }

    /// The payload row of `slot` laid out by `schema` (empty when the row
    /// has none).
    pub fn payload_row(&self, schema: &Schema, slot: u32) -> Result<Row> {
        Ok(match &self.body {
            Body::Sealed { seg, .. } => match seg.payload()? {
                Some(p) => p.row(schema, slot as usize),
                None => Row::default(),
            },
            Body::Frozen { rows, .. } => rows.get(slot).unwrap_or_default(),
        })
    }

    /// A reader of one payload field of this part: `name`, at column `col`
    /// of the collection's schema.
    pub fn field(&self, name: &str, col: usize) -> Result<FieldIn> {
        Ok(match &self.body {
            Body::Sealed { seg, .. } => FieldIn::Sealed(
                seg.payload()?
                    .and_then(|p| p.column_of(name).map(|(c, ty)| (p, c, ty))),
            ),
            Body::Frozen { rows, .. } => FieldIn::Rows(rows.clone(), col),
        })
    }

    /// Hints the CPU to fetch the payload of `slot` (sealed parts; a
    /// frozen part's rows are in memory already).
    pub fn prefetch_payload(&self, slot: u32) {
        if let Body::Sealed { seg, .. } = &self.body {
            if let Ok(Some(p)) = seg.payload() {
                p.prefetch_row(slot as usize);
            }
        }
    }

    /// Bytes held in memory (frozen parts) or mapped (sealed ones).
    pub fn bytes(&self) -> (u64, u64) {
        match &self.body {
            Body::Sealed { seg, .. } => (0, seg.info().file_len),
            Body::Frozen { index, .. } => (index.memory_usage() as u64, 0),
        }
    }
}

/// One payload field of one part ([`Part::field`]): read a slot's value
/// without decoding the rest of its row.
#[derive(Debug, Clone)]
pub(crate) enum FieldIn {
    /// A segment's column and its type (`None`: the segment has no such
    /// column, every value is null).
    Sealed(Option<(Arc<SegmentPayload>, usize, FieldType)>),
    /// A frozen part's rows, at this column.
    Rows(Arc<ActiveRows>, usize),
}

impl FieldIn {
    /// Hints the CPU to fetch `slot`'s value.
    pub fn prefetch(&self, slot: u32) {
        if let FieldIn::Sealed(Some((p, c, _))) = self {
            p.prefetch_in(*c, slot as usize);
        }
    }

    /// `slot`'s value.
    pub fn value(&self, slot: u32) -> Value {
        match self {
            FieldIn::Sealed(Some((p, c, ty))) => p.value_in(*c, *ty, slot as usize),
            FieldIn::Sealed(None) => Value::Null,
            FieldIn::Rows(rows, col) => rows.value(slot, *col),
        }
    }
}
