//! A [`Collection`]: one logical index of any size on a directory.
//!
//! ```text
//! DIR/
//!   MANIFEST               the commit point: config, sealed segments, the
//!                          tombstone and bloom files, the last logged seq
//!                          folded into segments (JSON + CRC32C line)
//!   LOCK                   held (flock) by the one writer
//!   seg-000001.sgt ...     sealed, immutable, memory-mapped segments
//!   tomb-000007.bin        keys deleted from sealed segments
//!   bloom-000007.bin       scalable bloom filter over every key
//!   wal-000...0123.log     write-ahead log since the last seal
//! ```
//!
//! Writes go to the WAL first (fsynced per the [`Durability`] policy), then
//! into the active in-memory [`Index`]; a write returns (is acknowledged)
//! only after that. When the active segment passes `segment_size` bytes it
//! is sealed: written as a segment file, the tombstone and bloom files
//! written, the manifest replaced atomically, the WAL restarted. Every file
//! is written tmp → fsync → rename → fsync(dir), and the manifest rename is
//! the commit: a crash at any moment leaves the old manifest (and a WAL
//! that replays everything since) or the new one. Files the manifest does
//! not name are leftovers of an interrupted seal and are removed at open.
//!
//! Each key has at most one live version: in the active segment or in one
//! sealed segment. Replacing or deleting a key held by a sealed segment
//! records it in that segment's dead set (persisted in the tombstone file),
//! which searches turn into a filter bitmap, so dead keys are never
//! returned and the graph still routes through them.

use crate::bloom::Bloom;
use crate::error::{io, Result, StoreError};
use crate::filter::{Bound, Filter, FilterCache, SegmentPayload};
use crate::payload::{self, Field, FieldType, Payload, PayloadError, Row, Schema, Value};
use crate::segment::{sync_dir, write_durably, Segment};
use crate::wal::{self, Op, Wal};
use parking_lot::{Mutex, RwLock};
use rayon::prelude::*;
use sagitta_index::{
    check_k, Bitset, DType, GraphView, HnswParams, Index, IndexError, IndexKind, IndexRead,
    IndexWrite, IvfParams, Metric, Neighbor, SearchOptions, Space, VectorRef,
};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

const MANIFEST: &str = "MANIFEST";
const LOCK: &str = "LOCK";
const MANIFEST_FORMAT: u32 = 1;
const TOMB_MAGIC: &[u8; 8] = b"SGTATMB\0";
const TOMB_VERSION: u32 = 1;

/// When acknowledged writes reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync the WAL before every write call returns (the default).
    Batch,
    /// fsync at most this many milliseconds after a write (a background
    /// thread); a power loss can lose that window, a process crash cannot.
    IntervalMs(u64),
    /// Never fsync the WAL (the OS writes it back eventually); survives a
    /// process crash, not a power loss.
    Off,
}

impl Durability {
    /// Parses `batch`, `off`, or a number of milliseconds (`"100"`,
    /// `"100ms"`).
    pub fn parse(s: &str) -> Option<Durability> {
        match s.to_ascii_lowercase().as_str() {
            "batch" | "fsync" => Some(Durability::Batch),
            "off" | "none" => Some(Durability::Off),
            other => other
                .trim_end_matches("ms")
                .parse()
                .ok()
                .filter(|&ms| ms > 0)
                .map(Durability::IntervalMs),
        }
    }

    /// The policy as `parse` reads it.
    pub fn name(self) -> String {
        match self {
            Durability::Batch => "batch".into(),
            Durability::Off => "off".into(),
            Durability::IntervalMs(ms) => format!("{ms}ms"),
        }
    }
}

/// Settings fixed when a collection is created.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CollectionConfig {
    /// Dimensions, metric, storage type.
    pub space: Space,
    /// Index of the active and sealed segments.
    pub kind: IndexKind,
    /// HNSW parameters (also of the active segment of an IVF collection).
    pub hnsw: HnswParams,
    /// IVF-RaBitQ parameters (kind `IvfRq`): each segment is trained on
    /// its own vectors when it is sealed.
    pub ivf: IvfParams,
    /// Seal the active segment when its estimated size passes this many
    /// bytes.
    pub segment_size: u64,
    /// WAL fsync policy.
    pub durability: Durability,
    /// Key width in bits; only 64 is supported so far.
    pub key_bits: u32,
}

impl CollectionConfig {
    /// Defaults: HNSW (M=16, ef_construction=128), 64 MiB segments, fsync
    /// per batch, 64-bit keys.
    pub fn new(space: Space) -> Self {
        CollectionConfig {
            space,
            kind: IndexKind::Hnsw,
            hnsw: HnswParams::default(),
            ivf: IvfParams::default(),
            segment_size: 64 << 20,
            durability: Durability::Batch,
            key_bits: 64,
        }
    }

    fn validate(&self) -> Result<()> {
        if self.key_bits != 64 {
            return Err(StoreError::Config(format!(
                "key_bits = {}: only 64-bit keys are supported so far",
                self.key_bits
            )));
        }
        if self.segment_size < 4096 {
            return Err(StoreError::Config(format!(
                "segment_size = {} bytes: must be at least 4096",
                self.segment_size
            )));
        }
        self.sealed_index()?;
        self.active_index()?;
        Ok(())
    }

    /// A new, empty active segment: HNSW for IVF collections (an IVF index
    /// needs its segment's vectors to train on, so it is built at seal).
    pub(crate) fn active_index(&self) -> Result<Index> {
        Ok(match self.kind {
            IndexKind::IvfRq => Index::hnsw(self.space, self.hnsw)?,
            k => Index::new(self.space, k, self.hnsw)?,
        })
    }

    /// A new, empty index of the kind sealed segments have.
    pub(crate) fn sealed_index(&self) -> Result<Index> {
        Ok(match self.kind {
            IndexKind::IvfRq => Index::ivf_rq(self.space, self.ivf)?,
            k => Index::new(self.space, k, self.hnsw)?,
        })
    }

