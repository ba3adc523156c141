//! Freezing the mutable part, flushing frozen parts to segment files, and
//! the commit that publishes a new part list (tombstones, bloom, manifest
//! rename, state swap, removal of replaced files).

use super::active::ActiveRows;
use super::config::CollectionConfig;
use super::files::{self, segment_file, SegmentEntry};
use super::part::{Body, Dead, Part};
use super::{Inner, State, Writer, MAX_FROZEN};
use crate::bloom::Bloom;
use crate::durable::sync_dir;
use crate::error::Result;
use crate::payload::{self, Row, Schema};
use crate::segment::{Segment, SegmentWriter};
use crate::wal::{self, Wal};
use sagitta_index::{GraphView, Index, IndexRead};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A change to the immutable part list, committed by one manifest rename.
#[derive(Default)]
pub(crate) struct Change {
    /// Ids of parts that leave the list.
    pub remove: Vec<u64>,
    /// Sealed parts that join it.
    pub add: Vec<Arc<Part>>,
    /// New `wal_seq` (a flush of a frozen part).
    pub wal_seq: Option<u64>,
    /// What the change is, for the history (`seal`, `build`, `merge`,
    /// `compact`); `None`: not recorded (a checkpoint).
    pub what: Option<&'static str>,
    /// Write the bloom file even if the last one lacks few keys.
    pub full_bloom: bool,
}

impl Inner {
    /// Freezes the mutable part (if it holds anything): it joins the
    /// immutable parts, holding the records up to `last_seq`. Under the
    /// writer lock (or during replay).
    pub(super) fn freeze(&self, last_seq: u64) -> bool {
        let mut st = self.state.write();
        if st.active.slot_count() == 0 {
            return false;
        }
        let active = match self.config.active_index() {
            Ok(a) => Arc::new(a),
            Err(_) => return false,
        };
        let id = self.next_id.fetch_add(1, Ordering::AcqRel);
        let mut parts = st.parts.clone();
        parts.push(Arc::new(Part::new(
            id,
            Body::Frozen {
                index: st.active.clone(),
                rows: st.rows.clone(),
                last_seq,
            },
        )));
        *st = Arc::new(State {
            active,
            rows: Arc::new(ActiveRows::new(&self.config.text)),
            parts,
        });
        true
    }

    /// The writer's freeze: also starts a new log file, so the frozen
    /// part's records can be dropped once it is flushed, and wakes the
    /// flush thread. Skipped while [`MAX_FROZEN`] parts wait (the mutable
    /// part then keeps growing, bounded by what the log holds).
    pub(super) fn freeze_locked(&self, w: &mut Writer) -> Result<()> {
        if self.snapshot().frozen().count() >= MAX_FROZEN {
            self.opt.wake();
            return Ok(());
        }
        if !self.freeze(w.next_seq - 1) {
            return Ok(());
        }
        if w.wal.len() > wal::HEADER_LEN {
            w.wal.sync()?;
            w.wal = Wal::create(&self.dir, w.next_seq, self.config.durability.unsynced())?;
        }
        self.opt.wake();
        Ok(())
    }

    /// Freezes the mutable part now (close, seal, optimize, idle).
    pub(super) fn freeze_now(&self) -> Result<()> {
        if self.snapshot().frozen().count() >= MAX_FROZEN {
            // Make room first (the flush is what frees it).
            self.flush_frozen()?;
        }
        if let Some(w) = self.writer.lock().as_mut() {
            self.freeze_locked(w)?;
        }
        Ok(())
    }

    /// Folds a log tail that holds no rows (only removes of keys in
    /// immutable parts, already in their dead sets) into the manifest: the
    /// tombstone file takes them and the log restarts, so such a tail is
    /// never replayed again. Does nothing while rows or frozen parts wait.
    pub(super) fn checkpoint(&self) -> Result<()> {
        let wal_seq = self.manifest.lock().wal_seq;
        let last = {
            let mut g = self.writer.lock();
            let Some(w) = g.as_mut() else {
                return Ok(());
            };
            let st = self.snapshot();
            let last = w.next_seq - 1;
            if st.active.slot_count() > 0 || st.frozen().next().is_some() || last <= wal_seq {
                return Ok(());
            }
            if w.wal.len() > wal::HEADER_LEN {
                w.wal.sync()?;
                w.wal = Wal::create(&self.dir, w.next_seq, self.config.durability.unsynced())?;
            }
            last
        };
        self.commit(
            Change {
                wal_seq: Some(last),
                ..Change::default()
            },
            &[],
        )
    }

