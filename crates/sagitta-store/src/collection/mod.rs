//! A [`Collection`]: one logical index of any size on a directory, stored
//! as a log-structured set of segments with a background optimizer.
//!
//! ```text
//! DIR/
//!   MANIFEST               the commit point: config, sealed segments, the
//!                          tombstone and bloom files, the last logged seq
//!                          folded into segments (JSON + CRC32C line)
//!   LOCK                   held (flock) by the one writer
//!   seg-000001.sgt ...     sealed, immutable, memory-mapped segments
//!   tomb-000007.bin        keys deleted from sealed segments
//!   bloom-000007.bin       scalable bloom filter over every key (or
//!                          every key but the segments the MANIFEST
//!                          lists as missing: it is rewritten only when
//!                          those pass an eighth of the rows, and at close)
//!   wal-000...0123.log     write-ahead logs not yet folded into segments
//! ```
//!
//! **Writes** are validated and encoded whole, logged (fsynced per the
//! [`Durability`] policy), copied into the mutable part (a Flat index:
//! no graph work), then acknowledged. A search right after sees the row
//! (the mutable part is searched exactly).
//!
//! **Freeze.** When the mutable part passes `segment_size` (or has been
//! idle for `idle_seal_ms`, or at `close()` / `optimize()`), the writer
//! swaps in an empty one and starts a new log file; the old part is frozen
//! (still searched, in memory) until the flush thread writes it as a Flat
//! segment file and commits it (the manifest's `wal_seq` then covers its
//! records and its log is removed). Replay after a crash is therefore
//! bounded by about one `segment_size` of rows (plus frozen parts not yet
//! flushed, at most [`MAX_FROZEN`]).
//!
//! **Optimizer.** A second background thread (its builds on a niced pool
//! of `optimizer_threads`) follows a pure policy ([`optimizer::plan`]):
//! builds the HNSW (or IVF) index of Flat segments, importing the graph of
//! the largest built segment with room so only new rows are linked; merges
//! small segments up to `max_segment_size`; rewrites segments with many
//! dead rows. Each result is written as a new segment file, then
//! committed by a manifest rename, the part list swapped under the apply
//! lock (not the writer lock: a long write does not hold up a flush). Readers hold an
//! `Arc` snapshot of the part list and never wait.
//!
//! **Open** reads the manifest, maps the segments (in parallel), maps the
//! bloom file (adding the keys of segments it lacks, if any), loads the
//! tombstone file and replays the logs written since `wal_seq` into the
//! mutable part: after `close()` nothing grows with the number of sealed
//! vectors and nothing is left to replay.
//!
//! Each key has at most one live version. Replacing or deleting a key held
//! by an immutable part records it in that part's dead set (persisted in
//! the tombstone file at the next commit, in the WAL until then), which
//! searches turn into a filter bitmap.

mod active;
mod commit;
pub(crate) mod config;
mod embed;
mod export;
mod files;
mod ids;
mod lookup;
pub(crate) mod optimizer;
mod part;
mod parts;
#[doc(hidden)]
pub use commit::set_small_bloom_bytes;
pub use export::{Export, ExportFile, ExportKind};
pub use parts::{PartEvent, PartSummary};
mod scan;
mod search;
pub use ids::IdWrite;
pub use scan::{Scan, ScanBatch};
pub use search::SearchRows;
mod text;
mod update;
mod write;

pub use config::{
    codes_named, default_codes, CollectionConfig, Durability, DEFAULT_IDLE_SEAL_MS,
    DEFAULT_MAX_SEGMENT_SIZE, DEFAULT_SEGMENT_SIZE, MIN_SEGMENT_SIZE,
};
pub use optimizer::OptimizerStats;
pub use text::TextHit;

use crate::bloom::Bloom;
use crate::error::{io, Result, StoreError};
use crate::payload::{Field, FieldType, Schema};
use crate::segment::Segment;
use crate::wal::{self, Wal};
use active::ActiveRows;
use files::{Manifest, LOCK, MANIFEST, MANIFEST_FORMAT};
use parking_lot::{Mutex, RwLock};
use part::{Body, Part};
use sagitta_index::{Index, IndexRead};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

