//! # sagitta-index
//!
//! In-memory indexes behind one read trait ([`IndexRead`]) and one write
//! trait ([`IndexWrite`]):
//!
//! * **Flat**: exact scan, multi-threaded over query batches; the recall
//!   oracle every other index is measured against.
//! * **HNSW**: hierarchical navigable small-world graph with concurrent
//!   inserts, tombstone deletes, upserts and filtered search; one can also
//!   be imported from an existing graph ([`Index::from_graph`]) and grown
//!   from there.
//!
//! Indexes see vectors only as storage bytes compared by a
//! [`sagitta_kernels::Distance`]; graph search is written once against
//! [`GraphView`] so sealed, memory-mapped segments (in `sagitta-store`)
//! reuse it unchanged, and one planner ([`plan`]) decides for both how a
//! search runs. Filters arrive as a [`Bitset`] of allowed slots.
//!
//! This crate depends only on `sagitta-kernels`; it knows nothing of files.
//! (The low-dimensional exact kNN is its own crate, `sagitta-lowdim`.)

mod bitset;
mod error;
mod graph;
mod index;
pub mod ivf;
mod ivf_build;
pub mod kmeans;
pub mod limits;
pub mod plan;
pub mod rotation;
pub mod sched;
mod scratch;
mod space;
mod storage;
mod topk;
mod view;

pub use bitset::{AtomicBitset, Bitset};
pub use error::{IndexError, Result};
pub use index::{
    HnswParams, Index, IndexKind, IndexRead, IndexView, IndexWrite, IvfExport, IvfListData,
    SearchOptions, Staged, MAX_LEVEL, MAX_SLOTS,
};
pub use ivf::{IvfModel, IvfParams};
pub use ivf_build::IvfBuilder;
pub use limits::{check_k, check_knobs, MAX_BEAM, MAX_K};
pub use plan::{prefer_exact_scan, prefer_filter_scan, Plan, Target};
pub use sagitta_kernels::{prefetch, DType, Metric};
pub use space::{Space, VectorRef, VECTOR_ALIGN};
pub use topk::Neighbor;
pub use view::GraphView;

/// Search a graph given by any [`GraphView`] (used by sealed segments).
pub mod search {
    use super::*;
    use sagitta_kernels::Distance;

    /// Reusable per-thread search state; keep one per thread and reuse it.
    #[derive(Debug, Default)]
    pub struct SearchScratch(pub(crate) scratch::Scratch);

    impl SearchScratch {
        /// The IVF part of the scratch.
        pub fn ivf(&mut self) -> &mut crate::ivf::IvfScratch {
            &mut self.0.ivf
        }

        /// Encodes `query` into the scratch's aligned query buffer and runs
        /// `f` with the encoded bytes and the rest of the scratch.
        pub fn with_query<R>(
            &mut self,
            space: &Space,
            query: VectorRef<'_>,
            f: impl FnOnce(&[u8], &mut SearchScratch) -> R,
        ) -> Result<R> {
            let stride = space.stride();
            space.encode_query(query, self.0.query_buf(stride))?;
            let q = self.0.take_query();
            let r = f(scratch::query_bytes(&q, stride), self);
            self.0.put_query(q);
            Ok(r)
        }
    }

    /// Runs an exact or graph [`Plan`] (from [`crate::plan::plan`]) over
    /// any [`GraphView`] whose vectors are stored in `space` and compared by
    /// `dist`: encodes the query, searches, and re-scores from
    /// full-precision rows where the view keeps them.
    #[allow(clippy::too_many_arguments)]
    pub fn run<G: GraphView + ?Sized>(
        g: &G,
        space: &Space,
        dist: &Distance,
        query: VectorRef<'_>,
        k: usize,
        plan: Plan,
        filter: Option<&Bitset>,
        s: &mut SearchScratch,
    ) -> Result<Vec<Neighbor>> {
        crate::plan::execute(g, space, dist, query, k, plan, filter, &mut s.0)
    }
}