    /// Commits a bloom file of every key if the manifest names one that
    /// lacks some (at close: a reopen then adds none).
    pub(super) fn complete_bloom(&self) -> Result<()> {
        if self.manifest.lock().bloom_partial.is_none() {
            return Ok(());
        }
        self.commit(
            Change {
                full_bloom: true,
                ..Change::default()
            },
            &[],
        )
    }

    /// Whether the log holds records not yet folded into the manifest.
    pub(super) fn log_pending(&self) -> bool {
        let wal_seq = self.manifest.lock().wal_seq;
        self.writer
            .lock()
            .as_ref()
            .is_some_and(|w| w.next_seq - 1 > wal_seq)
    }

    /// Writes every frozen part, oldest first, as a Flat segment file and
    /// commits it (advancing `wal_seq` past its records).
    pub(super) fn flush_frozen(&self) -> Result<()> {
        let _one = self.opt.flush_lock.lock();
        loop {
            let st = self.snapshot();
            let Some(part) = st.frozen().next().cloned() else {
                return Ok(());
            };
            let Body::Frozen {
                index,
                rows,
                last_seq,
            } = &part.body
            else {
                return Ok(());
            };
            let began = std::time::Instant::now();
            let file = segment_file(part.id);
            let path = self.dir.join(&file);
            let batch = self.payload_batch(index, |_, slot| rows.get(slot))?;
            // The part's text index has every slot's documents: the
            // segment keeps the live ones, analysed once, at write time.
            let analysed = rows.text.as_ref().map(|(mem, _)| mem.read());
            let specs = self.config.text_fields();
            let mut w = SegmentWriter::new(index).text(&specs);
            if let Some((schema, b)) = &batch {
                w = w.payload(schema, b);
            }
            if let Some(mem) = analysed.as_deref() {
                w = w.analysed(mem);
            }
            w.write(&path)?;
            drop(analysed);
            let seg = open_written(&path)?;
            // The file has the frozen part's slots: its dead set carries
            // over as is (and the commit carries kills made since).
            let dead = part.dead();
            let sealed = Arc::new(Part::with_dead_of(
                part.id,
                Body::Sealed { file, seg },
                &part,
            ));
            self.commit(
                Change {
                    remove: vec![part.id],
                    add: vec![sealed],
                    wal_seq: Some(*last_seq),
                    what: Some("seal"),
                    full_bloom: false,
                },
                &[(part.clone(), dead)],
            )?;
            self.opt.flushed(index.len() as u64, began.elapsed());
        }
    }

