//! [`GraphView`]: read access to an HNSW graph and its vectors, in memory
//! or memory-mapped. Search ([`crate::graph`]), IVF and the planner see
//! graphs only through it; it imports nothing from them.

/// Read access to a graph and its vectors.
pub trait GraphView: Sync {
    /// Number of slots (live, deleted and unpublished).
    fn slots(&self) -> usize;
    /// Stored bytes of a slot.
    fn vector(&self, slot: u32) -> &[u8];
    /// The user key of a slot.
    fn key(&self, slot: u32) -> u64;
    /// Whether the slot may appear in results: published and not deleted.
    fn is_live(&self, slot: u32) -> bool;
    /// The node's top level: 0 for nodes only on level 0 (and for slots
    /// outside the graph).
    fn level(&self, slot: u32) -> usize;
    /// Entry slot and top level, `None` for an empty graph.
    fn entry_point(&self) -> Option<(u32, usize)>;
    /// Writes the neighbours of `slot` at `level` into `out` (cleared first).
    fn neighbors(&self, level: usize, slot: u32, out: &mut Vec<u32>);
    /// Hints the CPU to fetch the neighbour list of `slot` at `level`
    /// (the search calls it for the next candidate while it scores the
    /// current one's neighbours).
    fn prefetch_links(&self, _level: usize, _slot: u32) {}
    /// The full-precision f32 row of a slot (at least `dims × 4` bytes,
    /// 4-byte aligned), where the structure keeps them beside compact
    /// codes: searches then re-score their best candidates from these rows
    /// and exact scans read only them.
    fn full(&self, _slot: u32) -> Option<&[u8]> {
        None
    }
    /// A slot's full-precision row for re-scoring, as [`GraphView::full`]
    /// unless the structure reads it into `buf` instead (a sealed segment
    /// reads it with a positional read: mapping it in would leave every
    /// row a search ever re-scored, and the pages the kernel maps around
    /// each, in the process's resident set, where only the codes and the
    /// graph belong).
    fn full_row<'a>(&'a self, slot: u32, _buf: &'a mut Vec<f32>) -> Option<&'a [u8]> {
        self.full(slot)
    }
    /// Whether [`GraphView::full_row`] reads rows rather than returning
    /// [`GraphView::full`]'s (a prefetch of the mapping is then wasted).
    fn reads_full_rows(&self) -> bool {
        false
    }
    /// Every slot's stored vector back to back and their stride in bytes,
    /// where the structure keeps them so (a sealed segment's mapped
    /// vectors): exact scans then compute distances a block of rows at a
    /// time instead of one call per slot. At least `slots × stride` bytes.
    fn rows(&self) -> Option<(&[u8], usize)> {
        None
    }
    /// As [`GraphView::rows`] for the full-precision rows (see
    /// [`GraphView::full`]).
    fn full_rows(&self) -> Option<(&[u8], usize)> {
        None
    }
}