    /// Estimated bytes one vector occupies in a segment (vector, key, and
    /// level-0 links for HNSW).
    pub fn bytes_per_vector(&self) -> u64 {
        // The active segment decides rotation; it is HNSW for IVF too.
        let links = match self.kind {
            IndexKind::Hnsw | IndexKind::IvfRq => 4 * (self.hnsw.m0() as u64 + 1),
            IndexKind::Flat => 0,
        };
        self.space.stride() as u64 + 16 + links
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ConfigFile {
    dims: usize,
    metric: String,
    dtype: String,
    kind: String,
    m: usize,
    ef_construction: usize,
    ef_search: usize,
    seed: u64,
    segment_size: u64,
    durability: String,
    key_bits: u32,
    #[serde(default = "default_bits")]
    ivf_bits: u8,
    #[serde(default)]
    ivf_partitions: Option<usize>,
    #[serde(default = "default_partition_size")]
    ivf_partition_size: usize,
    #[serde(default = "default_nprobe")]
    ivf_nprobe: usize,
    #[serde(default)]
    ivf_refine: Option<usize>,
}

fn default_bits() -> u8 {
    IvfParams::default().bits
}
fn default_partition_size() -> usize {
    IvfParams::default().partition_size
}
fn default_nprobe() -> usize {
    IvfParams::default().nprobe
}

impl ConfigFile {
    fn from_config(c: &CollectionConfig) -> Self {
        ConfigFile {
            dims: c.space.dims,
            metric: c.space.metric.name().into(),
            dtype: c.space.dtype.name().into(),
            kind: c.kind.name().into(),
            m: c.hnsw.m,
            ef_construction: c.hnsw.ef_construction,
            ef_search: c.hnsw.ef_search,
            seed: c.hnsw.seed,
            segment_size: c.segment_size,
            durability: c.durability.name(),
            key_bits: c.key_bits,
            ivf_bits: c.ivf.bits,
            ivf_partitions: c.ivf.partitions,
            ivf_partition_size: c.ivf.partition_size,
            ivf_nprobe: c.ivf.nprobe,
            ivf_refine: c.ivf.refine,
        }
    }

    fn to_config(&self) -> Option<CollectionConfig> {
        let space = Space::new(
            self.dims,
            Metric::parse(&self.metric)?,
            DType::parse(&self.dtype)?,
        )
        .ok()?;
        Some(CollectionConfig {
            space,
            kind: IndexKind::parse(&self.kind)?,
            hnsw: HnswParams {
                m: self.m,
                ef_construction: self.ef_construction,
                ef_search: self.ef_search,
                seed: self.seed,
                ..HnswParams::default()
            },
            ivf: IvfParams {
                bits: self.ivf_bits,
                partitions: self.ivf_partitions,
                partition_size: self.ivf_partition_size,
                nprobe: self.ivf_nprobe,
                refine: self.ivf_refine,
                ..IvfParams::default()
            },
            segment_size: self.segment_size,
            durability: Durability::parse(&self.durability)?,
            key_bits: self.key_bits,
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SegmentEntry {
    id: u64,
    file: String,
    vectors: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Manifest {
    format: u32,
    generation: u64,
    config: ConfigFile,
    segments: Vec<SegmentEntry>,
    tombstones: Option<String>,
    bloom: Option<String>,
    /// Every WAL record up to this sequence number is in the segments.
    wal_seq: u64,
    next_segment_id: u64,
    /// Payload columns, in order (absent in manifests written before
    /// payloads existed).
    #[serde(default)]
    payload: Vec<ManifestField>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ManifestField {
    name: String,
    #[serde(rename = "type")]
    ty: String,
}

fn schema_of(m: &Manifest, dir: &Path) -> Result<Schema> {
    let fields = m
        .payload
        .iter()
        .map(|f| {
            FieldType::parse(&f.ty).map(|ty| Field {
                name: f.name.clone(),
                ty,
            })
        })
        .collect::<Option<Vec<_>>>();
    fields
        .and_then(|f| Schema::new(f).ok())
        .ok_or_else(|| StoreError::Corrupt {
            file: dir.join(MANIFEST),
            offset: 0,
            reason: "invalid payload schema in manifest".into(),
        })
}

fn manifest_fields(s: &Schema) -> Vec<ManifestField> {
    s.fields()
        .iter()
        .map(|f| ManifestField {
            name: f.name.clone(),
            ty: f.ty.name().into(),
        })
        .collect()
}

impl Manifest {
    fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(MANIFEST);
        let mut body = serde_json::to_vec_pretty(self)
            .map_err(|e| StoreError::Config(format!("cannot serialise the manifest: {e}")))?;
        body.push(b'\n');
        let crc = crc32c::crc32c(&body);
        body.extend_from_slice(format!("crc32c:{crc:08x}\n").as_bytes());
        write_durably(&path, &body)
    }

    fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::NotACollection {
                    dir: dir.to_path_buf(),
                })
            }
            Err(e) => return Err(io("read", &path)(e)),
        };
        let corrupt = |offset: usize, reason: String| StoreError::Corrupt {
            file: path.clone(),
            offset: offset as u64,
            reason,
        };
        let text = std::str::from_utf8(&bytes)
            .map_err(|e| corrupt(e.valid_up_to(), "not UTF-8".into()))?;
        let at = text
            .rfind("crc32c:")
            .ok_or_else(|| corrupt(bytes.len(), "no checksum line".into()))?;
        let want = u32::from_str_radix(text[at + 7..].trim(), 16)
            .map_err(|_| corrupt(at, "bad checksum line".into()))?;
        if crc32c::crc32c(&bytes[..at]) != want {
            return Err(corrupt(at, "checksum mismatch".into()));
        }
        let m: Manifest = serde_json::from_slice(&bytes[..at])
            .map_err(|e| corrupt(0, format!("bad manifest: {e}")))?;
        if m.format != MANIFEST_FORMAT {
            return Err(StoreError::UnsupportedVersion {
                file: path,
                found: m.format,
                oldest: MANIFEST_FORMAT,
                newest: MANIFEST_FORMAT,
            });
        }
        Ok(m)
    }
}

/// Keys deleted from one sealed segment, and the matching filter.
#[derive(Debug, Default)]
struct Dead {
    keys: HashSet<u64>,
    /// Slots still allowed (None while no key is dead).
    allowed: Option<Bitset>,
}

#[derive(Debug)]
struct Sealed {
    id: u64,
    file: String,
    seg: Segment,
    dead: RwLock<Arc<Dead>>,
}

impl Sealed {
    fn dead(&self) -> Arc<Dead> {
        self.dead.read().clone()
    }

    fn live_len(&self) -> usize {
        self.seg.len().saturating_sub(self.dead().keys.len())
    }

    fn has_live(&self, key: u64) -> bool {
        self.seg.contains(key) && !self.dead().keys.contains(&key)
    }

    /// Marks live keys of this segment dead (copy-on-write, so searches in
    /// flight keep the set they started with).
    fn kill(&self, keys: &[u64]) {
        if keys.is_empty() {
            return;
        }
        let mut guard = self.dead.write();
        let mut set = guard.keys.clone();
        let mut allowed = guard
            .allowed
            .clone()
            .unwrap_or_else(|| Bitset::full(self.seg.slot_count()));
        for &k in keys {
            if let Some(slot) = self.seg.slot_of(k) {
                if set.insert(k) {
                    allowed.remove(slot as usize);
                }
            }
        }
        *guard = Arc::new(Dead {
            keys: set,
            allowed: Some(allowed),
        });
    }
}

/// Payload rows of the active segment, by slot, and the filters
/// evaluated over them. A slot's row never changes once written (an
/// upsert takes a new slot), so a cached evaluation stays true for the
/// slots it covers and is only extended over slots added since.
#[derive(Debug, Default)]
struct ActiveRows {
    rows: RwLock<Vec<Option<Row>>>,
    cache: FilterCache,
    /// Slots below this have their final row (set after each write has
    /// stored its rows); only those are cached.
    complete: std::sync::atomic::AtomicUsize,
}

impl ActiveRows {
    fn get(&self, slot: u32) -> Option<Row> {
        self.rows.read().get(slot as usize).cloned().flatten()
    }

    fn eval_into(&self, b: &Bound, words: &mut [u64], range: std::ops::Range<usize>) {
        let rows = self.rows.read();
        for slot in range {
            let row = rows.get(slot).and_then(|r| r.as_deref()).unwrap_or(&[]);
            if b.matches(row) {
                words[slot / 64] |= 1 << (slot % 64);
            }
        }
    }

    /// Slots `0..n` whose payload passes `b` (liveness not applied).
    fn matching(&self, b: &Bound, n: usize) -> Arc<Bitset> {
        let done = self.complete.load(Ordering::Acquire).min(n);
        let cached = self.matching_cached(b, done);
        if done == n {
            return cached;
        }
        // Slots of a write still in flight: evaluated, not cached.
        let mut words = cached.words().to_vec();
        words.resize(n.div_ceil(64), 0);
        self.eval_into(b, &mut words, done..n);
        Arc::new(Bitset::from_words(words, n))
    }

    fn matching_cached(&self, b: &Bound, n: usize) -> Arc<Bitset> {
        let key = b.cache_key();
        let old = self.cache.get(&key);
        if let Some(bits) = &old {
            if bits.len() >= n {
                return bits.clone();
            }
        }
        let from = old.as_ref().map_or(0, |b| b.len());
        let mut words = old.map_or_else(Vec::new, |b| b.words().to_vec());
        words.resize(n.div_ceil(64), 0);
        self.eval_into(b, &mut words, from..n);
        let bits = Arc::new(Bitset::from_words(words, n));
        self.cache.put(key, bits.clone());
        bits
    }
}

#[derive(Debug)]
struct State {
    active: Arc<Index>,
    /// Payload rows of `active`.
    rows: Arc<ActiveRows>,
    /// Oldest first.
    sealed: Vec<Arc<Sealed>>,
}

impl State {
    /// The sealed segment holding a live `key`, newest first.
    fn sealed_holder(&self, key: u64) -> Option<&Arc<Sealed>> {
        self.sealed.iter().rev().find(|s| s.has_live(key))
    }
}

#[derive(Debug)]
struct Writer {
    wal: Wal,
    next_seq: u64,
    manifest: Manifest,
}

/// How to open a collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// The one writer (holds the directory's lock).
    ReadWrite,
    /// A reader: any number, also while a writer appends; sees the
    /// collection as of the moment it was opened.
    ReadOnly,
}

/// Per-search options of a collection.
#[derive(Debug, Clone, Copy, Default)]
pub struct CollectionSearch<'a> {
    /// Beam width override (HNSW).
    pub ef: Option<usize>,
    /// Exact scan of every segment.
    pub exact: bool,
    /// Only these keys may be returned.
    pub filter: Option<&'a [u64]>,
    /// Only matches at most this far away.
    pub radius: Option<f32>,
    /// Only vectors whose payload passes this (bound) filter.
    pub predicate: Option<&'a Bound>,
    /// Partitions probed per IVF segment.
    pub nprobe: Option<usize>,
    /// Rerank depth per IVF segment.
    pub refine: Option<usize>,
}

/// Numbers describing a collection.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollectionStats {
    /// Sealed segments.
    pub segments: usize,
    /// Live vectors (all segments).
    pub vectors: usize,
    /// Live vectors in the active segment.
    pub active_vectors: usize,
    /// Dead keys in sealed segments not yet compacted away.
    pub tombstones: usize,
    /// Bytes of all files in the directory.
    pub bytes_on_disk: u64,
    /// Bytes of write-ahead log files (part of `bytes_on_disk`).
    pub wal_bytes: u64,
    /// Bytes held in memory: the active index and the bloom filter
    /// (mapped segment pages are the OS's to keep or drop).
    pub bytes_in_memory: u64,
    /// Bytes of mapped segment files.
    pub bytes_mapped: u64,
    /// Fraction of the newest bloom filter's capacity in use.
    pub bloom_fill: f64,
    /// Filters in the bloom chain.
    pub bloom_filters: usize,
    /// Last WAL sequence number written.
    pub wal_seq: u64,
}

