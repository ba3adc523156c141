//! [`Index`]: the mutable in-memory index, Flat or HNSW.
//!
//! Both kinds share one slot store: vectors at a fixed stride (64-byte
//! aligned buffer), slot → key, a key → slot map, and tombstones. HNSW adds
//! its links: level-0 lists in one flat array of fixed-width records
//! `[count, n_0, .., n_{2M-1}]` (one cache-friendly stride per node), and
//! upper-level lists allocated per node only for the few nodes above
//! level 0.
//!
//! ## Concurrency
//! Every operation holds a shared lock on the [`Store`] for its duration;
//! only growth (doubling the capacity) takes it exclusively. Inserts from
//! many threads proceed in parallel: a slot is claimed under the key-map
//! mutex, its vector written by the claiming thread alone, then linked
//! under per-node locks (hnswlib's scheme). Link entries are atomics with
//! Release stores / Acquire loads, so a reader that finds a slot in a list
//! also sees its vector. Exact scans only read slots whose `ready` bit is
//! set.
//!
//! ## Deletes and upserts
//! A delete sets a tombstone bit and forgets the key; the node stays in the
//! graph so it keeps routing searches, and is never returned. An upsert is
//! a delete of the old slot plus an insert into a new slot. Space is
//! reclaimed when a segment is rewritten (compaction, later issue).
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

/// Which structure answers searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    /// Exact scan over every vector: the recall oracle.
    Flat,
    /// Hierarchical navigable small-world graph.
    Hnsw,
    /// Inverted file of k-means partitions with RaBitQ codes (see
    /// [`crate::ivf`]); the full-precision vectors are kept for reranking.
    IvfRq,
}

impl IndexKind {
    /// `flat`, `hnsw` or `ivf_rq`.
    pub fn name(self) -> &'static str {
        match self {
            IndexKind::Flat => "flat",
            IndexKind::Hnsw => "hnsw",
            IndexKind::IvfRq => "ivf_rq",
        }
    }

    /// Parses a name given by [`IndexKind::name`].
    pub fn parse(s: &str) -> Option<IndexKind> {
        Some(match s.to_ascii_lowercase().as_str() {
            "flat" => IndexKind::Flat,
            "hnsw" => IndexKind::Hnsw,
            "ivf_rq" | "ivf-rq" | "ivf_rabitq" => IndexKind::IvfRq,
            _ => return None,
        })
    }
}

/// HNSW construction and search parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HnswParams {
    /// Links per node on upper levels (level 0 has `2 * m`).
    pub m: usize,
    /// Beam width while inserting.
    pub ef_construction: usize,
    /// Default beam width while searching (at least k is used).
    pub ef_search: usize,
    /// Seed of the level assignment (levels are a hash of seed and slot,
    /// so builds are reproducible).
    pub seed: u64,
}

impl Default for HnswParams {
    fn default() -> Self {
        HnswParams {
            m: 16,
            ef_construction: 128,
            ef_search: 64,
            seed: 0x5A61_7474_6100,
        }
    }
}

impl HnswParams {
    /// Checks every parameter's range (`InvalidParameter` naming the
    /// first one out of it).
    pub fn validate(&self) -> Result<()> {
        let bad = |name, value: String, reason| {
            Err(IndexError::InvalidParameter {
                name,
                value,
                reason,
            })
        };
        if !(2..=256).contains(&self.m) {
            return bad("m", self.m.to_string(), "must be in 2..=256");
        }
        if self.ef_construction == 0 || self.ef_construction > 1 << 16 {
            return bad(
                "ef_construction",
                self.ef_construction.to_string(),
                "must be in 1..=65536",
            );
        }
        if self.ef_search == 0 || self.ef_search > 1 << 16 {
            return bad(
                "ef_search",
                self.ef_search.to_string(),
                "must be in 1..=65536",
            );
        }
        Ok(())
    }

    /// Links per node on level 0.
    pub fn m0(&self) -> usize {
        self.m * 2
    }
}

/// Per-search options.
#[derive(Debug, Clone, Copy, Default)]
pub struct SearchOptions<'a> {
    /// Beam width override (HNSW); `None` uses the index default.
    pub ef: Option<usize>,
    /// Slots that may be returned; `None` allows all.
    pub filter: Option<&'a Bitset>,
    /// Force an exact scan even on an HNSW index.
    pub exact: bool,
    /// Partitions probed (IVF); `None` uses the index default.
    pub nprobe: Option<usize>,
    /// Rerank depth: candidates re-scored from full-precision vectors, 0
    /// for none. `None` uses the default: for IVF the index's, for graphs
    /// over codes with full-precision rows the best `max(2k, 16)` of the
    /// beam (see [`crate::plan::plan`]).
    pub refine: Option<usize>,
}

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