    /// Publishes `change`: writes the tombstone and bloom files and the
    /// manifest (the commit point), swaps the state, and removes the files
    /// the new manifest no longer names. `carry` lists the parts replaced
    /// by `change.add[0]` with the dead sets the new part was built from:
    /// keys killed in them since are killed in the new part too.
    ///
    /// The files are written without the writer lock, so writes go on
    /// meanwhile (only commits are serialised): a key a write kills after
    /// the tombstone file was written has a log record past `wal_seq`, and
    /// a key it adds after the bloom file was written likewise, so replay
    /// restores both. The apply lock (which a write takes only to kill and
    /// publish, after its log sync) is held to carry the last kills and
    /// swap the state (no I/O).
    ///
    /// On a failure before the manifest is in place nothing changed: the
    /// files of `change.add` are removed, and the generation is used up
    /// anyway, so a retry never rewrites a file that a manifest renamed
    /// into place (but not proven durable) may name. Once the manifest is
    /// in place the state follows it whatever happens next; an error from
    /// the directory fsync is returned, and the replaced files are then
    /// kept (the old manifest may still be the durable one).
    pub(super) fn commit(&self, change: Change, carry: &[(Arc<Part>, Arc<Dead>)]) -> Result<()> {
        let mut mg = self.manifest.lock();
        let r = self.commit_files(&mut mg, &change, carry);
        if r.is_err() {
            // The old manifest is the one in place: nothing names these.
            let generation = mg.generation;
            let names = change
                .add
                .iter()
                .filter_map(|p| p.file().map(str::to_string))
                .chain([tomb_file(generation), bloom_file(generation)]);
            for f in names {
                let _ = crate::fault::remove(&self.dir.join(f));
            }
        }
        let m = r?;
        {
            let _apply = self.apply.lock();
            // Kills made while the files were written, second pass.
            let out = change.add.first();
            let gone: HashSet<u64> = change.remove.iter().copied().collect();
            carry_kills(out, carry.iter().map(|(p, _)| p).zip(&m.1));
            let mut cur = self.state.write();
            let mut parts = sealed_after(&cur.parts, &gone, &change.add);
            parts.extend(
                cur.parts
                    .iter()
                    .filter(|p| p.is_frozen() && !gone.contains(&p.id))
                    .cloned(),
            );
            *cur = Arc::new(State {
                active: cur.active.clone(),
                rows: cur.rows.clone(),
                parts,
            });
        }
        if let Some(what) = change.what {
            self.record(what, &change);
        }
        let old = std::mem::replace(&mut *mg, m.0);
        sync_dir(&self.dir.join(files::MANIFEST))?;
        files::remove_replaced(&self.dir, &old, &mg)?;
        sync_dir(&self.dir.join(files::MANIFEST))
    }

    /// [`Inner::commit`] up to its commit point: the tombstone, bloom and
    /// manifest files written and the manifest renamed into place.
    /// Returns the new manifest and the dead sets of `carry` seen meanwhile.
    fn commit_files(
        &self,
        mg: &mut files::Manifest,
        change: &Change,
        carry: &[(Arc<Part>, Arc<Dead>)],
    ) -> Result<(files::Manifest, Vec<Arc<Dead>>)> {
        let gone: HashSet<u64> = change.remove.iter().copied().collect();
        let out = change.add.first();
        // Kills made while the new part was built, first pass.
        let seen = carry_kills(out, carry.iter().map(|(p, d0)| (p, d0)));
        let sealed = sealed_after(&self.snapshot().parts, &gone, &change.add);
        let mut m = mg.clone();
        m.generation += 1;
        mg.generation = m.generation;
        m.next_segment_id = self.next_id.load(Ordering::Acquire);
        if let Some(s) = change.wal_seq {
            m.wal_seq = m.wal_seq.max(s);
        }
        m.segments = sealed
            .iter()
            .map(|s| SegmentEntry {
                id: s.id,
                file: s.file().unwrap_or_default().to_string(),
                vectors: s.live_len() as u64,
            })
            .collect();
        let tomb_name = tomb_file(m.generation);
        files::write_tombstones(&self.dir.join(&tomb_name), &sealed)?;
        m.tombstones = Some(tomb_name);
        self.commit_bloom(&mut m, mg, change, &gone)?;
        m.set_schema(&self.schema.read());
        m.publish(&self.dir)?; // the commit point
        Ok((m, seen))
    }