/// A sharded, durable collection on a directory (see the module docs).
#[derive(Debug)]
pub struct Collection {
    dir: PathBuf,
    mode: OpenMode,
    config: CollectionConfig,
    state: RwLock<Arc<State>>,
    schema: RwLock<Schema>,
    bloom: RwLock<Bloom>,
    writer: Arc<Mutex<Option<Writer>>>,
    flusher: Option<Flusher>,
    _lock: Option<File>,
}

#[derive(Debug)]
struct Flusher {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn spawn_flusher(writer: Weak<Mutex<Option<Writer>>>, every: Duration) -> Flusher {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("sagitta-wal-flush".into())
        .spawn(move || {
            while !flag.load(Ordering::Acquire) {
                std::thread::park_timeout(every);
                let Some(writer) = writer.upgrade() else {
                    return;
                };
                let mut guard = writer.lock();
                if let Some(w) = guard.as_mut() {
                    let _ = w.wal.sync();
                }
            }
        })
        .ok();
    Flusher { stop, thread }
}

fn segment_file(id: u64) -> String {
    format!("seg-{id:06}.sgt")
}

fn bloom_capacity(config: &CollectionConfig) -> u64 {
    // Sized so that collections up to a million keys or 16 segments stay
    // on the first filter of the chain (one probe per lookup).
    (config.segment_size / config.bytes_per_vector().max(1) * 16).clamp(1 << 16, 1 << 20)
}

fn row_err(row: usize, e: IndexError) -> StoreError {
    StoreError::Index(IndexError::at_row(row, e))
}

fn write_tombstones(path: &Path, sealed: &[Arc<Sealed>]) -> Result<()> {
    let mut entries: Vec<(u64, u64)> = sealed
        .iter()
        .flat_map(|s| {
            let d = s.dead();
            d.keys.iter().map(|&k| (s.id, k)).collect::<Vec<_>>()
        })
        .collect();
    entries.sort_unstable();
    let mut b = Vec::with_capacity(24 + entries.len() * 16 + 4);
    b.extend_from_slice(TOMB_MAGIC);
    b.extend_from_slice(&TOMB_VERSION.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (id, k) in entries {
        b.extend_from_slice(&id.to_le_bytes());
        b.extend_from_slice(&k.to_le_bytes());
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    write_durably(path, &b)
}

fn read_tombstones(path: &Path) -> Result<HashMap<u64, Vec<u64>>> {
    let b = std::fs::read(path).map_err(io("read", path))?;
    let bad = |offset: usize, reason: &str| StoreError::Corrupt {
        file: path.to_path_buf(),
        offset: offset as u64,
        reason: reason.into(),
    };
    if b.len() < 28 || &b[..8] != TOMB_MAGIC {
        return Err(bad(0, "not a tombstone file"));
    }
    let (body, tail) = b.split_at(b.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]) {
        return Err(bad(body.len(), "checksum mismatch"));
    }
    let u64_at = |o: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&body[o..o + 8]);
        u64::from_le_bytes(x)
    };
    let n = u64_at(16) as usize;
    if body.len() != 24 + n.saturating_mul(16) {
        return Err(bad(16, "entry count does not match the file size"));
    }
    let mut out: HashMap<u64, Vec<u64>> = HashMap::new();
    for i in 0..n {
        out.entry(u64_at(24 + 16 * i))
            .or_default()
            .push(u64_at(32 + 16 * i));
    }
    Ok(out)
}

/// One segment as a search sees it.
struct Seg<'a> {
    seg: &'a dyn IndexRead,
    live: usize,
    dead: Option<Arc<Dead>>,
    /// The caller's key filter and payload predicate, intersected with the
    /// dead bitmap.
    combined: Option<Bitset>,
    /// Slots set in `combined`.
    allowed: Option<usize>,
}

impl Seg<'_> {
    fn filter(&self) -> Option<&Bitset> {
        self.combined
            .as_ref()
            .or_else(|| self.dead.as_ref().and_then(|d| d.allowed.as_ref()))
    }
}

/// Keys of a batch with their encoded vectors (and payload rows, laid
/// out by the collection schema), deduplicated.
#[derive(Default)]
struct Encoded {
    keys: Vec<u64>,
    stored: Vec<u8>,
    rows: Option<Vec<Row>>,
}

impl Collection {
    /// Creates a collection in `dir` (created if missing; must not already
    /// hold one) and opens it for writing.
    pub fn create(dir: &Path, config: CollectionConfig) -> Result<Collection> {
        config.validate()?;
        std::fs::create_dir_all(dir).map_err(io("create dir", dir))?;
        if dir.join(MANIFEST).exists() {
            return Err(StoreError::AlreadyExists {
                dir: dir.to_path_buf(),
            });
        }
        let m = Manifest {
            format: MANIFEST_FORMAT,
            generation: 1,
            config: ConfigFile::from_config(&config),
            segments: Vec::new(),
            tombstones: None,
            bloom: None,
            wal_seq: 0,
            next_segment_id: 1,
            payload: Vec::new(),
        };
        m.write(dir)?;
        Collection::open(dir, OpenMode::ReadWrite)
    }

    /// Opens the collection in `dir`. Reads the manifest, maps the sealed
    /// segments (in parallel), loads the bloom filter and tombstones, and
    /// replays the WAL written since the last seal into the active segment.
    /// Nothing here grows with the number of sealed vectors (unless the
    /// bloom file is missing and must be rebuilt; its checksum is checked
    /// by a background thread, see [`Bloom::open`]). A writer
    /// also removes leftovers of interrupted seals and cuts a torn WAL
    /// tail.
    pub fn open(dir: &Path, mode: OpenMode) -> Result<Collection> {
        // A reader can race a writer's commit (a file named by the manifest
        // it read is removed before it opens it): read the manifest again.
        let mut attempt = 0;
        loop {
            match Collection::open_once(dir, mode) {
                Err(StoreError::Io { source, .. })
                    if mode == OpenMode::ReadOnly
                        && source.kind() == std::io::ErrorKind::NotFound
                        && attempt < 5 =>
                {
                    attempt += 1;
                }
                r => return r,
            }
        }
    }

