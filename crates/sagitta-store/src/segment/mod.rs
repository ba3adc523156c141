//! Sealed segment files: one immutable file per segment, memory-mapped.
//!
//! A segment holds a sealed index's vectors, keys, tombstones and graph
//! (HNSW) or lists (IVF-RaBitQ), and optionally full-precision rows,
//! payload columns with their indexes and a full-text index. This module
//! owns the [`Segment`] type and its small accessors; the rest is split
//! by concern:
//!
//! - `format.rs`: magic, versions, the header and section-table layout
//!   (its rustdoc table describes the current format), header encoding
//!   and decoding;
//! - `reader.rs`: [`Segment::open`] and [`Segment::verify`];
//! - `ivf.rs`: the IVF part, checked at open and read as an `IvfSource`;
//! - `view.rs`: the `GraphView` and `IndexRead` impls (search dispatch);
//! - `keys.rs`: batch key lookup and the in-memory key filter;
//! - `columns.rs`: payload columns and the text index;
//! - `writer.rs`: [`SegmentWriter`], the builder that writes a file,
//!   and `stream.rs`, the section stream it writes through.
//!
//! ## Open and verify
//! [`Segment::open`] reads the header and table, checks magic, version,
//! both CRCs, that every section lies inside the file with the length its
//! counts imply, and the upper-level directory (O(levels)). Nothing that
//! grows with the number of vectors runs at open. Section CRCs and
//! structural invariants (neighbour ids in range, sorted key index) are
//! checked by [`Segment::verify`]. Reads of unverified data are bounds
//! checked, so a corrupt section gives wrong answers or errors, never a
//! panic or undefined behaviour.

mod columns;
mod format;
mod ivf;
mod keys;
mod reader;
mod stream;
mod view;
mod writer;

pub use format::{
    IvfInfo, SectionKind, SegmentInfo, FORMAT_VERSION, HEADER_LEN, MAGIC, OLDEST_SUPPORTED_VERSION,
    SECTION_ENTRY_LEN,
};
pub use writer::{FullRows, SegmentWriter};

use crate::bloom::Bloom;
use crate::durable::write_durably;
use crate::error::{Result, StoreError};
use crate::filter::SegmentPayload;
use crate::warm::Warmup;
use format::Section;
use ivf::SegIvf;
use memmap2::Mmap;
use parking_lot::Mutex;
use sagitta_index::search::SearchScratch;
use sagitta_index::{Bitset, Index, IndexError, IvfModel, IvfParams};
use sagitta_kernels::Distance;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Reinterprets an 8-aligned byte slice as little-endian `T` words.
fn words<T: Copy>(b: &[u8]) -> &[T] {
    let size = std::mem::size_of::<T>();
    if b.is_empty() || !(b.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return &[];
    }
    // SAFETY: aligned (checked), in bounds (length rounded down), and T is
    // a plain integer type valid for every bit pattern; the target is
    // little-endian (enforced in lib.rs) like the file.
    unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<T>(), b.len() / size) }
}

/// One upper level in CSR form.
#[derive(Debug, Clone, Copy, Default)]
struct UpperLevel {
    nodes: (usize, usize),
    offsets: (usize, usize),
    adj: (usize, usize),
}

/// An open, memory-mapped segment.
pub struct Segment {
    path: PathBuf,
    map: Arc<Mmap>,
    info: SegmentInfo,
    sections: Vec<Section>,
    dist: Distance,
    stride: usize,
    vectors: (usize, usize),
    slot_keys: (usize, usize),
    key_index: (usize, usize),
    tombstones: (usize, usize),
    level0: (usize, usize),
    upper: Vec<UpperLevel>,
    ivf: Option<SegIvf>,
    /// Full-precision rows (sq8 / sq16 segments written with them).
    full: Option<(usize, usize)>,
    /// The file, kept open where it has full-precision rows: a search
    /// reads the rows it re-scores from it (`GraphView::full_row`).
    rows_file: Option<std::fs::File>,
    ef_search: AtomicUsize,
    scratch: Mutex<Vec<SearchScratch>>,
    /// Payload sections (IPC stream, index), decoded on first use.
    payload_sections: Option<((usize, usize), (usize, usize))>,
    payload: OnceLock<std::result::Result<Option<Arc<SegmentPayload>>, String>>,
    /// A bloom filter of the keys, in memory, built by the first batch
    /// lookup (see [`Segment::key_filter`]).
    key_filter: OnceLock<Bloom>,
    /// Lookups in the key index (advised random at open, normal once in
    /// use).
    key_warm: Warmup,
    /// Whether a lookup has hinted this key index's first reads (once:
    /// see [`Segment::hint_key_ends`]).
    key_hinted: AtomicBool,
    /// The text section, parsed on each use (O(fields)).
    text: Option<(usize, usize)>,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("path", &self.path)
            .field("info", &self.info)
            .finish()
    }
}

impl Segment {
    /// Writes `index` alone (no payload, no text) as a segment file at
    /// `path`, durably: the bytes go to `path.tmp`, which is fsynced,
    /// renamed over `path`, and the directory fsynced. Returns the header
    /// written. [`SegmentWriter`] writes a segment with more.
    pub fn write(index: &Index, path: &Path) -> Result<SegmentInfo> {
        SegmentWriter::new(index).write(path)
    }