    /// The bloom filter's part of a commit: `m` (the new manifest) gets a
    /// new bloom file of every key, or keeps the file of `prev` (the
    /// manifest in place) and lists the segments whose keys it lacks.
    ///
    /// A file of every key at every commit rewrote the whole filter each
    /// time a segment was flushed (537 MB per commit at 81M keys: the add
    /// rate of a 100M collection fell to a fifth). The file is now
    /// rewritten when the rows of the segments it lacks pass an eighth of
    /// all (so a collection growing by a factor writes O(its size) bytes
    /// of filter in all, and an open after a crash adds at most that
    /// eighth), when it is small anyway, when the filter was rebuilt, and
    /// at close. A segment merged or built only from segments the file
    /// covers is covered; a flushed one is not.
    fn commit_bloom(
        &self,
        m: &mut files::Manifest,
        prev: &files::Manifest,
        change: &Change,
        gone: &HashSet<u64>,
    ) -> Result<()> {
        let lacked: HashSet<u64> = prev.bloom_missing().iter().copied().collect();
        // A flush removes a frozen part, which no manifest named.
        let covered_inputs = !change.remove.is_empty()
            && change
                .remove
                .iter()
                .all(|id| !lacked.contains(id) && prev.segments.iter().any(|s| s.id == *id));
        let new: HashSet<u64> = change.add.iter().map(|p| p.id).collect();
        let missing: Vec<u64> = m
            .segments
            .iter()
            .map(|s| s.id)
            .filter(|id| lacked.contains(id) || (new.contains(id) && !covered_inputs))
            .collect();
        let total: u64 = m.segments.iter().map(|s| s.vectors).sum();
        let lacking: u64 = m
            .segments
            .iter()
            .filter(|s| missing.contains(&s.id))
            .map(|s| s.vectors)
            .sum();
        // A grown chain costs one probe per filter on every miss: fold it
        // back into one filter (O(n), but only each time the collection
        // has grown fourfold, so O(1) per insert amortised). A filter
        // opened from a file that failed its check answers "maybe" to
        // everything: rebuild it rather than persist it. The rebuild runs
        // under the apply lock (no key may be missed); it is rare.
        // A large filter is folded by the bloom thread instead
        // ([`Inner::fold_bloom`]): inline, the fold of 100M keys held the
        // writer for 34 s.
        // A large filter half full is folded ahead, before it fills and
        // chains: the fold gets the time the collection takes to double
        // to run, and writes never probe a chain meanwhile (at 57M codes
        // the 2-filter chain made every batch of 1M 0.4 s slower for the
        // 40 s the nice-19 fold took).
        let (untrusted, chained, small, fold) = {
            let b = self.bloom.read();
            let small = b.memory_bytes() <= SMALL_BLOOM.load(Ordering::Relaxed);
            (!b.wait_checked(), b.filters() > 1, small, wants_fold(&b))
        };
        let rebuild = untrusted || (chained && small);
        if fold && !rebuild && !self.bloom_fold.swap(true, Ordering::AcqRel) {
            self.opt.wake();
        }
        let keep = prev.bloom_file().filter(|_| {
            !rebuild
                && !change.full_bloom
                && !self.bloom_folded.load(Ordering::Acquire)
                && !small
                && lacking * 8 <= total
        });
        if let Some(file) = keep {
            // A merge of covered segments leaves nothing missing: the
            // file is whole again, and the manifest says so.
            if missing.is_empty() {
                m.bloom = Some(file.to_string());
                m.bloom_partial = None;
            } else {
                m.bloom = None;
                m.bloom_partial = Some(files::PartialBloom {
                    file: file.to_string(),
                    missing,
                });
            }
            return Ok(());
        }
        if rebuild {
            let _apply = self.apply.lock();
            let st = self.snapshot();
            let all: Vec<Arc<Part>> = st
                .parts
                .iter()
                .filter(|p| !gone.contains(&p.id))
                .chain(change.add.iter())
                .cloned()
                .collect();
            let b = rebuild_bloom(&self.config, &all, Some(&st.active));
            *self.bloom.write() = b;
        }
        let bloom_name = bloom_file(m.generation);
        // Written from a copy, so writes (which insert their keys) wait
        // for a memory copy, not for the file. Keys inserted meanwhile
        // are logged past this commit's `wal_seq` (replay restores them).
        let copy = Bloom::copy_chunked(&self.bloom);
        self.bloom_folded.store(false, Ordering::Release);
        copy.write_durably(&self.dir.join(&bloom_name))?;
        m.bloom = Some(bloom_name);
        m.bloom_partial = None;
        Ok(())
    }

