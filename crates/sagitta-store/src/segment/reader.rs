//! Opening a segment file and checking it: [`Segment::open`] in named
//! steps (map, header, section table, the sections each index kind needs,
//! the optional ones), the HNSW upper-level directory, and
//! [`Segment::verify`].
//!
//! `open` is O(1) in the number of vectors (O(levels) for the upper-level
//! directory, O(partitions) for IVF); everything that grows with the
//! vectors (section CRCs, neighbour ids, key order) waits for `verify`.

use super::format::{
    self, corrupt, parse_table, u32_at, u64_at, Header, IvfInfo, Section, SectionKind, Sections,
    SegmentInfo, HEADER_LEN, SECTION_ALIGN, SECTION_ENTRY_LEN,
};
use super::ivf::SegIvf;
use super::{words, Segment, UpperLevel};
use crate::error::{io, Result, StoreError};
use crate::fault::{self, IoOp};
use crate::warm::Warmup;
use memmap2::Mmap;
use parking_lot::Mutex;
use sagitta_index::{DType, IndexKind};
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, OnceLock};

/// Lookups of a key index after which its misses read ahead as usual:
/// the first lookup after a cold open reads a page per probe in each
/// segment, the next ones warm the index by large reads (see `warm.rs`).
const KEY_WARM_AFTER: u32 = 1;

/// Byte ranges of an HNSW segment's graph.
type Graph = ((usize, usize), Vec<UpperLevel>);

impl Segment {
    /// Maps and validates a segment. O(1) in the number of vectors.
    pub fn open(path: &Path) -> Result<Segment> {
        let (map, file, file_len) = map_file(path)?;
        let h = &map[..HEADER_LEN];
        let head = format::parse_header(path, h)?;
        let list = read_table(path, &map, &head, file_len)?;
        let sections = Sections { path, list: &list };
        let (slots, live, stride) = (head.slots, head.live, head.stride as u64);
        let vectors = sections.find(SectionKind::Vectors, Some(slots * stride))?;
        let slot_keys = sections.find(SectionKind::SlotKeys, Some(slots * 8))?;
        let key_index = sections.find(SectionKind::KeyIndex, Some(live * 16))?;
        let tombstones = sections.find(SectionKind::Tombstones, Some(slots.div_ceil(64) * 8))?;
        let (level0, upper) = if head.kind == IndexKind::Hnsw {
            open_graph(path, &map, &head, &sections)?
        } else {
            ((0, 0), Vec::new())
        };
        let (mut ivf, mut ivf_info) = (None, None);
        if head.kind == IndexKind::IvfRq {
            let (parsed, i) = SegIvf::open(path, &map, h, head.space, slots, &sections)?;
            ivf = Some(parsed);
            ivf_info = Some(i);
        }
        let full = open_full(path, &map, &head, &sections)?;
        let payload_sections = open_payload(path, &sections)?;
        let text = if sections.has(SectionKind::Text) {
            Some(sections.find(SectionKind::Text, None)?)
        } else {
            None
        };
        let info = segment_info(&head, file_len, ivf_info);
        #[cfg(unix)]
        {
            // What open read, it read page by page (see `map_file`); the
            // sections are read ahead as usual from here on but these:
            let _ = map.advise(memmap2::Advice::Normal);
            // A key lookup reads two or three records of the index: without
            // this each cold miss reads ahead the device's whole window (8
            // MiB on some virtual disks, 2.9 ms a miss measured here, 0.05
            // ms without), which made the first lookup in 100 segments take
            // seconds. Whole-index readers ask for it first (`key_filter`).
            let _ = map.advise_range(memmap2::Advice::Random, key_index.0, key_index.1);
            // A lookup reads one word of the dead-slot bitset.
            let _ = map.advise_range(memmap2::Advice::Random, tombstones.0, tombstones.1);
            // IVF searches touch full vectors only to rerank a few
            // candidates: no readahead, so only those pages come in.
            if ivf.is_some() {
                let _ = map.advise_range(memmap2::Advice::Random, vectors.0, vectors.1);
            }
        }
        Ok(Segment {
            path: path.to_path_buf(),
            dist: head.space.distance().map_err(StoreError::Index)?,
            stride: head.stride,
            vectors,
            slot_keys,
            key_index,
            tombstones,
            level0,
            upper,
            ivf,
            rows_file: full.map(|_| file),
            full,
            ef_search: AtomicUsize::new(info.ef_search as usize),
            scratch: Mutex::new(Vec::new()),
            payload_sections,
            payload: OnceLock::new(),
            key_filter: OnceLock::new(),
            key_warm: Warmup::new(KEY_WARM_AFTER),
            key_hinted: std::sync::atomic::AtomicBool::new(false),
            text,
            sections: list,
            info,
            map: Arc::new(map),
        })
    }