/// Multiplicative hashing for u64 keys (keys are ours to hash, no need for
/// a DoS-resistant hasher inside one process).
#[derive(Default, Clone, Copy)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }
    fn write_u64(&mut self, k: u64) {
        let x = (k ^ (k >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        self.0 = x ^ (x >> 29);
    }
}

type KeyMap = HashMap<u64, u32, BuildHasherDefault<KeyHasher>>;

/// The capacity-bound part of an index, replaced wholesale on growth.
struct Store {
    vectors: SlotBuf,
    keys: Box<[AtomicU64]>,
    ready: AtomicBitset,
    deleted: AtomicBitset,
    /// Slots claimed so far.
    used: AtomicUsize,
    links: Option<Links>,
    /// Full-precision f32 rows beside quantized (sq8 / sq16) storage, for
    /// exact reranking; `None` unless asked for.
    full: Option<SlotBuf>,
}

struct Links {
    stride0: usize,
    level0: Box<[AtomicU32]>,
    upper: Box<[OnceLock<Box<[AtomicU32]>>]>,
    levels: Box<[AtomicU8]>,
    locks: Box<[Mutex<()>]>,
    /// (entry slot, top level); `None` while empty.
    entry: RwLock<Option<(u32, usize)>>,
}

impl Links {
    fn new(capacity: usize, m0: usize) -> Self {
        let stride0 = 1 + m0;
        Links {
            stride0,
            level0: (0..capacity * stride0).map(|_| AtomicU32::new(0)).collect(),
            upper: (0..capacity).map(|_| OnceLock::new()).collect(),
            levels: (0..capacity).map(|_| AtomicU8::new(0)).collect(),
            locks: (0..capacity).map(|_| Mutex::new(())).collect(),
            entry: RwLock::new(None),
        }
    }

    fn grown(&self, capacity: usize, m0: usize, used: usize) -> Self {
        let new = Links::new(capacity, m0);
        for (d, s) in new
            .level0
            .iter()
            .zip(self.level0.iter())
            .take(used * self.stride0)
        {
            d.store(s.load(Ordering::Acquire), Ordering::Relaxed);
        }
        for (i, u) in self.upper.iter().enumerate().take(used) {
            if let Some(lists) = u.get() {
                let copy: Box<[AtomicU32]> = lists
                    .iter()
                    .map(|a| AtomicU32::new(a.load(Ordering::Acquire)))
                    .collect();
                let _ = new.upper[i].set(copy);
            }
        }
        for (d, s) in new.levels.iter().zip(self.levels.iter()).take(used) {
            d.store(s.load(Ordering::Acquire), Ordering::Relaxed);
        }
        *new.entry.write() = *self.entry.read();
        new
    }

    /// The atomics holding `[count, n..]` of `slot` at `level`.
    #[inline]
    fn list(&self, level: usize, slot: u32, m: usize) -> Option<&[AtomicU32]> {
        if level == 0 {
            let at = slot as usize * self.stride0;
            self.level0.get(at..at + self.stride0)
        } else {
            let lists = self.upper.get(slot as usize)?.get()?;
            let at = (level - 1) * (1 + m);
            lists.get(at..at + 1 + m)
        }
    }
}

fn read_list(list: &[AtomicU32], out: &mut Vec<u32>) {
    out.clear();
    let n = (list[0].load(Ordering::Acquire) as usize).min(list.len() - 1);
    out.extend(list[1..=n].iter().map(|a| a.load(Ordering::Acquire)));
}

fn write_list(list: &[AtomicU32], items: &[u32]) {
    let n = items.len().min(list.len() - 1);
    for (a, &v) in list[1..=n].iter().zip(items) {
        a.store(v, Ordering::Release);
    }
    list[0].store(n as u32, Ordering::Release);
}

impl Store {
    fn new(space: &Space, capacity: usize, links: Option<usize>) -> Self {
        Store {
            vectors: SlotBuf::new(space.stride(), capacity),
            keys: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            ready: AtomicBitset::new(capacity),
            deleted: AtomicBitset::new(capacity),
            used: AtomicUsize::new(0),
            links: links.map(|m0| Links::new(capacity, m0)),
            full: None,
        }
    }

    fn capacity(&self) -> usize {
        self.vectors.capacity()
    }

    fn grown(&self, capacity: usize, m0: usize) -> Self {
        let used = self.used.load(Ordering::Acquire);
        Store {
            vectors: self.vectors.grown(capacity, used),
            keys: (0..capacity)
                .map(|i| AtomicU64::new(self.keys.get(i).map_or(0, |k| k.load(Ordering::Acquire))))
                .collect(),
            ready: self.ready.grown(capacity),
            deleted: self.deleted.grown(capacity),
            used: AtomicUsize::new(used),
            links: self.links.as_ref().map(|l| l.grown(capacity, m0, used)),
            full: self.full.as_ref().map(|f| f.grown(capacity, used)),
        }
    }
}

/// A borrowed store seen as a graph.
#[derive(Clone, Copy)]
struct Graph<'a> {
    store: &'a Store,
    m: usize,
}

impl GraphView for Graph<'_> {
    fn slots(&self) -> usize {
        self.store
            .used
            .load(Ordering::Acquire)
            .min(self.store.capacity())
    }
    #[inline]
    fn vector(&self, slot: u32) -> &[u8] {
        self.store.vectors.get(slot as usize)
    }
    fn key(&self, slot: u32) -> u64 {
        self.store
            .keys
            .get(slot as usize)
            .map_or(0, |k| k.load(Ordering::Acquire))
    }
    #[inline]
    fn is_live(&self, slot: u32) -> bool {
        self.store.ready.get(slot as usize) && !self.store.deleted.get(slot as usize)
    }
    #[inline]
    fn level(&self, slot: u32) -> usize {
        self.store
            .links
            .as_ref()
            .and_then(|l| l.levels.get(slot as usize))
            .map_or(0, |x| usize::from(x.load(Ordering::Acquire)))
    }
    fn entry_point(&self) -> Option<(u32, usize)> {
        self.store.links.as_ref().and_then(|l| *l.entry.read())
    }
    #[inline]
    fn neighbors(&self, level: usize, slot: u32, out: &mut Vec<u32>) {
        match self
            .store
            .links
            .as_ref()
            .and_then(|l| l.list(level, slot, self.m))
        {
            Some(list) => read_list(list, out),
            None => out.clear(),
        }
    }
    #[inline]
    fn prefetch_links(&self, level: usize, slot: u32) {
        if let Some(list) = self
            .store
            .links
            .as_ref()
            .and_then(|l| l.list(level, slot, self.m))
        {
            let p = list.as_ptr().cast::<u8>();
            let bytes = std::mem::size_of_val(list);
            for off in (0..bytes).step_by(64) {
                // `wrapping_add`: the pointer is only a hint.
                sagitta_kernels::prefetch(p.wrapping_add(off));
            }
        }
    }
    #[inline]
    fn full(&self, slot: u32) -> Option<&[u8]> {
        let f = self.store.full.as_ref()?;
        ((slot as usize) < f.capacity()).then(|| f.get(slot as usize))
    }
}