    /// Slots that are live in the file (not deleted before the seal).
    pub fn live_slots(&self) -> Bitset {
        let n = self.info.slots as usize;
        let tomb = self.bytes(self.tombstones);
        let words = (0..n.div_ceil(64))
            .map(|i| {
                let w = tomb
                    .get(i * 8..i * 8 + 8)
                    .map(|b| {
                        let mut x = [0u8; 8];
                        x.copy_from_slice(b);
                        u64::from_le_bytes(x)
                    })
                    .unwrap_or(0);
                !w
            })
            .collect();
        Bitset::from_words(words, n)
    }

    /// Whether this (f16 / sq8 / sq16) segment carries full-precision rows.
    pub fn has_full_precision(&self) -> bool {
        self.full.is_some()
    }

    /// The default nprobe of an IVF segment (`None` for other kinds).
    pub fn nprobe(&self) -> Option<usize> {
        self.ivf.as_ref().map(|i| i.nprobe.load(Ordering::Relaxed))
    }

    /// Sets the default nprobe of an open IVF segment.
    pub fn set_nprobe(&self, nprobe: usize) -> Result<()> {
        let Some(i) = self.ivf.as_ref() else {
            return Err(IndexError::InvalidParameter {
                name: "nprobe",
                value: nprobe.to_string(),
                reason: "only IVF indexes have nprobe",
            }
            .into());
        };
        IvfParams { nprobe, ..i.params }
            .validate()
            .map_err(StoreError::Index)?;
        i.nprobe.store(nprobe, Ordering::Relaxed);
        Ok(())
    }

    /// The IVF model of an IVF segment.
    pub fn ivf_model(&self) -> Option<&IvfModel> {
        self.ivf.as_ref().map(|i| &i.model)
    }

    /// Bytes of an IVF segment that searches keep resident: codes,
    /// factors, extra bits, lists and centroids (the vectors are read only
    /// for reranking). 0 for other kinds.
    pub fn ivf_resident_bytes(&self) -> usize {
        self.ivf.as_ref().map_or(0, |i| {
            i.slots.1
                + i.codes.1
                + i.factors.1
                + i.extra.1
                + i.directory.1
                + (i.model.centroids().len() + i.model.rotated_centroids().len()) * 4
        })
    }

    /// The decoded header.
    pub fn info(&self) -> &SegmentInfo {
        &self.info
    }

    /// The file this segment maps.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The default search beam width of this open segment.
    pub fn ef_search(&self) -> usize {
        self.ef_search.load(Ordering::Relaxed)
    }

    /// Copies this segment's bytes to `path` as durably as [`Segment::write`]
    /// (tmp file, fsync, rename, fsync of the directory).
    pub fn copy_to(&self, path: &Path) -> Result<()> {
        write_durably(path, &self.map)
    }

    /// Sets the default search beam width for this open segment.
    pub fn set_ef_search(&self, ef: usize) -> Result<()> {
        if ef == 0 || ef > 1 << 16 {
            return Err(IndexError::InvalidParameter {
                name: "ef_search",
                value: ef.to_string(),
                reason: "must be in 1..=65536",
            }
            .into());
        }
        self.ef_search.store(ef, Ordering::Relaxed);
        Ok(())
    }

    #[inline]
    fn bytes(&self, (off, len): (usize, usize)) -> &[u8] {
        self.map.get(off..off + len).unwrap_or(&[])
    }

    /// Asks the kernel to read a byte range in (asynchronously).
    fn will_need(&self, (off, len): (usize, usize)) {
        #[cfg(unix)]
        let _ = self.map.advise_range(memmap2::Advice::WillNeed, off, len);
        #[cfg(not(unix))]
        let _ = (off, len);
    }

    /// Gives a section the normal read-ahead again, and with `now` asks
    /// the kernel to read all of it in (one request instead of a miss per
    /// page, for a reader about to walk all of it).
    fn unrandom(&self, (off, len): (usize, usize), now: bool) {
        #[cfg(unix)]
        {
            let _ = self.map.advise_range(memmap2::Advice::Normal, off, len);
            if now {
                self.will_need((off, len));
            }
        }
        #[cfg(not(unix))]
        let _ = (off, len, now);
    }

    /// Counts a lookup in the key index (advised random at open): from
    /// the second on, misses read ahead as usual (see `warm.rs`).
    #[inline]
    fn note_key_lookup(&self) {
        if self.key_warm.note() {
            self.unrandom(self.key_index, false);
        }
    }

    fn key_records(&self) -> &[u64] {
        words(self.bytes(self.key_index))
    }

    fn with_scratch<R>(&self, f: impl FnOnce(&mut SearchScratch) -> R) -> R {
        let mut s = self.scratch.lock().pop().unwrap_or_default();
        let r = f(&mut s);
        let mut pool = self.scratch.lock();
        if pool.len() < 256 {
            pool.push(s);
        }
        r
    }
}