/// Frozen parts allowed in memory at once. From one below it writes are
/// paced ([`pace_delay`]); past it the writer stops freezing; once the
/// mutable part is full too, a write waits for the
/// flush (at most [`STALL_TIMEOUT`] without one finishing) or, when the
/// flush is failing (a full disk), is refused with
/// [`StoreError::Stalled`]: memory stays bounded by about
/// `MAX_FROZEN + 1` parts plus the batches in flight.
pub const MAX_FROZEN: usize = 4;

/// How long a write waits for a flush to free a frozen part before it is
/// refused ([`StoreError::Stalled`]); each finished flush starts it again.
pub const STALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The longest a write is paced (see [`pace_delay`]): a larger batch's
/// rest, if any, is the hard limit's to wait for.
pub const PACE_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a write of `rows` waits before it is admitted when `frozen`
/// parts wait for a flush that has lately written `flush_rows_per_s`:
/// nothing while two or more frozen slots are free; with one left (or
/// none), the batch's own share of the flush's time, at most
/// [`PACE_MAX`]. Writers then slow towards the flush's speed together
/// rather than one of them waiting out a whole flush at [`MAX_FROZEN`]
/// (RocksDB delays writes before its stop the same way). A 1M-row load
/// flush-bound behind a busy machine: slowest batch 5.2-5.6 s against
/// 8.3-8.6 s unpaced, the load 3-7% longer (journal, 2026-11-30). Pacing
/// from two slots left as well cut the slowest batch only to 5.0 s and
/// cost 13% of the load's speed.
pub(crate) fn pace_delay(
    frozen: usize,
    rows: usize,
    flush_rows_per_s: Option<f64>,
) -> std::time::Duration {
    match flush_rows_per_s {
        Some(rate) if frozen + 1 >= MAX_FROZEN && rows > 0 && rate > 0.0 => {
            std::time::Duration::from_secs_f64((rows as f64 / rate).min(PACE_MAX.as_secs_f64()))
        }
        _ => std::time::Duration::ZERO,
    }
}

#[derive(Debug)]
pub(crate) struct State {
    /// The mutable part (Flat).
    active: Arc<Index>,
    /// Payload rows of `active`.
    rows: Arc<ActiveRows>,
    /// Immutable parts: sealed segments (by id), then frozen parts (oldest
    /// first).
    parts: Vec<Arc<Part>>,
}

impl State {
    /// The immutable part holding a live `key`.
    fn holder(&self, key: u64) -> Option<&Arc<Part>> {
        self.prefetch_cold_key(key);
        self.parts.iter().rev().find(|s| s.has_live(key))
    }

    /// Hints the reads of a lookup of `key` in every segment not searched
    /// yet, in two rounds whose reads each go out together: the ends of
    /// every cold key index, then the records near `key` in each (see
    /// [`Segment::hint_key_ends`]).
    fn prefetch_cold_key(&self, key: u64) {
        if self.parts.len() > 1 {
            let cold: Vec<&Segment> = (self.parts.iter().filter_map(|p| p.segment()))
                .filter(|s| s.hint_key_ends())
                .collect();
            for seg in cold {
                seg.hint_key_near(key);
            }
        }
    }

    fn frozen(&self) -> impl Iterator<Item = &Arc<Part>> {
        self.parts.iter().filter(|p| p.is_frozen())
    }

    fn live(&self) -> usize {
        self.active.len() + self.parts.iter().map(|s| s.live_len()).sum::<usize>()
    }
}

#[derive(Debug)]
pub(crate) struct Writer {
    wal: Wal,
    next_seq: u64,
    /// The records of the write in progress, encoded before they are
    /// appended; kept between writes so a large batch neither grows a
    /// fresh buffer nor faults in fresh pages each time.
    log_buf: Vec<u8>,
}

