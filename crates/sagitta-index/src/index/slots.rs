//! The slot store of an [`Index`]: vectors at a fixed stride, slot -> key,
//! key -> slot, the ready and tombstone bits, the HNSW link arrays; the
//! graph view over them ([`Graph`]) and the public [`IndexView`].

use super::*;

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

pub(super) type KeyMap = HashMap<u64, u32, BuildHasherDefault<KeyHasher>>;

/// The capacity-bound part of an index, replaced wholesale on growth.
pub(super) struct Store {
    pub(super) vectors: SlotBuf,
    pub(super) keys: Box<[AtomicU64]>,
    pub(super) ready: AtomicBitset,
    pub(super) deleted: AtomicBitset,
    /// Slots claimed so far.
    pub(super) used: AtomicUsize,
    pub(super) links: Option<Links>,
    /// Full-precision f32 rows beside quantized (sq8 / sq16) storage, for
    /// exact reranking; `None` unless asked for.
    pub(super) full: Option<SlotBuf>,
}

pub(super) struct Links {
    pub(super) stride0: usize,
    pub(super) level0: Box<[AtomicU32]>,
    pub(super) upper: Box<[OnceLock<Box<[AtomicU32]>>]>,
    pub(super) levels: Box<[AtomicU8]>,
    pub(super) locks: Box<[Mutex<()>]>,
    /// (entry slot, top level); `None` while empty.
    pub(super) entry: RwLock<Option<(u32, usize)>>,
}

impl Links {
    pub(super) fn new(capacity: usize, m0: usize) -> Self {
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

    pub(super) fn grown(&self, capacity: usize, m0: usize, used: usize) -> Self {
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
    pub(super) fn list(&self, level: usize, slot: u32, m: usize) -> Option<&[AtomicU32]> {
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

pub(super) fn read_list(list: &[AtomicU32], out: &mut Vec<u32>) {
    out.clear();
    let n = (list[0].load(Ordering::Acquire) as usize).min(list.len() - 1);
    out.extend(list[1..=n].iter().map(|a| a.load(Ordering::Acquire)));
}

pub(super) fn write_list(list: &[AtomicU32], items: &[u32]) {
    let n = items.len().min(list.len() - 1);
    for (a, &v) in list[1..=n].iter().zip(items) {
        a.store(v, Ordering::Release);
    }
    list[0].store(n as u32, Ordering::Release);
}

impl Store {
    pub(super) fn new(space: &Space, capacity: usize, links: Option<usize>) -> Self {
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

    pub(super) fn capacity(&self) -> usize {
        self.vectors.capacity()
    }

    pub(super) fn grown(&self, capacity: usize, m0: usize) -> Self {
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
pub(super) struct Graph<'a> {
    pub(super) store: &'a Store,
    pub(super) m: usize,
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

/// A [`Graph`] whose slots are live once published, deleted or not: the
/// view of a search whose filter is the caller's snapshot of the live
/// slots ([`crate::SearchOptions::snapshot`]).
#[derive(Clone, Copy)]
pub(super) struct Published<'a>(pub(super) Graph<'a>);

impl GraphView for Published<'_> {
    fn slots(&self) -> usize {
        self.0.slots()
    }
    #[inline]
    fn vector(&self, slot: u32) -> &[u8] {
        self.0.vector(slot)
    }
    fn key(&self, slot: u32) -> u64 {
        self.0.key(slot)
    }
    #[inline]
    fn is_live(&self, slot: u32) -> bool {
        self.0.store.ready.get(slot as usize)
    }
    #[inline]
    fn level(&self, slot: u32) -> usize {
        self.0.level(slot)
    }
    fn entry_point(&self) -> Option<(u32, usize)> {
        self.0.entry_point()
    }
    #[inline]
    fn neighbors(&self, level: usize, slot: u32, out: &mut Vec<u32>) {
        self.0.neighbors(level, slot, out)
    }
    #[inline]
    fn prefetch_links(&self, level: usize, slot: u32) {
        self.0.prefetch_links(level, slot)
    }
    #[inline]
    fn full(&self, slot: u32) -> Option<&[u8]> {
        self.0.full(slot)
    }
}

/// A read guard over an index that implements [`GraphView`]; used to
/// serialise the index into a segment file. Holds a shared lock: inserts
/// that need to grow the index wait until it is dropped.
pub struct IndexView<'a> {
    pub(super) store: RwLockReadGuard<'a, Store>,
    pub(super) m: usize,
}

impl std::fmt::Debug for IndexView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexView")
            .field("slots", &self.slots())
            .finish()
    }
}

impl IndexView<'_> {
    pub(super) fn graph(&self) -> Graph<'_> {
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
