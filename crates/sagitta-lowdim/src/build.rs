//! Building a low-dimensional index: the grid check, the kd-tree, and the
//! bytes of the format (see `format.rs`).

use super::format::{
    Layout, LowDimView, FLAG_LABELS, FORMAT_VERSION, HEADER, KIND_F32, KIND_GRID, LEAF_BIT, MAGIC,
};
use super::scan::Coord;
use super::{box_dim, leaf_ok, LEAF, MAX_DIM};
use crate::{LowDimError, Result};
use std::sync::Arc;

/// Finest decimal grid tried: 10^-4.
const MAX_DECIMALS: i32 = 4;
/// Rows sampled to pick a split dimension.
const SPLIT_SAMPLE: usize = 2048;

/// An owned low-dimensional index: its bytes, 8-byte aligned, searched
/// through [`LowDimIndex::view`] and written as they are with
/// [`LowDimIndex::as_bytes`].
#[derive(Clone)]
pub struct LowDimIndex {
    bytes: Backing,
}

/// Where an index's bytes live: built or read here, or shared (a memory
/// map), already checked.
#[derive(Clone)]
enum Backing {
    Words(Vec<u64>, usize),
    Shared(Arc<dyn AsRef<[u8]> + Send + Sync>),
}

impl std::fmt::Debug for LowDimIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LowDimIndex")
            .field("bytes", &self.as_bytes().len())
            .finish()
    }
}

/// The code of `x` on the grid of `scale`, when it is exactly on it.
pub(crate) fn grid_code(x: f32, scale: f64) -> Option<i16> {
    let c = (f64::from(x) * scale).round();
    if (-32767.0..=32767.0).contains(&c) && (c / scale) as f32 == x {
        Some(c as i16)
    } else {
        None
    }
}

/// The coarsest decimal grid (10^-p, p ≤ 4) that holds every value exactly
/// as an `i16` code, if any.
fn find_grid(rows: &[f32]) -> Option<f64> {
    (0..=MAX_DECIMALS)
        .map(|p| 10f64.powi(p))
        .find(|&scale| rows.iter().all(|&x| grid_code(x, scale).is_some()))
}

impl LowDimIndex {
    /// Builds an index over `rows` (`n × dim`, row-major), with an optional
    /// label per row. Refuses 0 or more than [`MAX_DIM`] dimensions, a
    /// ragged or empty buffer, non-finite components and a label count
    /// that is not the row count.
    pub fn build(rows: &[f32], dim: usize, labels: Option<&[u16]>) -> Result<LowDimIndex> {
        Self::build_with_leaf(rows, dim, labels, LEAF)
    }

    /// [`LowDimIndex::build`] with `leaf` rows per kd-tree leaf (a multiple
    /// of 16 from 16 to [`super::MAX_LEAF`]): larger leaves mean fewer,
    /// wider boxes to check and more rows scanned per leaf.
    pub fn build_with_leaf(
        rows: &[f32],
        dim: usize,
        labels: Option<&[u16]>,
        leaf: usize,
    ) -> Result<LowDimIndex> {
        if !leaf_ok(leaf) {
            return Err(LowDimError::InvalidParameter {
                name: "leaf",
                value: leaf.to_string(),
                reason: "rows per leaf must be a multiple of 16 from 16 to 256",
            });
        }
        if dim == 0 || dim > MAX_DIM {
            return Err(LowDimError::InvalidParameter {
                name: "dim",
                value: dim.to_string(),
                reason: "a low-dimensional index takes 1 to 32 dimensions",
            });
        }
        if rows.is_empty() {
            return Err(LowDimError::Empty);
        }
        if !rows.len().is_multiple_of(dim) {
            return Err(LowDimError::Dimensions {
                expected: dim,
                got: rows.len() % dim,
            });
        }
        let n = rows.len() / dim;
        if n >= u32::MAX as usize {
            return Err(LowDimError::TooManyRows(n));
        }
        if let Some(i) = rows.iter().position(|x| !x.is_finite()) {
            return Err(LowDimError::at_row(
                i / dim,
                LowDimError::NotFinite {
                    index: i % dim,
                    value: rows[i],
                },
            ));
        }
        if let Some(l) = labels {
            if l.len() != n {
                return Err(LowDimError::InvalidParameter {
                    name: "labels",
                    value: l.len().to_string(),
                    reason: "one label per row is needed",
                });
            }
        }
        match find_grid(rows) {
            Some(scale) => {
                let codes: Vec<i16> = rows
                    .iter()
                    .map(|&x| grid_code(x, scale).unwrap_or_default())
                    .collect();
                Ok(write(&codes, dim, leaf, labels, KIND_GRID, scale))
            }
            None => Ok(write(rows, dim, leaf, labels, KIND_F32, 1.0)),
        }
    }