/// Largest log buffer kept between writes (one 64 MiB part's worth at
/// most is written at once).
const KEEP_LOG_BUF: usize = 64 << 20;

/// The sealed parts `manifest` names, each segment mapped and its header
/// checked (several at once: on a cold open each waits for disk reads),
/// and in the collection's space.
fn open_parts(
    dir: &Path,
    manifest: &Manifest,
    config: &CollectionConfig,
) -> Result<Vec<Arc<Part>>> {
    files::on_io_threads(&manifest.segments, |e| {
        let seg = Segment::open(&dir.join(&e.file))?;
        let space = seg.info().space;
        if space != config.space && space != config.built_space() {
            return Err(StoreError::Corrupt {
                file: dir.join(&e.file),
                offset: 0,
                reason: "segment space differs from the collection's".into(),
            });
        }
        Ok(Arc::new(Part::new(
            e.id,
            Body::Sealed {
                file: e.file.clone(),
                seg,
            },
        )))
    })
}

/// The config a manifest records (read by the one parser of collection
/// options), or why it cannot be one.
fn manifest_config(dir: &Path, manifest: &Manifest) -> Result<CollectionConfig> {
    let mut config = crate::request::CollectionOptions::from(&manifest.config)
        .to_config()
        .map_err(|e| StoreError::Corrupt {
            file: dir.join(MANIFEST),
            offset: 0,
            reason: format!("invalid config in manifest: {e}"),
        })?;
    // No id type recorded: open until the first write by ids.
    config.id_type_open =
        manifest.config.id_type.is_none() && config.id_type == crate::ids::IdType::UInt64;
    Ok(config)
}

/// A collection's manifest, read without opening it
/// ([`Collection::metadata`]).
#[derive(Debug, Clone)]
pub struct CollectionMetadata {
    /// The configuration it was created with.
    pub config: CollectionConfig,
    /// Manifest format version.
    pub format: u32,
    /// Commits so far.
    pub generation: u64,
    /// Sealed segment files.
    pub segments: usize,
    /// Live vectors in the sealed segments at the last commit.
    pub sealed_vectors: u64,
    /// Every logged write up to this sequence number is in the segments.
    pub wal_seq: u64,
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

/// Numbers describing a collection.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollectionStats {
    /// Immutable segments: sealed files, and frozen parts waiting in
    /// memory to be flushed.
    pub segments: usize,
    /// Frozen parts waiting in memory to be flushed (part of `segments`).
    pub frozen_segments: usize,
    /// Live vectors (all segments).
    pub vectors: usize,
    /// Live vectors in the mutable part.
    pub active_vectors: usize,
    /// Live vectors not yet in their index (the mutable part, frozen parts
    /// and segments waiting for the optimizer's build): searched exactly.
    pub unindexed_vectors: usize,
    /// Dead keys in immutable segments not yet compacted away.
    pub tombstones: usize,
    /// Bytes of all files in the directory.
    pub bytes_on_disk: u64,
    /// Bytes of write-ahead log files (part of `bytes_on_disk`).
    pub wal_bytes: u64,
    /// Bytes held in memory: the mutable and frozen parts and the bloom
    /// filter (mapped segment pages are the OS's to keep or drop).
    pub bytes_in_memory: u64,
    /// Bytes of mapped segment files.
    pub bytes_mapped: u64,
    /// Fraction of the newest bloom filter's capacity in use.
    pub bloom_fill: f64,
    /// Filters in the bloom chain.
    pub bloom_filters: usize,
    /// Last WAL sequence number written.
    pub wal_seq: u64,
    /// Background work: current task, totals, errors.
    pub optimizer: OptimizerStats,
}