    fn open_once(dir: &Path, mode: OpenMode) -> Result<Collection> {
        let lock = match mode {
            OpenMode::ReadWrite => {
                let path = dir.join(LOCK);
                if !dir.join(MANIFEST).exists() {
                    return Err(StoreError::NotACollection {
                        dir: dir.to_path_buf(),
                    });
                }
                let f = File::options()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&path)
                    .map_err(io("open", &path))?;
                match f.try_lock() {
                    Ok(()) => Some(f),
                    Err(std::fs::TryLockError::WouldBlock) => {
                        return Err(StoreError::Locked {
                            dir: dir.to_path_buf(),
                        })
                    }
                    Err(std::fs::TryLockError::Error(e)) => return Err(io("lock", &path)(e)),
                }
            }
            OpenMode::ReadOnly => None,
        };
        let manifest = Manifest::read(dir)?;
        let config = manifest
            .config
            .to_config()
            .ok_or_else(|| StoreError::Corrupt {
                file: dir.join(MANIFEST),
                offset: 0,
                reason: "invalid config in manifest".into(),
            })?;
        if mode == OpenMode::ReadWrite {
            remove_leftovers(dir, &manifest)?;
        }
        let sealed: Vec<Arc<Sealed>> = manifest
            .segments
            .par_iter()
            .map(|e| {
                let seg = Segment::open(&dir.join(&e.file))?;
                if seg.info().space != config.space {
                    return Err(StoreError::Corrupt {
                        file: dir.join(&e.file),
                        offset: 0,
                        reason: "segment space differs from the collection's".into(),
                    });
                }
                Ok(Arc::new(Sealed {
                    id: e.id,
                    file: e.file.clone(),
                    seg,
                    dead: RwLock::new(Arc::new(Dead::default())),
                }))
            })
            .collect::<Result<_>>()?;
        if let Some(t) = &manifest.tombstones {
            let dead = read_tombstones(&dir.join(t))?;
            for s in &sealed {
                if let Some(keys) = dead.get(&s.id) {
                    s.kill(keys);
                }
            }
        }
        let bloom = manifest
            .bloom
            .as_ref()
            .and_then(|b| Bloom::open(&dir.join(b)).ok())
            .unwrap_or_else(|| rebuild_bloom(&config, &sealed, None));
        let active = Arc::new(config.active_index()?);
        let schema = schema_of(&manifest, dir)?;
        let c = Collection {
            dir: dir.to_path_buf(),
            mode,
            config,
            state: RwLock::new(Arc::new(State {
                active,
                rows: Arc::default(),
                sealed,
            })),
            schema: RwLock::new(schema),
            bloom: RwLock::new(bloom),
            writer: Arc::new(Mutex::new(None)),
            flusher: None,
            _lock: lock,
        };
        let (last_seq, tail) = c.replay(manifest.wal_seq)?;
        let mut c = c;
        if mode == OpenMode::ReadWrite {
            let next_seq = last_seq.max(manifest.wal_seq) + 1;
            let wal = match tail {
                Some((path, valid_len)) => Wal::open_append(&path, valid_len)?,
                None => Wal::create(dir, next_seq)?,
            };
            *c.writer.lock() = Some(Writer {
                wal,
                next_seq,
                manifest,
            });
            if let Durability::IntervalMs(ms) = config.durability {
                c.flusher = Some(spawn_flusher(
                    Arc::downgrade(&c.writer),
                    Duration::from_millis(ms),
                ));
            }
        }
        Ok(c)
    }

    /// Replays WAL records after `after_seq`; returns the last sequence
    /// number seen and the newest log with the length of its valid prefix.
    fn replay(&self, after_seq: u64) -> Result<(u64, Option<(PathBuf, u64)>)> {
        let mut logs: Vec<(u64, PathBuf)> = std::fs::read_dir(&self.dir)
            .map_err(io("list", &self.dir))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                wal::parse_name(&name).map(|s| (s, e.path()))
            })
            .collect();
        logs.sort();
        let mut last = after_seq;
        let mut tail = None;
        let state = self.snapshot();
        for (_, path) in &logs {
            let r = wal::read(path)?;
            let mut batch: Vec<(u64, &[u8], Option<Row>)> = Vec::new();
            let mut pos: HashMap<u64, usize> = HashMap::new();
            let vb = self.config.space.vector_bytes();
            for rec in r.records() {
                if rec.seq <= after_seq {
                    continue;
                }
                last = last.max(rec.seq);
                match rec.op {
                    Op::Put | Op::PutPayload => {
                        let (vector, row) = if rec.op == Op::PutPayload && rec.vector.len() >= vb {
                            let (v, p) = rec.vector.split_at(vb);
                            (v, Some(self.row_from_log(p, path)?))
                        } else {
                            (rec.vector, None)
                        };
                        match pos.get(&rec.key) {
                            Some(&i) => batch[i] = (rec.key, vector, row),
                            None => {
                                pos.insert(rec.key, batch.len());
                                batch.push((rec.key, vector, row));
                            }
                        }
                    }
                    Op::Remove => {
                        self.apply_puts(&state, &batch)?;
                        batch.clear();
                        pos.clear();
                        self.apply_removes(&state, &[rec.key]);
                    }
                }
            }
            self.apply_puts(&state, &batch)?;
            tail = Some((path.clone(), r.valid_len.max(wal::HEADER_LEN)));
            if r.valid_len < wal::HEADER_LEN {
                // Created but never completed: start a fresh log instead.
                tail = None;
                if self.mode == OpenMode::ReadWrite {
                    std::fs::remove_file(path).map_err(io("remove", path))?;
                }
            }
        }
        Ok((last, tail))
    }

    /// A logged payload row, growing the schema with its fields.
    fn row_from_log(&self, bytes: &[u8], path: &Path) -> Result<Row> {
        let pairs = payload::decode_row(bytes).map_err(|e| StoreError::Corrupt {
            file: path.to_path_buf(),
            offset: 0,
            reason: e.to_string(),
        })?;
        let mut schema = self.schema.write();
        let fields: Vec<Field> = pairs.iter().map(|(f, _)| f.clone()).collect();
        schema.merge(&fields).map_err(|e| StoreError::Corrupt {
            file: path.to_path_buf(),
            offset: 0,
            reason: e.to_string(),
        })?;
        let mut row = vec![Value::Null; schema.len()];
        for (f, v) in pairs {
            if let Some(i) = schema.index_of(&f.name) {
                row[i] = v;
            }
        }
        Ok(row.into_boxed_slice())
    }

    /// Applies puts of stored vectors (vector bytes as logged).
    fn apply_puts(&self, state: &State, batch: &[(u64, &[u8], Option<Row>)]) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let stride = self.config.space.stride();
        let mut stored = vec![0u8; batch.len() * stride];
        for ((_, v, _), row) in batch.iter().zip(stored.chunks_exact_mut(stride)) {
            let n = v.len().min(stride);
            row[..n].copy_from_slice(&v[..n]);
        }
        let keys: Vec<u64> = batch.iter().map(|(k, _, _)| *k).collect();
        let rows: Option<Vec<Row>> = batch.iter().any(|b| b.2.is_some()).then(|| {
            batch
                .iter()
                .map(|b| b.2.clone().unwrap_or_default())
                .collect()
        });
        self.put_encoded(state, &keys, &stored, rows.as_deref())
    }

    /// Applies puts: `stored` holds one stride-long encoded row per key,
    /// `rows` (when given) one payload row per key.
    fn put_encoded(
        &self,
        state: &State,
        keys: &[u64],
        stored: &[u8],
        rows: Option<&[Row]>,
    ) -> Result<()> {
        // Keys living in sealed segments become dead there once the new
        // version is in the active segment.
        let mut kills: HashMap<u64, Vec<u64>> = HashMap::new();
        {
            let bloom = self.bloom.read();
            for &k in keys {
                if bloom.may_contain(k) && !state.active.contains(k) {
                    if let Some(s) = state.sealed_holder(k) {
                        kills.entry(s.id).or_default().push(k);
                    }
                }
            }
        }
        state.active.upsert_encoded_batch(keys, stored, 0)?;
        if let Some(rows) = rows {
            let mut slots = state.rows.rows.write();
            slots.resize(state.active.slot_count(), None);
            for (k, r) in keys.iter().zip(rows) {
                if let Some(slot) = state.active.slot_of(*k) {
                    if let Some(x) = slots.get_mut(slot as usize) {
                        *x = (!r.is_empty()).then(|| r.clone());
                    }
                }
            }
        }
        // Writes are serialised (writer lock, or replay): every slot
        // claimed so far now has its final row.
        state
            .rows
            .complete
            .store(state.active.slot_count(), Ordering::Release);
        for s in &state.sealed {
            if let Some(keys) = kills.get(&s.id) {
                s.kill(keys);
            }
        }
        let mut bloom = self.bloom.write();
        for &k in keys {
            bloom.insert(k);
        }
        Ok(())
    }

    fn apply_removes(&self, state: &State, keys: &[u64]) -> usize {
        let mut kills: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut removed = 0;
        let bloom = self.bloom.read();
        for &k in keys {
            if !bloom.may_contain(k) {
                continue;
            }
            if state.active.remove(k) {
                removed += 1;
            } else if let Some(s) = state.sealed_holder(k) {
                kills.entry(s.id).or_default().push(k);
                removed += 1;
            }
        }
        drop(bloom);
        for s in &state.sealed {
            if let Some(keys) = kills.get(&s.id) {
                s.kill(keys);
            }
        }
        removed
    }

    fn snapshot(&self) -> Arc<State> {
        self.state.read().clone()
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The settings the collection was created with.
    pub fn config(&self) -> &CollectionConfig {
        &self.config
    }

    /// How the collection was opened.
    pub fn mode(&self) -> OpenMode {
        self.mode
    }

    fn encode(&self, vectors: &[VectorRef<'_>]) -> Result<Vec<u8>> {
        let stride = self.config.space.stride();
        let mut stored = vec![0u8; vectors.len() * stride];
        let space = self.config.space;
        stored
            .par_chunks_exact_mut(stride)
            .zip(vectors.par_iter())
            .enumerate()
            .try_for_each(|(i, (row, v))| space.encode(*v, row).map_err(|e| (i, e)))
            .map_err(|(i, e)| row_err(i, e))?;
        Ok(stored)
    }

    /// Writes puts in pieces that fit the active segment, sealing between
    /// them, so no segment grows past `segment_size` however large the
    /// batch.
    fn write(&self, w: &mut Writer, puts: Encoded, removes: &[u64]) -> Result<()> {
        let per_segment = (self.config.segment_size / self.config.bytes_per_vector().max(1)).max(1);
        let stride = self.config.space.stride();
        let mut start = 0;
        while start < puts.keys.len() {
            let used = self.snapshot().active.slot_count() as u64;
            let room = per_segment.saturating_sub(used).max(1) as usize;
            let end = (start + room).min(puts.keys.len());
            self.write_piece(
                w,
                &puts.keys[start..end],
                &puts.stored[start * stride..end * stride],
                puts.rows.as_ref().map(|r| &r[start..end]),
                &[],
            )?;
            start = end;
        }
        if !removes.is_empty() {
            self.write_piece(w, &[], &[], None, removes)?;
        }
        Ok(())
    }

    /// The one write path: log, sync per policy, apply, maybe seal.
    fn write_piece(
        &self,
        w: &mut Writer,
        keys: &[u64],
        stored: &[u8],
        rows: Option<&[Row]>,
        removes: &[u64],
    ) -> Result<()> {
        let vb = self.config.space.vector_bytes();
        let stride = self.config.space.stride();
        let mut buf = Vec::with_capacity(keys.len() * (vb + 25) + removes.len() * 25);
        let mut seq = w.next_seq;
        let schema = self.schema.read().clone();
        let mut body = Vec::new();
        for (i, (k, row)) in keys
            .iter()
            .zip(stored.chunks_exact(stride.max(1)))
            .enumerate()
        {
            match rows.map(|r| &r[i]).filter(|r| !r.is_empty()) {
                Some(r) => {
                    body.clear();
                    body.extend_from_slice(&row[..vb]);
                    payload::encode_row(&mut body, &schema, r);
                    if body.len() - vb > payload::MAX_ROW_BYTES {
                        return Err(PayloadError::Malformed(format!(
                            "the payload of key {k} takes {} bytes (limit {})",
                            body.len() - vb,
                            payload::MAX_ROW_BYTES
                        ))
                        .into());
                    }
                    wal::encode(&mut buf, seq, Op::PutPayload, *k, &body);
                }
                None => wal::encode(&mut buf, seq, Op::Put, *k, &row[..vb]),
            }
            seq += 1;
        }
        for &k in removes {
            wal::encode(&mut buf, seq, Op::Remove, k, &[]);
            seq += 1;
        }
        w.wal.append(&buf)?;
        w.next_seq = seq;
        if self.config.durability == Durability::Batch {
            w.wal.sync()?;
        }
        let state = self.snapshot();
        if !keys.is_empty() {
            self.put_encoded(&state, keys, stored, rows)?;
        }
        if !removes.is_empty() {
            self.apply_removes(&state, removes);
        }
        if state.active.slot_count() as u64 * self.config.bytes_per_vector()
            >= self.config.segment_size
        {
            self.seal_locked(w)?;
        }
        Ok(())
    }

    fn writer_guard(
        &self,
        op: &'static str,
    ) -> Result<parking_lot::MutexGuard<'_, Option<Writer>>> {
        if self.mode == OpenMode::ReadOnly {
            return Err(StoreError::ReadOnly { op });
        }
        Ok(self.writer.lock())
    }

    /// Adds new keys. The batch is checked whole first (every vector valid,
    /// no key repeated or already present); an error adds nothing.
    pub fn add(&self, keys: &[u64], vectors: &[VectorRef<'_>]) -> Result<()> {
        check_lengths(keys, vectors)?;
        let stored = self.encode(vectors)?;
        let mut g = self.writer_guard("add")?;
        let w = g.as_mut().ok_or(StoreError::ReadOnly { op: "add" })?;
        let mut seen = HashSet::with_capacity(keys.len());
        for (i, &k) in keys.iter().enumerate() {
            if !seen.insert(k) || self.contains(k) {
                return Err(row_err(i, IndexError::DuplicateKey(k)));
            }
        }
        self.write(
            w,
            Encoded {
                keys: keys.to_vec(),
                stored,
                rows: None,
            },
            &[],
        )
    }

    /// Adds the keys not already present (and the first of repeated keys);
    /// returns how many were added.
    pub fn add_once(&self, keys: &[u64], vectors: &[VectorRef<'_>]) -> Result<usize> {
        check_lengths(keys, vectors)?;
        let stored = self.encode(vectors)?;
        let mut g = self.writer_guard("add_once")?;
        let w = g.as_mut().ok_or(StoreError::ReadOnly { op: "add_once" })?;
        let stride = self.config.space.stride();
        let mut seen = HashSet::with_capacity(keys.len());
        let mut e = Encoded::default();
        for (i, &k) in keys.iter().enumerate() {
            if seen.insert(k) && !self.contains(k) {
                e.keys.push(k);
                e.stored
                    .extend_from_slice(&stored[i * stride..(i + 1) * stride]);
            }
        }
        let n = e.keys.len();
        if n > 0 {
            self.write(w, e, &[])?;
        }
        Ok(n)
    }

    /// Inserts or replaces; within a batch the last row of a key wins.
    pub fn upsert(&self, keys: &[u64], vectors: &[VectorRef<'_>]) -> Result<()> {
        self.upsert_with_payload(keys, vectors, None)
    }

    /// Inserts or replaces vectors together with their payload columns
    /// (one payload row per key; a replaced key's old payload is dropped
    /// with its old vector). New columns are added to the schema; a column
    /// of another type than the schema's, a NaN, or a row count that does
    /// not match is refused before anything is written.
    pub fn upsert_with_payload(
        &self,
        keys: &[u64],
        vectors: &[VectorRef<'_>],
        payload: Option<&Payload>,
    ) -> Result<()> {
        check_lengths(keys, vectors)?;
        if let Some(p) = payload {
            p.validate(keys.len())?;
        }
        let stored = self.encode(vectors)?;
        let mut g = self.writer_guard("upsert")?;
        let w = g.as_mut().ok_or(StoreError::ReadOnly { op: "upsert" })?;
        let rows = match payload {
            Some(p) if !p.fields.is_empty() => {
                let mut schema = self.schema.read().clone();
                schema.merge(&p.fields)?;
                let rows: Vec<Row> = (0..keys.len()).map(|r| p.row(&schema, r)).collect();
                // Grown under the writer lock, before the rows are logged
                // (each logged row names its fields, so a crash replays
                // the growth).
                *self.schema.write() = schema;
                Some(rows)
            }
            _ => None,
        };
        let stride = self.config.space.stride();
        let mut last: HashMap<u64, usize> = HashMap::with_capacity(keys.len());
        for (i, &k) in keys.iter().enumerate() {
            last.insert(k, i);
        }
        let e = if last.len() == keys.len() {
            Encoded {
                keys: keys.to_vec(),
                stored,
                rows,
            }
        } else {
            let mut e = Encoded {
                rows: rows.as_ref().map(|_| Vec::new()),
                ..Encoded::default()
            };
            for (i, &k) in keys.iter().enumerate() {
                if last.get(&k) == Some(&i) {
                    e.keys.push(k);
                    e.stored
                        .extend_from_slice(&stored[i * stride..(i + 1) * stride]);
                    if let (Some(out), Some(r)) = (e.rows.as_mut(), rows.as_ref()) {
                        out.push(r[i].clone());
                    }
                }
            }
            e
        };
        self.write(w, e, &[])
    }

    /// The payload schema (columns in the order they appeared).
    pub fn schema(&self) -> Schema {
        self.schema.read().clone()
    }

    /// Parses and checks a JSON filter against the current schema.
    pub fn bind_filter(&self, filter: &Filter) -> Result<Bound> {
        Ok(filter.bind(&self.schema.read())?)
    }

    /// Deletes keys; returns how many were present.
    pub fn remove(&self, keys: &[u64]) -> Result<usize> {
        let mut g = self.writer_guard("remove")?;
        let w = g.as_mut().ok_or(StoreError::ReadOnly { op: "remove" })?;
        let mut seen = HashSet::with_capacity(keys.len());
        let present: Vec<u64> = keys
            .iter()
            .copied()
            .filter(|&k| seen.insert(k) && self.contains(k))
            .collect();
        if !present.is_empty() {
            self.write(w, Encoded::default(), &present)?;
        }
        Ok(present.len())
    }

    /// Makes every acknowledged write durable now (fsync of the WAL).
    pub fn flush(&self) -> Result<()> {
        if self.mode == OpenMode::ReadOnly {
            return Ok(());
        }
        if let Some(w) = self.writer.lock().as_mut() {
            w.wal.sync()?;
        }
        Ok(())
    }

    /// Seals the active segment now (if it holds anything).
    pub fn seal(&self) -> Result<()> {
        let mut g = self.writer_guard("seal")?;
        let w = g.as_mut().ok_or(StoreError::ReadOnly { op: "seal" })?;
        self.seal_locked(w)
    }

    fn seal_locked(&self, w: &mut Writer) -> Result<()> {
        let state = self.snapshot();
        if state.active.slot_count() == 0 {
            return Ok(());
        }
        w.wal.sync()?;
        let id = w.manifest.next_segment_id;
        let file = segment_file(id);
        let path = self.dir.join(&file);
        if self.config.kind == IndexKind::IvfRq {
            // Train this segment's IVF model on its own live vectors.
            let stride = self.config.space.stride();
            let (mut keys, mut stored) = (Vec::new(), Vec::new());
            {
                let view = state.active.view();
                for slot in 0..view.slots() as u32 {
                    if view.is_live(slot) {
                        keys.push(view.key(slot));
                        stored.extend_from_slice(&view.vector(slot)[..stride]);
                    }
                }
            }
            let index = self.config.sealed_index()?;
            if !keys.is_empty() {
                index.upsert_encoded_batch(&keys, &stored, 0)?;
                let batch = self.payload_batch(&index, |key, _| {
                    state.active.slot_of(key).and_then(|s| state.rows.get(s))
                })?;
                Segment::write_with_payload(&index, batch.as_ref().map(|(s, b)| (s, b)), &path)?;
            } else {
                Segment::write(&self.config.active_index()?, &path)?;
            }
        } else {
            let batch = self.payload_batch(&state.active, |_, slot| state.rows.get(slot))?;
            Segment::write_with_payload(&state.active, batch.as_ref().map(|(s, b)| (s, b)), &path)?;
        }
        let seg = Segment::open(&path)?;
        let mut sealed = state.sealed.clone();
        sealed.push(Arc::new(Sealed {
            id,
            file: file.clone(),
            seg,
            dead: RwLock::new(Arc::new(Dead::default())),
        }));
        let mut m = w.manifest.clone();
        m.next_segment_id = id + 1;
        m.segments.push(SegmentEntry {
            id,
            file,
            vectors: state.active.len() as u64,
        });
        m.wal_seq = w.next_seq - 1;
        self.commit(w, m, sealed, None, true)
    }

    /// Writes tombstones, bloom and manifest for the new segment list,
    /// publishes the new state, restarts the WAL, and removes the files
    /// the new manifest no longer names.
    fn commit(
        &self,
        w: &mut Writer,
        mut m: Manifest,
        sealed: Vec<Arc<Sealed>>,
        new_bloom: Option<Bloom>,
        sealed_active: bool,
    ) -> Result<()> {
        m.generation += 1;
        let tomb_name = format!("tomb-{:06}.bin", m.generation);
        write_tombstones(&self.dir.join(&tomb_name), &sealed)?;
        let bloom_name = format!("bloom-{:06}.bin", m.generation);
        // A grown chain costs one probe per filter on every miss: fold it
        // back into one filter (O(n), but only each time the collection
        // has grown fourfold, so O(1) per insert amortised).
        // A filter opened from a file that failed its check answers
        // "maybe" to everything: rebuild it rather than persist it.
        let new_bloom = match new_bloom {
            Some(b) => Some(b),
            None if !self.bloom.read().wait_checked() => {
                let active = self.snapshot().active.clone();
                Some(rebuild_bloom(
                    &self.config,
                    &sealed,
                    (!sealed_active).then_some(&*active),
                ))
            }
            None if sealed_active && self.bloom.read().filters() > 1 => {
                Some(rebuild_bloom(&self.config, &sealed, None))
            }
            None => None,
        };
        {
            let bytes = match &new_bloom {
                Some(b) => b.to_bytes(),
                None => self.bloom.read().to_bytes(),
            };
            write_durably(&self.dir.join(&bloom_name), &bytes)?;
        }
        m.tombstones = Some(tomb_name);
        m.bloom = Some(bloom_name);
        m.payload = manifest_fields(&self.schema.read());
        m.write(&self.dir)?; // the commit point
        {
            let mut st = self.state.write();
            let active = if sealed_active {
                Arc::new(self.config.active_index()?)
            } else {
                st.active.clone()
            };
            let rows = if sealed_active {
                Arc::default()
            } else {
                st.rows.clone()
            };
            *st = Arc::new(State {
                active,
                rows,
                sealed,
            });
            if let Some(b) = new_bloom {
                *self.bloom.write() = b;
            }
        }
        w.manifest = m;
        if sealed_active {
            let old = w.wal.path().to_path_buf();
            w.wal = Wal::create(&self.dir, w.next_seq)?;
            if old != w.wal.path() {
                let _ = std::fs::remove_file(&old);
            }
        }
        remove_leftovers(&self.dir, &w.manifest)?;
        sync_dir(&self.dir.join(MANIFEST))
    }

    /// Rewrites sealed segments without their dead vectors and merges
    /// small neighbours (up to `segment_size`), then rebuilds the bloom
    /// filter. Searches keep running on the old segments meanwhile; writes
    /// wait.
    pub fn compact(&self) -> Result<()> {
        let mut g = self.writer_guard("compact")?;
        let w = g.as_mut().ok_or(StoreError::ReadOnly { op: "compact" })?;
        let state = self.snapshot();
        let per = self.config.bytes_per_vector();
        let limit = self.config.segment_size;
        // Greedy groups of neighbouring segments that need rewriting
        // (dead or deleted vectors) or are small.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut cur: Vec<usize> = Vec::new();
        let mut cur_bytes = 0u64;
        for (i, s) in state.sealed.iter().enumerate() {
            let live = s.live_len() as u64;
            let dirty = s.seg.info().slots as usize != s.live_len();
            let small = live * per < limit / 2;
            if !(dirty || small) || (cur_bytes + live * per > limit && !cur.is_empty()) {
                if !cur.is_empty() {
                    groups.push(std::mem::take(&mut cur));
                }
                cur_bytes = 0;
            }
            if dirty || small {
                cur.push(i);
                cur_bytes += live * per;
            }
        }
        if !cur.is_empty() {
            groups.push(cur);
        }
        groups.retain(|g| {
            g.len() > 1 || {
                let s = &state.sealed[g[0]];
                s.seg.info().slots as usize != s.live_len()
            }
        });
        if groups.is_empty() {
            return Ok(());
        }
        let mut m = w.manifest.clone();
        let mut replaced: HashMap<usize, Option<Arc<Sealed>>> = HashMap::new();
        let stride = self.config.space.stride();
        for group in &groups {
            let index = self.config.sealed_index()?;
            let mut keys = Vec::new();
            let mut stored = Vec::new();
            let mut origin: HashMap<u64, (usize, u32)> = HashMap::new();
            for &i in group {
                let s = &state.sealed[i];
                let dead = s.dead();
                for slot in 0..s.seg.slot_count() as u32 {
                    let key = s.seg.key(slot);
                    if s.seg.is_live(slot) && !dead.keys.contains(&key) {
                        keys.push(key);
                        stored.extend_from_slice(&s.seg.vector(slot)[..stride]);
                        origin.insert(key, (i, slot));
                    }
                }
            }
            // An IVF group left with no live vector has nothing to train
            // on: it is written as an empty active-kind segment.
            let index = if keys.is_empty() && !index.is_trained() {
                self.config.active_index()?
            } else {
                index
            };
            index.upsert_encoded_batch(&keys, &stored, 0)?;
            let id = m.next_segment_id;
            m.next_segment_id += 1;
            let file = segment_file(id);
            let path = self.dir.join(&file);
            let schema = self.schema.read().clone();
            let payloads: HashMap<usize, Arc<SegmentPayload>> = group
                .iter()
                .filter_map(|&i| match state.sealed[i].seg.payload() {
                    Ok(Some(p)) => Some(Ok((i, p))),
                    Ok(None) => None,
                    Err(e) => Some(Err(e)),
                })
                .collect::<Result<_>>()?;
            let batch = self.payload_batch(&index, |key, _| {
                let (i, slot) = origin.get(&key)?;
                let row = payloads.get(i)?.row(&schema, *slot as usize);
                Some(row)
            })?;
            Segment::write_with_payload(&index, batch.as_ref().map(|(s, b)| (s, b)), &path)?;
            let seg = Segment::open(&path)?;
            replaced.insert(
                group[0],
                Some(Arc::new(Sealed {
                    id,
                    file,
                    seg,
                    dead: RwLock::new(Arc::new(Dead::default())),
                })),
            );
            for &i in &group[1..] {
                replaced.insert(i, None);
            }
        }
        let sealed: Vec<Arc<Sealed>> = state
            .sealed
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match replaced.get(&i) {
                Some(new) => new.clone(),
                None => Some(s.clone()),
            })
            .collect();
        m.segments = sealed
            .iter()
            .map(|s| SegmentEntry {
                id: s.id,
                file: s.file.clone(),
                vectors: s.live_len() as u64,
            })
            .collect();
        let bloom = rebuild_bloom(&self.config, &sealed, Some(&state.active));
        self.commit(w, m, sealed, Some(bloom), false)
    }

    /// The payload record batch for the segment `index` is written as:
    /// one row per slot (`row(key, slot)`), `None` when the collection has
    /// no payload columns.
    fn payload_batch(
        &self,
        index: &Index,
        row: impl Fn(u64, u32) -> Option<Row>,
    ) -> Result<Option<(Schema, arrow_array::RecordBatch)>> {
        let schema = self.schema.read().clone();
        if schema.is_empty() {
            return Ok(None);
        }
        let rows: Vec<Option<Row>> = {
            let view = index.view();
            (0..view.slots() as u32)
                .map(|slot| row(view.key(slot), slot))
                .collect()
        };
        let batch = payload::to_record_batch(&schema, rows.iter().map(|r| r.as_deref()))?;
        Ok(Some((schema, batch)))
    }

    /// Every segment of `st` with the slots a search or count may return:
    /// the caller's keys, the payload predicate and the dead set, ANDed.
    fn segments<'s>(
        &self,
        st: &'s State,
        keys: Option<&[u64]>,
        pred: Option<&Bound>,
    ) -> Result<Vec<Seg<'s>>> {
        let mut out = Vec::with_capacity(st.sealed.len() + 1);
        // The active segment: rows are evaluated in place (it is small and
        // changing; sealed segments use their payload indexes).
        {
            let active = &*st.active;
            let mut combined = keys.map(|k| active.filter_for_keys(k));
            if let Some(b) = pred {
                let live = active.view().live_slots();
                let f = st.rows.matching(b, live.len()).and(&live);
                combined = Some(match combined {
                    None => f,
                    Some(c) => c.and(&f),
                });
            }
            out.push(Seg {
                seg: active as &dyn IndexRead,
                live: active.len(),
                dead: None,
                allowed: combined.as_ref().map(Bitset::count),
                combined,
            });
        }
        for s in &st.sealed {
            let dead = s.dead();
            let mut combined: Option<Bitset> = keys.map(|k| s.seg.filter_for_keys(k));
            if let Some(b) = pred {
                let f: Option<Arc<Bitset>> = match s.seg.payload()? {
                    Some(p) => Some(p.eval_cached(b, || s.seg.live_slots()).map_err(|reason| {
                        StoreError::Corrupt {
                            file: s.seg.path().to_path_buf(),
                            offset: 0,
                            reason,
                        }
                    })?),
                    // No payload in this segment: every row is null, so
                    // the predicate is the same for all of them.
                    None if b.matches(&[]) => None,
                    None => Some(Arc::new(Bitset::new(s.seg.slot_count()))),
                };
                if let Some(f) = f {
                    combined = Some(match combined {
                        None => (*f).clone(),
                        Some(c) => c.and(&f),
                    });
                }
            }
            if let (Some(c), Some(a)) = (combined.as_mut(), dead.allowed.as_ref()) {
                *c = c.and(a);
            }
            out.push(Seg {
                seg: &s.seg as &dyn IndexRead,
                live: s.live_len(),
                allowed: combined.as_ref().map(Bitset::count),
                combined,
                dead: Some(dead),
            });
        }
        Ok(out)
    }

    /// Live vectors whose payload passes `pred` (all live vectors for
    /// `None`).
    pub fn count(&self, pred: Option<&Bound>) -> Result<usize> {
        let st = self.snapshot();
        let segs = self.segments(&st, None, pred)?;
        Ok(segs.iter().map(|s| s.allowed.unwrap_or(s.live)).sum())
    }

    /// Keys of the live vectors whose payload passes `pred`, segment by
    /// segment (active first).
    pub fn keys_where(&self, pred: Option<&Bound>) -> Result<Vec<u64>> {
        let Some(pred) = pred else {
            return Ok(self.keys().collect());
        };
        let st = self.snapshot();
        let segs = self.segments(&st, None, Some(pred))?;
        let mut out = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            if let Some(c) = &s.combined {
                if i == 0 {
                    let view = st.active.view();
                    out.extend(c.iter().map(|slot| view.key(slot as u32)));
                } else {
                    let seg = &st.sealed[i - 1].seg;
                    out.extend(
                        c.iter()
                            .filter(|&slot| seg.is_live(slot as u32))
                            .map(|slot| seg.key(slot as u32)),
                    );
                }
            }
        }
        Ok(out)
    }

    /// Deletes every live vector whose payload passes `pred`; returns how
    /// many. The matching keys are logged as removes like [`remove`].
    ///
    /// [`remove`]: Collection::remove
    pub fn remove_where(&self, pred: &Bound) -> Result<usize> {
        // Hold the writer lock so that the keys matched are the keys
        // removed (no write can slip in between).
        let mut g = self.writer_guard("remove")?;
        let w = g.as_mut().ok_or(StoreError::ReadOnly { op: "remove" })?;
        let keys = self.keys_where(Some(pred))?;
        if !keys.is_empty() {
            self.write(w, Encoded::default(), &keys)?;
        }
        Ok(keys.len())
    }

    /// The payload rows of `keys` (laid out by [`Collection::schema`]);
    /// `None` for a key that is not live, an empty row for a key without
    /// payload.
    pub fn payload_rows(&self, keys: &[u64]) -> Result<Vec<Option<Row>>> {
        let st = self.snapshot();
        let schema = self.schema.read().clone();
        let bloom = self.bloom.read();
        let mut out = Vec::with_capacity(keys.len());
        for &k in keys {
            if !bloom.may_contain(k) {
                out.push(None);
                continue;
            }
            if let Some(slot) = st.active.slot_of(k) {
                out.push(Some(st.rows.get(slot).unwrap_or_default()));
                continue;
            }
            match st.sealed_holder(k) {
                None => out.push(None),
                Some(s) => {
                    let slot = s.seg.slot_of(k);
                    let row = match (s.seg.payload()?, slot) {
                        (Some(p), Some(slot)) => p.row(&schema, slot as usize),
                        _ => Row::default(),
                    };
                    out.push(Some(row));
                }
            }
        }
        Ok(out)
    }

    /// The payload of `keys` as an Arrow record batch, one row per key
    /// (all null where a key is missing), restricted to `columns` when
    /// given (an unknown column is [`PayloadError::UnknownField`]).
    pub fn payload_table(
        &self,
        keys: &[u64],
        columns: Option<&[String]>,
    ) -> Result<arrow_array::RecordBatch> {
        let schema = self.schema.read().clone();
        let rows = self.payload_rows(keys)?;
        let (out_schema, picks): (Schema, Vec<usize>) = match columns {
            None => (schema.clone(), (0..schema.len()).collect()),
            Some(cols) => {
                let mut picks = Vec::with_capacity(cols.len());
                let mut fields = Vec::with_capacity(cols.len());
                for c in cols {
                    let (i, ty) = schema.field(c)?;
                    picks.push(i);
                    fields.push(Field {
                        name: c.clone(),
                        ty,
                    });
                }
                (Schema::new(fields)?, picks)
            }
        };
        let picked: Vec<Option<Vec<Value>>> = rows
            .into_iter()
            .map(|r| {
                r.map(|r| {
                    picks
                        .iter()
                        .map(|&i| r.get(i).cloned().unwrap_or(Value::Null))
                        .collect()
                })
            })
            .collect();
        Ok(payload::to_record_batch(
            &out_schema,
            picked.iter().map(|r| r.as_deref()),
        )?)
    }

    /// Live vectors.
    pub fn len(&self) -> usize {
        let st = self.snapshot();
        st.active.len() + st.sealed.iter().map(|s| s.live_len()).sum::<usize>()
    }

    /// Whether no vector is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` is live: bloom filter, then the active segment, then
    /// sealed segments newest first.
    pub fn contains(&self, key: u64) -> bool {
        if !self.bloom.read().may_contain(key) {
            return false;
        }
        let st = self.snapshot();
        st.active.contains(key) || st.sealed_holder(key).is_some()
    }

    /// The stored bytes of `key`'s vector.
    pub fn get_raw(&self, key: u64) -> Option<Vec<u8>> {
        if !self.bloom.read().may_contain(key) {
            return None;
        }
        let st = self.snapshot();
        st.active
            .get_raw(key)
            .or_else(|| st.sealed_holder(key).and_then(|s| s.seg.get_raw(key)))
    }

    /// The k nearest live vectors to each query, over every segment (in
    /// parallel), merged by distance with ties broken by key.
    pub fn search(
        &self,
        queries: &[VectorRef<'_>],
        k: usize,
        opts: &CollectionSearch<'_>,
    ) -> Result<Vec<Vec<Neighbor>>> {
        let st = self.snapshot();
        let total = st.active.len() + st.sealed.iter().map(|s| s.live_len()).sum::<usize>();
        check_k(k, total)?;
        // Segments with nothing to return are dropped up front, so a query
        // only fans out over threads when two or more segments can answer.
        let segs: Vec<Seg<'_>> = self
            .segments(&st, opts.filter, opts.predicate)?
            .into_iter()
            .filter(|s| s.live > 0 && s.allowed != Some(0))
            .collect();
        let one = |q: VectorRef<'_>, parallel: bool| -> Result<Vec<Neighbor>> {
            let per_seg = |s: &Seg<'_>| {
                let kk = k
                    .min(s.live)
                    .min(s.seg.len())
                    .min(s.allowed.unwrap_or(usize::MAX));
                if kk == 0 {
                    return Ok(Vec::new());
                }
                let o = SearchOptions {
                    ef: opts.ef,
                    filter: s.filter(),
                    exact: opts.exact,
                    nprobe: opts.nprobe,
                    refine: opts.refine,
                };
                let found = s.seg.search(q, kk, &o)?;
                if found.len() < kk && !opts.exact && s.combined.is_some() {
                    // A filtered walk (or probe) that came back short while
                    // enough vectors match: scan the allowed slots exactly,
                    // so a search never returns fewer than k matches when
                    // k exist.
                    return s.seg.search(q, kk, &SearchOptions { exact: true, ..o });
                }
                Ok(found)
            };
            let parts: Vec<Vec<Neighbor>> = if parallel {
                segs.par_iter()
                    .map(per_seg)
                    .collect::<Result<_, IndexError>>()?
            } else {
                segs.iter()
                    .map(per_seg)
                    .collect::<Result<_, IndexError>>()?
            };
            let mut all: Vec<Neighbor> = parts.into_iter().flatten().collect();
            all.sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.key.cmp(&b.key)));
            let mut seen = HashSet::with_capacity(k * 2);
            all.retain(|n| seen.insert(n.key));
            if let Some(r) = opts.radius {
                all.retain(|n| n.distance <= r);
            }
            all.truncate(k);
            Ok(all)
        };
        if queries.len() == 1 {
            Ok(vec![one(queries[0], segs.len() > 1)?])
        } else {
            queries
                .par_iter()
                .enumerate()
                .map(|(i, q)| {
                    one(*q, false).map_err(|e| match e {
                        StoreError::Index(
                            e @ (IndexError::Dimensions { .. }
                            | IndexError::NotFinite { .. }
                            | IndexError::WrongInputKind { .. }
                            | IndexError::Kernel(_)),
                        ) => row_err(i, e),
                        e => e,
                    })
                })
                .collect()
        }
    }

    /// Every live key, segment by segment, without loading the vectors.
    pub fn keys(&self) -> impl Iterator<Item = u64> + Send + 'static {
        self.items_inner(false).map(|(k, _)| k)
    }

    /// Every live (key, stored vector bytes), read lazily segment by
    /// segment.
    pub fn items(&self) -> impl Iterator<Item = (u64, Vec<u8>)> + Send + 'static {
        self.items_inner(true)
    }

    fn items_inner(&self, vectors: bool) -> impl Iterator<Item = (u64, Vec<u8>)> + Send + 'static {
        let st = self.snapshot();
        let vb = self.config.space.vector_bytes();
        let active = st.active.clone();
        let active_slots = active.slot_count() as u32;
        let active_iter = (0..active_slots).filter_map(move |slot| {
            let view = active.view();
            if !view.is_live(slot) {
                return None;
            }
            let key = view.key(slot);
            let v = if vectors {
                view.vector(slot)[..vb].to_vec()
            } else {
                Vec::new()
            };
            Some((key, v))
        });
        let sealed = st.sealed.clone();
        let sealed_iter = sealed.into_iter().flat_map(move |s| {
            let dead = s.dead();
            (0..s.seg.slot_count() as u32).filter_map(move |slot| {
                if !s.seg.is_live(slot) {
                    return None;
                }
                let key = s.seg.key(slot);
                if dead.keys.contains(&key) {
                    return None;
                }
                let v = if vectors {
                    s.seg.vector(slot)[..vb].to_vec()
                } else {
                    Vec::new()
                };
                Some((key, v))
            })
        });
        active_iter.chain(sealed_iter)
    }

    /// Segment, vector, tombstone, byte and bloom figures.
    pub fn stats(&self) -> CollectionStats {
        let st = self.snapshot();
        let bloom = self.bloom.read();
        let (mut bytes_on_disk, mut wal_bytes) = (0, 0);
        for e in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let len = e.metadata().map_or(0, |m| m.len());
            bytes_on_disk += len;
            if e.file_name().to_str().and_then(wal::parse_name).is_some() {
                wal_bytes += len;
            }
        }
        let wal_seq = self
            .writer
            .lock()
            .as_ref()
            .map_or(0, |w| w.next_seq.saturating_sub(1));
        CollectionStats {
            segments: st.sealed.len(),
            vectors: st.active.len() + st.sealed.iter().map(|s| s.live_len()).sum::<usize>(),
            active_vectors: st.active.len(),
            tombstones: st.sealed.iter().map(|s| s.dead().keys.len()).sum(),
            bytes_on_disk,
            wal_bytes,
            bytes_in_memory: (st.active.memory_usage() + bloom.memory_bytes()) as u64,
            bytes_mapped: st.sealed.iter().map(|s| s.seg.info().file_len).sum(),
            bloom_fill: bloom.fill(),
            bloom_filters: bloom.filters(),
            wal_seq,
        }
    }

    /// Flushes the WAL and releases the writer lock (also done on drop).
    pub fn close(self) -> Result<()> {
        self.flush()
    }
}