    /// Folds the bloom filter (half full, or grown into a chain) into one
    /// filter sized for four times the live keys, off the write path
    /// (asked for by a commit, run by the bloom thread): the filter is built from a
    /// snapshot while writes go on, caught up with the parts written
    /// since (off the lock while many were), and swapped in under the
    /// apply lock after the last few, so no key is missed and a write
    /// waits at most for that last catch-up. The next commit writes it.
    pub(super) fn fold_bloom(&self) {
        let st = self.snapshot();
        let mut bloom = sized_bloom(&self.config, &st.parts, Some(&st.active));
        let mut seen = HashSet::new();
        let mut keys = Vec::new();
        // Part by part, so that a close does not wait for the whole fold.
        for p in &st.parts {
            if self.opt.stopping() {
                return;
            }
            seen.insert(p.id);
            insert_live_keys(&mut bloom, p, &mut keys);
        }
        drop(st);
        for _ in 0..4 {
            if self.opt.stopping() {
                return;
            }
            if catch_up(&mut bloom, &self.snapshot(), &mut seen) < FOLD_CATCH_UP_LOCKED {
                break;
            }
        }
        let _apply = self.apply.lock();
        catch_up(&mut bloom, &self.snapshot(), &mut seen);
        *self.bloom.write() = bloom;
        self.bloom_folded.store(true, Ordering::Release);
    }

    /// The payload record batch for the segment `index` is written as:
    /// one row per slot (`row(key, slot)`), `None` when the collection has
    /// no payload columns.
    pub(super) fn payload_batch(
        &self,
        index: &Index,
        row: impl Fn(u64, u32) -> Option<Row>,
    ) -> Result<Option<(Schema, arrow_array::RecordBatch)>> {
        let schema = self.schema.read().clone();
        if schema.is_empty() {
            return Ok(None);
        }
        // A row at a time into the batch: the rows are never all held
        // besides it.
        let view = index.view();
        let mut batch = payload::BatchBuilder::new(&schema, view.slots());
        for slot in 0..view.slots() as u32 {
            let r = if view.is_live(slot) {
                row(view.key(slot), slot)
            } else {
                None
            };
            batch.push(r.as_deref());
        }
        drop(view);
        Ok(Some((schema, batch.finish()?)))
    }
}

/// The tombstone file of a manifest generation.
fn tomb_file(generation: u64) -> String {
    format!("tomb-{generation:06}.bin")
}

/// A filter of more than [`SMALL_BLOOM`] bytes this full is folded into
/// one sized for four times the live keys (twice its capacity) before it
/// fills.
const FOLD_AHEAD_FILL: f64 = 0.5;

/// Whether `b` is for the bloom thread to fold: larger than
/// [`SMALL_BLOOM`] (a small chain is rebuilt inline) and chained, or
/// [`FOLD_AHEAD_FILL`] full.
pub(super) fn wants_fold(b: &Bloom) -> bool {
    b.memory_bytes() > SMALL_BLOOM.load(Ordering::Relaxed)
        && (b.filters() > 1 || b.fill() >= FOLD_AHEAD_FILL)
}

/// Bloom filters up to this many bytes are written at every commit.
static SMALL_BLOOM: AtomicUsize = AtomicUsize::new(4 << 20);

/// Sets the size up to which a bloom filter is written at every commit
/// (4 MiB). For tests of the partial bloom files, which small collections
/// never write otherwise.
#[doc(hidden)]
pub fn set_small_bloom_bytes(bytes: usize) {
    SMALL_BLOOM.store(bytes, Ordering::Relaxed);
}

/// The bloom file of a manifest generation.
fn bloom_file(generation: u64) -> String {
    format!("bloom-{generation:06}.bin")
}

/// Opens a segment file just written; removes it if it cannot be opened
/// (nothing names it yet).
pub(super) fn open_written(path: &std::path::Path) -> Result<Segment> {
    Segment::open(path).inspect_err(|_| {
        let _ = crate::fault::remove(path);
    })
}