/// The shared inside of a collection (the background threads hold it too).
#[derive(Debug)]
pub(crate) struct Inner {
    dir: PathBuf,
    mode: OpenMode,
    config: CollectionConfig,
    state: RwLock<Arc<State>>,
    schema: RwLock<Schema>,
    bloom: RwLock<Bloom>,
    writer: Mutex<Option<Writer>>,
    /// Held while a write finds the older versions of its keys, kills
    /// them and makes its rows visible (after it is logged), and while a
    /// commit carries kills and swaps the part list: a write never kills
    /// in a part a commit has just replaced. Not the writer lock, which a
    /// write holds from its checks through its log sync: a flush waiting
    /// for that to commit a segment let one segment through per write
    /// (a bulk load of 1M-key batches slept a third of its time in
    /// pacing while the flush thread waited). Taken after the writer
    /// lock and the manifest lock, never before them.
    apply: Mutex<()>,
    /// A commit found the bloom filter too large to fold inline and half
    /// full or grown into a chain: the bloom thread folds it
    /// ([`Inner::fold_bloom`]).
    bloom_fold: AtomicBool,
    /// The filter was folded since the last bloom file was written: the
    /// next commit writes it whole.
    bloom_folded: AtomicBool,
    /// What a read may see changes only under this lock's write side: a
    /// write makes its new rows visible, retires the rows they replace
    /// and kills the keys it removes all at once ([`Inner::publish`]),
    /// and a read takes its snapshot of every part under the read side
    /// ([`Inner::view`], lookups), so it sees each write whole or not at
    /// all. Held for no I/O and no index insert, only for those flips.
    visible: RwLock<()>,
    /// The manifest last committed; its lock serialises commits (taken
    /// before the writer lock, never while holding it).
    manifest: Mutex<Manifest>,
    /// Next segment id to hand out (the manifest records it at commits).
    next_id: AtomicU64,
    /// `ef_construction` of the graphs built from now on: the config's,
    /// unless [`Collection::set_expansion_add`] changed it since open.
    build_ef: AtomicUsize,
    /// The id type, and whether it is still open (`ids::pack`; see
    /// [`CollectionConfig::id_type_open`]): `config.id_type` until the
    /// first write by ids fixes an open one.
    id_type: AtomicU8,
    /// Milliseconds (since `epoch`) of the last write.
    last_write: AtomicU64,
    /// Writes begun and not finished ([`Inner::quiet_ms`]).
    writing: AtomicUsize,
    epoch: std::time::Instant,
    opt: optimizer::Shared,
    /// The latest changes to the part list (seals, builds, merges,
    /// compactions) since open, oldest first.
    history: Mutex<std::collections::VecDeque<PartEvent>>,
    _lock: Option<File>,
}

/// A durable collection on a directory (see the module docs).
#[derive(Debug)]
pub struct Collection {
    inner: Arc<Inner>,
    background: Option<optimizer::Background>,
}

impl Collection {
    /// Creates a collection in `dir` (created if missing; must not already
    /// hold one) and opens it for writing.
    pub fn create(dir: &Path, config: CollectionConfig) -> Result<Collection> {
        config.validate()?;
        if let Some(m) = &config.embed_model {
            embed::check_model(m, config.space.dims)?;
            embed::preload(m);
        }
        std::fs::create_dir_all(dir).map_err(io("create dir", dir))?;
        if dir.join(MANIFEST).exists() {
            return Err(StoreError::AlreadyExists {
                dir: dir.to_path_buf(),
            });
        }
        let m = Manifest {
            format: MANIFEST_FORMAT,
            generation: 1,
            config: config::ConfigFile::from_config(&config),
            segments: Vec::new(),
            tombstones: None,
            bloom: None,
            bloom_partial: None,
            wal_seq: 0,
            next_segment_id: 1,
            payload: Vec::new(),
        };
        let mut m = m;
        if !config.text.is_empty() {
            let fields: Vec<Field> = config
                .text
                .iter()
                .map(|f| Field {
                    name: f.name.clone(),
                    ty: FieldType::String,
                })
                .collect();
            m.set_schema(&Schema::new(fields)?);
        }
        m.write(dir)?;
        Collection::open(dir, OpenMode::ReadWrite)
    }

