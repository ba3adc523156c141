//! [`Index`]: the mutable in-memory index: Flat (exact scan), HNSW, or
//! IVF-RaBitQ.
//!
//! Every kind shares one slot store (`slots.rs`): vectors at a fixed
//! stride (a multiple of 16 bytes, in a 64-byte aligned buffer), slot →
//! key, a key → slot map, and tombstones. HNSW adds its links: level-0
//! lists in one flat array of fixed-width records
//! `[count, n_0, .., n_{2M-1}]` (one cache-friendly stride per node), and
//! upper-level lists allocated per node only for the few nodes above
//! level 0. A float HNSW index may store compact codes (sq8, sq16, f16)
//! and keep each f32 row beside them ([`Index::keep_full_precision`]): the
//! graph is walked over the codes, the best of the beam re-scored from
//! the rows. IVF-RaBitQ (`ivf_rq.rs`) trains its model on the first rows
//! and keeps one partition list per centroid.
//!
//! The files: `mod.rs` the type, its settings and its read side;
//! `slots.rs` the slot store and graph views; `insert.rs` writes and
//! HNSW linking; `import.rs` an index from an existing graph; `ivf_rq.rs`
//! the IVF side. Limits of a search (`k`, knobs) are [`crate::limits`].
//!
//! ## Concurrency
//! Every operation holds a shared lock on the slot store for its
//! duration; only growth (doubling the capacity) takes it exclusively.
//! Inserts from many threads proceed in parallel: a slot is claimed under
//! the key-map mutex, its vector written by the claiming thread alone,
//! then linked under per-node locks (hnswlib's scheme). Link entries are
//! atomics with Release stores / Acquire loads, so a reader that finds a
//! slot in a list also sees its vector. Exact scans only read slots whose
//! `ready` bit is set.
//!
//! ## Deletes and upserts
//! A delete sets a tombstone bit and forgets the key; the node stays in the
//! graph so it keeps routing searches, and is never returned. An upsert is
//! a delete of the old slot plus an insert into a new slot. Space is
//! reclaimed when a collection's optimizer rewrites the segment (merge or
//! compaction, in `sagitta-store`).
//!
//! ## Importing a graph
//! [`Index::from_graph`] builds an HNSW index from any [`GraphView`] (an
//! [`IndexView`] or a sealed segment) by copying its slots, vectors, keys,
//! levels and links as they are; slots not kept become tombstones. A merge
//! imports its largest segment's graph and inserts only the other rows.

use crate::bitset::AtomicBitset;
use crate::graph;
use crate::ivf::{self, Encoded, IvfModel, IvfParams, IvfQuery, IvfSource, List, ListRef};
use crate::kmeans::Progress;
use crate::plan::{self, Plan, Target};
use crate::scratch::{query_bytes, Scratch, ScratchPool};
use crate::storage::SlotBuf;
use crate::topk::{Cand, Neighbor};
use crate::view::GraphView;
use crate::{Bitset, IndexError, Result, Space, VectorRef};
use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use rayon::prelude::*;
use sagitta_kernels::DType;
use sagitta_kernels::Distance;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;

/// Most slots an index holds (slots are u32; one value is reserved).
pub const MAX_SLOTS: usize = u32::MAX as usize - 1;
/// Highest HNSW level a node may get.
pub const MAX_LEVEL: usize = 15;