/// A read guard over an index that implements [`GraphView`]; used to
/// serialise the index into a segment file. Holds a shared lock: inserts
/// that need to grow the index wait until it is dropped.
pub struct IndexView<'a> {
    store: RwLockReadGuard<'a, Store>,
    m: usize,
}

impl std::fmt::Debug for IndexView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexView")
            .field("slots", &self.slots())
            .finish()
    }
}

impl IndexView<'_> {
    fn graph(&self) -> Graph<'_> {
        Graph {
            store: &self.store,
            m: self.m,
        }
    }

    /// HNSW level of a slot (0 for Flat); the same as
    /// [`GraphView::level`], callable without the trait in scope.
    pub fn level(&self, slot: u32) -> usize {
        self.graph().level(slot)
    }

    /// Whether the slot is tombstoned or was never published.
    pub fn is_deleted(&self, slot: u32) -> bool {
        !self.is_live(slot)
    }

    /// Live slots (published and not tombstoned) as a bitset over
    /// `slots()`: O(slots / 64).
    pub fn live_slots(&self) -> Bitset {
        let n = self.slots();
        let ready = self.store.ready.snapshot(n);
        let deleted = self.store.deleted.snapshot(n);
        let words = ready
            .words()
            .iter()
            .zip(deleted.words())
            .map(|(r, d)| r & !d)
            .collect();
        Bitset::from_words(words, n)
    }
}

impl GraphView for IndexView<'_> {
    fn slots(&self) -> usize {
        self.graph().slots()
    }
    fn vector(&self, slot: u32) -> &[u8] {
        self.store.vectors.get(slot as usize)
    }
    fn key(&self, slot: u32) -> u64 {
        self.graph().key(slot)
    }
    fn is_live(&self, slot: u32) -> bool {
        self.graph().is_live(slot)
    }
    fn level(&self, slot: u32) -> usize {
        self.graph().level(slot)
    }
    fn entry_point(&self) -> Option<(u32, usize)> {
        self.graph().entry_point()
    }
    fn neighbors(&self, level: usize, slot: u32, out: &mut Vec<u32>) {
        self.graph().neighbors(level, slot, out)
    }
    fn full(&self, slot: u32) -> Option<&[u8]> {
        let f = self.store.full.as_ref()?;
        ((slot as usize) < f.capacity()).then(|| f.get(slot as usize))
    }
}

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

/// The IVF part of an `IvfRq` index. Lock order: `trained` before the
/// store, everywhere.
struct IvfState {
    params: IvfParams,
    nprobe: AtomicUsize,
    trained: RwLock<Option<Trained>>,
}

struct Trained {
    model: Arc<IvfModel>,
    lists: Box<[RwLock<List>]>,
}

impl IvfSource for Trained {
    fn model(&self) -> &IvfModel {
        &self.model
    }
    fn with_list(&self, p: usize, f: &mut dyn FnMut(ListRef<'_>)) {
        if let Some(l) = self.lists.get(p) {
            f(l.read().as_ref());
        }
    }
}

/// A copy of a trained IVF index's model and partitions (for writing it
/// into a segment file).
#[derive(Debug, Clone)]
pub struct IvfExport {
    /// Rotation seed, bits and centroids.
    pub model: Arc<IvfModel>,
    /// Per partition: slots, codes, factors, extra-bit planes.
    pub lists: Vec<IvfListData>,
}

/// One partition's arrays (see [`crate::ivf::ListRef`]).
#[derive(Debug, Clone, Default)]
pub struct IvfListData {
    /// Slots in list order.
    pub slots: Vec<u32>,
    /// 1-bit codes, fast-scan blocks.
    pub codes: Vec<u8>,
    /// 4 f32 per vector.
    pub factors: Vec<f32>,
    /// Extra-bit planes.
    pub ex: Vec<u8>,
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

