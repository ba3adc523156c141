//! The segment file format: magic, versions, the fixed header, the section
//! table and the section kinds, with the header's encoder and decoder.
//! Nothing here reads a file or maps memory; `reader.rs` and `writer.rs`
//! call these on bytes they hold.
//!
//! ## Layout (format version 5, little-endian)
//!
//! [`FORMAT_VERSION`] is the version written; a file says in bytes 12..16
//! the oldest reader version that can read it (1 for flat / HNSW over the
//! version-1 dtypes, 2 for IVF or sq8 / sq16, 3 with payload sections, 4
//! with a text section, 5 for cosine f32 / f16 vectors or full rows kept
//! as given rather than at unit length). `docs/FORMAT.md` has the version table and the
//! contents of each section in full.
//!
//! | offset | size | field                                                        |
//! |-------:|-----:|--------------------------------------------------------------|
//! | 0      | 8    | magic `b"SGTASEG\0"`                                         |
//! | 8      | 4    | format version written (5; older files say 1 to 4)           |
//! | 12     | 4    | oldest format version whose reader can read this file       |
//! | 16     | 4    | dims                                                         |
//! | 20     | 1    | dtype (0 f32, 1 f16, 2 i8, 3 b1, 4 sq8, 5 sq16)              |
//! | 21     | 1    | metric (0 l2, 1 ip, 2 cos, 3 hamming, 4 nphd)                |
//! | 22     | 1    | index kind (0 flat, 1 hnsw, 2 ivf_rq)                        |
//! | 23     | 1    | reserved, 0                                                  |
//! | 24     | 8    | slot count *n*                                               |
//! | 32     | 8    | live count                                                   |
//! | 40     | 4    | vector stride in bytes                                       |
//! | 44     | 4    | section count                                                |
//! | 48     | 4    | HNSW M                                                       |
//! | 52     | 4    | HNSW M0 (level-0 links)                                      |
//! | 56     | 4    | entry slot (`u32::MAX` when none)                            |
//! | 60     | 4    | top level                                                    |
//! | 64     | 4    | default ef_search                                            |
//! | 68     | 4    | ef_construction                                              |
//! | 72     | 4    | IVF: partition count *P* (0 otherwise)                       |
//! | 76     | 1    | IVF: RaBitQ bits per dimension, 1..=8                        |
//! | 77     | 3    | reserved, 0                                                  |
//! | 80     | 8    | IVF: rotation seed                                           |
//! | 88     | 4    | IVF: default nprobe                                          |
//! | 92     | 4    | IVF: default rerank depth (`u32::MAX`: chosen from bits, k)  |
//! | 96     | 8    | IVF: listed vectors *L* (live + deleted)                     |
//! | 104    | 8    | smallest live key (with 112: the key range, see below)       |
//! | 112    | 8    | largest live key; 104..120 all 0: no range recorded         |
//! | 120    | 4    | CRC32C of the section table                                  |
//! | 124    | 4    | CRC32C of bytes 0..124                                       |
//!
//! The section table follows at byte 128: one 32-byte entry per section,
//! `kind: u32, reserved: u32, offset: u64, length: u64, crc32c: u32,
//! reserved: u32`. Every section starts at a multiple of 64 bytes.
//!
//! Bytes 104..120 were reserved (0) in the files of every version before
//! the key range was recorded there; readers of any version ignore them.
//! A reader treats both zero (older files, a segment with no live key, or
//! one whose only key is 0) as "no range": it then reads the key index's
//! ends instead. With a range, a key outside it is known absent without a
//! read, and a lookup starts interpolating from the range.
//!
//! | kind | section         | contents                                                     |
//! |-----:|-----------------|--------------------------------------------------------------|
//! | 1    | vectors         | *n* × stride bytes; slot *s* at `offset + s × stride`        |
//! | 2    | slot keys       | *n* × u64: the key of each slot                              |
//! | 3    | key index       | live × {key u64, slot u32, 0 u32}, sorted by key             |
//! | 4    | tombstones      | ceil(*n*/64) × u64 bitset; bit set = deleted                 |
//! | 5    | level 0         | *n* × (1 + M0) × u32: `[count, neighbours…]` (HNSW only)     |
//! | 6    | upper           | levels 1..=top in CSR form (HNSW only), see below            |
//! | 7    | IVF centroids   | *P* × dims × f32 (IVF only)                                  |
//! | 8    | IVF directory   | (*P* + 1) × u64 list starts, (*P* + 1) × u64 block starts    |
//! | 9    | IVF slots       | *L* × u32, partition by partition                            |
//! | 10   | IVF codes       | 1-bit RaBitQ codes in fast-scan blocks of 32 vectors         |
//! | 11   | IVF factors     | *L* × 4 × f32                                                |
//! | 12   | IVF extra bits  | *L* × (bits − 1) bit planes                                  |
//! | 13   | full vectors    | *n* × f32 rows (optional; f16 / sq8 / sq16 segments)         |
//! | 14   | payload         | one Arrow IPC stream, one row per slot (optional)            |
//! | 15   | payload indexes | one index per payload column (with 14; see `pindex`)         |
//! | 16   | text index      | full-text index of the text fields (optional)                |
//!
//! Upper section: `top: u32, 0: u32`, then per level 1..=top a directory
//! entry `{offset: u64 (from section start), nodes: u64}`; at each offset,
//! `nodes` sorted u32 slots, `nodes + 1` u32 offsets into the adjacency,
//! then the u32 adjacency.