/// Read side of every index: mutable in-memory ones and sealed segments.
pub trait IndexRead: Send + Sync {
    /// Dimensions, metric, storage type.
    fn space(&self) -> Space;
    /// Live (searchable) vectors.
    fn len(&self) -> usize;
    /// Whether the index holds no live vector.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether `key` is live.
    fn contains(&self, key: u64) -> bool;
    /// The slot holding `key`, for building filter bitmaps.
    fn slot_of(&self, key: u64) -> Option<u32>;
    /// Number of slots a filter bitmap must cover.
    fn slot_count(&self) -> usize;
    /// A filter bitmap allowing exactly the given keys (missing keys are
    /// ignored).
    fn filter_for_keys(&self, keys: &[u64]) -> Bitset {
        let mut b = Bitset::new(self.slot_count());
        for &k in keys {
            if let Some(s) = self.slot_of(k) {
                b.insert(s as usize);
            }
        }
        b
    }
    /// The stored bytes of `key`'s vector (as encoded by [`Space::encode`]).
    fn get_raw(&self, key: u64) -> Option<Vec<u8>>;
    /// The k nearest live vectors to `query`.
    fn search(
        &self,
        query: VectorRef<'_>,
        k: usize,
        opts: &SearchOptions<'_>,
    ) -> Result<Vec<Neighbor>>;
    /// Searches many queries in parallel (rayon); results in query order.
    fn search_batch(
        &self,
        queries: &[VectorRef<'_>],
        k: usize,
        opts: &SearchOptions<'_>,
    ) -> Result<Vec<Vec<Neighbor>>> {
        queries
            .par_iter()
            .map(|q| self.search(*q, k, opts))
            .collect()
    }
    /// The stored vector of `key` decoded to floats (float dtypes only).
    fn get(&self, key: u64) -> Option<Vec<f32>> {
        self.get_raw(key)
            .and_then(|b| self.space().decode_floats(&b))
    }
}

/// Write side: only mutable indexes implement it.
pub trait IndexWrite: IndexRead {
    /// Inserts a new key; [`IndexError::DuplicateKey`] if it exists.
    fn add(&self, key: u64, v: VectorRef<'_>) -> Result<()>;
    /// Inserts or replaces.
    fn upsert(&self, key: u64, v: VectorRef<'_>) -> Result<()>;
    /// Deletes; returns whether the key was live.
    fn remove(&self, key: u64) -> bool;
}

mod import;
mod insert;
mod ivf_rq;
mod params;
mod slots;

pub use insert::Staged;
use ivf_rq::IvfState;
pub use ivf_rq::{IvfExport, IvfListData};
pub use params::{HnswParams, IndexKind, SearchOptions};
pub use slots::IndexView;
pub(crate) use slots::KeyHasher;
use slots::{read_list, write_list, Graph, KeyMap, Links, Published, Store};

/// The mutable in-memory index. See the module docs.
pub struct Index {
    space: Space,
    kind: IndexKind,
    params: HnswParams,
    ef_search: AtomicUsize,
    dist: Distance,
    store: RwLock<Store>,
    keymap: Mutex<KeyMap>,
    live: AtomicUsize,
    scratch: ScratchPool,
    ivf: Option<Box<IvfState>>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("space", &self.space)
            .field("kind", &self.kind)
            .field("params", &self.params)
            .field("len", &self.len())
            .finish()
    }
}

const INITIAL_CAPACITY: usize = 1024;

impl Index {
    /// An exact (brute-force) index.
    pub fn flat(space: Space) -> Result<Self> {
        Self::new(space, IndexKind::Flat, HnswParams::default())
    }

    /// An HNSW index.
    pub fn hnsw(space: Space, params: HnswParams) -> Result<Self> {
        Self::new(space, IndexKind::Hnsw, params)
    }

    /// An index of either kind.
    pub fn new(space: Space, kind: IndexKind, params: HnswParams) -> Result<Self> {
        params.validate()?;
        let dist = space.distance()?;
        let links = (kind == IndexKind::Hnsw).then(|| params.m0());
        if kind == IndexKind::IvfRq {
            return Self::ivf_rq(space, IvfParams::default());
        }
        Ok(Index {
            space,
            kind,
            params,
            ef_search: AtomicUsize::new(params.ef_search),
            dist,
            store: RwLock::new(Store::new(&space, INITIAL_CAPACITY, links)),
            keymap: Mutex::new(KeyMap::default()),
            live: AtomicUsize::new(0),
            scratch: ScratchPool::default(),
            ivf: None,
        })
    }

