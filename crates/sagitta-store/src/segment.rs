//! Sealed segment files: one immutable file per segment, memory-mapped.
//!
//! ## Layout (format version 1, little-endian)
//!
//! | offset | size | field                                             |
//! |-------:|-----:|---------------------------------------------------|
//! | 0      | 8    | magic `b"SGTASEG\0"`                              |
//! | 8      | 4    | format version (1)                                |
//! | 12     | 4    | oldest format version whose reader can read this  |
//! | 16     | 4    | dims                                              |
//! | 20     | 1    | dtype (0 f32, 1 f16, 2 i8, 3 b1)                  |
//! | 21     | 1    | metric (0 l2, 1 ip, 2 cos, 3 hamming, 4 nphd)     |
//! | 22     | 1    | index kind (0 flat, 1 hnsw)                       |
//! | 23     | 1    | reserved, 0                                       |
//! | 24     | 8    | slot count *n*                                    |
//! | 32     | 8    | live count                                        |
//! | 40     | 4    | vector stride in bytes                            |
//! | 44     | 4    | section count                                     |
//! | 48     | 4    | HNSW M                                            |
//! | 52     | 4    | HNSW M0 (level-0 links)                           |
//! | 56     | 4    | entry slot (`u32::MAX` when none)                 |
//! | 60     | 4    | top level                                         |
//! | 64     | 4    | default ef_search                                 |
//! | 68     | 4    | ef_construction                                   |
//! | 72     | 48   | reserved, 0                                       |
//! | 120    | 4    | CRC32C of the section table                       |
//! | 124    | 4    | CRC32C of bytes 0..124                            |
//!
//! The section table follows at byte 128: one 32-byte entry per section,
//! `kind: u32, reserved: u32, offset: u64, length: u64, crc32c: u32,
//! reserved: u32`. Every section starts at a multiple of 64 bytes.
//!
//! | kind | section    | contents                                                     |
//! |-----:|------------|--------------------------------------------------------------|
//! | 1    | vectors    | *n* × stride bytes; slot *s* at `offset + s × stride`        |
//! | 2    | slot keys  | *n* × u64: the key of each slot                              |
//! | 3    | key index  | live × {key u64, slot u32, 0 u32}, sorted by key             |
//! | 4    | tombstones | ceil(*n*/64) × u64 bitset; bit set = deleted                 |
//! | 5    | level 0    | *n* × (1 + M0) × u32: `[count, neighbours…]` (HNSW only)     |
//! | 6    | upper      | levels 1..=top in CSR form (HNSW only), see below            |
//!
//! Upper section: `top: u32, 0: u32`, then per level 1..=top a directory
//! entry `{offset: u64 (from section start), nodes: u64}`; at each offset,
//! `nodes` sorted u32 slots, `nodes + 1` u32 offsets into the adjacency,
//! then the u32 adjacency.
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

use crate::bloom::Bloom;
use crate::envelope::SEGMENT;
use crate::error::{io, Result, StoreError};
use crate::fault::{self, IoOp};
use crate::filter::SegmentPayload;
use crate::keysearch::{lower_bound_from, lower_bounds};
use crate::payload::{self, PayloadError, Schema};
use crate::pindex;
use arrow_array::RecordBatch;
use memmap2::Mmap;
use parking_lot::Mutex;
use sagitta_index::ivf::{self, IvfQuery, IvfSource, ListRef, FACTORS};
use sagitta_index::search::{self, SearchScratch};
use sagitta_index::{
    Bitset, DType, GraphView, Index, IndexError, IndexKind, IndexRead, IvfModel, IvfParams, Metric,
    Neighbor, Plan, SearchOptions, Space, Target, VectorRef,
};
use sagitta_kernels::Distance;
use sagitta_text::{MemText, TextFieldSpec, TextSection};
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// File magic.
pub const MAGIC: [u8; 8] = *SEGMENT.magic;
/// The format version this build writes.
pub const FORMAT_VERSION: u32 = SEGMENT.newest;
/// The oldest format version this build reads.
pub const OLDEST_SUPPORTED_VERSION: u32 = SEGMENT.oldest;
/// Bytes in the fixed header.
pub const HEADER_LEN: usize = 128;
/// Bytes per section-table entry.
pub const SECTION_ENTRY_LEN: usize = 32;
const SECTION_ALIGN: u64 = 64;
const NO_ENTRY: u32 = u32::MAX;

/// Section kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum SectionKind {
    /// Vectors at a fixed stride.
    Vectors = 1,
    /// Slot → key.
    SlotKeys = 2,
    /// Sorted key → slot records.
    KeyIndex = 3,
    /// Deleted-slot bitset.
    Tombstones = 4,
    /// Level-0 adjacency, fixed width.
    Level0 = 5,
    /// Upper levels, CSR.
    Upper = 6,
    /// IVF centroids, partitions × dims × f32 (format 2).
    IvfCentroids = 7,
    /// IVF directory: (partitions + 1) × u64 list starts, then
    /// (partitions + 1) × u64 block starts (format 2).
    IvfDirectory = 8,
    /// IVF list slots, u32 per listed vector in partition order (format 2).
    IvfSlots = 9,
    /// RaBitQ 1-bit codes in fast-scan blocks, per partition (format 2).
    IvfCodes = 10,
    /// RaBitQ factors, 4 × f32 per listed vector (format 2).
    IvfFactors = 11,
    /// RaBitQ extra-bit planes, per listed vector (format 2).
    IvfExtra = 12,
    /// Full-precision f32 rows of a scalar-quantized segment, for exact
    /// reranking (optional, format 2).
    FullVectors = 13,
    /// Payload columns: one Arrow IPC stream (schema + one record batch,
    /// one row per slot, 64-byte aligned buffers) (optional, format 3).
    Payload = 14,
    /// Payload indexes (see the `pindex` module) (with `Payload`, format 3).
    PayloadIndex = 15,
    /// Full-text index of the text fields (see `sagitta_text::section`)
    /// (optional, format 4).
    Text = 16,
}

/// IVF-RaBitQ parameters of a segment (header bytes 72..100).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IvfInfo {
    /// Partition count.
    pub partitions: u32,
    /// Bits per dimension (1..=8).
    pub bits: u8,
    /// Rotation seed.
    pub seed: u64,
    /// Default partitions probed.
    pub nprobe: u32,
    /// Default rerank depth (`None`: chosen from `bits` and k).
    pub refine: Option<u32>,
    /// Vectors listed in partitions (live and deleted).
    pub listed: u64,
}

/// The decoded fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Format version of the file.
    pub version: u32,
    /// Dimensions, metric, dtype.
    pub space: Space,
    /// Flat or HNSW.
    pub kind: IndexKind,
    /// Slots (live + deleted).
    pub slots: u64,
    /// Live vectors.
    pub live: u64,
    /// HNSW M / M0 (0 for Flat).
    pub m: u32,
    /// Level-0 links per node.
    pub m0: u32,
    /// Entry slot of the graph.
    pub entry: Option<u32>,
    /// Top level of the graph.
    pub top_level: u32,
    /// Default ef_search stored with the index.
    pub ef_search: u32,
    /// ef_construction used to build it.
    pub ef_construction: u32,
    /// File size in bytes.
    pub file_len: u64,
    /// IVF-RaBitQ parameters (IVF segments only).
    pub ivf: Option<IvfInfo>,
}

#[derive(Debug, Clone, Copy)]
struct Section {
    kind: u32,
    offset: u64,
    len: u64,
    crc: u32,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).map_or(0, |x| {
        u64::from_le_bytes([x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]])
    })
}

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

/// The IVF part of an open segment: the model (rotation rebuilt from the
/// seed, centroids copied: O(partitions)) and the byte ranges of the lists.
#[derive(Debug)]
struct SegIvf {
    model: IvfModel,
    params: IvfParams,
    nprobe: std::sync::atomic::AtomicUsize,
    directory: (usize, usize),
    slots: (usize, usize),
    codes: (usize, usize),
    factors: (usize, usize),
    extra: (usize, usize),
}

/// A segment seen as an IVF source.
struct SegIvfView<'a> {
    seg: &'a Segment,
    ivf: &'a SegIvf,
}