    /// Whether `dir` holds a collection (it has a manifest; whether that
    /// manifest is readable is for [`Collection::open`] to say).
    pub fn exists(dir: &Path) -> bool {
        dir.join(MANIFEST).is_file()
    }

    /// Opens the collection in `dir`: reads the manifest, maps the sealed
    /// segments (in parallel), loads the bloom filter and tombstones, and
    /// replays the logs written since the last flush into the mutable
    /// part (nothing after a `close()`). Nothing here grows with the
    /// number of sealed vectors. A writer also removes leftovers of
    /// interrupted background work, cuts a torn log tail, and starts the
    /// background threads.
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

    /// What the manifest in `dir` says, without opening the collection
    /// (no lock, no mapping, no replay): the config, the sealed segments
    /// and the vectors they held when last committed (the rows still in
    /// the logs are not counted).
    pub fn metadata(dir: &Path) -> Result<CollectionMetadata> {
        let manifest = Manifest::read(dir)?;
        let config = manifest_config(dir, &manifest)?;
        Ok(CollectionMetadata {
            config,
            format: manifest.format,
            generation: manifest.generation,
            segments: manifest.segments.len(),
            sealed_vectors: manifest.segments.iter().map(|s| s.vectors).sum(),
            wal_seq: manifest.wal_seq,
        })
    }