    /// Copies index bytes (a file read into memory) into an aligned buffer
    /// and checks them as [`LowDimView::parse`] does.
    pub fn from_bytes(bytes: &[u8]) -> Result<LowDimIndex> {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        for (w, chunk) in words.iter_mut().zip(bytes.chunks(8)) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            *w = u64::from_le_bytes(b);
        }
        let index = LowDimIndex {
            bytes: Backing::Words(words, bytes.len()),
        };
        LowDimView::parse(index.as_bytes())?;
        Ok(index)
    }

    /// Takes bytes that stay where they are (a memory map of an index
    /// file: the rows are paged in as searches touch them) and checks them
    /// once, as [`LowDimView::parse`] does. They must be 8-byte aligned.
    pub fn from_shared(bytes: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Result<LowDimIndex> {
        LowDimView::parse((*bytes).as_ref())?;
        Ok(LowDimIndex {
            bytes: Backing::Shared(bytes),
        })
    }

    /// The index's bytes, exactly as a file holds them.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.bytes {
            Backing::Words(words, len) => {
                // SAFETY: a `u64` buffer is a valid, more strictly aligned
                // byte buffer; `len` never exceeds its size in bytes.
                unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), *len) }
            }
            Backing::Shared(b) => (**b).as_ref(),
        }
    }

    /// The index, ready to search (O(1): the bytes were checked when this
    /// value was made).
    pub fn view(&self) -> LowDimView<'_> {
        LowDimView::parse_checked(self.as_bytes()).expect("checked when the index was made")
    }
}

/// Builds the tree over `values` and lays out the bytes.
fn write<C: Coord>(
    values: &[C],
    dim: usize,
    leaf: usize,
    labels: Option<&[u16]>,
    kind: u32,
    scale: f64,
) -> LowDimIndex {
    let n = values.len() / dim;
    let mut perm: Vec<u32> = (0..n as u32).collect();
    let mut tree = Tree {
        values,
        dim,
        leaf,
        nodes: Vec::new(),
        boxes: Vec::new(),
        leaves: Vec::new(),
    };
    tree.build(&mut perm);

    let blocks = tree.leaves.len();
    let node_count = tree.nodes.len() / 2;
    let layout = Layout::of(kind, dim, leaf, blocks, node_count, labels.is_some())
        .expect("sizes of an in-memory index fit");
    let mut bytes = vec![0u8; layout.end];
    bytes[..8].copy_from_slice(MAGIC);
    bytes[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    let flags = if labels.is_some() { FLAG_LABELS } else { 0 };
    bytes[12..16].copy_from_slice(&(kind | flags << 16).to_le_bytes());
    bytes[16..20].copy_from_slice(&(dim as u32).to_le_bytes());
    bytes[20..24].copy_from_slice(&(leaf as u32).to_le_bytes());
    bytes[24..32].copy_from_slice(&(n as u64).to_le_bytes());
    bytes[32..36].copy_from_slice(&(node_count as u32).to_le_bytes());
    bytes[36..40].copy_from_slice(&(blocks as u32).to_le_bytes());
    bytes[40..48].copy_from_slice(&scale.to_bits().to_le_bytes());
    bytes[48..56].copy_from_slice(&((layout.end - HEADER) as u64).to_le_bytes());

    put(
        &mut bytes,
        layout.nodes.0,
        tree.nodes.iter().map(|w| w.to_le_bytes()),
    );
    put(
        &mut bytes,
        layout.boxes.0,
        tree.boxes.iter().map(|c| c.le_bytes()),
    );
    // One block per leaf, in the coordinate type's order; a leaf's unused
    // slots repeat its last row (never scored: the leaf's count excludes
    // them), padding dimensions are 0. A grid leaf stores only the
    // dimensions its rows do not all share (its box's low < high), in
    // order: a search takes a shared one's value from the box.
    let block = C::block_len(dim, leaf);
    let mut coords = vec![C::default(); blocks * block];
    let mut slots: Vec<u32> = Vec::with_capacity(blocks * leaf);
    let mut stored: Vec<usize> = Vec::with_capacity(dim);
    for (b, &(start, count)) in tree.leaves.iter().enumerate() {
        let rows = &perm[start..start + count];
        let value = |r: u32, d: usize| values[r as usize * dim + d];
        stored.clear();
        stored.extend((0..dim).filter(|&d| {
            kind != KIND_GRID
                || rows
                    .iter()
                    .any(|&r| value(r, d).f() != value(rows[0], d).f())
        }));
        for j in 0..leaf {
            let row = perm[start + j.min(count - 1)];
            slots.push(row);
            for (s, &d) in stored.iter().enumerate() {
                coords[b * block + C::at(s, j, leaf)] = value(row, d);
            }
        }
    }
    put(
        &mut bytes,
        layout.coords.0,
        coords.iter().map(|c| c.le_bytes()),
    );
    put(
        &mut bytes,
        layout.ids.0,
        slots.iter().map(|id| id.to_le_bytes()),
    );
    if let Some(l) = labels {
        put(
            &mut bytes,
            layout.labels.0,
            slots.iter().map(|&id| l[id as usize].to_le_bytes()),
        );
    }
    let body_crc = crc32c::crc32c(&bytes[HEADER..]);
    bytes[56..60].copy_from_slice(&body_crc.to_le_bytes());
    let head_crc = crc32c::crc32c(&bytes[..60]);
    bytes[60..64].copy_from_slice(&head_crc.to_le_bytes());

    let len = bytes.len();
    let mut words = vec![0u64; len.div_ceil(8)];
    for (w, chunk) in words.iter_mut().zip(bytes.chunks(8)) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        *w = u64::from_le_bytes(b);
    }
    LowDimIndex {
        bytes: Backing::Words(words, len),
    }
}