impl IvfSource for SegIvfView<'_> {
    fn model(&self) -> &IvfModel {
        &self.ivf.model
    }

    fn with_list(&self, p: usize, f: &mut dyn FnMut(ListRef<'_>)) {
        let parts = self.ivf.model.partitions();
        let dir: &[u64] = words(self.seg.bytes(self.ivf.directory));
        let (Some(&a), Some(&b), Some(&ba), Some(&bb)) = (
            dir.get(p),
            dir.get(p + 1),
            dir.get(parts + 1 + p),
            dir.get(parts + 2 + p),
        ) else {
            return;
        };
        let (a, b, ba, bb) = (a as usize, b as usize, ba as usize, bb as usize);
        let m = &self.ivf.model;
        let slots: &[u32] = words(self.seg.bytes(self.ivf.slots));
        let factors: &[f32] = words(self.seg.bytes(self.ivf.factors));
        let codes = self.seg.bytes(self.ivf.codes);
        let extra = self.seg.bytes(self.ivf.extra);
        let (bbytes, xbytes) = (m.block_bytes(), m.ex_bytes());
        let list = (|| {
            Some(ListRef {
                slots: slots.get(a..b)?,
                codes: codes.get(ba.checked_mul(bbytes)?..bb.checked_mul(bbytes)?)?,
                factors: factors.get(a * FACTORS..b.checked_mul(FACTORS)?)?,
                ex: extra.get(a.checked_mul(xbytes)?..b.checked_mul(xbytes)?)?,
            })
        })();
        // Out-of-range directory entries (a corrupt file) read as an empty
        // list; `ivf::search` also checks the lengths agree.
        if let Some(list) = list {
            f(list);
        }
    }
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
    ef_search: std::sync::atomic::AtomicUsize,
    scratch: Mutex<Vec<SearchScratch>>,
    /// Payload sections (IPC stream, index), decoded on first use.
    payload_sections: Option<((usize, usize), (usize, usize))>,
    payload: OnceLock<std::result::Result<Option<Arc<SegmentPayload>>, String>>,
    /// A bloom filter of the keys, in memory, built by the first batch
    /// lookup (see [`Segment::key_filter`]).
    key_filter: OnceLock<Bloom>,
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
    fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> StoreError {
        StoreError::Corrupt {
            file: path.to_path_buf(),
            offset,
            reason: reason.into(),
        }
    }

    /// Writes `index` as a segment file at `path`, durably: the bytes go to
    /// `path.tmp`, which is fsynced, renamed over `path`, and the directory
    /// fsynced. Returns the header written.
    pub fn write(index: &Index, path: &Path) -> Result<SegmentInfo> {
        Segment::write_with_payload(index, None, &[], path)
    }

    /// [`Segment::write`] with payload columns: `payload` holds one row per
    /// slot of `index`, in slot order; its schema's fields become the
    /// Arrow section's columns and each gets a payload index. The string
    /// columns named in `text` get a full-text index (a text section);
    /// only live slots are indexed.
    pub fn write_with_payload(
        index: &Index,
        payload: Option<(&Schema, &RecordBatch)>,
        text: &[TextFieldSpec],
        path: &Path,
    ) -> Result<SegmentInfo> {
        Self::write_with_text(index, payload, text, None, path)
    }

    /// [`Segment::write_with_payload`] with the text already indexed:
    /// `analysed`, when given and over the same fields as `text`, holds
    /// every slot's documents (a mutable part's index); the section keeps
    /// the live slots' and no text is analysed again.
    pub fn write_with_text(
        index: &Index,
        payload: Option<(&Schema, &RecordBatch)>,
        text: &[TextFieldSpec],
        analysed: Option<&MemText>,
        path: &Path,
    ) -> Result<SegmentInfo> {
        let source = match analysed {
            Some(m) => TextSource::Indexed(m),
            None => TextSource::Analyse,
        };
        Self::write_with_text_source(index, payload, text, source, path)
    }

    /// [`Segment::write_with_payload`] with the text section already
    /// encoded for this segment's slots (`sagitta_text::merge` of the
    /// input segments' sections): nothing is analysed, and no inverted
    /// index of every document is built in memory.
    pub fn write_with_text_section(
        index: &Index,
        payload: Option<(&Schema, &RecordBatch)>,
        text: &[TextFieldSpec],
        section: Vec<u8>,
        path: &Path,
    ) -> Result<SegmentInfo> {
        Self::write_with_text_source(index, payload, text, TextSource::Encoded(section), path)
    }

    /// [`Segment::write_with_payload`] (with the text section already
    /// encoded when `section` is given) for an index that holds codes
    /// only, whose full-precision rows are elsewhere: `full` gives each
    /// slot's f32 row, and the segment keeps them beside the codes as if
    /// the index had held them (an optimizer build holds no second copy of
    /// every row).
    pub fn write_with_full_rows(
        index: &Index,
        payload: Option<(&Schema, &RecordBatch)>,
        text: &[TextFieldSpec],
        section: Option<Vec<u8>>,
        full: FullRows<'_>,
        path: &Path,
    ) -> Result<SegmentInfo> {
        let source = match section {
            Some(s) => TextSource::Encoded(s),
            None => TextSource::Analyse,
        };
        let tmp = tmp_path(path);
        let r = write_file(index, payload, text, source, Some(full), &tmp);
        Self::publish(r, &tmp, path)
    }

    fn write_with_text_source(
        index: &Index,
        payload: Option<(&Schema, &RecordBatch)>,
        text: &[TextFieldSpec],
        source: TextSource<'_>,
        path: &Path,
    ) -> Result<SegmentInfo> {
        let tmp = tmp_path(path);
        let r = write_file(index, payload, text, source, None, &tmp);
        Self::publish(r, &tmp, path)
    }

    /// The written temporary file renamed over `path` (removed on error).
    fn publish(r: Result<SegmentInfo>, tmp: &Path, path: &Path) -> Result<SegmentInfo> {
        if r.is_err() {
            let _ = fault::remove(tmp);
        }
        let info = r?;
        if let Err(e) = fault::rename(tmp, path) {
            let _ = fault::remove(tmp);
            return Err(e);
        }
        sync_dir(path)?;
        Ok(info)
    }

    /// Maps and validates a segment. O(1) in the number of vectors.
    pub fn open(path: &Path) -> Result<Segment> {
        let file = fault::open(path)?;
        let file_len = file.metadata().map_err(io("stat", path))?.len();
        if file_len < HEADER_LEN as u64 {
            return Err(Self::corrupt(
                path,
                0,
                format!("file of {file_len} bytes is shorter than the header"),
            ));
        }
        fault::check(IoOp::Mmap, path).map_err(io("mmap", path))?;
        // SAFETY: segment files are immutable once renamed into place;
        // Sagitta never writes to them again. Another process truncating
        // or rewriting the file would break that contract (as for every
        // mmap-based store); all reads below are bounds checked against
        // the length seen here.
        let map = unsafe { Mmap::map(&file) }.map_err(io("mmap", path))?;
        let h = &map[..HEADER_LEN];
        let version = SEGMENT.version(path, h)?;
        let oldest_reader = u32_at(h, 12);
        if oldest_reader > FORMAT_VERSION {
            return Err(StoreError::UnsupportedVersion {
                file: path.to_path_buf(),
                found: version,
                oldest: OLDEST_SUPPORTED_VERSION,
                newest: FORMAT_VERSION,
            });
        }
        if crc32c::crc32c(&h[..124]) != u32_at(h, 124) {
            return Err(Self::corrupt(path, 124, "header checksum mismatch"));
        }
        let dims = u32_at(h, 16) as usize;
        let dtype = DType::from_u8(h[20])
            .filter(|d| version >= 2 || !d.is_quantized())
            .ok_or_else(|| Self::corrupt(path, 20, "unknown dtype"))?;
        let metric =
            Metric::from_u8(h[21]).ok_or_else(|| Self::corrupt(path, 21, "unknown metric"))?;
        let kind = match h[22] {
            0 => IndexKind::Flat,
            1 => IndexKind::Hnsw,
            2 if version >= 2 => IndexKind::IvfRq,
            _ => return Err(Self::corrupt(path, 22, "unknown index kind")),
        };
        let space =
            Space::new(dims, metric, dtype).map_err(|e| Self::corrupt(path, 16, e.to_string()))?;
        let slots = u64_at(h, 24);
        let live = u64_at(h, 32);
        let stride = u32_at(h, 40) as usize;
        let nsec = u32_at(h, 44) as usize;
        let (m, m0) = (u32_at(h, 48), u32_at(h, 52));
        let entry = u32_at(h, 56);
        let top_level = u32_at(h, 60);
        if stride != space.stride() {
            return Err(Self::corrupt(
                path,
                40,
                format!(
                    "stride {stride} does not match the space ({})",
                    space.stride()
                ),
            ));
        }
        if slots > sagitta_index::MAX_SLOTS as u64 || live > slots {
            return Err(Self::corrupt(
                path,
                24,
                format!("impossible counts: {slots} slots, {live} live"),
            ));
        }
        if nsec > 64 {
            return Err(Self::corrupt(path, 44, format!("{nsec} sections")));
        }
        let table_end = HEADER_LEN + nsec * SECTION_ENTRY_LEN;
        let table = map.get(HEADER_LEN..table_end).ok_or_else(|| {
            Self::corrupt(path, HEADER_LEN as u64, "section table past end of file")
        })?;
        if crc32c::crc32c(table) != u32_at(h, 120) {
            return Err(Self::corrupt(
                path,
                HEADER_LEN as u64,
                "section table checksum mismatch",
            ));
        }
        let sections: Vec<Section> = table
            .chunks_exact(SECTION_ENTRY_LEN)
            .map(|e| Section {
                kind: u32_at(e, 0),
                offset: u64_at(e, 8),
                len: u64_at(e, 16),
                crc: u32_at(e, 24),
            })
            .collect();
        for (i, s) in sections.iter().enumerate() {
            let at = (HEADER_LEN + i * SECTION_ENTRY_LEN) as u64;
            if s.offset % SECTION_ALIGN != 0
                || s.offset.checked_add(s.len).is_none_or(|end| end > file_len)
            {
                return Err(Self::corrupt(
                    path,
                    at,
                    format!("section {} lies outside the file or is misaligned", s.kind),
                ));
            }
        }
        let n = slots as usize;
        let find = |kind: SectionKind, want: Option<u64>| -> Result<(usize, usize)> {
            let s = sections
                .iter()
                .find(|s| s.kind == kind as u32)
                .ok_or_else(|| {
                    Self::corrupt(path, HEADER_LEN as u64, format!("missing section {kind:?}"))
                })?;
            if let Some(w) = want {
                if s.len != w {
                    return Err(Self::corrupt(
                        path,
                        s.offset,
                        format!("section {kind:?} is {} bytes, expected {w}", s.len),
                    ));
                }
            }
            Ok((s.offset as usize, s.len as usize))
        };
        let vectors = find(SectionKind::Vectors, Some(slots * stride as u64))?;
        let slot_keys = find(SectionKind::SlotKeys, Some(slots * 8))?;
        let key_index = find(SectionKind::KeyIndex, Some(live * 16))?;
        let tombstones = find(SectionKind::Tombstones, Some(slots.div_ceil(64) * 8))?;
        let (mut level0, mut upper) = ((0, 0), Vec::new());
        if kind == IndexKind::Hnsw {
            if !(2..=512).contains(&m0) || m == 0 || m > m0 {
                return Err(Self::corrupt(
                    path,
                    48,
                    format!("bad link counts M={m} M0={m0}"),
                ));
            }
            if n > 0 && entry as usize >= n {
                return Err(Self::corrupt(
                    path,
                    56,
                    format!("entry slot {entry} out of range"),
                ));
            }
            if top_level as usize > sagitta_index::MAX_LEVEL {
                return Err(Self::corrupt(path, 60, format!("top level {top_level}")));
            }
            level0 = find(SectionKind::Level0, Some(slots * (1 + u64::from(m0)) * 4))?;
            let (uoff, ulen) = find(SectionKind::Upper, None)?;
            upper = parse_upper(&map[uoff..uoff + ulen], uoff, top_level as usize)
                .map_err(|(at, why)| Self::corrupt(path, at as u64, why))?;
        }
        let (mut ivf, mut ivf_info) = (None, None);
        if kind == IndexKind::IvfRq {
            let (parsed, i) = Self::open_ivf(path, &map, h, space, slots, &find)?;
            ivf = Some(parsed);
            ivf_info = Some(i);
            // IVF searches touch full vectors only to rerank a few
            // candidates: no readahead, so only those pages come in.
            #[cfg(unix)]
            let _ = map.advise_range(memmap2::Advice::Random, vectors.0, vectors.1);
        }
        let fstride = (dims * 4).next_multiple_of(sagitta_index::VECTOR_ALIGN) as u64;
        let full = if sections
            .iter()
            .any(|s| s.kind == SectionKind::FullVectors as u32)
        {
            if !matches!(dtype, DType::F16 | DType::Sq8 | DType::Sq16) {
                return Err(Self::corrupt(
                    path,
                    HEADER_LEN as u64,
                    "full-precision rows in a segment whose vectors are not f16, sq8 or sq16",
                ));
            }
            let f = find(SectionKind::FullVectors, Some(slots * fstride))?;
            #[cfg(unix)]
            let _ = map.advise_range(memmap2::Advice::Random, f.0, f.1);
            Some(f)
        } else {
            None
        };
        let has = |k: SectionKind| sections.iter().any(|s| s.kind == k as u32);
        let payload_sections = match (has(SectionKind::Payload), has(SectionKind::PayloadIndex)) {
            (false, false) => None,
            (true, true) => Some((
                find(SectionKind::Payload, None)?,
                find(SectionKind::PayloadIndex, None)?,
            )),
            _ => {
                return Err(Self::corrupt(
                    path,
                    HEADER_LEN as u64,
                    "a payload section without its index, or an index without payload",
                ))
            }
        };
        let text = if has(SectionKind::Text) {
            Some(find(SectionKind::Text, None)?)
        } else {
            None
        };
        let info = SegmentInfo {
            version,
            space,
            kind,
            slots,
            live,
            m,
            m0,
            entry: (kind == IndexKind::Hnsw && n > 0).then_some(entry),
            top_level,
            ef_search: u32_at(h, 64).max(1),
            ef_construction: u32_at(h, 68),
            file_len,
            ivf: ivf_info,
        };
        Ok(Segment {
            path: path.to_path_buf(),
            dist: space.distance().map_err(StoreError::Index)?,
            stride,
            vectors,
            slot_keys,
            key_index,
            tombstones,
            level0,
            upper,
            ivf,
            full,
            ef_search: std::sync::atomic::AtomicUsize::new(info.ef_search as usize),
            scratch: Mutex::new(Vec::new()),
            payload_sections,
            payload: OnceLock::new(),
            key_filter: OnceLock::new(),
            text,
            sections,
            info,
            map: Arc::new(map),
        })
    }

    /// Reads the IVF header fields and sections: O(partitions).
    fn open_ivf(
        path: &Path,
        map: &[u8],
        h: &[u8],
        space: Space,
        slots: u64,
        find: &dyn Fn(SectionKind, Option<u64>) -> Result<(usize, usize)>,
    ) -> Result<(SegIvf, IvfInfo)> {
        let parts = u32_at(h, 72);
        let bits = h[76];
        let seed = u64_at(h, 80);
        let nprobe = u32_at(h, 88).max(1);
        let refine = u32_at(h, 92);
        let listed = u64_at(h, 96);
        if parts == 0 || parts as usize > sagitta_index::ivf::MAX_PARTITIONS {
            return Err(Self::corrupt(path, 72, format!("{parts} IVF partitions")));
        }
        if !(1..=8).contains(&bits) {
            return Err(Self::corrupt(path, 76, format!("{bits} RaBitQ bits")));
        }
        if listed > slots {
            return Err(Self::corrupt(
                path,
                96,
                format!("{listed} listed vectors but {slots} slots"),
            ));
        }
        let dims = space.dims;
        let p = u64::from(parts);
        let centroids = find(SectionKind::IvfCentroids, Some(p * dims as u64 * 4))?;
        let directory = find(SectionKind::IvfDirectory, Some((p + 1) * 16))?;
        let cbytes = &map[centroids.0..centroids.0 + centroids.1];
        let centroids_f: Vec<f32> = cbytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if centroids_f.iter().any(|x| !x.is_finite()) {
            return Err(Self::corrupt(
                path,
                centroids.0 as u64,
                "non-finite centroid",
            ));
        }
        let model = IvfModel::from_centroids(dims, bits, space.metric, seed, centroids_f);
        // The directory must be two non-decreasing runs ending at the
        // section sizes; checked here so scans can trust list bounds.
        let dir: Vec<u64> = map[directory.0..directory.0 + directory.1]
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .collect();
        let (lists, blocks) = dir.split_at(parts as usize + 1);
        let monotone = |v: &[u64]| v.windows(2).all(|w| w[0] <= w[1]) && v[0] == 0;
        let block_ok = lists
            .windows(2)
            .zip(blocks.windows(2))
            .all(|(l, b)| b[1].checked_sub(b[0]) == Some((l[1] - l[0].min(l[1])).div_ceil(32)));
        let total_blocks = blocks[parts as usize];
        if !monotone(lists) || !monotone(blocks) || lists[parts as usize] != listed || !block_ok {
            return Err(Self::corrupt(path, directory.0 as u64, "bad IVF directory"));
        }
        let slots_sec = find(SectionKind::IvfSlots, Some(listed * 4))?;
        let codes = find(
            SectionKind::IvfCodes,
            Some(total_blocks * model.block_bytes() as u64),
        )?;
        let factors = find(SectionKind::IvfFactors, Some(listed * FACTORS as u64 * 4))?;
        let extra = find(
            SectionKind::IvfExtra,
            Some(listed * model.ex_bytes() as u64),
        )?;
        let params = IvfParams {
            bits,
            partitions: Some(parts as usize),
            nprobe: nprobe as usize,
            refine: (refine != u32::MAX).then_some(refine as usize),
            seed,
            ..IvfParams::default()
        };
        let info = IvfInfo {
            partitions: parts,
            bits,
            seed,
            nprobe,
            refine: params.refine.map(|r| r as u32),
            listed,
        };
        Ok((
            SegIvf {
                model,
                params,
                nprobe: std::sync::atomic::AtomicUsize::new(nprobe as usize),
                directory,
                slots: slots_sec,
                codes,
                factors,
                extra,
            },
            info,
        ))
    }

    /// The full-text index of the segment's text fields (None when it was
    /// written without one). Parsed from the mapping on each call: the
    /// header and one directory entry per field.
    pub fn text(&self) -> Result<Option<TextSection<'_>>> {
        let Some((off, len)) = self.text else {
            return Ok(None);
        };
        TextSection::parse(&self.map[off..off + len], self.info.slots as u32)
            .map(Some)
            .map_err(|e| Self::corrupt(&self.path, off as u64, e.to_string()))
    }

    /// The payload columns and indexes, decoded on first use (the Arrow
    /// buffers point into the map: nothing is copied). `None` when the
    /// segment was written without payload.
    pub fn payload(&self) -> Result<Option<Arc<SegmentPayload>>> {
        let r = self.payload.get_or_init(|| {
            let Some(((po, pl), (io_, il))) = self.payload_sections else {
                return Ok(None);
            };
            // Checked once, on first use (not at open): a damaged payload
            // is a typed error before any of it is parsed.
            for s in self.sections.iter().filter(|s| {
                s.kind == SectionKind::Payload as u32 || s.kind == SectionKind::PayloadIndex as u32
            }) {
                let bytes = self.bytes((s.offset as usize, s.len as usize));
                if crc32c::crc32c(bytes) != s.crc {
                    return Err(format!("section {} fails its checksum", s.kind));
                }
            }
            crate::ipc::check_stream(self.bytes((po, pl)), false)
                .map_err(|e| format!("payload section: {e}"))?;
            let whole = self.map_buffer();
            let mut ipc = whole.slice_with_length(po, pl);
            let mut dec = arrow_ipc::reader::StreamDecoder::new();
            let mut batch = None;
            // ipc::check_stream bounds every buffer, and the decoder
            // validates array data; a panic inside Arrow on bytes that
            // slipped through both is still turned into an error.
            let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                while !ipc.is_empty() && batch.is_none() {
                    batch = dec.decode(&mut ipc)?;
                }
                Ok::<_, arrow_schema::ArrowError>(())
            }));
            match decoded {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(format!("payload section: {e}")),
                Err(_) => return Err("payload section: malformed Arrow data".into()),
            }
            let batch = batch.ok_or("payload section: no record batch")?;
            if batch.num_rows() != self.info.slots as usize {
                return Err(format!(
                    "payload section has {} rows for {} slots",
                    batch.num_rows(),
                    self.info.slots
                ));
            }
            let schema = Schema::from_arrow(batch.schema().as_ref()).map_err(|e| e.to_string())?;
            let index = pindex::PayloadIndex::open(whole.slice_with_length(io_, il), schema.len())?;
            Ok(Some(Arc::new(SegmentPayload::new(schema, batch, index))))
        });
        r.clone().map_err(|reason| {
            Self::corrupt(
                &self.path,
                self.payload_sections.map_or(0, |p| p.0 .0 as u64),
                reason,
            )
        })
    }

    /// The whole map as an Arrow buffer that keeps the map alive.
    fn map_buffer(&self) -> arrow_buffer::Buffer {
        let owner: Arc<Mmap> = self.map.clone();
        let ptr = std::ptr::NonNull::new(owner.as_ptr() as *mut u8)
            .unwrap_or(std::ptr::NonNull::dangling());
        // SAFETY: the pointer and length describe the live, read-only
        // mapping owned by `owner`, which the buffer keeps alive; Arrow
        // never writes through an immutable `Buffer`.
        unsafe { arrow_buffer::Buffer::from_custom_allocation(ptr, owner.len(), owner) }
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
        self.ivf
            .as_ref()
            .map(|i| i.nprobe.load(std::sync::atomic::Ordering::Relaxed))
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
        i.nprobe.store(nprobe, std::sync::atomic::Ordering::Relaxed);
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
        self.ef_search.load(std::sync::atomic::Ordering::Relaxed)
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
        self.ef_search
            .store(ef, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Checks every section checksum and the structural invariants that
    /// `open` does not (O(file size)).
    pub fn verify(&self) -> Result<()> {
        for s in &self.sections {
            let bytes = &self.map[s.offset as usize..(s.offset + s.len) as usize];
            if crc32c::crc32c(bytes) != s.crc {
                return Err(Self::corrupt(
                    &self.path,
                    s.offset,
                    format!("section {} checksum mismatch", s.kind),
                ));
            }
        }
        let n = self.info.slots as usize;
        let recs = self.key_records();
        for (i, w) in recs.chunks_exact(2).enumerate() {
            let slot = (w[1] & 0xFFFF_FFFF) as usize;
            if slot >= n || (i > 0 && recs[2 * i - 2] >= w[0]) {
                return Err(Self::corrupt(
                    &self.path,
                    (self.key_index.0 + i * 16) as u64,
                    "key index unsorted or slot out of range",
                ));
            }
        }
        if self.info.kind == IndexKind::Hnsw {
            let l0: &[u32] = words(self.bytes(self.level0));
            for (slot, rec) in l0.chunks_exact(1 + self.info.m0 as usize).enumerate() {
                if rec[0] > self.info.m0
                    || rec[1..=rec[0] as usize].iter().any(|&x| x as usize >= n)
                {
                    return Err(Self::corrupt(
                        &self.path,
                        (self.level0.0 + slot * rec.len() * 4) as u64,
                        "level-0 list out of range",
                    ));
                }
            }
        }
        if let Some(ivf) = &self.ivf {
            let slots: &[u32] = words(self.bytes(ivf.slots));
            if let Some(i) = slots.iter().position(|&s| s as usize >= n) {
                return Err(Self::corrupt(
                    &self.path,
                    (ivf.slots.0 + i * 4) as u64,
                    "IVF list slot out of range",
                ));
            }
        }
        Ok(())
    }

    #[inline]
    fn bytes(&self, (off, len): (usize, usize)) -> &[u8] {
        self.map.get(off..off + len).unwrap_or(&[])
    }

    fn key_records(&self) -> &[u64] {
        words(self.bytes(self.key_index))
    }

    /// A bloom filter of this segment's keys, so that a batch lookup
    /// routes each key to the segments that may hold it instead of
    /// searching every segment's key index (keys spread evenly over
    /// segments, as hashed ids are, would otherwise cost a search per
    /// key and segment). Built in memory from the key index on first use
    /// with `build` (1.5–3 bytes per key; the first batch over a million
    /// keys in 35 segments took 84 ms, the next 0.6 ms), so opening stays
    /// O(1); `None` for segments small enough that searching their index
    /// costs no more.
    fn key_filter(&self, build: bool) -> Option<&Bloom> {
        let recs = self.key_records();
        let n = recs.len() / 2;
        if n < KEY_FILTER_MIN {
            return None;
        }
        if !build {
            return self.key_filter.get();
        }
        Some(self.key_filter.get_or_init(|| {
            let mut b = Bloom::new(n as u64, KEY_FILTER_FP);
            for &k in recs.iter().step_by(2) {
                b.insert(k);
            }
            b
        }))
    }

    /// The live slots of many keys: `keys` must be sorted ascending;
    /// `found(i, slot)` is called for each `keys[i]` that is live here.
    /// With `route` (the keys are spread over several segments), keys the
    /// segment's key filter rules out are skipped. A dense batch (keys a
    /// few records apart) is searched key after key, each from the
    /// previous one's position (see [`lower_bound_from`]), reading the
    /// index in order once; a sparse one, whose every key lands on lines
    /// of its own, is searched interleaved (see [`lower_bounds`]) so its
    /// cache misses overlap.
    pub fn slots_of_sorted(&self, keys: &[u64], route: bool, mut found: impl FnMut(usize, u32)) {
        let recs = self.key_records();
        let n = recs.len() / 2;
        if n == 0 {
            return;
        }
        // Only the keys inside this segment's key range can be here (a
        // segment of a run of sequential ids sees just its own run, and
        // never needs its filter).
        let (first, last) = (recs[0], recs[2 * (n - 1)]);
        let from = keys.partition_point(|&k| k < first);
        let to = keys.partition_point(|&k| k <= last);
        if from >= to {
            return;
        }
        let filter = if route { self.key_filter(true) } else { None };
        let mut hit = |i: usize, at: usize| {
            if at < n && recs[2 * at] == keys[i] {
                let slot = (recs[2 * at + 1] & 0xFFFF_FFFF) as u32;
                if self.is_live(slot) {
                    found(i, slot);
                }
            }
        };
        if (to - from) * SPARSE_GAP < n {
            let asked: Vec<usize> = (from..to)
                .filter(|&i| filter.is_none_or(|f| f.may_contain(keys[i])))
                .collect();
            let wanted: Vec<u64> = asked.iter().map(|&i| keys[i]).collect();
            let mut at = Vec::new();
            lower_bounds(recs, &wanted, &mut at);
            for (&i, &a) in asked.iter().zip(&at) {
                hit(i, a);
            }
            return;
        }
        let mut lo = 0usize;
        for (i, &key) in keys.iter().enumerate().take(to).skip(from) {
            if filter.is_some_and(|f| !f.may_contain(key)) {
                continue;
            }
            lo = lower_bound_from(recs, lo, key);
            if lo >= n {
                break;
            }
            hit(i, lo);
        }
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

/// Segments with fewer keys get no key filter: their whole key index
/// (64 KiB at this size) stays in cache and is searched as fast.
const KEY_FILTER_MIN: usize = 4096;

/// Batches whose keys are on average more than this many records apart
/// are searched interleaved (see [`Segment::slots_of_sorted`]).
const SPARSE_GAP: usize = 64;

/// False-positive rate of the segment key filters.
const KEY_FILTER_FP: f64 = 1.0 / 64.0;

fn parse_upper(
    b: &[u8],
    base: usize,
    top: usize,
) -> std::result::Result<Vec<UpperLevel>, (usize, String)> {
    if u32_at(b, 0) as usize != top || b.len() < 8 + top * 16 {
        return Err((
            base,
            format!("upper section does not describe {top} levels"),
        ));
    }
    let mut out = Vec::with_capacity(top);
    for l in 0..top {
        let off = u64_at(b, 8 + l * 16) as usize;
        let nodes = u64_at(b, 16 + l * 16) as usize;
        let need = nodes
            .checked_mul(8)
            .and_then(|x| x.checked_add(4))
            .and_then(|x| x.checked_add(off));
        match need {
            Some(end) if off.is_multiple_of(4) && end <= b.len() => {}
            _ => {
                return Err((
                    base + 8 + l * 16,
                    format!("upper level {} out of bounds", l + 1),
                ))
            }
        }
        let nodes_at = base + off;
        let offsets_at = nodes_at + nodes * 4;
        let adj_at = offsets_at + (nodes + 1) * 4;
        let last = u32_at(b, off + nodes * 4 + nodes * 4) as usize;
        if adj_at - base + last * 4 > b.len() {
            return Err((
                base + off,
                format!("upper level {} adjacency out of bounds", l + 1),
            ));
        }
        out.push(UpperLevel {
            nodes: (nodes_at, nodes * 4),
            offsets: (offsets_at, (nodes + 1) * 4),
            adj: (adj_at, last * 4),
        });
    }
    Ok(out)
}

impl GraphView for Segment {
    fn slots(&self) -> usize {
        self.info.slots as usize
    }

    #[inline]
    fn vector(&self, slot: u32) -> &[u8] {
        let at = self.vectors.0 + slot as usize * self.stride;
        // Slots reaching here are < slot_count (neighbour ids are filtered,
        // the entry is checked at open), so this is in bounds; the fallback
        // to slot 0 keeps a logic error from becoming a panic.
        self.map
            .get(at..at + self.stride)
            .unwrap_or_else(|| &self.map[self.vectors.0..self.vectors.0 + self.stride])
    }

    fn key(&self, slot: u32) -> u64 {
        words::<u64>(self.bytes(self.slot_keys))
            .get(slot as usize)
            .copied()
            .unwrap_or(u64::MAX)
    }

    #[inline]
    fn is_live(&self, slot: u32) -> bool {
        let s = slot as usize;
        s < self.info.slots as usize
            && words::<u64>(self.bytes(self.tombstones))
                .get(s / 64)
                .is_some_and(|w| w & (1 << (s % 64)) == 0)
    }

    /// The highest upper level whose (sorted) node list holds `slot`, by
    /// binary search from the top down; 0 when none does. Reads only
    /// bounds-checked ranges of the map.
    fn level(&self, slot: u32) -> usize {
        for (i, u) in self.upper.iter().enumerate().rev() {
            let nodes: &[u32] = words(self.bytes(u.nodes));
            if nodes.binary_search(&slot).is_ok() {
                return i + 1;
            }
        }
        0
    }

    fn entry_point(&self) -> Option<(u32, usize)> {
        self.info.entry.map(|e| (e, self.info.top_level as usize))
    }

    #[inline]
    fn full(&self, slot: u32) -> Option<&[u8]> {
        let (at, len) = self.full?;
        let fstride = len / (self.info.slots as usize).max(1);
        let start = at + slot as usize * fstride;
        self.map.get(start..start + fstride)
    }

    fn full_rows(&self) -> Option<(&[u8], usize)> {
        let (at, len) = self.full?;
        let fstride = len.checked_div(self.info.slots as usize)?;
        Some((self.map.get(at..at.checked_add(len)?)?, fstride))
    }

    fn rows(&self) -> Option<(&[u8], usize)> {
        let len = (self.info.slots as usize).checked_mul(self.stride)?;
        let rows = self
            .map
            .get(self.vectors.0..self.vectors.0.checked_add(len)?)?;
        Some((rows, self.stride))
    }

    #[inline]
    fn prefetch_links(&self, level: usize, slot: u32) {
        if level == 0 {
            let w = 1 + self.info.m0 as usize;
            let at = self.level0.0 + slot as usize * w * 4;
            if let Some(rec) = self.map.get(at..at + w * 4) {
                for line in rec.chunks(64) {
                    sagitta_index::prefetch(line.as_ptr());
                }
            }
        }
    }

    #[inline]
    fn neighbors(&self, level: usize, slot: u32, out: &mut Vec<u32>) {
        out.clear();
        let n = self.info.slots as u32;
        if level == 0 {
            let w = 1 + self.info.m0 as usize;
            let l0: &[u32] = words(self.bytes(self.level0));
            if let Some(rec) = l0.get(slot as usize * w..slot as usize * w + w) {
                let c = (rec[0] as usize).min(w - 1);
                out.extend(rec[1..=c].iter().copied().filter(|&x| x < n));
            }
            return;
        }
        let Some(u) = self.upper.get(level - 1) else {
            return;
        };
        let nodes: &[u32] = words(self.bytes(u.nodes));
        let offsets: &[u32] = words(self.bytes(u.offsets));
        let adj: &[u32] = words(self.bytes(u.adj));
        if let Ok(i) = nodes.binary_search(&slot) {
            let (a, b) = (
                offsets.get(i).copied().unwrap_or(0) as usize,
                offsets.get(i + 1).copied().unwrap_or(0) as usize,
            );
            if let Some(list) = adj.get(a..b) {
                out.extend(list.iter().copied().filter(|&x| x < n));
            }
        }
    }
}

impl IndexRead for Segment {
    fn space(&self) -> Space {
        self.info.space
    }

    fn len(&self) -> usize {
        self.info.live as usize
    }

    fn contains(&self, key: u64) -> bool {
        self.slot_of(key).is_some()
    }

    fn slot_of(&self, key: u64) -> Option<u32> {
        // A single key never builds the filter (a first lookup after open
        // stays instant), but uses one a batch built.
        if self.key_filter(false).is_some_and(|f| !f.may_contain(key)) {
            return None;
        }
        let recs = self.key_records();
        let at = lower_bound_from(recs, 0, key);
        if recs.get(2 * at) != Some(&key) {
            return None;
        }
        let slot = (recs[2 * at + 1] & 0xFFFF_FFFF) as u32;
        self.is_live(slot).then_some(slot)
    }

    fn slot_count(&self) -> usize {
        self.info.slots as usize
    }

    fn get_raw(&self, key: u64) -> Option<Vec<u8>> {
        let slot = self.slot_of(key)?;
        Some(self.vector(slot)[..self.info.space.vector_bytes()].to_vec())
    }

    /// The full-precision row where the segment carries them, else the
    /// stored codes decoded.
    fn get(&self, key: u64) -> Option<Vec<f32>> {
        let slot = self.slot_of(key)?;
        match GraphView::full(self, slot) {
            Some(row) => Some(
                row.chunks_exact(4)
                    .take(self.info.space.dims)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            ),
            None => self.info.space.decode_floats(self.vector(slot)),
        }
    }

    fn search(
        &self,
        query: VectorRef<'_>,
        k: usize,
        opts: &SearchOptions<'_>,
    ) -> Result<Vec<Neighbor>, IndexError> {
        sagitta_index::check_k(k, self.len())?;
        let target = Target {
            kind: self.info.kind,
            slots: self.info.slots as usize,
            m0: self.info.m0 as usize,
            ef_search: self.ef_search.load(std::sync::atomic::Ordering::Relaxed),
            full_precision: self.full.is_some(),
            scan_bytes: self.full_rows().map_or(self.stride, |(_, fstride)| fstride),
            contiguous: true,
        };
        let plan = sagitta_index::plan::plan(&target, k, opts)?;
        let space = self.info.space;
        if let (Plan::Ivf, Some(ivf)) = (plan, &self.ivf) {
            let VectorRef::F32(x) = query else {
                return Err(IndexError::WrongInputKind {
                    expected: "float",
                    dtype: space.dtype,
                });
            };
            let iq = IvfQuery {
                k,
                nprobe: opts
                    .nprobe
                    .unwrap_or_else(|| ivf.nprobe.load(std::sync::atomic::Ordering::Relaxed)),
                refine: opts.refine.unwrap_or_else(|| ivf.params.default_refine(k)),
                filter: opts.filter,
            };
            let view = SegIvfView { seg: self, ivf };
            return self.with_scratch(|s| {
                s.with_query(&space, query, |q, s| {
                    let scratch = s.ivf();
                    space.float_query(x, scratch.query_mut(space.dims));
                    let mut out = Vec::with_capacity(k);
                    ivf::search(&view, self, &self.dist, q, iq, scratch, &mut out);
                    out
                })
            });
        }
        self.with_scratch(|s| search::run(self, &space, &self.dist, query, k, plan, opts.filter, s))
    }
}

/// `path` with `.tmp` appended: where durable writers stage a file.
pub(crate) fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

pub(crate) use fault::sync_dir;

/// Writes `bytes` to `path` durably: `path.tmp`, fsync, rename, fsync of
/// the directory. A crash leaves the old file or the new one, never a mix.
pub(crate) fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    replace(path, bytes)?;
    sync_dir(path)
}

/// [`write_durably`] without the directory fsync: the new file is in
/// place (whole, its bytes synced) but its name may not survive a power
/// loss until the directory is synced. On failure `path` is untouched.
pub(crate) fn replace(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    let r = (|| {
        let mut f = fault::create(&tmp)?;
        fault::write_all(&mut f, bytes, &tmp)?;
        fault::sync_all(&f, &tmp)
    })();
    if r.is_err() {
        let _ = fault::remove(&tmp);
    }
    r?;
    let r = fault::rename(&tmp, path);
    if r.is_err() {
        let _ = fault::remove(&tmp);
    }
    r
}

/// Streams sections into a file, tracking offset and CRC of each.
struct SectionWriter<'a> {
    out: BufWriter<File>,
    pos: u64,
    /// Bytes before this offset have been handed to the disk.
    synced: u64,
    path: &'a Path,
    sections: Vec<Section>,
    cur: Option<(u32, u64, u32)>,
}

/// A [`SectionWriter`] as `io::Write` for Arrow's IPC writer, keeping the
/// first error of the file.
struct IpcSink<'s, 'p> {
    w: &'s mut SectionWriter<'p>,
    err: Option<StoreError>,
}

impl std::io::Write for IpcSink<'_, '_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self.w.put(b) {
            Ok(()) => Ok(b.len()),
            Err(e) => {
                let msg = e.to_string();
                self.err.get_or_insert(e);
                Err(std::io::Error::other(msg))
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Start the disk's writeback every this many bytes while a segment is
/// written (RocksDB's `bytes_per_sync`), so the final fsync has little
/// left and the journal commit it forces does not stall the WAL's fsyncs
/// of concurrent writers behind tens of megabytes of dirty pages.
const WRITEBACK_EVERY: u64 = 4 << 20;

impl SectionWriter<'_> {
    fn raw(&mut self, b: &[u8]) -> Result<()> {
        fault::write_all(&mut self.out, b, self.path)?;
        self.pos += b.len() as u64;
        if self.pos - self.synced >= WRITEBACK_EVERY {
            self.start_writeback()?;
        }
        Ok(())
    }

    /// Asks the kernel to start writing the bytes written since the last
    /// call, after waiting for the previous range to reach the disk: at
    /// most one chunk is in flight, so a background segment write paces
    /// itself to the disk instead of queueing tens of megabytes that a
    /// concurrent WAL fsync would wait behind. The fsync at the end still
    /// makes the file durable.
    fn start_writeback(&mut self) -> Result<()> {
        self.out.flush().map_err(io("write", self.path))?;
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let fd = self.out.get_ref().as_raw_fd();
            // SAFETY: sync_file_range on an open descriptor we own, over
            // byte ranges of the file; it touches no memory of ours.
            unsafe {
                if self.synced > 0 {
                    libc::sync_file_range(
                        fd,
                        0,
                        self.synced as libc::off64_t,
                        libc::SYNC_FILE_RANGE_WAIT_BEFORE
                            | libc::SYNC_FILE_RANGE_WRITE
                            | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                    );
                }
                libc::sync_file_range(
                    fd,
                    self.synced as libc::off64_t,
                    (self.pos - self.synced) as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                );
            }
        }
        self.synced = self.pos;
        Ok(())
    }

    fn begin(&mut self, kind: SectionKind) -> Result<()> {
        let pad = self.pos.next_multiple_of(SECTION_ALIGN) - self.pos;
        self.raw(&vec![0u8; pad as usize])?;
        self.cur = Some((kind as u32, self.pos, 0));
        Ok(())
    }

    fn put(&mut self, b: &[u8]) -> Result<()> {
        if let Some((_, _, crc)) = self.cur.as_mut() {
            *crc = crc32c::crc32c_append(*crc, b);
        }
        self.raw(b)
    }

    /// The Arrow IPC stream of `batch`, written as it is encoded.
    fn put_ipc(&mut self, batch: &RecordBatch) -> Result<()> {
        let mut sink = IpcSink { w: self, err: None };
        let r = payload::write_ipc(batch, &mut sink);
        match (sink.err, r) {
            // The file's own error (a full disk, an injected fault), not
            // the message Arrow wrapped it in.
            (Some(e), _) => Err(e),
            (None, r) => r.map_err(StoreError::Payload),
        }
    }

    fn end(&mut self) {
        if let Some((kind, offset, crc)) = self.cur.take() {
            self.sections.push(Section {
                kind,
                offset,
                len: self.pos - offset,
                crc,
            });
        }
    }
}

/// Full-precision rows of a segment whose index holds codes only:
/// called with a slot and its key, gives that slot's f32 row (at least
/// `dims * 4` bytes) to the sink, or nothing for zeros (a dead slot may).
pub type FullRows<'a> =
    &'a (dyn Fn(u32, u64, &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> + 'a);

