//! The byte layout of a low-dimensional index and its checked, zero-copy
//! parse. Documented in docs/FORMAT.md ("Low-dimensional index").
//!
//! ```text
//! header (64 bytes, little-endian)
//!   0  magic "SGLOWDIM"        8  version u32       12 kind u16 (1 i16 grid, 2 f32), flags u16 (bit 0: labels)
//!   16 dim u32                 20 leaf u32 (LEAF: rows per leaf, 16..=256, a multiple of 16)
//!   24 rows u64
//!   32 nodes u32               36 blocks u32 (= leaves)
//!   40 scale f64 (grid: value = code / scale; 1 for f32)
//!   48 body length u64         56 body crc32c u32   60 header crc32c u32 (bytes 0..60)
//! body, each array starting at a multiple of 64 bytes from the file start
//!   nodes   [u32; 2] per node   internal: (left, right); leaf: (block, 0x8000_0000 | rows)
//!   boxes   2·B coords per node, B = dim padded to 16 or 32 with zeros (low corner, then high)
//!   coords  blocks of LEAF rows. i16: dimension pairs, each pair LEAF rows × 2 interleaved:
//!           block·P·2·LEAF + (s/2)·2·LEAF + 2·j + s%2, P = ceil(dim/2), for the s-th stored
//!           dimension: version 1 stores every dimension (s = d), version 2 only those the
//!           leaf's box does not fix (low < high), in order, the rest of the block 0 (a fixed
//!           dimension's value is its box's); f32 (both versions): column-major,
//!           block·dim·LEAF + d·LEAF + j
//!   ids     u32 per block slot (the row's index at build; a leaf's unused slots repeat its last)
//!   labels  u16 per block slot (only with flag bit 0)
//! ```

use super::{box_dim, leaf_ok, MAX_DIM};
use crate::{LowDimError, Result};

/// The first eight bytes of every low-dimensional index.
pub const MAGIC: &[u8; 8] = b"SGLOWDIM";
/// The version this build writes (it reads 1 and 2). Version 2 leaves
/// out of a grid leaf's block the dimensions its box fixes.
pub const FORMAT_VERSION: u32 = 2;
/// The oldest version this build reads.
pub(crate) const OLDEST_VERSION: u32 = 1;
pub(crate) const HEADER: usize = 64;
pub(crate) const LEAF_BIT: u32 = 0x8000_0000;
pub(crate) const KIND_GRID: u32 = 1;
pub(crate) const KIND_F32: u32 = 2;
pub(crate) const FLAG_LABELS: u32 = 1;

/// Where each array sits, derived from the header's counts alone.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub nodes: (usize, usize),
    pub boxes: (usize, usize),
    pub coords: (usize, usize),
    pub ids: (usize, usize),
    pub labels: (usize, usize),
    pub end: usize,
}

fn align64(x: usize) -> Option<usize> {
    x.checked_add(63).map(|v| v & !63)
}

impl Layout {
    /// The layout for these counts; `None` on overflow.
    pub fn of(
        kind: u32,
        dim: usize,
        leaf: usize,
        blocks: usize,
        nodes: usize,
        labels: bool,
    ) -> Option<Layout> {
        let coord = if kind == KIND_GRID { 2 } else { 4 };
        let block = if kind == KIND_GRID {
            dim.div_ceil(2) * 2 * leaf
        } else {
            dim * leaf
        };
        let slots = blocks.checked_mul(leaf)?;
        let mut at = HEADER;
        let mut take = |bytes: usize| -> Option<(usize, usize)> {
            let start = align64(at)?;
            at = start.checked_add(bytes)?;
            Some((start, bytes))
        };
        let nodes_r = take(nodes.checked_mul(8)?)?;
        let boxes_r = take(nodes.checked_mul(2 * box_dim(dim))?.checked_mul(coord)?)?;
        let coords_r = take(blocks.checked_mul(block)?.checked_mul(coord)?)?;
        let ids_r = take(slots.checked_mul(4)?)?;
        let labels_r = take(if labels { slots.checked_mul(2)? } else { 0 })?;
        Some(Layout {
            nodes: nodes_r,
            boxes: boxes_r,
            coords: coords_r,
            ids: ids_r,
            labels: labels_r,
            end: at,
        })
    }
}

/// The coordinates of a view: `i16` codes on a grid, or `f32` rows.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Coords<'a> {
    Grid { boxes: &'a [i16], coords: &'a [i16] },
    F32 { boxes: &'a [f32], coords: &'a [f32] },
}

/// A low-dimensional index searched in place over its bytes (a memory
/// map, or [`super::LowDimIndex::as_bytes`]).
#[derive(Debug, Clone, Copy)]
pub struct LowDimView<'a> {
    pub(crate) dim: usize,
    /// Rows per leaf (the block width).
    pub(crate) leaf: usize,
    pub(crate) rows: usize,
    pub(crate) scale: f64,
    pub(crate) nodes: &'a [u32],
    pub(crate) coords: Coords<'a>,
    pub(crate) ids: &'a [u32],
    pub(crate) labels: Option<&'a [u16]>,
    pub(crate) version: u32,
}