    fn open_once(dir: &Path, mode: OpenMode) -> Result<Collection> {
        // Nothing is created (a writer's lock) or removed before this build
        // knows it reads every file: the segments are mapped and their
        // headers checked, and the other files' versions read, first. An
        // older build refusing a newer directory leaves it byte for byte as
        // it was. Readers refuse the same files (a newer bloom filter too,
        // which they would otherwise rebuild in memory).
        let mut manifest = Manifest::read(dir)?;
        let mut config = manifest_config(dir, &manifest)?;
        let mut parts = open_parts(dir, &manifest, &config)?;
        files::check_versions(dir, &manifest)?;
        let lock = match mode {
            OpenMode::ReadWrite => Some(take_lock(dir)?),
            OpenMode::ReadOnly => None,
        };
        if lock.is_some() {
            // A writer that closed between the first read and the lock
            // may have committed: what the lock now guards is read again.
            let now = Manifest::read(dir)?;
            if now.generation != manifest.generation {
                config = manifest_config(dir, &now)?;
                parts = open_parts(dir, &now, &config)?;
                files::check_versions(dir, &now)?;
                manifest = now;
            }
        }
        if let Some(m) = &config.embed_model {
            embed::check_model(m, config.space.dims)?;
            embed::preload(m);
        }
        if let Some(t) = &manifest.tombstones {
            let dead = files::read_tombstones(&dir.join(t))?;
            for s in &parts {
                if let Some(keys) = dead.get(&s.id) {
                    s.kill(keys);
                }
            }
        }
        let bloom = match manifest.bloom_file().map(|b| Bloom::open(&dir.join(b))) {
            Some(Ok(mut b)) => {
                // The keys of segments written since the file was.
                let missing: std::collections::HashSet<u64> =
                    manifest.bloom_missing().iter().copied().collect();
                for p in parts.iter().filter(|p| missing.contains(&p.id)) {
                    p.for_each_live(|_, key, _| b.insert(key));
                }
                b
            }
            _ => commit::rebuild_bloom(&config, &parts, None),
        };
        let schema = manifest.schema(dir)?;
        if manifest.config.id_type.is_none() && schema.field(crate::ids::STRING_ID_FIELD).is_ok() {
            // Written before id types, by a server that kept string ids in
            // `_id`.
            config.id_type = crate::ids::IdType::String;
        }
        let build_ef = AtomicUsize::new(config.hnsw.ef_construction);
        let id_open =
            manifest.config.id_type.is_none() && config.id_type == crate::ids::IdType::UInt64;
        config.id_type_open = id_open;
        let id_type = AtomicU8::new(ids::pack(config.id_type, id_open));
        let inner = Inner {
            dir: dir.to_path_buf(),
            mode,
            state: RwLock::new(Arc::new(State {
                active: Arc::new(config.active_index()?),
                rows: Arc::new(ActiveRows::new(&config.text)),
                parts,
            })),
            config,
            schema: RwLock::new(schema),
            bloom: RwLock::new(bloom),
            writer: Mutex::new(None),
            apply: Mutex::new(()),
            bloom_fold: AtomicBool::new(false),
            bloom_folded: AtomicBool::new(false),
            visible: RwLock::new(()),
            manifest: Mutex::new(manifest.clone()),
            next_id: AtomicU64::new(manifest.next_segment_id),
            build_ef,
            id_type,
            last_write: AtomicU64::new(0),
            writing: AtomicUsize::new(0),
            epoch: std::time::Instant::now(),
            opt: optimizer::Shared::default(),
            history: Mutex::default(),
            _lock: lock,
        };
        let replayed = inner.replay(manifest.wal_seq)?;
        let inner = Arc::new(inner);
        let mut background = None;
        if mode == OpenMode::ReadWrite {
            // Every file is read: only now does the writer change the
            // directory (leftovers of interrupted work, a log never
            // completed, a torn log tail).
            files::remove_leftovers(dir, &manifest)?;
            for path in &replayed.incomplete {
                crate::fault::remove(path).map_err(crate::error::io("remove", path))?;
            }
            let next_seq = replayed.last_seq.max(manifest.wal_seq) + 1;
            let wal = match replayed.tail {
                Some((path, valid_len)) => {
                    Wal::open_append(&path, valid_len, inner.config.durability.unsynced())?
                }
                None => Wal::create(dir, next_seq, inner.config.durability.unsynced())?,
            };
            *inner.writer.lock() = Some(Writer {
                wal,
                next_seq,
                log_buf: Vec::new(),
            });
            background = Some(optimizer::Background::start(&inner));
        }
        Ok(Collection { inner, background })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The settings the collection was created with.
    pub fn config(&self) -> &CollectionConfig {
        &self.inner.config
    }

    /// `ef_construction` of the graphs the optimizer builds from now on
    /// (the config's unless [`Collection::set_expansion_add`] changed it).
    pub fn expansion_add(&self) -> usize {
        self.inner.build_ef.load(Ordering::Relaxed)
    }

    /// Sets `ef_construction` for the graphs this handle's optimizer builds
    /// from now on (usearch's `expansion_add`). Built segments keep the
    /// graphs they have (each records the value it was built with); the
    /// value is not persisted: a reopen takes the configured one again.
    /// Errors: a read-only handle, a value outside 1..=65536.
    pub fn set_expansion_add(&self, ef: usize) -> Result<()> {
        self.inner.writable("set_expansion_add")?;
        // The index's own check of ef_construction's range.
        sagitta_index::HnswParams {
            ef_construction: ef,
            ..self.inner.config.hnsw
        }
        .validate()?;
        self.inner.build_ef.store(ef, Ordering::Relaxed);
        Ok(())
    }

    /// How the collection was opened.
    pub fn mode(&self) -> OpenMode {
        self.inner.mode
    }

    /// The payload schema (columns in the order they appeared).
    pub fn schema(&self) -> Schema {
        self.inner.schema.read().clone()
    }

    /// Makes every acknowledged write durable now (fsync of the WAL).
    pub fn flush(&self) -> Result<()> {
        if self.inner.mode == OpenMode::ReadOnly {
            return Ok(());
        }
        if let Some(w) = self.inner.writer.lock().as_mut() {
            w.wal.sync()?;
        }
        Ok(())
    }

    /// Rebuilds the bloom filter from the live keys of every part (under
    /// the apply lock, so no key written meanwhile is missed); it is
    /// written with the next commit. Returns the keys it holds.
    pub fn rebuild_bloom(&self) -> usize {
        let c = &*self.inner;
        let _apply = c.apply.lock();
        let st = c.snapshot();
        let b = commit::rebuild_bloom(&c.config, &st.parts, Some(&st.active));
        *c.bloom.write() = b;
        st.live()
    }

    /// Freezes the mutable part now (if it holds anything) and writes it
    /// as a segment file, so nothing is left to replay; the optimizer
    /// indexes it in the background.
    pub fn seal(&self) -> Result<()> {
        self.inner.writable("seal")?;
        self.freeze_and_flush()?;
        self.inner.checkpoint()
    }

    /// Freezes the mutable part and writes every frozen part, on the
    /// calling thread and at its priority (see `optimizer::Pools`). The
    /// outcome counts as a pass of the flush thread would: a failure is
    /// in the optimizer's stats (`errors`, `last_error`) and is what
    /// stalled writes report, whichever thread met it first.
    fn freeze_and_flush(&self) -> Result<()> {
        let r = self
            .inner
            .freeze_now()
            .and_then(|()| self.inner.flush_frozen());
        match &r {
            Ok(()) => self.inner.opt.flush_ok(),
            Err(e) => self.inner.opt.flush_failed(e),
        }
        r
    }

    /// Seals the mutable part and waits until the optimizer has nothing
    /// left to do: every row written before the call is in a built
    /// segment, and segments are merged and compacted per the policy,
    /// small ones into the largest whatever their sizes (as the optimizer
    /// does on its own once writes pause), up to `max_segment_size`.
    /// Returns the optimizer's error if background work fails meanwhile.
    pub fn optimize(&self) -> Result<()> {
        self.inner.writable("optimize")?;
        self.freeze_and_flush()?;
        self.inner.wait_settled(false)
    }

    /// [`Collection::optimize`], and also rewrites every segment holding
    /// deleted rows (not only those past the policy's dead ratio).
    pub fn compact(&self) -> Result<()> {
        self.inner.writable("compact")?;
        self.freeze_and_flush()?;
        self.inner.wait_settled(true)
    }

    /// Segment, vector, tombstone, byte, bloom and optimizer figures.
    pub fn stats(&self) -> CollectionStats {
        let c = &*self.inner;
        let st = c.snapshot();
        // Read and let go at once: writers take the writer lock, then the
        // bloom's (see `wal_seq` below for the other order).
        let (bloom_bytes, bloom_fill, bloom_filters) = {
            let b = c.bloom.read();
            (b.memory_bytes(), b.fill(), b.filters())
        };
        let (mut bytes_on_disk, mut wal_bytes) = (0, 0);
        for e in std::fs::read_dir(&c.dir).into_iter().flatten().flatten() {
            let len = e.metadata().map_or(0, |m| m.len());
            bytes_on_disk += len;
            if e.file_name().to_str().and_then(wal::parse_name).is_some() {
                wal_bytes += len;
            }
        }
        let wal_seq = c
            .writer
            .lock()
            .as_ref()
            .map_or(0, |w| w.next_seq.saturating_sub(1));
        let (mut mem, mut mapped) = (0, 0);
        for p in &st.parts {
            let (m, f) = p.bytes();
            mem += m;
            mapped += f;
        }
        let unindexed = st.active.len()
            + st.parts
                .iter()
                .filter(|p| {
                    !c.config.is_built(p.kind())
                        && !c.config.stays_flat(p.kind(), p.live_len() as u64)
                })
                .map(|p| p.live_len())
                .sum::<usize>();
        CollectionStats {
            segments: st.parts.len(),
            frozen_segments: st.frozen().count(),
            vectors: st.live(),
            active_vectors: st.active.len(),
            unindexed_vectors: unindexed,
            tombstones: st.parts.iter().map(|s| s.dead().keys.len()).sum(),
            bytes_on_disk,
            wal_bytes,
            bytes_in_memory: mem + (st.active.memory_usage() + bloom_bytes) as u64,
            bytes_mapped: mapped,
            bloom_fill,
            bloom_filters,
            wal_seq,
            optimizer: c.opt.stats(),
        }
    }

    /// Stops background work, freezes the mutable part and writes it (and
    /// any frozen part) as segment files, so the next open replays
    /// nothing; then releases the writer lock. An index build in progress
    /// is abandoned (the next open resumes it). Also done, errors ignored,
    /// when the collection is dropped.
    pub fn close(mut self) -> Result<()> {
        let r = self.shutdown();
        // The parts go with the last reference to them (usually this one).
        drop(self);
        crate::trim::release_free_memory();
        r
    }

    /// Stops background work and lets the collection go without sealing,
    /// syncing or writing anything: what a crash of the process leaves on
    /// disk (tests of the `failpoints` feature).
    #[cfg(feature = "failpoints")]
    pub fn abandon(mut self) {
        if let Some(bg) = self.background.take() {
            bg.stop();
        }
    }

    fn shutdown(&mut self) -> Result<()> {
        let Some(bg) = self.background.take() else {
            return Ok(());
        };
        bg.stop();
        self.inner.freeze_now()?;
        self.inner.flush_frozen()?;
        self.inner.checkpoint()?;
        // A reopen finds a filter of every key, with none to add.
        self.inner.complete_bloom()?;
        self.flush()
    }
}

impl Drop for Collection {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

fn take_lock(dir: &Path) -> Result<File> {
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
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(io("lock", &path)(e)),
    }
}

impl Inner {
    /// The current state, for the writer and the optimizer; a read takes
    /// [`Inner::visible_state`] or [`Inner::view`] instead.
    fn snapshot(&self) -> Arc<State> {
        self.state.read().clone()
    }