/// Where a segment's text section comes from.
enum TextSource<'a> {
    /// Analyse the text columns of the payload.
    Analyse,
    /// A mutable part's index holding every slot's documents (the section
    /// keeps the live slots').
    Indexed(&'a MemText),
    /// Encoded already, for this segment's slots.
    Encoded(Vec<u8>),
}

fn write_file(
    index: &Index,
    payload: Option<(&Schema, &RecordBatch)>,
    text: &[TextFieldSpec],
    source: TextSource<'_>,
    full_rows: Option<FullRows<'_>>,
    tmp: &Path,
) -> Result<SegmentInfo> {
    let view = index.view();
    let space = index.space();
    let n = view.slots();
    let params = index.params();
    let hnsw = index.kind() == IndexKind::Hnsw;
    let ivf = if index.kind() == IndexKind::IvfRq {
        Some(index.ivf_export().ok_or_else(|| {
            StoreError::Index(IndexError::InvalidParameter {
                name: "index",
                value: "ivf_rq".into(),
                reason: "an untrained IVF index cannot be written",
            })
        })?)
    } else {
        None
    };
    // (The view holds the store's read lock: ask it, not the index.)
    let has_full = full_rows.is_some() || view.full(0).is_some();
    let nsec = if hnsw {
        6
    } else if ivf.is_some() {
        10
    } else {
        4
    } + usize::from(has_full);
    let text = match payload {
        Some((_, batch)) if !text.is_empty() && batch.num_rows() == view.slots() => {
            Some(match source {
                TextSource::Encoded(bytes) => {
                    // Made for these slots: a section that does not parse
                    // as such would make the segment unopenable.
                    TextSection::parse(&bytes, view.slots() as u32)
                        .map_err(|e| StoreError::Payload(PayloadError::Malformed(e.to_string())))?;
                    bytes
                }
                TextSource::Indexed(m) => text_section(&view, batch, text, Some(m))?,
                TextSource::Analyse => text_section(&view, batch, text, None)?,
            })
        }
        _ => None,
    };
    let payload = match payload {
        Some((schema, batch)) if !schema.is_empty() => {
            if batch.num_rows() != view.slots() {
                return Err(StoreError::Payload(PayloadError::Malformed(format!(
                    "{} payload rows for {} slots",
                    batch.num_rows(),
                    view.slots()
                ))));
            }
            Some((batch, pindex::build(schema, batch)))
        }
        _ => None,
    };
    let nsec = nsec + if payload.is_some() { 2 } else { 0 } + usize::from(text.is_some());
    let file = fault::create(tmp)?;
    let mut w = SectionWriter {
        out: BufWriter::with_capacity(1 << 20, file),
        pos: 0,
        synced: 0,
        path: tmp,
        sections: vec![],
        cur: None,
    };
    w.raw(&vec![0u8; HEADER_LEN + nsec * SECTION_ENTRY_LEN])?;

    let live: Vec<u32> = (0..n as u32).filter(|&s| view.is_live(s)).collect();
    w.begin(SectionKind::Vectors)?;
    for s in 0..n as u32 {
        w.put(view.vector(s))?;
    }
    w.end();
    w.begin(SectionKind::SlotKeys)?;
    for s in 0..n as u32 {
        w.put(&view.key(s).to_le_bytes())?;
    }
    w.end();
    let mut recs: Vec<(u64, u32)> = live.iter().map(|&s| (view.key(s), s)).collect();
    recs.sort_unstable();
    w.begin(SectionKind::KeyIndex)?;
    for (k, s) in &recs {
        w.put(&k.to_le_bytes())?;
        w.put(&u64::from(*s).to_le_bytes())?;
    }
    w.end();
    let mut tomb = Bitset::new(n);
    for s in 0..n {
        if !view.is_live(s as u32) {
            tomb.insert(s);
        }
    }
    w.begin(SectionKind::Tombstones)?;
    for word in tomb.words() {
        w.put(&word.to_le_bytes())?;
    }
    w.end();

    let (mut entry, mut top) = (NO_ENTRY, 0u32);
    if hnsw {
        let m0 = params.m0();
        let mut buf = Vec::new();
        let mut rec: Vec<u8> = Vec::with_capacity((1 + m0) * 4);
        w.begin(SectionKind::Level0)?;
        for s in 0..n as u32 {
            view.neighbors(0, s, &mut buf);
            let count = buf.len().min(m0);
            rec.clear();
            rec.extend_from_slice(&(count as u32).to_le_bytes());
            for &x in &buf[..count] {
                rec.extend_from_slice(&x.to_le_bytes());
            }
            rec.resize((1 + m0) * 4, 0);
            w.put(&rec)?;
        }
        w.end();
        if let Some((e, t)) = view.entry_point() {
            entry = e;
            top = t as u32;
        }
        // Upper levels in CSR form.
        let mut per_level: Vec<Vec<u32>> = vec![Vec::new(); top as usize];
        for s in 0..n as u32 {
            let lvl = view.level(s).min(top as usize);
            for l in 1..=lvl {
                per_level[l - 1].push(s);
            }
        }
        let mut body: Vec<u8> = Vec::new();
        let dir_len = 8 + 16 * top as usize;
        let mut dir = Vec::with_capacity(dir_len);
        dir.extend_from_slice(&top.to_le_bytes());
        dir.extend_from_slice(&0u32.to_le_bytes());
        for (li, nodes) in per_level.iter().enumerate() {
            let off = dir_len + body.len();
            dir.extend_from_slice(&(off as u64).to_le_bytes());
            dir.extend_from_slice(&(nodes.len() as u64).to_le_bytes());
            let mut offsets = vec![0u32];
            let mut adj = Vec::new();
            for &s in nodes {
                view.neighbors(li + 1, s, &mut buf);
                adj.extend_from_slice(&buf);
                offsets.push(adj.len() as u32);
            }
            for x in nodes.iter().chain(&offsets).chain(&adj) {
                body.extend_from_slice(&x.to_le_bytes());
            }
        }
        w.begin(SectionKind::Upper)?;
        w.put(&dir)?;
        w.put(&body)?;
        w.end();
    }

    if has_full {
        let fstride = index.full_stride();
        w.begin(SectionKind::FullVectors)?;
        let zeros = vec![0u8; fstride];
        for s in 0..n as u32 {
            match (full_rows, view.full(s)) {
                (Some(src), _) => {
                    let mut given = false;
                    src(s, view.key(s), &mut |row: &[u8]| {
                        let row = &row[..row.len().min(fstride)];
                        w.put(row)?;
                        w.put(&zeros[row.len()..])?;
                        given = true;
                        Ok(())
                    })?;
                    if !given {
                        w.put(&zeros)?;
                    }
                }
                (None, Some(row)) => w.put(&row[..fstride])?,
                (None, None) => w.put(&zeros)?,
            }
        }
        w.end();
    }
    let mut ivf_info = None;
    if let Some(x) = &ivf {
        let parts = x.lists.len();
        let dims = space.dims;
        w.begin(SectionKind::IvfCentroids)?;
        for c in &x.model.centroids()[..parts * dims] {
            w.put(&c.to_le_bytes())?;
        }
        w.end();
        let mut lists = vec![0u64];
        let mut blocks = vec![0u64];
        for l in &x.lists {
            lists.push(lists[lists.len() - 1] + l.slots.len() as u64);
            blocks.push(blocks[blocks.len() - 1] + l.slots.len().div_ceil(32) as u64);
        }
        w.begin(SectionKind::IvfDirectory)?;
        for v in lists.iter().chain(&blocks) {
            w.put(&v.to_le_bytes())?;
        }
        w.end();
        w.begin(SectionKind::IvfSlots)?;
        for l in &x.lists {
            for s in &l.slots {
                w.put(&s.to_le_bytes())?;
            }
        }
        w.end();
        w.begin(SectionKind::IvfCodes)?;
        for l in &x.lists {
            w.put(&l.codes)?;
        }
        w.end();
        w.begin(SectionKind::IvfFactors)?;
        for l in &x.lists {
            for f in &l.factors {
                w.put(&f.to_le_bytes())?;
            }
        }
        w.end();
        w.begin(SectionKind::IvfExtra)?;
        for l in &x.lists {
            w.put(&l.ex)?;
        }
        w.end();
        let p = index.ivf_params().unwrap_or_default();
        ivf_info = Some(IvfInfo {
            partitions: parts as u32,
            bits: x.model.bits(),
            seed: x.model.seed(),
            nprobe: p.nprobe as u32,
            refine: p.refine.map(|r| r.min(u32::MAX as usize - 1) as u32),
            listed: lists[parts],
        });
    }

    if let Some((batch, idx)) = &payload {
        w.begin(SectionKind::Payload)?;
        w.put_ipc(batch)?;
        w.end();
        w.begin(SectionKind::PayloadIndex)?;
        w.put(idx)?;
        w.end();
    }
    if let Some(t) = &text {
        w.begin(SectionKind::Text)?;
        w.put(t)?;
        w.end();
    }
    let info = SegmentInfo {
        version: FORMAT_VERSION,
        space,
        kind: index.kind(),
        slots: n as u64,
        live: live.len() as u64,
        m: if hnsw { params.m as u32 } else { 0 },
        m0: if hnsw { params.m0() as u32 } else { 0 },
        entry: (entry != NO_ENTRY).then_some(entry),
        top_level: top,
        ef_search: params.ef_search as u32,
        ef_construction: params.ef_construction as u32,
        file_len: w.pos,
        ivf: ivf_info,
    };
    let mut table = Vec::with_capacity(nsec * SECTION_ENTRY_LEN);
    for s in &w.sections {
        table.extend_from_slice(&s.kind.to_le_bytes());
        table.extend_from_slice(&0u32.to_le_bytes());
        table.extend_from_slice(&s.offset.to_le_bytes());
        table.extend_from_slice(&s.len.to_le_bytes());
        table.extend_from_slice(&s.crc.to_le_bytes());
        table.extend_from_slice(&0u32.to_le_bytes());
    }
    let header = encode_header(
        &info,
        nsec as u32,
        entry,
        crc32c::crc32c(&table),
        if text.is_some() {
            4
        } else if payload.is_some() {
            3
        } else {
            0
        },
    );
    let mut file = w.out.into_inner().map_err(|e| StoreError::Io {
        op: "flush",
        path: tmp.to_path_buf(),
        source: e.into_error(),
    })?;
    file.seek(SeekFrom::Start(0)).map_err(io("seek", tmp))?;
    fault::write_all(&mut file, &header, tmp)?;
    fault::write_all(&mut file, &table, tmp)?;
    fault::sync_all(&file, tmp)?;
    Ok(info)
}