    /// A mutable HNSW index (kind [`IndexKind::Hnsw`], parameters
    /// `params`) built from an existing HNSW graph, an in-memory
    /// [`IndexView`] or a memory-mapped sealed segment, without searching
    /// for a single neighbour: a merge can take the largest segment's
    /// graph as it is and insert only the other rows into it.
    ///
    /// **Copied**, slot for slot in the same order (slots
    /// `0..src.slots()` keep their numbers): the first `space.stride()`
    /// stored bytes of every vector (as stored, never re-encoded), the key,
    /// the node's level ([`GraphView::level`], at most [`MAX_LEVEL`]), its
    /// level-0 and upper-level neighbour lists (ids outside the source's
    /// slots dropped), the entry point with the top level, and the
    /// full-precision rows where the source has them ([`GraphView::full`];
    /// the result then keeps them for new rows too). Not copied: IVF lists.
    ///
    /// **Dead slots**: a slot is live in the result iff
    /// `src.is_live(slot) && keep(slot)`. Every other slot is copied as a
    /// tombstone, exactly like a deleted row of an index built by inserts:
    /// it keeps its links and routes searches, is never returned, its key
    /// is not in the key map (so [`IndexRead::contains`] is false and
    /// inserting the key again claims a new slot), and [`IndexRead::len`]
    /// counts live slots only.
    ///
    /// The result behaves as if built by inserts: later inserts, upserts
    /// and removes link into the imported graph (new slots get their level
    /// from `params.seed` like any insert), and it can be written back as a
    /// segment. Room for `extra_capacity` more slots is reserved up front.
    ///
    /// `space` must be the source's (vectors are copied, not re-encoded)
    /// and `params.m` must match the graph's (level 0 holds `2 * m` links):
    /// a source list longer than that is refused rather than truncated, and
    /// a smaller source `m` works but leaves the copied nodes with fewer
    /// links than new ones.
    ///
    /// Errors: [`IndexError::DuplicateKey`] when two live (and kept) slots
    /// share a key; [`IndexError::InvalidParameter`] when a list is too
    /// long for `m`, a stored vector is shorter than the space's stride, or
    /// the source has live slots but no entry point (not an HNSW graph);
    /// [`IndexError::Full`] when `src.slots() + extra_capacity` exceeds
    /// [`MAX_SLOTS`]; invalid `params` or space as for [`Index::hnsw`]. An
    /// empty source gives an empty index.
    ///
    /// Cost: O(slots × (stride + M0)) copies in one pass plus a key-map
    /// insert per live slot; the only allocations are the key map, the
    /// slot store and the upper-level lists of nodes above level 0. `src`
    /// should not change while it is read (a sealed segment, or an index
    /// no other thread writes to).
    pub fn from_graph<G: GraphView + ?Sized>(
        space: Space,
        params: HnswParams,
        src: &G,
        keep: &dyn Fn(u32) -> bool,
        extra_capacity: usize,
    ) -> Result<Index> {
        Self::import(space, params, src, keep, extra_capacity, true)
    }

    /// [`Index::from_graph`] without the source's full-precision rows: the
    /// result holds the stored codes, keys and links only (a merge that
    /// builds a graph over codes and writes the full rows from its inputs
    /// then holds no second copy of them).
    pub fn from_graph_codes<G: GraphView + ?Sized>(
        space: Space,
        params: HnswParams,
        src: &G,
        keep: &dyn Fn(u32) -> bool,
        extra_capacity: usize,
    ) -> Result<Index> {
        Self::import(space, params, src, keep, extra_capacity, false)
    }
}

impl Index {
    /// Keeps each vector's full-precision f32 form beside its f16 / sq8 /
    /// sq16 codes: graph searches then re-score their beam exactly, exact
    /// scans read only the f32 rows (see [`crate::plan`]), `get` returns
    /// them, and segment files carry them (memory-mapped, read only to
    /// rerank). Call on an empty index.
    pub fn keep_full_precision(self) -> Result<Self> {
        if !matches!(self.space.dtype, DType::F16 | DType::Sq8 | DType::Sq16)
            || self.kind == IndexKind::IvfRq
        {
            return Err(IndexError::InvalidParameter {
                name: "keep_full",
                value: "true".into(),
                reason:
                    "only f16 / sq8 / sq16 storage under flat or hnsw keeps full-precision rows",
            });
        }
        {
            let mut store = self.store.write();
            let cap = store.capacity();
            store.full = Some(SlotBuf::new(self.full_stride(), cap));
        }
        Ok(self)
    }