fn corrupt(offset: usize, what: impl Into<String>) -> LowDimError {
    LowDimError::corrupt(offset, what)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Reinterprets an aligned byte range as plain values.
fn cast<T: Plain>(bytes: &[u8], (start, len): (usize, usize)) -> Result<&[T]> {
    let raw = &bytes[start..start + len];
    // SAFETY: `T` is a plain number type (every bit pattern is a valid
    // value, no padding), and `align_to` only yields a middle slice that is
    // correctly aligned for `T`; a non-empty prefix or suffix is refused.
    let (pre, mid, post) = unsafe { raw.align_to::<T>() };
    if !pre.is_empty() || !post.is_empty() {
        return Err(corrupt(
            start,
            "buffer is not 8-byte aligned (memory-map the file, or use LowDimIndex::from_bytes)",
        ));
    }
    Ok(mid)
}

/// Number types whose every bit pattern is a value.
pub(crate) trait Plain: Copy {}
impl Plain for u32 {}
impl Plain for u16 {}
impl Plain for i16 {}
impl Plain for f32 {}

impl<'a> LowDimView<'a> {
    /// Parses and checks an index in place: magic, version, both
    /// checksums, every count and offset, and the tree's structure (every
    /// node reached exactly once, every leaf inside the rows, every id a
    /// row, each row held once). Damaged bytes give
    /// [`LowDimError::Corrupt`], never a panic or an out-of-bounds read
    /// later. `bytes` must be 8-byte aligned (a memory map is).
    pub fn parse(bytes: &'a [u8]) -> Result<LowDimView<'a>> {
        Self::parse_inner(bytes, true)
    }

    /// The view of bytes already checked by [`LowDimView::parse`]: the
    /// O(1) header and layout checks only, not the checksums or the tree.
    pub(crate) fn parse_checked(bytes: &'a [u8]) -> Result<LowDimView<'a>> {
        Self::parse_inner(bytes, false)
    }

    fn parse_inner(bytes: &'a [u8], full: bool) -> Result<LowDimView<'a>> {
        if cfg!(target_endian = "big") {
            return Err(corrupt(0, "little-endian index on a big-endian machine"));
        }
        if bytes.len() < HEADER {
            return Err(corrupt(
                bytes.len(),
                format!("{} bytes, shorter than the header", bytes.len()),
            ));
        }
        if &bytes[..8] != MAGIC {
            return Err(corrupt(0, "not a low-dimensional index (bad magic)"));
        }
        let version = u32_at(bytes, 8);
        if !(OLDEST_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(corrupt(
                8,
                format!(
                "format version {version}, this build reads {OLDEST_VERSION} to {FORMAT_VERSION}"
            ),
            ));
        }
        if crc32c::crc32c(&bytes[..60]) != u32_at(bytes, 60) {
            return Err(corrupt(60, "header checksum mismatch"));
        }
        let kind = u32_at(bytes, 12) & 0xffff;
        let flags = u32_at(bytes, 12) >> 16;
        let dim = u32_at(bytes, 16) as usize;
        let leaf = u32_at(bytes, 20) as usize;
        let rows = u64_at(bytes, 24);
        let nodes = u32_at(bytes, 32) as usize;
        let blocks = u32_at(bytes, 36) as usize;
        let scale = f64::from_bits(u64_at(bytes, 40));
        let body_len = u64_at(bytes, 48);
        if kind != KIND_GRID && kind != KIND_F32 {
            return Err(corrupt(12, format!("unknown coordinate kind {kind}")));
        }
        if dim == 0 || dim > MAX_DIM || !leaf_ok(leaf) || flags & !FLAG_LABELS != 0 {
            let at = if dim == 0 || dim > MAX_DIM {
                16
            } else if !leaf_ok(leaf) {
                20
            } else {
                12
            };
            return Err(corrupt(
                at,
                format!("bad header: dim {dim}, leaf {leaf}, flags {flags:#x}"),
            ));
        }
        if rows == 0 || rows >= u64::from(u32::MAX) {
            return Err(corrupt(24, format!("bad row count {rows}")));
        }
        let rows = rows as usize;
        if blocks < rows.div_ceil(leaf) || blocks > rows || nodes != 2 * blocks - 1 {
            return Err(corrupt(32, format!("{nodes} nodes for {blocks} leaves")));
        }
        if !(scale.is_finite() && scale > 0.0) {
            return Err(corrupt(40, format!("bad scale {scale}")));
        }
        let labels = flags & FLAG_LABELS != 0;
        let layout = Layout::of(kind, dim, leaf, blocks, nodes, labels)
            .ok_or_else(|| corrupt(32, "sizes overflow"))?;
        if body_len != (layout.end - HEADER) as u64 {
            return Err(corrupt(
                48,
                format!(
                    "body is {body_len} bytes, the counts need {}",
                    layout.end - HEADER
                ),
            ));
        }
        if bytes.len() < layout.end {
            return Err(corrupt(
                bytes.len(),
                format!("truncated: {} bytes, {} expected", bytes.len(), layout.end),
            ));
        }
        if full && crc32c::crc32c(&bytes[HEADER..layout.end]) != u32_at(bytes, 56) {
            return Err(corrupt(56, "body checksum mismatch"));
        }
        let node_words: &[u32] = cast(bytes, layout.nodes)?;
        let coords = if kind == KIND_GRID {
            Coords::Grid {
                boxes: cast(bytes, layout.boxes)?,
                coords: cast(bytes, layout.coords)?,
            }
        } else {
            Coords::F32 {
                boxes: cast(bytes, layout.boxes)?,
                coords: cast(bytes, layout.coords)?,
            }
        };
        let ids: &[u32] = cast(bytes, layout.ids)?;
        let labels = if labels {
            Some(cast::<u16>(bytes, layout.labels)?)
        } else {
            None
        };
        if full {
            check_tree(node_words, layout.nodes.0, rows, blocks, leaf)?;
            if let Some(at) = ids.iter().position(|&id| id as usize >= rows) {
                return Err(corrupt(
                    layout.ids.0 + 4 * at,
                    format!("row id {} out of {rows} rows", ids[at]),
                ));
            }
            check_rows_once(node_words, ids, layout.ids.0, rows, leaf)?;
        }
        Ok(LowDimView {
            dim,
            leaf,
            rows,
            scale,
            nodes: node_words,
            coords,
            ids,
            labels,
            version,
        })
    }

    /// Dimensions of the rows.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Never true: an index holds at least one row.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The format version of the bytes (older ones are read as written;
    /// [`FORMAT_VERSION`] searches grid leaves faster).
    pub fn format_version(&self) -> u32 {
        self.version
    }

    /// Whether grid blocks hold only the dimensions their leaf's box does
    /// not fix (version 2 on; `f32` blocks hold every dimension).
    pub(crate) fn packed(&self) -> bool {
        self.version >= 2 && matches!(self.coords, Coords::Grid { .. })
    }

    /// Rows per kd-tree leaf.
    pub fn leaf_size(&self) -> usize {
        self.leaf
    }

    /// Whether rows carry labels.
    pub fn has_labels(&self) -> bool {
        self.labels.is_some()
    }

    /// `Some(scale)` when rows are stored exactly as `i16` codes on the
    /// grid `code / scale`; `None` when they are kept as `f32`.
    pub fn grid_scale(&self) -> Option<f64> {
        match self.coords {
            Coords::Grid { .. } => Some(self.scale),
            Coords::F32 { .. } => None,
        }
    }
}

/// Each row is held by exactly one used slot of a leaf (with the counts
/// adding up to the rows, as [`check_tree`] checked, and every id a row):
/// so a search never returns a row twice nor misses one.
/// `ids_at` is the id array's offset in the bytes.
fn check_rows_once(
    nodes: &[u32],
    ids: &[u32],
    ids_at: usize,
    rows: usize,
    leaf: usize,
) -> Result<()> {
    let mut held = vec![false; rows];
    for node in nodes.chunks_exact(2) {
        if node[1] & LEAF_BIT != 0 {
            let start = node[0] as usize * leaf;
            let count = (node[1] & !LEAF_BIT) as usize;
            for (slot, &id) in ids[start..start + count].iter().enumerate() {
                let h = &mut held[id as usize];
                if *h {
                    let at = ids_at + 4 * (start + slot);
                    return Err(corrupt(at, format!("row {id} is held twice")));
                }
                *h = true;
            }
        }
    }
    Ok(())
}

/// Every node is reached from the root exactly once, children come after
/// their parent, each leaf owns the next block in order, and the leaves
/// hold every row once: so a search terminates, reads only in bounds, and
/// sees each row once.
/// `nodes_at` is the node array's offset in the bytes.
fn check_tree(
    nodes: &[u32],
    nodes_at: usize,
    rows: usize,
    blocks: usize,
    leaf: usize,
) -> Result<()> {
    let n = nodes.len() / 2;
    let mut seen = vec![false; n];
    seen[0] = true;
    let (mut covered, mut leaves) = (0usize, 0usize);
    for i in 0..n {
        if !seen[i] {
            return Err(corrupt(
                nodes_at + 8 * i,
                format!("node {i} is not reached from the root"),
            ));
        }
        let (a, b) = (nodes[2 * i], nodes[2 * i + 1]);
        if b & LEAF_BIT != 0 {
            let (block, count) = (a as usize, (b & !LEAF_BIT) as usize);
            if block != leaves || count == 0 || count > leaf {
                return Err(corrupt(
                    nodes_at + 8 * i,
                    format!("leaf {i}: block {block}, {count} rows"),
                ));
            }
            leaves += 1;
            covered += count;
        } else {
            for c in [a as usize, b as usize] {
                if c <= i || c >= n || seen[c] {
                    return Err(corrupt(
                        nodes_at + 8 * i,
                        format!("node {i} has a bad child {c}"),
                    ));
                }
                seen[c] = true;
            }
        }
    }
    if covered != rows || leaves != blocks {
        return Err(corrupt(
            24,
            format!("{leaves} leaves hold {covered} rows, the header says {blocks} and {rows}"),
        ));
    }
    Ok(())
}