fn encode_header(
    info: &SegmentInfo,
    nsec: u32,
    entry: u32,
    table_crc: u32,
    sections_need: u32,
) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    // Flat and HNSW files over version-1 dtypes are laid out as in
    // version 1, so a version-1 reader may read them; IVF files and
    // scalar-quantized dtypes need a version-2 reader.
    // Payload sections need a version-3 reader, a text section a
    // version-4 one.
    let oldest_reader: u32 = if sections_need > 0 {
        sections_need
    } else if info.ivf.is_some() || info.space.dtype.is_quantized() {
        2
    } else {
        1
    };
    h[12..16].copy_from_slice(&oldest_reader.to_le_bytes());
    h[16..20].copy_from_slice(&(info.space.dims as u32).to_le_bytes());
    h[20] = info.space.dtype as u8;
    h[21] = info.space.metric as u8;
    h[22] = match info.kind {
        IndexKind::Flat => 0,
        IndexKind::Hnsw => 1,
        IndexKind::IvfRq => 2,
    };
    if let Some(i) = &info.ivf {
        h[72..76].copy_from_slice(&i.partitions.to_le_bytes());
        h[76] = i.bits;
        h[80..88].copy_from_slice(&i.seed.to_le_bytes());
        h[88..92].copy_from_slice(&i.nprobe.to_le_bytes());
        h[92..96].copy_from_slice(&i.refine.unwrap_or(u32::MAX).to_le_bytes());
        h[96..104].copy_from_slice(&i.listed.to_le_bytes());
    }
    h[24..32].copy_from_slice(&info.slots.to_le_bytes());
    h[32..40].copy_from_slice(&info.live.to_le_bytes());
    h[40..44].copy_from_slice(&(info.space.stride() as u32).to_le_bytes());
    h[44..48].copy_from_slice(&nsec.to_le_bytes());
    h[48..52].copy_from_slice(&info.m.to_le_bytes());
    h[52..56].copy_from_slice(&info.m0.to_le_bytes());
    h[56..60].copy_from_slice(&entry.to_le_bytes());
    h[60..64].copy_from_slice(&info.top_level.to_le_bytes());
    h[64..68].copy_from_slice(&info.ef_search.to_le_bytes());
    h[68..72].copy_from_slice(&info.ef_construction.to_le_bytes());
    h[120..124].copy_from_slice(&table_crc.to_le_bytes());
    let crc = crc32c::crc32c(&h[..124]);
    h[124..128].copy_from_slice(&crc.to_le_bytes());
    h
}