    /// Whether full-precision rows are kept (see
    /// [`Index::keep_full_precision`]).
    pub fn keeps_full_precision(&self) -> bool {
        self.store.read().full.is_some()
    }

    /// Bytes per full-precision row (f32, 16-byte aligned).
    pub fn full_stride(&self) -> usize {
        (self.space.dims * 4).next_multiple_of(crate::VECTOR_ALIGN)
    }

    /// The kind of index.
    pub fn kind(&self) -> IndexKind {
        self.kind
    }

    /// Construction parameters (ef_search as set at creation).
    pub fn params(&self) -> HnswParams {
        HnswParams {
            ef_search: self.ef_search(),
            ..self.params
        }
    }

    /// The default search beam width.
    pub fn ef_search(&self) -> usize {
        self.ef_search.load(Ordering::Relaxed)
    }

    /// Changes the default search beam width.
    pub fn set_ef_search(&self, ef: usize) -> Result<()> {
        HnswParams {
            ef_search: ef,
            ..self.params
        }
        .validate()?;
        self.ef_search.store(ef, Ordering::Relaxed);
        Ok(())
    }

    /// The distance function in use.
    pub fn distance(&self) -> &Distance {
        &self.dist
    }

    /// A read view (holds a shared lock; do not hold it across an insert
    /// from the same thread that may need to grow the index).
    pub fn view(&self) -> IndexView<'_> {
        IndexView {
            store: self.store.read(),
            m: self.params.m,
        }
    }

    /// Bytes of heap memory held by vectors and links (approximate).
    pub fn memory_usage(&self) -> usize {
        let s = self.store.read();
        let cap = s.capacity();
        let mut bytes = cap * (self.space.stride() + 8 + 1) + cap / 4;
        if let Some(l) = &s.links {
            bytes +=
                l.level0.len() * 4 + cap * (std::mem::size_of::<OnceLock<Box<[AtomicU32]>>>() + 2);
            bytes += l
                .upper
                .iter()
                .filter_map(|u| u.get())
                .map(|b| b.len() * 4)
                .sum::<usize>();
        }
        if let Some(t) = self.ivf.as_ref().map(|s| s.trained.read()) {
            if let Some(t) = t.as_ref() {
                bytes += (t.model.centroids.len() + t.model.rcentroids.len()) * 4;
                bytes += t.lists.iter().map(|l| l.read().heap_bytes()).sum::<usize>();
            }
        }
        bytes + self.keymap.lock().capacity() * 16
    }