use crate::envelope::SEGMENT;
use crate::error::{Result, StoreError};
use sagitta_index::{DType, IndexKind, Metric, Space};
use std::path::Path;

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
pub(super) const SECTION_ALIGN: u64 = 64;
pub(super) const NO_ENTRY: u32 = u32::MAX;

const _: () = assert!(HEADER_LEN == 128 && SECTION_ENTRY_LEN == 32);

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

/// IVF-RaBitQ parameters of a segment (header bytes 72..104).
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
    /// The smallest and largest live key (header bytes 104..120), where
    /// the file records them.
    pub key_range: Option<(u64, u64)>,
}

/// One entry of the section table.
#[derive(Debug, Clone, Copy)]
pub(super) struct Section {
    pub(super) kind: u32,
    pub(super) offset: u64,
    pub(super) len: u64,
    pub(super) crc: u32,
}

pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]))
}

pub(super) fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).map_or(0, |x| {
        u64::from_le_bytes([x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]])
    })
}

/// A `Corrupt` error at `offset` of the segment file `path`.
pub(super) fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        file: path.to_path_buf(),
        offset,
        reason: reason.into(),
    }
}

/// The fixed header as read, checked on its own (magic, versions, CRC,
/// codes, counts against each other); the graph and IVF fields are
/// checked against the sections by the reader.
#[derive(Debug, Clone, Copy)]
pub(super) struct Header {
    pub(super) version: u32,
    pub(super) space: Space,
    pub(super) kind: IndexKind,
    pub(super) slots: u64,
    pub(super) live: u64,
    pub(super) stride: usize,
    pub(super) sections: usize,
    pub(super) m: u32,
    pub(super) m0: u32,
    /// The raw entry slot ([`NO_ENTRY`] when none).
    pub(super) entry: u32,
    pub(super) top_level: u32,
    /// Stored default ef_search, at least 1.
    pub(super) ef_search: u32,
    pub(super) ef_construction: u32,
    pub(super) table_crc: u32,
    pub(super) key_range: Option<(u64, u64)>,
}

/// Decodes and checks the fixed header `h` (at least [`HEADER_LEN`]
/// bytes) of the file `path`.
pub(super) fn parse_header(path: &Path, h: &[u8]) -> Result<Header> {
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
        return Err(corrupt(path, 124, "header checksum mismatch"));
    }
    let dims = u32_at(h, 16) as usize;
    let dtype = DType::from_u8(h[20])
        .filter(|d| version >= 2 || !d.is_quantized())
        .ok_or_else(|| corrupt(path, 20, "unknown dtype"))?;
    let metric = Metric::from_u8(h[21]).ok_or_else(|| corrupt(path, 21, "unknown metric"))?;
    let kind = match h[22] {
        0 => IndexKind::Flat,
        1 => IndexKind::Hnsw,
        2 if version >= 2 => IndexKind::IvfRq,
        _ => return Err(corrupt(path, 22, "unknown index kind")),
    };
    let space = Space::new(dims, metric, dtype).map_err(|e| corrupt(path, 16, e.to_string()))?;
    let slots = u64_at(h, 24);
    let live = u64_at(h, 32);
    let stride = u32_at(h, 40) as usize;
    let sections = u32_at(h, 44) as usize;
    if stride != space.stride() {
        return Err(corrupt(
            path,
            40,
            format!(
                "stride {stride} does not match the space ({})",
                space.stride()
            ),
        ));
    }
    if slots > sagitta_index::MAX_SLOTS as u64 || live > slots {
        return Err(corrupt(
            path,
            24,
            format!("impossible counts: {slots} slots, {live} live"),
        ));
    }
    if sections > 64 {
        return Err(corrupt(path, 44, format!("{sections} sections")));
    }
    let key_range = match (u64_at(h, 104), u64_at(h, 112)) {
        (0, 0) => None,
        (lo, hi) if lo <= hi && live > 0 => Some((lo, hi)),
        _ => return Err(corrupt(path, 104, "key range out of order")),
    };
    Ok(Header {
        version,
        space,
        kind,
        slots,
        live,
        stride,
        sections,
        m: u32_at(h, 48),
        m0: u32_at(h, 52),
        entry: u32_at(h, 56),
        top_level: u32_at(h, 60),
        ef_search: u32_at(h, 64).max(1),
        ef_construction: u32_at(h, 68),
        table_crc: u32_at(h, 120),
        key_range,
    })
}