fn put<B: AsRef<[u8]>>(bytes: &mut [u8], mut at: usize, items: impl Iterator<Item = B>) {
    for item in items {
        let item = item.as_ref();
        bytes[at..at + item.len()].copy_from_slice(item);
        at += item.len();
    }
}

struct Tree<'v, C> {
    values: &'v [C],
    dim: usize,
    /// Rows per leaf at most.
    leaf: usize,
    /// Two words per node; a node's two children numbered consecutively.
    nodes: Vec<u32>,
    /// Low then high corner per node.
    boxes: Vec<C>,
    /// Each leaf's (first position in the permutation, rows), in order.
    leaves: Vec<(usize, usize)>,
}

impl<C: Coord> Tree<'_, C> {
    fn at(&self, row: u32, d: usize) -> f64 {
        self.values[row as usize * self.dim + d].f()
    }

    /// Builds the tree: node 0 is the root, and the two children of a
    /// node get consecutive numbers (siblings' boxes are adjacent in
    /// memory, read together). Leaves get blocks in node order.
    fn build(&mut self, perm: &mut [u32]) {
        self.nodes.extend([0, 0]);
        self.push_box(perm);
        self.split(perm, 0, 0);
        let mut at_block = 0u32;
        let mut ordered = Vec::with_capacity(self.leaves.len());
        for node in 0..self.nodes.len() / 2 {
            if self.nodes[2 * node + 1] & LEAF_BIT != 0 {
                let leaf = self.nodes[2 * node] as usize;
                ordered.push(self.leaves[leaf]);
                self.nodes[2 * node] = at_block;
                at_block += 1;
            }
        }
        self.leaves = ordered;
    }

    /// Fills node `me` (box already pushed) over `rows`, which sit at
    /// `start` in the permutation. A node splits its dimension of largest
    /// variance at the middle of its range (boxes of even extent prune
    /// better than halves of equal counts); when that leaves fewer than
    /// 1/8 of the rows on one side, at the median instead, which keeps the
    /// depth logarithmic. Either way the split falls *between two distinct
    /// values*, so the children's boxes do not overlap there (a gap the
    /// bound can use). Leaves hold up to `leaf` rows, one block each.
    fn split(&mut self, rows: &mut [u32], start: usize, me: usize) {
        if rows.len() <= self.leaf {
            self.nodes[2 * me] = self.leaves.len() as u32;
            self.nodes[2 * me + 1] = LEAF_BIT | rows.len() as u32;
            self.leaves.push((start, rows.len()));
            return;
        }
        let d = self.widest(rows);
        let mid = match self.split_middle(rows, d) {
            Some(mid) => mid,
            None => self.split_median(rows, d),
        };
        let (left, right) = rows.split_at_mut(mid);
        let l = self.nodes.len() / 2;
        self.nodes.extend([0, 0, 0, 0]);
        self.push_box(left);
        self.push_box(right);
        self.nodes[2 * me] = l as u32;
        self.nodes[2 * me + 1] = l as u32 + 1;
        self.split(left, start, l);
        self.split(right, start + mid, l + 1);
    }

    /// Puts the rows at or below the middle of dimension `d`'s range
    /// first and returns how many, unless a side would hold fewer than 1/8
    /// of the rows (or the dimension has one value).
    fn split_middle(&self, rows: &mut [u32], d: usize) -> Option<usize> {
        let (lo, hi) = rows
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &r| {
                let v = self.at(r, d);
                (l.min(v), h.max(v))
            });
        // lo ≤ m < hi when lo < hi: both sides get a row.
        let m = lo + (hi - lo) / 2.0;
        if lo >= hi || m >= hi {
            return None;
        }
        let below = rows.iter().filter(|&&r| self.at(r, d) <= m).count();
        if below.min(rows.len() - below) < rows.len() / 8 {
            return None;
        }
        let (mut i, mut j) = (0, rows.len());
        while i < j {
            if self.at(rows[i], d) <= m {
                i += 1;
            } else {
                j -= 1;
                rows.swap(i, j);
            }
        }
        Some(i)
    }

    /// Splits near the median of dimension `d`, between two distinct
    /// values when there are two; returns the left side's size.
    fn split_median(&self, rows: &mut [u32], d: usize) -> usize {
        let half = rows.len() / 2;
        rows.select_nth_unstable_by(half, |&a, &b| {
            self.at(a, d).total_cmp(&self.at(b, d)).then(a.cmp(&b))
        });
        let v = self.at(rows[half], d);
        // Rows below v are all left of `half`, rows above all right of it.
        let below = rows[..half].iter().filter(|&&r| self.at(r, d) < v).count();
        let above = half + rows[half..].iter().filter(|&&r| self.at(r, d) <= v).count();
        let mid = match (below > 0, above < rows.len()) {
            (true, true) if half - below <= above - half => below,
            (_, true) => above,
            (true, false) => below,
            // One value in this dimension (duplicates everywhere else too,
            // as it is the widest): split by position.
            (false, false) => half,
        };
        if mid != half {
            rows.select_nth_unstable_by(mid, |&a, &b| {
                self.at(a, d).total_cmp(&self.at(b, d)).then(a.cmp(&b))
            });
        }
        mid
    }

    fn push_box(&mut self, rows: &[u32]) {
        let dim = self.dim;
        let first = rows[0] as usize * dim;
        let mut lo: Vec<C> = self.values[first..first + dim].to_vec();
        let mut hi = lo.clone();
        for &r in rows {
            let row = &self.values[r as usize * dim..(r as usize + 1) * dim];
            for d in 0..dim {
                if row[d].f() < lo[d].f() {
                    lo[d] = row[d];
                }
                if row[d].f() > hi[d].f() {
                    hi[d] = row[d];
                }
            }
        }
        let pad = box_dim(dim) - dim;
        self.boxes.extend(lo);
        self.boxes.extend(std::iter::repeat_n(C::default(), pad));
        self.boxes.extend(hi);
        self.boxes.extend(std::iter::repeat_n(C::default(), pad));
    }

    /// The dimension of largest variance over (a sample of) `rows`.
    fn widest(&self, rows: &[u32]) -> usize {
        let step = rows.len().div_ceil(SPLIT_SAMPLE).max(1);
        let mut best = (0, f64::NEG_INFINITY);
        for d in 0..self.dim {
            let (mut s, mut s2, mut m) = (0.0, 0.0, 0.0);
            for &r in rows.iter().step_by(step) {
                let v = self.at(r, d);
                s += v;
                s2 += v * v;
                m += 1.0;
            }
            let var = s2 / m - (s / m) * (s / m);
            if var > best.1 {
                best = (d, var);
            }
        }
        best.0
    }
}