    fn import<G: GraphView + ?Sized>(
        space: Space,
        params: HnswParams,
        src: &G,
        keep: &dyn Fn(u32) -> bool,
        extra_capacity: usize,
        with_full: bool,
    ) -> Result<Index> {
        params.validate()?;
        let dist = space.distance()?;
        let (m, m0, stride) = (params.m, params.m0(), space.stride());
        // Entry point before the slot count: an index growing concurrently
        // then has its entry among the slots seen.
        let src_entry = src.entry_point();
        let n = src.slots();
        // An HNSW graph with live nodes always has an entry point (a Flat
        // index or segment has none, nor any links).
        if src_entry.is_none() && (0..n as u32).any(|s| src.is_live(s)) {
            return Err(IndexError::InvalidParameter {
                name: "src",
                value: format!("{n} slots"),
                reason: "the source has live slots but no entry point (not an HNSW graph)",
            });
        }
        let capacity = n
            .checked_add(extra_capacity)
            .filter(|&c| c <= MAX_SLOTS)
            .ok_or(IndexError::Full(MAX_SLOTS))?
            .max(INITIAL_CAPACITY);
        let too_long = || IndexError::InvalidParameter {
            name: "m",
            value: m.to_string(),
            reason: "the source graph has longer neighbour lists than this m allows \
                     (params.m must match the source's)",
        };
        // Copies `items` (ids below `n` only) into a `[count, n..]` record.
        // Plain stores through `&mut`: nothing is shared yet.
        let copy_list = |rec: &mut [AtomicU32], items: &[u32]| -> Result<()> {
            let Some((count, body)) = rec.split_first_mut() else {
                return Err(too_long());
            };
            if items.len() > body.len() {
                return Err(too_long());
            }
            let mut c = 0;
            for &x in items {
                if (x as usize) < n {
                    *body[c].get_mut() = x;
                    c += 1;
                }
            }
            *count.get_mut() = c as u32;
            Ok(())
        };

        let mut store = Store::new(&space, capacity, None);
        // Full-precision rows travel with the graph when the source has
        // them (every slot or none).
        let fstride = (space.dims * 4).next_multiple_of(crate::VECTOR_ALIGN);
        if with_full && n > 0 && src.full(0).is_some() {
            store.full = Some(SlotBuf::new(fstride, capacity));
        }
        let mut links = Links::new(capacity, m0);
        let mut keymap =
            KeyMap::with_capacity_and_hasher(n.saturating_add(extra_capacity), Default::default());
        let mut live = 0usize;
        // The first slot of the highest level: the entry point should the
        // source name none usable.
        let mut highest: Option<(u32, usize)> = None;
        let mut buf: Vec<u32> = Vec::with_capacity(m0 + 1);
        let stride0 = links.stride0;
        let Links {
            level0,
            upper,
            levels,
            ..
        } = &mut links;
        let rows = level0
            .chunks_exact_mut(stride0)
            .zip(upper.iter_mut().zip(levels.iter_mut()))
            .take(n);
        for (slot, (rec0, (up, lvl))) in (0u32..).zip(rows) {
            let s = slot as usize;
            let v = src.vector(slot);
            let Some(v) = v.get(..stride) else {
                return Err(IndexError::InvalidParameter {
                    name: "src",
                    value: format!("slot {slot}: {} stored bytes", v.len()),
                    reason: "a source vector is shorter than the space's stride",
                });
            };
            // SAFETY: `store` was created above and is owned by this
            // function alone: no other thread can read or write any slot
            // of it, and each slot is written exactly once.
            unsafe { store.vectors.write(s, v) };
            if let Some(full) = &store.full {
                let Some(row) = src.full(slot).and_then(|r| r.get(..space.dims * 4)) else {
                    return Err(IndexError::InvalidParameter {
                        name: "src",
                        value: format!("slot {slot}"),
                        reason: "the source keeps full-precision rows but not for every slot",
                    });
                };
                // SAFETY: as for the vectors above.
                unsafe { full.write(s, row) };
            }
            let key = src.key(slot);
            *store.keys[s].get_mut() = key;

            src.neighbors(0, slot, &mut buf);
            copy_list(rec0, &buf)?;
            let level = src.level(slot).min(MAX_LEVEL);
            *lvl.get_mut() = level as u8;
            if level > 0 {
                let mut lists: Box<[AtomicU32]> =
                    (0..level * (1 + m)).map(|_| AtomicU32::new(0)).collect();
                for (l, rec) in (1..=level).zip(lists.chunks_exact_mut(1 + m)) {
                    src.neighbors(l, slot, &mut buf);
                    copy_list(rec, &buf)?;
                }
                *up = OnceLock::from(lists);
            }
            if highest.is_none_or(|(_, h)| level > h) {
                highest = Some((slot, level));
            }

            if src.is_live(slot) && keep(slot) {
                if keymap.insert(key, slot).is_some() {
                    return Err(IndexError::DuplicateKey(key));
                }
                live += 1;
            } else {
                store.deleted.set(s);
            }
            store.ready.set(s);
        }
        let entry = match src_entry {
            Some((e, top)) if (e as usize) < n => Some((e, top.min(MAX_LEVEL))),
            _ => highest,
        };
        *links.entry.get_mut() = entry;
        *store.used.get_mut() = n;
        store.links = Some(links);
        Ok(Index {
            space,
            kind: IndexKind::Hnsw,
            params,
            ef_search: AtomicUsize::new(params.ef_search),
            dist,
            store: RwLock::new(store),
            keymap: Mutex::new(keymap),
            live: AtomicUsize::new(live),
            scratch: ScratchPool::default(),
            ivf: None,
        })
    }

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

    /// An IVF-RaBitQ index (float dtypes only). Untrained until
    /// [`Index::train`] or the first add, which trains on the vectors it
    /// receives.
    pub fn ivf_rq(space: Space, ivf: IvfParams) -> Result<Self> {
        ivf.validate()?;
        if !matches!(space.dtype, DType::F32 | DType::F16) || space.metric.is_binary() {
            return Err(IndexError::InvalidParameter {
                name: "kind",
                value: "ivf_rq".into(),
                reason: "IVF-RaBitQ needs float vectors (f32 or f16) under l2, ip or cos",
            });
        }
        let mut idx = Self::new(space, IndexKind::Flat, HnswParams::default())?;
        idx.kind = IndexKind::IvfRq;
        idx.ivf = Some(Box::new(IvfState {
            params: ivf,
            nprobe: AtomicUsize::new(ivf.nprobe),
            trained: RwLock::new(None),
        }));
        Ok(idx)
    }

    /// IVF parameters (`None` unless the kind is `IvfRq`), with the current
    /// default nprobe.
    pub fn ivf_params(&self) -> Option<IvfParams> {
        self.ivf.as_ref().map(|s| IvfParams {
            nprobe: s.nprobe.load(Ordering::Relaxed),
            ..s.params
        })
    }

    /// Changes the default nprobe of an IVF index.
    pub fn set_nprobe(&self, nprobe: usize) -> Result<()> {
        let s = self.ivf.as_ref().ok_or(IndexError::InvalidParameter {
            name: "nprobe",
            value: nprobe.to_string(),
            reason: "only IVF indexes have nprobe",
        })?;
        IvfParams { nprobe, ..s.params }.validate()?;
        s.nprobe.store(nprobe, Ordering::Relaxed);
        Ok(())
    }