const _: () = assert!(HEADER_LEN == 128 && SECTION_ENTRY_LEN == 32);

/// The text section of a segment: the `text` fields' string columns of
/// `batch` (one row per slot), live slots only; taken from `analysed`
/// (every slot's documents, over the same fields) when given.
fn text_section(
    view: &sagitta_index::IndexView<'_>,
    batch: &RecordBatch,
    text: &[TextFieldSpec],
    analysed: Option<&MemText>,
) -> Result<Vec<u8>> {
    use arrow_array::cast::AsArray;
    use arrow_array::Array;
    let encode = |mem: &MemText| {
        sagitta_text::section::encode(mem, view.slots() as u32)
            .map_err(|e| StoreError::Payload(PayloadError::Malformed(e.to_string())))
    };
    if let Some(mem) = analysed.filter(|m| m.has_fields(text)) {
        let slots = view.slots();
        return encode(&mem.live_only(&|s| (s as usize) < slots && view.is_live(s)));
    }
    let mut mem = MemText::new(text);
    for (fi, f) in text.iter().enumerate() {
        let Some(col) = batch.column_by_name(&f.name) else {
            continue;
        };
        let Some(strings) = col.as_string_opt::<i32>() else {
            return Err(StoreError::Payload(PayloadError::Malformed(format!(
                "text field {:?} is not a string column",
                f.name
            ))));
        };
        for slot in 0..view.slots().min(strings.len()) {
            if view.is_live(slot as u32) && strings.is_valid(slot) {
                mem.add(fi, slot as u32, strings.value(slot));
            }
        }
    }
    encode(&mem)
}