    /// The current state with the guard under which no write becomes
    /// visible: what the mutable part's key map and the parts' dead sets
    /// say while it is held is one moment between whole writes.
    fn visible_state(&self) -> (parking_lot::RwLockReadGuard<'_, ()>, Arc<State>) {
        let g = self.visible.read();
        (g, self.snapshot())
    }

    fn writable(&self, op: &'static str) -> Result<()> {
        if self.mode == OpenMode::ReadOnly {
            return Err(StoreError::ReadOnly { op });
        }
        Ok(())
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn touch(&self) {
        self.last_write.store(self.now_ms(), Ordering::Release);
    }

    /// Milliseconds since writes last arrived: 0 while one is in
    /// progress. A batch of a million keys takes seconds; timed from the
    /// end of the last write only, the optimizer took the middle of each
    /// such write for a pause and ran its builds at the idle priority,
    /// above the flush the writer waited for.
    fn quiet_ms(&self) -> u64 {
        if self.writing.load(Ordering::Acquire) > 0 {
            return 0;
        }
        self.now_ms()
            .saturating_sub(self.last_write.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod pace_tests {
    use super::{pace_delay, MAX_FROZEN, PACE_MAX};
    use std::time::Duration;

    #[test]
    fn writes_are_paced_only_with_one_frozen_slot_left_and_a_known_flush_rate() {
        let rate = Some(50_000.0);
        for frozen in 0..MAX_FROZEN - 1 {
            assert_eq!(pace_delay(frozen, 10_000, rate), Duration::ZERO);
        }
        let share = pace_delay(MAX_FROZEN - 1, 10_000, rate);
        assert!((share.as_secs_f64() - 0.2).abs() < 1e-9, "{share:?}");
        assert_eq!(pace_delay(MAX_FROZEN, 10_000, rate), share);
        // Capped; nothing without a rate (before the first flush, or while
        // the flush fails) or for a write that adds no rows.
        assert_eq!(pace_delay(MAX_FROZEN, 10_000_000, rate), PACE_MAX);
        assert_eq!(pace_delay(MAX_FROZEN, 10_000, None), Duration::ZERO);
        assert_eq!(pace_delay(MAX_FROZEN, 0, rate), Duration::ZERO);
        assert_eq!(pace_delay(MAX_FROZEN, 10, Some(0.0)), Duration::ZERO);
    }
}