    /// The trained IVF model, if any.
    pub fn ivf_model(&self) -> Option<Arc<IvfModel>> {
        let s = self.ivf.as_ref()?;
        let t = s.trained.read();
        t.as_ref().map(|t| Arc::clone(&t.model))
    }

    /// Whether the index can search: always for Flat/HNSW, after training
    /// for IVF.
    pub fn is_trained(&self) -> bool {
        self.ivf.as_ref().is_none_or(|s| s.trained.read().is_some())
    }

    /// Trains the IVF coarse quantizer on `sample` (row-major, `dims`
    /// floats per row; rows are validated and normalised for cosine as
    /// vectors are), reporting k-means progress, then encodes every vector
    /// already in the index. Retraining replaces the model.
    pub fn train(&self, sample: &[f32], progress: &mut dyn FnMut(Progress)) -> Result<()> {
        let Some(state) = self.ivf.as_ref() else {
            return Err(IndexError::InvalidParameter {
                name: "kind",
                value: self.kind.name().into(),
                reason: "only IVF indexes are trained",
            });
        };
        let dims = self.space.dims;
        if sample.is_empty() || !sample.len().is_multiple_of(dims) {
            return Err(IndexError::Dimensions {
                expected: dims,
                got: sample.len() % dims.max(1),
            });
        }
        let rows = self.training_rows(sample.chunks_exact(dims).map(VectorRef::F32))?;
        let mut trained = state.trained.write();
        let model = IvfModel::train(&rows, dims, self.space.metric, &state.params, progress)?;
        let t = Trained {
            lists: (0..model.partitions())
                .map(|_| RwLock::new(List::default()))
                .collect(),
            model: Arc::new(model),
        };
        // Encode what is already stored (in slot order, in parallel).
        let store = self.store.read();
        let used = store.used.load(Ordering::Acquire).min(store.capacity());
        let encoded: Vec<(u32, Encoded)> = (0..used as u32)
            .into_par_iter()
            .filter(|&s| store.ready.get(s as usize))
            .map_init(Vec::new, |tmp, slot| {
                let x = self.stored_floats(store.vectors.get(slot as usize));
                let mut e = Encoded::default();
                t.model.encode(&x, tmp, &mut e);
                (slot, e)
            })
            .collect();
        for (slot, e) in &encoded {
            t.lists[e.partition as usize]
                .write()
                .push(&t.model, *slot, e);
        }
        drop(store);
        self.prepare_scratch(&t.model);
        *trained = Some(t);
        Ok(())
    }

    /// Sizes one search scratch per pool thread for `model`, so searches
    /// allocate nothing from the first query on.
    fn prepare_scratch(&self, model: &IvfModel) {
        let mut all: Vec<Scratch> = (0..rayon::current_num_threads().max(1))
            .map(|_| self.scratch.take())
            .collect();
        for s in &mut all {
            s.ivf.prepare(model, 256);
            s.query_buf(self.space.stride());
        }
        for s in all {
            self.scratch.give(s);
        }
    }

    /// Validates and encodes rows, returning their stored form as floats
    /// (normalised for cosine, rounded through f16 for f16 storage).
    fn training_rows<'a>(&self, rows: impl Iterator<Item = VectorRef<'a>>) -> Result<Vec<f32>> {
        let stride = self.space.stride();
        let mut buf = vec![0u8; stride];
        let mut out = Vec::new();
        for (i, v) in rows.enumerate() {
            self.space
                .encode(v, &mut buf)
                .map_err(|e| IndexError::at_row(i, e))?;
            out.extend(self.stored_floats(&buf));
        }
        Ok(out)
    }

    fn stored_floats(&self, stored: &[u8]) -> Vec<f32> {
        self.space.decode_floats(stored).unwrap_or_default()
    }

    /// A copy of the IVF model and partitions, `None` unless trained.
    pub fn ivf_export(&self) -> Option<IvfExport> {
        let s = self.ivf.as_ref()?;
        let t = s.trained.read();
        let t = t.as_ref()?;
        Some(IvfExport {
            model: Arc::clone(&t.model),
            lists: t
                .lists
                .iter()
                .map(|l| {
                    let l = l.read();
                    IvfListData {
                        slots: l.slots.clone(),
                        codes: l.codes.clone(),
                        factors: l.factors.clone(),
                        ex: l.ex.clone(),
                    }
                })
                .collect(),
        })
    }

    /// Searches into `out` (cleared first), reusing its capacity. For IVF
    /// indexes this performs no heap allocation once the calling thread's
    /// scratch is warm (see the crate's counting-allocator test).
    pub fn search_into(
        &self,
        query: VectorRef<'_>,
        k: usize,
        opts: &SearchOptions<'_>,
        out: &mut Vec<Neighbor>,
    ) -> Result<()> {
        if self.kind != IndexKind::IvfRq || opts.exact {
            let r = self.search(query, k, opts)?;
            out.clear();
            out.extend_from_slice(&r);
            return Ok(());
        }
        let k = self.check_k(k)?;
        if k == 0 {
            out.clear();
            return Ok(());
        }
        let Some(state) = self.ivf.as_ref() else {
            return Err(IndexError::Empty);
        };
        let trained = state.trained.read();
        let Some(t) = trained.as_ref() else {
            return Err(IndexError::Empty);
        };
        let VectorRef::F32(x) = query else {
            return Err(IndexError::WrongInputKind {
                expected: "float",
                dtype: self.space.dtype,
            });
        };
        let mut s = self.scratch.take();
        let stride = self.space.stride();
        if let Err(e) = self.space.encode(query, s.query_buf(stride)) {
            self.scratch.give(s);
            return Err(e);
        }
        let q = s.take_query();
        let qb = query_bytes(&q, stride);
        self.space.float_query(x, s.ivf.query_mut(self.space.dims));
        let store = self.store.read();
        let view = Graph {
            store: &store,
            m: self.params.m,
        };
        let result = match opts.filter {
            Some(f) if f.len() > view.slots() => Err(IndexError::FilterSize {
                expected: view.slots(),
                got: f.len(),
            }),
            _ => {
                let iq = IvfQuery {
                    k,
                    nprobe: opts
                        .nprobe
                        .unwrap_or_else(|| state.nprobe.load(Ordering::Relaxed)),
                    refine: opts
                        .refine
                        .unwrap_or_else(|| state.params.default_refine(k)),
                    filter: opts.filter,
                };
                ivf::search(t, &view, &self.dist, qb, iq, &mut s.ivf, out);
                Ok(())
            }
        };
        drop(store);
        s.put_query(q);
        self.scratch.give(s);
        result
    }