    /// Bytes of the IVF codes, factors, lists and centroids alone (what a
    /// sealed IVF segment keeps resident; the full vectors stay on disk
    /// until a rerank touches them). 0 for other kinds.
    pub fn ivf_memory_usage(&self) -> usize {
        let Some(t) = self.ivf.as_ref().map(|s| s.trained.read()) else {
            return 0;
        };
        t.as_ref().map_or(0, |t| {
            (t.model.centroids.len() + t.model.rcentroids.len()) * 4
                + t.lists.iter().map(|l| l.read().heap_bytes()).sum::<usize>()
        })
    }
}

/// The first `dims` floats of a full-precision row.
pub(crate) fn f32_row(row: &[u8], dims: usize) -> Vec<f32> {
    row.chunks_exact(4)
        .take(dims)
        .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Runs `f` on the global rayon pool (`threads == 0`) or on a pool of
/// `threads` workers, joined before returning (no thread outlives the call).
fn with_threads<R: Send>(threads: usize, f: impl FnOnce() -> Result<R> + Send) -> Result<R> {
    if threads == 0 {
        return f();
    }
    let builder = rayon::ThreadPoolBuilder::new().num_threads(threads);
    crate::sched::threads::with_joined_pool(builder, |pool| pool.install(f)).map_err(|_| {
        IndexError::InvalidParameter {
            name: "threads",
            value: threads.to_string(),
            reason: "could not start a thread pool",
        }
    })?
}

impl IndexRead for Index {
    fn space(&self) -> Space {
        self.space
    }

    fn len(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    fn contains(&self, key: u64) -> bool {
        self.keymap.lock().contains_key(&key)
    }

    fn slot_of(&self, key: u64) -> Option<u32> {
        self.keymap.lock().get(&key).copied()
    }

    fn slot_count(&self) -> usize {
        self.store.read().used.load(Ordering::Acquire)
    }

    fn get_raw(&self, key: u64) -> Option<Vec<u8>> {
        let store = self.store.read();
        let slot = *self.keymap.lock().get(&key)?;
        if !store.ready.get(slot as usize) {
            return None;
        }
        Some(store.vectors.get(slot as usize)[..self.space.vector_bytes()].to_vec())
    }

    /// The full-precision row where one is kept, else the stored codes
    /// decoded.
    fn get(&self, key: u64) -> Option<Vec<f32>> {
        let store = self.store.read();
        let slot = *self.keymap.lock().get(&key)?;
        if !store.ready.get(slot as usize) {
            return None;
        }
        match &store.full {
            Some(f) => Some(f32_row(f.get(slot as usize), self.space.dims)),
            None => self.space.decode_floats(store.vectors.get(slot as usize)),
        }
    }

    fn search(
        &self,
        query: VectorRef<'_>,
        k: usize,
        opts: &SearchOptions<'_>,
    ) -> Result<Vec<Neighbor>> {
        // A snapshot filter may allow rows deleted since: up to every slot.
        let k = match opts.filter {
            Some(_) if opts.snapshot => crate::limits::check_k(k, self.slot_count())?,
            _ => self.check_k(k)?,
        };
        if k == 0 {
            return Ok(Vec::new());
        }
        let guard = self.store.read();
        let view = Graph {
            store: &guard,
            m: self.params.m,
        };
        let target = Target {
            kind: self.kind,
            slots: view.slots(),
            m0: self.params.m0(),
            ef_search: self.ef_search(),
            full_precision: guard.full.is_some(),
            scan_bytes: if guard.full.is_some() {
                self.space.dims * 4
            } else {
                self.space.stride()
            },
            contiguous: false,
        };
        let plan = plan::plan(&target, k, opts)?;
        if plan == Plan::Ivf {
            drop(guard);
            let mut out = Vec::with_capacity(k);
            self.search_into(query, k, opts, &mut out)?;
            return Ok(out);
        }
        let mut s = self.scratch.take();
        let (space, dist) = (&self.space, &self.dist);
        let result = match opts.filter {
            Some(f) if opts.snapshot => {
                let view = Published(view);
                plan::execute(&view, space, dist, query, k, plan, Some(f), &mut s)
            }
            f => plan::execute(&view, space, dist, query, k, plan, f, &mut s),
        };
        drop(guard);
        self.scratch.give(s);
        result
    }
}

impl IndexWrite for Index {
    fn add(&self, key: u64, v: VectorRef<'_>) -> Result<()> {
        self.insert(key, v, false)
    }

    fn upsert(&self, key: u64, v: VectorRef<'_>) -> Result<()> {
        self.insert(key, v, true)
    }

    fn remove(&self, key: u64) -> bool {
        let store = self.store.read();
        let mut keymap = self.keymap.lock();
        match keymap.remove(&key) {
            Some(slot) => {
                store.deleted.set(slot as usize);
                self.live.fetch_sub(1, Ordering::AcqRel);
                true
            }
            None => false,
        }
    }
}