/// The sealed parts of `parts` without those in `gone`, plus `add`, by id
/// (the manifest's segment list after a commit).
fn sealed_after(parts: &[Arc<Part>], gone: &HashSet<u64>, add: &[Arc<Part>]) -> Vec<Arc<Part>> {
    let mut sealed: Vec<Arc<Part>> = parts
        .iter()
        .filter(|p| !p.is_frozen() && !gone.contains(&p.id))
        .chain(add)
        .cloned()
        .collect();
    sealed.sort_by_key(|p| p.id);
    sealed
}

/// Kills in `out` the keys each replaced part lost since the dead set it
/// is paired with; returns the dead sets seen now (for a later pass).
fn carry_kills<'a>(
    out: Option<&Arc<Part>>,
    replaced: impl Iterator<Item = (&'a Arc<Part>, &'a Arc<Dead>)>,
) -> Vec<Arc<Dead>> {
    replaced
        .map(|(p, before)| {
            let now = p.dead();
            if let Some(out) = out {
                out.kill(
                    &now.keys
                        .difference(&before.keys)
                        .copied()
                        .collect::<Vec<_>>(),
                );
            }
            now
        })
        .collect()
}

/// A bloom filter over the live keys of `parts` (and `active`)
/// ([`sized_bloom`]).
pub(crate) fn rebuild_bloom(
    config: &CollectionConfig,
    parts: &[Arc<Part>],
    active: Option<&Index>,
) -> Bloom {
    let mut bloom = sized_bloom(config, parts, active);
    // A live key is live in one part only: each part's keys go in as
    // distinct keys, their blocks prefetched (this runs under the apply
    // lock: at 64M keys one at a time took seconds).
    let mut keys = Vec::new();
    if let Some(a) = active {
        active_keys(a, &mut keys);
        bloom.insert_distinct(keys.iter().copied());
    }
    for s in parts {
        insert_live_keys(&mut bloom, s, &mut keys);
    }
    bloom
}

/// An empty bloom filter sized for four times the live rows of `parts`
/// (and `active`), so it stays one filter, one probe, while the
/// collection grows fourfold.
fn sized_bloom(config: &CollectionConfig, parts: &[Arc<Part>], active: Option<&Index>) -> Bloom {
    let live: u64 = parts.iter().map(|s| s.live_len() as u64).sum::<u64>()
        + active.map_or(0, |a| a.len() as u64);
    Bloom::new(bloom_capacity(config).max(live * 4), 0.01)
}

/// The live keys of the mutable part `a`, into `keys` (cleared first).
fn active_keys(a: &Index, keys: &mut Vec<u64>) {
    let view = a.view();
    keys.clear();
    keys.extend(
        (0..view.slots() as u32)
            .filter(|&s| view.is_live(s))
            .map(|s| view.key(s)),
    );
}

/// Keys of parts written since a fold's snapshot that are left for the
/// swap under the apply lock (about 20 ms of inserts); more are caught up
/// before it is taken.
const FOLD_CATCH_UP_LOCKED: usize = 1 << 20;

/// Adds the live keys of `part` to `bloom` (gathered in `keys`); returns
/// how many.
/// A part's live keys are distinct, and from other parts' (an upsert
/// kills the older row): inserted without testing each first.
fn insert_live_keys(bloom: &mut Bloom, part: &Part, keys: &mut Vec<u64>) -> usize {
    keys.clear();
    part.for_each_live(|_, key, _| keys.push(key));
    bloom.insert_distinct(keys.iter().copied());
    keys.len()
}

/// Adds to `bloom` the live keys of the parts of `st` not in `seen` (now
/// seen) and of its mutable part; returns how many keys of new parts.
fn catch_up(bloom: &mut Bloom, st: &State, seen: &mut HashSet<u64>) -> usize {
    let mut keys = Vec::new();
    let mut fresh = 0;
    for p in st.parts.iter().filter(|p| seen.insert(p.id)) {
        fresh += insert_live_keys(bloom, p, &mut keys);
    }
    active_keys(&st.active, &mut keys);
    bloom.insert_many(&keys);
    fresh
}