impl Drop for Collection {
    fn drop(&mut self) {
        self.flusher = None;
        if let Some(w) = self.writer.lock().as_mut() {
            let _ = w.wal.sync();
        }
    }
}

fn check_lengths(keys: &[u64], vectors: &[VectorRef<'_>]) -> Result<()> {
    if keys.len() != vectors.len() {
        return Err(StoreError::Index(IndexError::InvalidParameter {
            name: "keys",
            value: keys.len().to_string(),
            reason: "must have one key per vector",
        }));
    }
    Ok(())
}

/// A bloom filter over the live keys of `sealed`, sized for four times
/// their number (so it stays one filter, one probe, while the collection
/// grows fourfold).
fn rebuild_bloom(
    config: &CollectionConfig,
    sealed: &[Arc<Sealed>],
    active: Option<&Index>,
) -> Bloom {
    let live: u64 = sealed.iter().map(|s| s.live_len() as u64).sum::<u64>()
        + active.map_or(0, |a| a.len() as u64);
    let mut bloom = Bloom::new(bloom_capacity(config).max(live * 4), 0.01);
    if let Some(a) = active {
        let view = a.view();
        for slot in 0..view.slots() as u32 {
            if view.is_live(slot) {
                bloom.insert(view.key(slot));
            }
        }
    }
    for s in sealed {
        let dead = s.dead();
        for slot in 0..s.seg.slot_count() as u32 {
            let key = s.seg.key(slot);
            if s.seg.is_live(slot) && !dead.keys.contains(&key) {
                bloom.insert(key);
            }
        }
    }
    bloom
}

/// Removes `*.tmp` files and segment / tombstone / bloom / WAL files the
/// manifest does not need (leftovers of an interrupted seal or compaction).
fn remove_leftovers(dir: &Path, m: &Manifest) -> Result<()> {
    let keep: HashSet<&str> = m
        .segments
        .iter()
        .map(|s| s.file.as_str())
        .chain(m.tombstones.as_deref())
        .chain(m.bloom.as_deref())
        .collect();
    let rd = std::fs::read_dir(dir).map_err(io("list", dir))?;
    let mut wals: Vec<(u64, PathBuf)> = Vec::new();
    for e in rd.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        let ours = name.ends_with(".tmp")
            || ((name.starts_with("seg-") && name.ends_with(".sgt"))
                || (name.starts_with("tomb-") && name.ends_with(".bin"))
                || (name.starts_with("bloom-") && name.ends_with(".bin")))
                && !keep.contains(name.as_str());
        if ours {
            std::fs::remove_file(e.path()).map_err(io("remove", &e.path()))?;
        } else if let Some(first) = wal::parse_name(&name) {
            wals.push((first, e.path()));
        }
    }
    // A log is obsolete when the next one starts at or before wal_seq + 1:
    // all its records are then folded into segments.
    wals.sort();
    for i in 0..wals.len() {
        let next_first = wals.get(i + 1).map(|w| w.0);
        if next_first.is_some_and(|n| n <= m.wal_seq + 1) {
            std::fs::remove_file(&wals[i].1).map_err(io("remove", &wals[i].1))?;
        }
    }
    Ok(())
}