#[cfg(all(test, feature = "failpoints"))]
mod payload_write_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::payload::{Field, FieldType, Value};

    fn batch(rows: usize) -> RecordBatch {
        let schema = Schema::new(vec![Field {
            name: "text".into(),
            ty: FieldType::String,
        }])
        .unwrap();
        let rows: Vec<Vec<Value>> = (0..rows)
            .map(|i| vec![Value::Str(format!("row {i} {}", "x".repeat(i % 50)))])
            .collect();
        payload::to_record_batch(&schema, rows.iter().map(|r| Some(&r[..]))).unwrap()
    }

    fn writer(path: &Path) -> SectionWriter<'_> {
        SectionWriter {
            // A small buffer: every put reaches the file layer.
            out: BufWriter::with_capacity(64, fault::create(path).unwrap()),
            pos: 0,
            synced: 0,
            path,
            sections: vec![],
            cur: None,
        }
    }

    #[test]
    fn the_payload_section_is_the_ipc_stream_with_its_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("payload.bin");
        let b = batch(2_000);
        let mut w = writer(&path);
        w.begin(SectionKind::Payload).unwrap();
        w.put_ipc(&b).unwrap();
        w.end();
        w.out.flush().unwrap();
        let written = std::fs::read(&path).unwrap();
        let expected = payload::ipc_bytes(&b).unwrap();
        assert_eq!(written, expected);
        assert_eq!(w.sections.len(), 1);
        assert_eq!(w.sections[0].len, expected.len() as u64);
        assert_eq!(w.sections[0].crc, crc32c::crc32c(&expected));
    }

    #[test]
    fn a_disk_failing_inside_the_payload_returns_the_file_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("payload.bin");
        let b = batch(2_000);
        let mut w = writer(&path);
        w.begin(SectionKind::Payload).unwrap();
        // Some of the stream lands, then the disk is full.
        fault::armed::inject(
            fault::armed::Fault::new(IoOp::Write, dir.path(), libc::ENOSPC).after(3),
        );
        let e = w.put_ipc(&b).unwrap_err();
        let fired = fault::armed::clear(dir.path());
        assert!(fired >= 1, "the fault fired");
        match e {
            StoreError::Io { op, source, .. } => {
                assert_eq!(op, "write");
                assert_eq!(source.raw_os_error(), Some(libc::ENOSPC));
            }
            other => panic!("expected the file's error, got {other:?}"),
        }
    }
}