/// The IVF fields of header `h` (bytes 72..104) as stored; the reader
/// checks them. The default nprobe reads as at least 1.
pub(super) fn parse_ivf(h: &[u8]) -> IvfInfo {
    let refine = u32_at(h, 92);
    IvfInfo {
        partitions: u32_at(h, 72),
        bits: h.get(76).copied().unwrap_or(0),
        seed: u64_at(h, 80),
        nprobe: u32_at(h, 88).max(1),
        refine: (refine != u32::MAX).then_some(refine),
        listed: u64_at(h, 96),
    }
}

/// Decodes a section table (whole entries only).
pub(super) fn parse_table(table: &[u8]) -> Vec<Section> {
    table
        .chunks_exact(SECTION_ENTRY_LEN)
        .map(|e| Section {
            kind: u32_at(e, 0),
            offset: u64_at(e, 8),
            len: u64_at(e, 16),
            crc: u32_at(e, 24),
        })
        .collect()
}

/// Encodes a section table.
pub(super) fn encode_table(sections: &[Section]) -> Vec<u8> {
    let mut table = Vec::with_capacity(sections.len() * SECTION_ENTRY_LEN);
    for s in sections {
        table.extend_from_slice(&s.kind.to_le_bytes());
        table.extend_from_slice(&0u32.to_le_bytes());
        table.extend_from_slice(&s.offset.to_le_bytes());
        table.extend_from_slice(&s.len.to_le_bytes());
        table.extend_from_slice(&s.crc.to_le_bytes());
        table.extend_from_slice(&0u32.to_le_bytes());
    }
    table
}

/// Encodes the fixed header of a file described by `info`, with `nsec`
/// sections, the raw `entry` slot and the CRC of its section table.
/// `sections_need` is the reader version its contents need (5 for cosine
/// vectors kept as given, 4 with a text section, 3 with payload, 0 with
/// none of these).
pub(super) fn encode_header(
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
    if let Some((lo, hi)) = info.key_range {
        h[104..112].copy_from_slice(&lo.to_le_bytes());
        h[112..120].copy_from_slice(&hi.to_le_bytes());
    }
    h[120..124].copy_from_slice(&table_crc.to_le_bytes());
    let crc = crc32c::crc32c(&h[..124]);
    h[124..128].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The section table of a file being opened, with the lookups `open`
/// makes in it.
pub(super) struct Sections<'a> {
    pub(super) path: &'a Path,
    pub(super) list: &'a [Section],
}

impl Sections<'_> {
    /// Whether the file has a section of `kind`.
    pub(super) fn has(&self, kind: SectionKind) -> bool {
        self.list.iter().any(|s| s.kind == kind as u32)
    }

    /// The byte range of the section of `kind`, which must exist and,
    /// with `want`, be exactly that long.
    pub(super) fn find(&self, kind: SectionKind, want: Option<u64>) -> Result<(usize, usize)> {
        let s = self
            .list
            .iter()
            .find(|s| s.kind == kind as u32)
            .ok_or_else(|| {
                corrupt(
                    self.path,
                    HEADER_LEN as u64,
                    format!("missing section {kind:?}"),
                )
            })?;
        if let Some(w) = want {
            if s.len != w {
                return Err(corrupt(
                    self.path,
                    s.offset,
                    format!("section {kind:?} is {} bytes, expected {w}", s.len),
                ));
            }
        }
        Ok((s.offset as usize, s.len as usize))
    }
}