    /// Checks every section checksum and the structural invariants that
    /// `open` does not (O(file size)).
    pub fn verify(&self) -> Result<()> {
        for s in &self.sections {
            let bytes = &self.map[s.offset as usize..(s.offset + s.len) as usize];
            if crc32c::crc32c(bytes) != s.crc {
                return Err(corrupt(
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
                return Err(corrupt(
                    &self.path,
                    (self.key_index.0 + i * 16) as u64,
                    "key index unsorted or slot out of range",
                ));
            }
        }
        if let Some((lo, hi)) = self.info.key_range {
            let n = recs.len() / 2;
            if n == 0 || recs[0] != lo || recs[2 * (n - 1)] != hi {
                return Err(corrupt(
                    &self.path,
                    104,
                    "key range differs from the key index",
                ));
            }
        }
        if self.info.kind == IndexKind::Hnsw {
            let l0: &[u32] = words(self.bytes(self.level0));
            for (slot, rec) in l0.chunks_exact(1 + self.info.m0 as usize).enumerate() {
                if rec[0] > self.info.m0
                    || rec[1..=rec[0] as usize].iter().any(|&x| x as usize >= n)
                {
                    return Err(corrupt(
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
                return Err(corrupt(
                    &self.path,
                    (ivf.slots.0 + i * 4) as u64,
                    "IVF list slot out of range",
                ));
            }
        }
        Ok(())
    }
}

/// Opens and maps `path`, which must be at least a header long; returns
/// the map and the file's length.
fn map_file(path: &Path) -> Result<(Mmap, std::fs::File, u64)> {
    let file = fault::open(path)?;
    let file_len = file.metadata().map_err(io("stat", path))?.len();
    if file_len < HEADER_LEN as u64 {
        return Err(corrupt(
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
    // Open reads the header, the section table and a few directories, a
    // page or two each: with the device's read-ahead a cold page fault
    // reads a window around it (8 MiB on some virtual disks), which made
    // opening 221 segments on 16 threads read gigabytes and take 1-2 s.
    // `open` restores read-ahead once it is done.
    #[cfg(unix)]
    let _ = map.advise(memmap2::Advice::Random);
    Ok((map, file, file_len))
}

/// The section table after the header: checksummed, and every section
/// aligned and inside the file.
fn read_table(path: &Path, map: &[u8], head: &Header, file_len: u64) -> Result<Vec<Section>> {
    let table_end = HEADER_LEN + head.sections * SECTION_ENTRY_LEN;
    let table = map
        .get(HEADER_LEN..table_end)
        .ok_or_else(|| corrupt(path, HEADER_LEN as u64, "section table past end of file"))?;
    if crc32c::crc32c(table) != head.table_crc {
        return Err(corrupt(
            path,
            HEADER_LEN as u64,
            "section table checksum mismatch",
        ));
    }
    let sections = parse_table(table);
    for (i, s) in sections.iter().enumerate() {
        let at = (HEADER_LEN + i * SECTION_ENTRY_LEN) as u64;
        if s.offset % SECTION_ALIGN != 0
            || s.offset.checked_add(s.len).is_none_or(|end| end > file_len)
        {
            return Err(corrupt(
                path,
                at,
                format!("section {} lies outside the file or is misaligned", s.kind),
            ));
        }
    }
    Ok(sections)
}

/// The graph of an HNSW segment: its link counts, entry and top level
/// checked, the level-0 section's range and the upper-level directory.
fn open_graph(path: &Path, map: &[u8], head: &Header, sections: &Sections<'_>) -> Result<Graph> {
    let (m, m0, entry, top_level) = (head.m, head.m0, head.entry, head.top_level);
    if !(2..=512).contains(&m0) || m == 0 || m > m0 {
        return Err(corrupt(path, 48, format!("bad link counts M={m} M0={m0}")));
    }
    let n = head.slots as usize;
    if n > 0 && entry as usize >= n {
        return Err(corrupt(
            path,
            56,
            format!("entry slot {entry} out of range"),
        ));
    }
    if top_level as usize > sagitta_index::MAX_LEVEL {
        return Err(corrupt(path, 60, format!("top level {top_level}")));
    }
    let level0 = sections.find(
        SectionKind::Level0,
        Some(head.slots * (1 + u64::from(m0)) * 4),
    )?;
    let (uoff, ulen) = sections.find(SectionKind::Upper, None)?;
    let upper = parse_upper(&map[uoff..uoff + ulen], uoff, top_level as usize)
        .map_err(|(at, why)| corrupt(path, at as u64, why))?;
    Ok((level0, upper))
}

/// The full-precision rows' range, when the file has them (only beside
/// f16, sq8 or sq16 vectors).
fn open_full(
    path: &Path,
    map: &Mmap,
    head: &Header,
    sections: &Sections<'_>,
) -> Result<Option<(usize, usize)>> {
    if !sections.has(SectionKind::FullVectors) {
        return Ok(None);
    }
    if !matches!(head.space.dtype, DType::F16 | DType::Sq8 | DType::Sq16) {
        return Err(corrupt(
            path,
            HEADER_LEN as u64,
            "full-precision rows in a segment whose vectors are not f16, sq8 or sq16",
        ));
    }
    let fstride = (head.space.dims * 4).next_multiple_of(sagitta_index::VECTOR_ALIGN) as u64;
    let f = sections.find(SectionKind::FullVectors, Some(head.slots * fstride))?;
    #[cfg(unix)]
    let _ = map.advise_range(memmap2::Advice::Random, f.0, f.1);
    #[cfg(not(unix))]
    let _ = map;
    Ok(Some(f))
}

/// The payload and payload-index sections' ranges: both or neither.
#[allow(clippy::type_complexity)]
fn open_payload(
    path: &Path,
    sections: &Sections<'_>,
) -> Result<Option<((usize, usize), (usize, usize))>> {
    match (
        sections.has(SectionKind::Payload),
        sections.has(SectionKind::PayloadIndex),
    ) {
        (false, false) => Ok(None),
        (true, true) => Ok(Some((
            sections.find(SectionKind::Payload, None)?,
            sections.find(SectionKind::PayloadIndex, None)?,
        ))),
        _ => Err(corrupt(
            path,
            HEADER_LEN as u64,
            "a payload section without its index, or an index without payload",
        )),
    }
}

/// The public form of a checked header.
fn segment_info(head: &Header, file_len: u64, ivf: Option<IvfInfo>) -> SegmentInfo {
    let n = head.slots as usize;
    SegmentInfo {
        version: head.version,
        space: head.space,
        kind: head.kind,
        slots: head.slots,
        live: head.live,
        m: head.m,
        m0: head.m0,
        entry: (head.kind == IndexKind::Hnsw && n > 0).then_some(head.entry),
        top_level: head.top_level,
        ef_search: head.ef_search,
        ef_construction: head.ef_construction,
        file_len,
        ivf,
        key_range: head.key_range,
    }
}

/// The upper-level directory of an HNSW segment's upper section `b`
/// (which starts at `base` in the file), checked to lie inside it; an
/// error names the file offset and what is wrong.
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