fn bloom_capacity(config: &CollectionConfig) -> u64 {
    // Sized so that collections up to a million keys or 16 segments stay
    // on the first filter of the chain (one probe per lookup).
    (config.segment_size / config.bytes_per_vector().max(1) * 16).clamp(1 << 16, 1 << 20)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::Change;
    use crate::collection::{Collection, CollectionConfig};
    use sagitta_index::{DType, Metric, Space, VectorRef};
    use std::sync::mpsc;
    use std::time::Duration;

    /// A commit (a flush, a merge) swaps the part list under the apply
    /// lock, not the writer lock a write holds from its checks through its
    /// log sync: it goes through while a write is in progress.
    #[test]
    fn a_commit_goes_through_while_a_write_holds_the_writer_lock() {
        let dir = tempfile::tempdir().unwrap();
        let space = Space::new(4, Metric::L2, DType::F32).unwrap();
        let c = Collection::create(dir.path(), CollectionConfig::new(space)).unwrap();
        let rows: Vec<[f32; 4]> = (0..100).map(|i| [i as f32, 1.0, 2.0, 3.0]).collect();
        let vecs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
        let keys: Vec<u64> = (0..100).collect();
        c.add(&keys, &vecs).unwrap();
        c.seal().unwrap();
        let generation = c.inner.manifest.lock().generation;
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|s| {
            // Held inside the scope: a failed assertion unwinds it first,
            // and the commit's thread can then end.
            let writing = c.inner.writer.lock();
            s.spawn(|| tx.send(c.inner.commit(Change::default(), &[]).is_ok()));
            assert_eq!(rx.recv_timeout(Duration::from_secs(60)), Ok(true));
            drop(writing);
        });
        assert!(c.inner.manifest.lock().generation > generation);
        assert_eq!(c.len(), 100);
    }

    /// The bloom thread's fold: one filter again, holding every key,
    /// those written while it ran included.
    /// A filter too large to rebuild inline is handed to the bloom
    /// thread once half full, before it fills and grows a chain; a small
    /// one only when it chains (then it is rebuilt inline).
    #[test]
    fn a_large_filter_is_folded_ahead_once_half_full() {
        use super::wants_fold;
        use crate::bloom::Bloom;
        let cap = 8_000_000u64;
        let mut b = Bloom::new(cap, 0.01);
        assert!(b.memory_bytes() > 4 << 20);
        b.insert_distinct((0..cap as usize / 2 - 1).map(|k| k as u64 * 7919));
        assert!(!wants_fold(&b));
        b.insert(u64::MAX - 1);
        assert!(wants_fold(&b));
        let mut small = Bloom::new(100_000, 0.01);
        small.insert_distinct((0..99_999usize).map(|k| k as u64 * 7919));
        assert!(!wants_fold(&small));
        small.insert_distinct((0..2usize).map(|k| u64::MAX - k as u64));
        assert!(small.filters() > 1 && !wants_fold(&small));
    }

    #[test]
    fn a_fold_keeps_every_key_written_while_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let space = Space::new(1, Metric::L2, DType::F32).unwrap();
        let mut config = CollectionConfig::new(space);
        // One mutable part, no commit (whose inline fold of a filter this
        // small would get there first).
        config.segment_size = 1 << 30;
        config.durability = crate::collection::Durability::Off;
        config.idle_seal_ms = 0;
        let c = Collection::create(dir.path(), config).unwrap();
        let add = |from: u64, n: u64| {
            let rows: Vec<[f32; 1]> = (from..from + n).map(|i| [i as f32]).collect();
            let vecs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
            let keys: Vec<u64> = (from..from + n).map(|k| k * 7919).collect();
            c.add(&keys, &vecs).unwrap();
        };
        for b in 0..12 {
            add(b * 100_000, 100_000);
        }
        assert!(c.stats().bloom_filters > 1, "the chain grew");
        std::thread::scope(|s| {
            s.spawn(|| c.inner.fold_bloom());
            for b in 12..16 {
                add(b * 100_000, 100_000);
            }
        });
        assert_eq!(c.stats().bloom_filters, 1);
        assert!((0..1_600_000u64).all(|k| c.contains(k * 7919)));
        assert!(!c.contains(7919 * 1_600_000));
    }
}