    /// Appends a just-written slot to its IVF partition (IVF indexes, once
    /// trained).
    fn ivf_append(&self, t: &Trained, slot: u32, stored: &[u8]) {
        let x = self.stored_floats(stored);
        let mut tmp = Vec::new();
        let mut e = Encoded::default();
        t.model.encode(&x, &mut tmp, &mut e);
        t.lists[e.partition as usize]
            .write()
            .push(&t.model, slot, &e);
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

    /// Makes room for `additional` more slots without growing later.
    pub fn reserve(&self, additional: usize) -> Result<()> {
        let want = self.slot_count().saturating_add(additional);
        self.grow_to(want)
    }

    fn grow_to(&self, want: usize) -> Result<()> {
        if want > MAX_SLOTS {
            return Err(IndexError::Full(MAX_SLOTS));
        }
        let mut store = self.store.write();
        if store.capacity() >= want {
            return Ok(());
        }
        let cap = want.max(store.capacity() * 2).min(MAX_SLOTS);
        *store = store.grown(cap, self.params.m0());
        Ok(())
    }

    fn level_for(&self, slot: usize) -> usize {
        // splitmix64 of (seed, slot) → uniform in (0, 1] → geometric level.
        let mut z = self.params.seed ^ (slot as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let u = ((z >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let ml = 1.0 / (self.params.m as f64).ln();
        ((-u.ln() * ml) as usize).min(MAX_LEVEL)
    }

    /// Claims a slot for `key` (and tombstones its previous slot when
    /// `replace`), growing the index if needed.
    fn insert(&self, key: u64, v: VectorRef<'_>, replace: bool) -> Result<()> {
        let mut scratch = self.scratch.take();
        let stride = self.space.stride();
        scratch.full.clear();
        if let (VectorRef::F32(x), true) = (v, self.space.dtype.is_quantized()) {
            scratch.full.resize(x.len(), 0.0);
            self.space.float_query(x, &mut scratch.full);
        }
        let r = self
            .space
            .encode(v, scratch.query_buf(stride))
            .and_then(|()| self.insert_encoded(key, &mut scratch, replace));
        self.scratch.give(scratch);
        r
    }

    fn insert_encoded(&self, key: u64, scratch: &mut Scratch, replace: bool) -> Result<()> {
        // IVF: hold the model for the whole insert (so training, which
        // takes it exclusively, sees every slot either before or after),
        // training first on this one vector when nothing trained it yet.
        let mut ivf = self.ivf.as_ref().map(|s| s.trained.read());
        if ivf.as_ref().is_some_and(|g| g.is_none()) {
            drop(ivf.take());
            let stride = self.space.stride();
            let q = scratch.take_query();
            let rows = self.stored_floats(query_bytes(&q, stride));
            scratch.put_query(q);
            if !self.is_trained() {
                self.train(&rows, &mut |_| {})?;
            }
            ivf = self.ivf.as_ref().map(|s| s.trained.read());
        }
        let trained = ivf.as_ref().and_then(|g| g.as_ref());
        loop {
            let store = self.store.read();
            let claimed = {
                let keymap = self.keymap.lock();
                let old = keymap.get(&key).copied();
                if old.is_some() && !replace {
                    return Err(IndexError::DuplicateKey(key));
                }
                let slot = store.used.load(Ordering::Acquire);
                if slot >= store.capacity() {
                    None
                } else {
                    store.used.store(slot + 1, Ordering::Release);
                    // The key names the new slot only once it is ready
                    // (below): until then a replaced key keeps its old
                    // slot, so readers never find it missing.
                    Some((slot, old))
                }
            };
            let Some((slot, old)) = claimed else {
                let cap = store.capacity();
                drop(store);
                self.grow_to(cap + 1)?;
                continue;
            };
            let q = scratch.take_query();
            let qb = query_bytes(&q, self.space.stride());
            store.keys[slot].store(key, Ordering::Release);
            // SAFETY: `slot` was claimed above under the key-map lock by
            // this thread alone and is not yet reachable by any reader.
            unsafe { store.vectors.write(slot, qb) };
            if let Some(full) = &store.full {
                let bytes: Vec<u8> = scratch.full.iter().flat_map(|x| x.to_ne_bytes()).collect();
                // SAFETY: as above: the slot is this thread's alone.
                unsafe { full.write(slot, &bytes) };
            }
            if let Some(links) = &store.links {
                let g = Graph {
                    store: &store,
                    m: self.params.m,
                };
                self.link(&g, links, slot as u32, qb, scratch);
            }
            if let Some(t) = trained {
                self.ivf_append(t, slot as u32, qb);
            }
            scratch.put_query(q);
            // Publish: the key names the new slot, and its previous one
            // (the one at the claim, or a newer one another thread
            // finished meanwhile) is dead, retired before the new one is
            // ready so no search sees both. A key removed meanwhile leaves
            // the new slot dead too; one added meanwhile by a
            // non-replacing insert is a duplicate.
            let mut keymap = self.keymap.lock();
            let r = match (keymap.get(&key).copied(), old) {
                (Some(cur), _) if replace => {
                    store.deleted.set(cur as usize);
                    keymap.insert(key, slot as u32);
                    Ok(())
                }
                (Some(_), _) => {
                    store.deleted.set(slot);
                    Err(IndexError::DuplicateKey(key))
                }
                (None, Some(_)) => {
                    store.deleted.set(slot);
                    Ok(())
                }
                (None, None) => {
                    keymap.insert(key, slot as u32);
                    self.live.fetch_add(1, Ordering::AcqRel);
                    Ok(())
                }
            };
            store.ready.set(slot);
            return r;
        }
    }

    fn link(&self, view: &Graph<'_>, links: &Links, slot: u32, q: &[u8], s: &mut Scratch) {
        let m = self.params.m;
        let level = self.level_for(slot as usize);
        links.levels[slot as usize].store(level as u8, Ordering::Release);
        if level > 0 {
            let lists: Box<[AtomicU32]> = (0..level * (1 + m)).map(|_| AtomicU32::new(0)).collect();
            let _ = links.upper[slot as usize].set(lists);
        }
        // Inserting above the current top takes the entry lock for the
        // whole insert (rare: ~1/M of nodes reach level 1).
        let mut entry_guard = None;
        let entry = {
            let e = *links.entry.read();
            match e {
                Some((_, top)) if level <= top => e,
                _ => {
                    let g = links.entry.write();
                    let e = *g;
                    entry_guard = Some(g);
                    e
                }
            }
        };
        let Some((ep, top)) = entry else {
            if let Some(mut g) = entry_guard {
                *g = Some((slot, level));
            }
            return;
        };
        let dist = &self.dist;
        let mut cur = Cand {
            dist: dist.eval(q, view.vector(ep)),
            slot: ep,
        };
        let mut neigh = std::mem::take(&mut s.neighbors);
        for l in (level + 1..=top).rev() {
            cur = graph::greedy(view, dist, q, cur, l, &mut neigh);
        }
        s.neighbors = neigh;
        // Write all of the new node's own lists first and only then the
        // reverse links: the node becomes reachable from the graph only
        // once every one of its levels can be walked.
        let mut eps = vec![cur];
        let mut chosen: Vec<(usize, Vec<u32>)> = Vec::with_capacity(level.min(top) + 1);
        for l in (0..=level.min(top)).rev() {
            graph::search_layer(
                view,
                dist,
                q,
                &eps,
                self.params.ef_construction,
                l,
                s,
                |x| x != slot,
            );
            let mut cands = std::mem::take(&mut s.pool);
            cands.clear();
            cands.extend(s.results.drain());
            cands.sort_unstable();
            let mut selected = Vec::with_capacity(m);
            graph::select_neighbors(view, dist, &cands, m, &mut selected);
            if let Some(list) = links.list(l, slot, m) {
                let _g = links.locks[slot as usize].lock();
                write_list(list, &selected);
            }
            chosen.push((l, selected));
            eps.clear();
            eps.extend_from_slice(&cands);
            s.pool = cands;
        }
        for (l, selected) in chosen {
            let max = if l == 0 { self.params.m0() } else { m };
            for n in selected {
                self.add_link(view, links, n, slot, l, max, s);
            }
        }
        if let Some(mut g) = entry_guard {
            if level > top {
                *g = Some((slot, level));
            }
        }
    }

    /// Adds `new` to `node`'s list at `level`, shrinking with the heuristic
    /// when full.
    #[allow(clippy::too_many_arguments)]
    fn add_link(
        &self,
        view: &Graph<'_>,
        links: &Links,
        node: u32,
        new: u32,
        level: usize,
        max: usize,
        s: &mut Scratch,
    ) {
        let Some(list) = links.list(level, node, self.params.m) else {
            return;
        };
        let _g = links.locks[node as usize].lock();
        let mut cur = std::mem::take(&mut s.neighbors);
        read_list(list, &mut cur);
        if cur.contains(&new) {
            s.neighbors = cur;
            return;
        }
        if cur.len() < max {
            let at = cur.len() + 1;
            list[at].store(new, Ordering::Release);
            list[0].store(at as u32, Ordering::Release);
        } else {
            let base = view.vector(node);
            cur.push(new);
            let mut d = Vec::with_capacity(cur.len());
            graph::eval_slots(view, &self.dist, base, &cur, &mut d);
            let mut cands: Vec<Cand> = cur
                .iter()
                .zip(&d)
                .map(|(&slot, &dist)| Cand { dist, slot })
                .collect();
            cands.sort_unstable();
            let mut keep = Vec::with_capacity(max);
            graph::select_neighbors(view, &self.dist, &cands, max, &mut keep);
            write_list(list, &keep);
        }
        s.neighbors = cur;
    }

    /// Inserts or replaces `key` with a vector already in stored form (as
    /// written by [`Space::encode`]: `stored.len()` is the space's
    /// `vector_bytes()` or `stride()`). Used to replay logs and to copy
    /// vectors between segments without decoding them.
    pub fn upsert_encoded(&self, key: u64, stored: &[u8]) -> Result<()> {
        let (vb, stride) = (self.space.vector_bytes(), self.space.stride());
        if self.keeps_full_precision() {
            return Err(IndexError::InvalidParameter {
                name: "stored",
                value: "quantized row".into(),
                reason: "an index keeping full precision needs float input (add / upsert)",
            });
        }
        if stored.len() != vb && stored.len() != stride {
            return Err(IndexError::Dimensions {
                expected: vb,
                got: stored.len(),
            });
        }
        let mut scratch = self.scratch.take();
        let buf = scratch.query_buf(stride);
        buf.fill(0);
        buf[..vb].copy_from_slice(&stored[..vb]);
        let r = self.insert_encoded(key, &mut scratch, true);
        self.scratch.give(scratch);
        r
    }

    /// [`Index::upsert_encoded`] for many keys in parallel (`threads` as
    /// in [`Index::add_batch`]); `stored` holds one `stride()`-long row per
    /// key.
    pub fn upsert_encoded_batch(&self, keys: &[u64], stored: &[u8], threads: usize) -> Result<()> {
        let stride = self.space.stride();
        if stored.len() != keys.len() * stride {
            return Err(IndexError::InvalidParameter {
                name: "stored",
                value: stored.len().to_string(),
                reason: "must hold one stride-long row per key",
            });
        }
        if !self.is_trained() && !keys.is_empty() {
            let rows: Vec<f32> = stored
                .chunks_exact(stride)
                .flat_map(|r| self.stored_floats(r))
                .collect();
            with_threads(threads, || self.train(&rows, &mut |_| {}))?;
        }
        self.reserve(keys.len())?;
        let run = || {
            keys.par_iter()
                .zip(stored.par_chunks_exact(stride.max(1)))
                .try_for_each(|(&k, v)| {
                    crate::foreground::step();
                    self.upsert_encoded(k, v)
                })
        };
        with_threads(if keys.len() < 64 { 0 } else { threads }, run)
    }

    /// Upserts rows given as f32 bytes (`row_stride` bytes per key, the
    /// first `dims × 4` of them the components, native byte order: the
    /// stored form of an f32 space or a full-precision row): each is
    /// encoded as a user vector would be. Used to build an index with
    /// codes and full rows from f32 rows (`threads` as in
    /// [`Index::add_batch`]).
    pub fn upsert_f32_rows(
        &self,
        keys: &[u64],
        rows: &[u8],
        row_stride: usize,
        threads: usize,
    ) -> Result<()> {
        let dims = self.space.dims;
        if row_stride < dims * 4 || rows.len() != keys.len() * row_stride {
            return Err(IndexError::InvalidParameter {
                name: "rows",
                value: rows.len().to_string(),
                reason: "must hold one row of at least dims f32 per key",
            });
        }
        self.reserve(keys.len())?;
        let run = || {
            keys.par_iter()
                .zip(rows.par_chunks_exact(row_stride))
                .try_for_each(|(&k, r)| {
                    crate::foreground::step();
                    let v = f32_row(r, dims);
                    self.upsert(k, VectorRef::F32(&v))
                })
        };
        with_threads(if keys.len() < 64 { 0 } else { threads }, run)
    }

    /// Checks a batch without changing the index: one key per vector,
    /// every vector valid for the space, no key repeated within the batch
    /// or already present. The error names the first offending row
    /// ([`IndexError::Row`]).
    pub fn validate_batch(&self, keys: &[u64], vectors: &[VectorRef<'_>]) -> Result<()> {
        if keys.len() != vectors.len() {
            return Err(IndexError::InvalidParameter {
                name: "keys",
                value: keys.len().to_string(),
                reason: "must have one key per vector",
            });
        }
        let stride = self.space.stride();
        let bad = vectors
            .par_iter()
            .enumerate()
            .map_init(
                || vec![0u8; stride],
                |buf, (i, v)| {
                    crate::foreground::step();
                    self.space.encode(*v, buf).err().map(|e| (i, e))
                },
            )
            .flatten()
            .min_by_key(|(i, _)| *i);
        if let Some((i, e)) = bad {
            return Err(IndexError::at_row(i, e));
        }
        let mut seen: HashMap<u64, (), BuildHasherDefault<KeyHasher>> =
            HashMap::with_capacity_and_hasher(keys.len(), Default::default());
        let keymap = self.keymap.lock();
        for (i, &k) in keys.iter().enumerate() {
            if seen.insert(k, ()).is_some() || keymap.contains_key(&k) {
                return Err(IndexError::at_row(i, IndexError::DuplicateKey(k)));
            }
        }
        Ok(())
    }

    /// Adds many vectors using up to `threads` threads (all cores when 0).
    /// The batch is validated first ([`Index::validate_batch`]): a bad row
    /// or a duplicate key rejects the whole batch and nothing is added.
    /// (Concurrent writers adding the same keys at the same time can still
    /// make a later row fail with [`IndexError::DuplicateKey`].)
    pub fn add_batch(&self, keys: &[u64], vectors: &[VectorRef<'_>], threads: usize) -> Result<()> {
        self.validate_batch(keys, vectors)?;
        if !self.is_trained() && !vectors.is_empty() {
            let rows = self.training_rows(vectors.iter().copied())?;
            with_threads(threads, || self.train(&rows, &mut |_| {}))?;
        }
        self.reserve(keys.len())?;
        let run = || {
            keys.par_iter()
                .zip(vectors.par_iter())
                .try_for_each(|(&k, &v)| self.add(k, v))
        };
        with_threads(threads, run)
    }

    /// `k` under the one rule ([`crate::limits::check_k`]): 0 when the
    /// index holds no live row.
    fn check_k(&self, k: usize) -> Result<usize> {
        crate::limits::check_k(k, self.len())
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
    crate::threads::with_joined_pool(builder, |pool| pool.install(f)).map_err(|_| {
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
        let k = self.check_k(k)?;
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
        let result = plan::execute(
            &view,
            &self.space,
            &self.dist,
            query,
            k,
            plan,
            opts.filter,
            &mut s,
        );
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
