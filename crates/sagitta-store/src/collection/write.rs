//! The write path (validate, log, apply to the mutable part, maybe
//! freeze) and its replay at open.

use super::part::Part;
use super::{Collection, Inner, State, Writer};
use crate::error::{Result, StoreError};
use crate::filter::{Bound, Filter};
use crate::payload::{self, Field, Payload, PayloadError, Row, Value};
use crate::wal::{self, Op};
use rayon::prelude::*;
use sagitta_index::{IndexError, IndexRead, IndexWrite, VectorRef};
use sagitta_text::MAX_TEXT_BYTES;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Keys of a batch with their encoded vectors (and payload rows, laid
/// out by the collection schema), deduplicated.
#[derive(Default)]
pub(crate) struct Encoded {
    keys: Vec<u64>,
    stored: Vec<u8>,
    rows: Option<Vec<Row>>,
    /// No key is live anywhere (checked under the writer lock by `add`):
    /// there are no older versions to find and kill.
    absent: bool,
}

pub(crate) fn row_err(row: usize, e: IndexError) -> StoreError {
    StoreError::Index(IndexError::at_row(row, e))
}

/// `None` when the keys are distinct, else whether each row holds the
/// first occurrence of its key. Checked by sorting a copy: a set of a
/// million keys cost the add of a batch that many a fifth of a second.
fn firsts(keys: &[u64]) -> Option<Vec<bool>> {
    let mut sorted = keys.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).all(|w| w[0] != w[1]) {
        return None;
    }
    let mut seen = HashSet::with_capacity(keys.len());
    Some(keys.iter().map(|&k| seen.insert(k)).collect())
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

impl Encoded {
    /// Rows to write: keys, their stored vectors (`stride` bytes each) and
    /// payload rows laid out by the collection schema.
    pub(super) fn new(keys: Vec<u64>, stored: Vec<u8>, rows: Option<Vec<Row>>) -> Encoded {
        Encoded {
            keys,
            stored,
            rows,
            absent: false,
        }
    }
}

/// The writer lock of one write, which counts as in progress (for the
/// optimizer, [`Inner::quiet_ms`]) from before its pacing until it ends.
pub(super) struct WriterGuard<'a> {
    guard: parking_lot::MutexGuard<'a, Option<super::Writer>>,
    _writing: Writing<'a>,
}

impl std::ops::Deref for WriterGuard<'_> {
    type Target = Option<super::Writer>;
    fn deref(&self) -> &Self::Target {
        &self.guard
    }
}

impl std::ops::DerefMut for WriterGuard<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.guard
    }
}

/// A write in progress; its end is the collection's last write.
struct Writing<'a>(&'a Inner);

impl<'a> Writing<'a> {
    fn begin(c: &'a Inner) -> Writing<'a> {
        c.writing.fetch_add(1, Ordering::AcqRel);
        Writing(c)
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.touch();
        self.0.writing.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Collection {
    /// The writer, for a write adding `rows` rows to the mutable part
    /// (paced while the flush falls behind, then room waited for).
    pub(super) fn writer_guard(&self, op: &'static str, rows: usize) -> Result<WriterGuard<'_>> {
        self.inner.writable(op)?;
        let writing = Writing::begin(&self.inner);
        self.inner.pace(rows);
        self.inner.wait_for_room()?;
        let guard = self.inner.writer.lock();
        if guard.is_none() {
            return Err(StoreError::ReadOnly { op });
        }
        Ok(WriterGuard {
            guard,
            _writing: writing,
        })
    }

    /// Adds new keys. The batch is checked whole first (every vector valid,
    /// no key repeated or already present); an error adds nothing.
    pub fn add(&self, keys: &[u64], vectors: &[VectorRef<'_>]) -> Result<()> {
        check_lengths(keys, vectors)?;
        let stored = self.inner.encode(vectors)?;
        let mut g = self.writer_guard("add", keys.len())?;
        let w = g.as_mut().ok_or(StoreError::ReadOnly { op: "add" })?;
        let repeated = firsts(keys).and_then(|f| f.iter().position(|&first| !first));
        let present = self.contains_many(keys).iter().position(|&p| p);
        if let Some(i) = repeated.into_iter().chain(present).min() {
            return Err(row_err(i, IndexError::DuplicateKey(keys[i])));
        }
        self.inner.write(
            w,
            Encoded {
                keys: keys.to_vec(),
                stored,
                rows: None,
                absent: true,
            },
            &[],
        )
    }

    /// Adds the keys not already present (and the first of repeated keys);
    /// returns how many were added.
    pub fn add_once(&self, keys: &[u64], vectors: &[VectorRef<'_>]) -> Result<usize> {
        check_lengths(keys, vectors)?;
        let stored = self.inner.encode(vectors)?;
        let mut g = self.writer_guard("add_once", keys.len())?;
        let w = g.as_mut().ok_or(StoreError::ReadOnly { op: "add_once" })?;
        let stride = self.inner.config.space.stride();
        let first = firsts(keys);
        let present = self.contains_many(keys);
        let mut e = Encoded {
            absent: true,
            ..Encoded::default()
        };
        for (i, &k) in keys.iter().enumerate() {
            if first.as_ref().is_none_or(|f| f[i]) && !present[i] {
                e.keys.push(k);
                e.stored
                    .extend_from_slice(&stored[i * stride..(i + 1) * stride]);
            }
        }
        let n = e.keys.len();
        if n > 0 {
            self.inner.write(w, e, &[])?;
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
            self.check_text_columns(p)?;
        }
        let c = &*self.inner;
        let stored = c.encode(vectors)?;
        let mut g = self.writer_guard("upsert", keys.len())?;
        let w = g.as_mut().ok_or(StoreError::ReadOnly { op: "upsert" })?;
        let rows = match payload {
            Some(p) if !p.fields.is_empty() => {
                let mut schema = c.schema.read().clone();
                schema.merge(&p.fields)?;
                let rows: Vec<Row> = (0..keys.len()).map(|r| p.row(&schema, r)).collect();
                // Grown under the writer lock, before the rows are logged
                // (each logged row names its fields, so a crash replays
                // the growth).
                *c.schema.write() = schema;
                Some(rows)
            }
            _ => None,
        };
        let stride = c.config.space.stride();
        let mut last: HashMap<u64, usize> = HashMap::with_capacity(keys.len());
        for (i, &k) in keys.iter().enumerate() {
            last.insert(k, i);
        }
        let e = if last.len() == keys.len() {
            Encoded {
                keys: keys.to_vec(),
                stored,
                rows,
                absent: false,
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
        c.write(w, e, &[])
    }

    /// Text fields hold strings of at most [`MAX_TEXT_BYTES`].
    pub(super) fn check_text_columns(&self, p: &Payload) -> Result<()> {
        for (f, col) in p.fields.iter().zip(&p.columns) {
            if !self.inner.config.text.iter().any(|t| t.name == f.name) {
                continue;
            }
            for (row, v) in col.iter().enumerate() {
                if let Value::Str(s) = v {
                    if s.len() > MAX_TEXT_BYTES {
                        return Err(StoreError::InvalidText(format!(
                            "row {row}: field {:?} holds {} bytes of text: at most {MAX_TEXT_BYTES}",
                            f.name,
                            s.len()
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Parses and checks a JSON filter against the current schema.
    pub fn bind_filter(&self, filter: &Filter) -> Result<Bound> {
        Ok(filter.bind(&self.inner.schema.read())?)
    }

    /// Deletes keys; returns how many were present.
    pub fn remove(&self, keys: &[u64]) -> Result<usize> {
        let mut g = self.writer_guard("remove", 0)?;
        let w = g.as_mut().ok_or(StoreError::ReadOnly { op: "remove" })?;
        let first = firsts(keys);
        let live = self.contains_many(keys);
        let present: Vec<u64> = (keys.iter().enumerate())
            .filter(|&(i, _)| first.as_ref().is_none_or(|f| f[i]) && live[i])
            .map(|(_, &k)| k)
            .collect();
        if !present.is_empty() {
            self.inner.write(w, Encoded::default(), &present)?;
        }
        Ok(present.len())
    }

    /// Deletes every live vector whose payload passes `pred`; returns how
    /// many. The matching keys are logged as removes like [`remove`].
    ///
    /// [`remove`]: Collection::remove
    pub fn remove_where(&self, pred: &Bound) -> Result<usize> {
        // Hold the writer lock so that the keys matched are the keys
        // removed (no write can slip in between).
        let mut g = self.writer_guard("remove", 0)?;
        let w = g.as_mut().ok_or(StoreError::ReadOnly { op: "remove" })?;
        let keys = self.keys_where(Some(pred))?;
        if !keys.is_empty() {
            self.inner.write(w, Encoded::default(), &keys)?;
        }
        Ok(keys.len())
    }
}

impl Inner {
    pub(super) fn encode(&self, vectors: &[VectorRef<'_>]) -> Result<Vec<u8>> {
        let stride = self.config.space.stride();
        let mut stored = vec![0u8; vectors.len() * stride];
        let space = self.config.space;
        stored
            .par_chunks_exact_mut(stride)
            .zip(vectors.par_iter())
            .enumerate()
            .try_for_each(|(i, (row, v))| {
                sagitta_index::sched::foreground::step();
                space.encode(*v, row).map_err(|e| (i, e))
            })
            .map_err(|(i, e)| row_err(i, e))?;
        Ok(stored)
    }

    /// Writes puts in pieces that fit the mutable part, freezing between
    /// them, so no part grows past `segment_size` however large the batch.
    pub(super) fn write(&self, w: &mut Writer, puts: Encoded, removes: &[u64]) -> Result<()> {
        let per_segment = self.config.rows_per_segment();
        let stride = self.config.space.stride();
        let mut start = 0;
        while start < puts.keys.len() {
            // A write that fits in a part goes into the mutable part
            // whole (which may then hold up to twice a part), so that
            // reads see it whole; a larger one fills the mutable part
            // and each part after it, and is seen part by part. When the
            // mutable part is already full (its freeze deferred while
            // MAX_FROZEN parts wait for the flush), the next piece is a
            // whole part's worth too: the part grows by the batch this
            // call holds in memory anyway, instead of the rest of the
            // batch going in one row (and one log sync) at a time.
            let left = puts.keys.len() - start;
            let used = self.snapshot().active.slot_count() as u64;
            let take = if left as u64 <= per_segment {
                left
            } else if used >= per_segment {
                per_segment as usize
            } else {
                (per_segment - used) as usize
            };
            let end = start + take;
            self.write_piece(
                w,
                &puts.keys[start..end],
                &puts.stored[start * stride..end * stride],
                puts.rows.as_ref().map(|r| &r[start..end]),
                &[],
                puts.absent,
            )?;
            start = end;
        }
        if !removes.is_empty() {
            self.write_piece(w, &[], &[], None, removes, false)?;
        }
        self.touch();
        Ok(())
    }

    /// The one write path: log, sync per policy, apply, maybe freeze.
    fn write_piece(
        &self,
        w: &mut Writer,
        keys: &[u64],
        stored: &[u8],
        rows: Option<&[Row]>,
        removes: &[u64],
        absent: bool,
    ) -> Result<()> {
        let vb = self.config.space.vector_bytes();
        let stride = self.config.space.stride();
        let mut buf = std::mem::take(&mut w.log_buf);
        buf.clear();
        buf.reserve(keys.len() * (vb + 25) + removes.len() * 25);
        let mut seq = w.next_seq;
        let schema = self.schema.read().clone();
        let mut body = Vec::new();
        for (i, (k, row)) in keys
            .iter()
            .zip(stored.chunks_exact(stride.max(1)))
            .enumerate()
        {
            sagitta_index::sched::foreground::step();
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
        let appended = w.wal.append(&buf);
        if buf.capacity() <= super::KEEP_LOG_BUF {
            w.log_buf = buf;
        }
        appended?;
        w.next_seq = seq;
        if self.config.durability == super::Durability::Batch {
            w.wal.sync()?;
        }
        if !keys.is_empty() {
            self.put_encoded(keys, stored, rows, absent)?;
        }
        if !removes.is_empty() {
            self.apply_removes(removes);
        }
        if self.is_full(&self.snapshot()) {
            // The write is done (logged, synced per policy, applied): a
            // failure to start the next log file is the background's to
            // report and retry, not this write's.
            if let Err(e) = self.freeze_locked(w) {
                self.opt.failed(&e);
            }
        }
        Ok(())
    }

    /// Before a write of `rows` takes the writer lock: waits for its
    /// share of the flush while one frozen slot is left (see
    /// [`super::pace_delay`]).
    pub(super) fn pace(&self, rows: usize) {
        let frozen = self.snapshot().frozen().count();
        let wait = super::pace_delay(frozen, rows, self.opt.flush_rate());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }

    /// Before a write takes the writer lock: while the mutable part is
    /// full and [`MAX_FROZEN`](super::MAX_FROZEN) frozen parts wait, waits
    /// for the flush to free one; refuses the write ([`StoreError::Stalled`])
    /// at once when the flush is failing, or after
    /// [`STALL_TIMEOUT`](super::STALL_TIMEOUT) without a flush finishing.
    /// Writers that pass together may each still add their batch: memory
    /// is bounded by the parts plus the batches in flight.
    pub(super) fn wait_for_room(&self) -> Result<()> {
        let mut seen = self.opt.wait_flush(
            &super::optimizer::FlushState {
                flushes: u64::MAX,
                passes: u64::MAX,
                error: None,
            },
            std::time::Duration::ZERO,
        );
        let mut since = std::time::Instant::now();
        loop {
            let st = self.snapshot();
            let frozen = st.frozen().count();
            if frozen < super::MAX_FROZEN || !self.is_full(&st) || self.opt.stopping() {
                return Ok(());
            }
            drop(st);
            // A pass begun now (the flush thread retries at once when
            // woken): the write is refused only on a failure seen after
            // this write began waiting, so freed space is used at once.
            self.opt.wake();
            let now = self
                .opt
                .wait_flush(&seen, std::time::Duration::from_millis(100));
            if now.flushes != seen.flushes {
                since = std::time::Instant::now();
            }
            if let Some(reason) = &now.error {
                if now.passes != seen.passes {
                    return Err(StoreError::Stalled {
                        frozen,
                        reason: reason.clone(),
                    });
                }
            }
            seen = now;
            if since.elapsed() >= super::STALL_TIMEOUT {
                return Err(StoreError::Stalled {
                    frozen,
                    reason: format!("no flush finished in {} s", super::STALL_TIMEOUT.as_secs()),
                });
            }
        }
    }

    /// Whether the mutable part has reached `segment_size`.
    pub(super) fn is_full(&self, state: &State) -> bool {
        state.active.slot_count() as u64 >= self.config.rows_per_segment()
    }

    /// Applies puts: `stored` holds one stride-long encoded row per key,
    /// `rows` (when given) one payload row per key.
    /// Under the apply lock, on the part list as it is then; `absent`:
    /// no key is live anywhere (nothing to kill).
    fn put_encoded(
        &self,
        keys: &[u64],
        stored: &[u8],
        rows: Option<&[Row]>,
        absent: bool,
    ) -> Result<()> {
        let _apply = self.apply.lock();
        let st = self.snapshot();
        let state = &*st;
        // Keys living in immutable parts become dead there once the new
        // version is in the mutable part.
        // Located as a batch: filter blocks fetched ahead, segments
        // joined once (a probe per key cost a miss per key in a filter of
        // hundreds of megabytes).
        let mut kills: HashMap<u64, Vec<u64>> = HashMap::new();
        if !absent {
            let holders = state.holders(&self.bloom.read(), keys);
            for (&k, h) in keys.iter().zip(holders) {
                if let Some(part) = h {
                    kills.entry(state.parts[part].id).or_default().push(k);
                }
            }
        }
        // Into the bloom filter before the keys become visible: a reader
        // that finds one by search never has its lookup stopped there.
        self.bloom.write().insert_many(keys);
        // The vectors go into new slots that no key names yet and no
        // read returns (past the mutable part's completed slots), and
        // their payload rows and texts beside them: the slow part of the
        // write runs while reads go on, seeing none of it.
        let staged = state.active.stage_encoded_batch(keys, stored, 0)?;
        if let Some(rows) = rows {
            let schema = state.rows.text.as_ref().map(|_| self.schema.read().clone());
            let mut docs: Vec<(u32, &[Value])> = Vec::new();
            {
                let mut slots = state.rows.rows.write();
                slots.resize(state.active.slot_count(), None);
                for ((_, slot), r) in staged.rows().zip(rows) {
                    if let Some(x) = slots.get_mut(slot as usize) {
                        *x = (!r.is_empty()).then(|| r.clone());
                    }
                    if schema.is_some() {
                        docs.push((slot, r));
                    }
                }
            }
            if let Some(schema) = &schema {
                state.rows.index_text(schema, &docs);
            }
        }
        // Then all at once: the keys name their new slots (their old
        // ones in this part die), every slot claimed so far is complete
        // (writes are serialised: writer lock, or replay), and the old
        // versions in the immutable parts die.
        self.publish(|| {
            state.active.publish(staged);
            state.rows.mark_complete(state.active.slot_count());
            kill_in(&state.parts, &kills);
        });
        Ok(())
    }

    /// Runs `flip` (a write's change to what reads see) while no read
    /// takes its snapshot ([`Inner::visible`]).
    fn publish(&self, flip: impl FnOnce()) {
        let _g = self.visible.write();
        flip();
    }

    /// Removes `keys`, all visible at once (under the apply lock, on the
    /// part list as it is then).
    fn apply_removes(&self, keys: &[u64]) -> usize {
        let _apply = self.apply.lock();
        let st = self.snapshot();
        let state = &*st;
        let mut removed = 0;
        self.publish(|| {
            let mut kills: HashMap<u64, Vec<u64>> = HashMap::new();
            let bloom = self.bloom.read();
            for &k in keys {
                if !bloom.may_contain(k) {
                    continue;
                }
                if state.active.remove(k) {
                    removed += 1;
                } else if let Some(s) = state.holder(k) {
                    kills.entry(s.id).or_default().push(k);
                    removed += 1;
                }
            }
            drop(bloom);
            kill_in(&state.parts, &kills);
        });
        removed
    }

    /// Replays WAL records after `after_seq` (freezing the mutable part
    /// whenever it fills, as the writer did), reading only: obsolete logs
    /// are skipped, and a log created but never completed is not removed
    /// here but returned, so that nothing in the directory changes before
    /// every file has been read. Returns the last sequence number seen,
    /// the newest log with the length of its valid prefix, and the
    /// never-completed logs for a writer to remove.
    pub(super) fn replay(&self, after_seq: u64) -> Result<Replayed> {
        let logs = super::files::split_logs(&self.dir, after_seq)?.0;
        let mut last = after_seq;
        let mut tail = None;
        let mut incomplete = Vec::new();
        let vb = self.config.space.vector_bytes();
        let per_segment = self.config.rows_per_segment() as usize;
        for path in &logs {
            let r = wal::read(path)?;
            let mut batch: Vec<(u64, &[u8], Option<Row>)> = Vec::new();
            let mut pos: HashMap<u64, usize> = HashMap::new();
            let mut batch_last = last;
            for rec in r.records() {
                if rec.seq <= after_seq {
                    continue;
                }
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
                        batch_last = rec.seq;
                        let used = self.snapshot().active.slot_count();
                        if used + batch.len() >= per_segment {
                            self.apply_puts(&batch)?;
                            batch.clear();
                            pos.clear();
                            last = last.max(batch_last);
                            self.freeze_if_full(last);
                        }
                    }
                    Op::Remove => {
                        self.apply_puts(&batch)?;
                        batch.clear();
                        pos.clear();
                        self.apply_removes(&[rec.key]);
                        batch_last = rec.seq;
                    }
                }
                last = last.max(rec.seq);
            }
            self.apply_puts(&batch)?;
            last = last.max(batch_last);
            self.freeze_if_full(last);
            tail = Some((path.clone(), r.valid_len.max(wal::HEADER_LEN)));
            if r.valid_len < wal::HEADER_LEN {
                // Created but never completed: a writer starts a fresh log
                // instead (and removes this one once the open succeeds).
                tail = None;
                incomplete.push(path.clone());
            }
        }
        Ok(Replayed {
            last_seq: last,
            tail,
            incomplete,
        })
    }

    fn freeze_if_full(&self, last_seq: u64) {
        if self.is_full(&self.snapshot()) {
            self.freeze(last_seq);
        }
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
    fn apply_puts(&self, batch: &[(u64, &[u8], Option<Row>)]) -> Result<()> {
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
        self.put_encoded(&keys, &stored, rows.as_deref(), false)
    }
}

fn kill_in(parts: &[Arc<Part>], kills: &HashMap<u64, Vec<u64>>) {
    if kills.is_empty() {
        return;
    }
    for s in parts {
        if let Some(keys) = kills.get(&s.id) {
            s.kill(keys);
        }
    }
}

/// What [`Inner::replay`] found in the logs.
pub(super) struct Replayed {
    /// The last sequence number seen (at least the one replay started after).
    pub last_seq: u64,
    /// The newest log and the length of its valid prefix, to append to.
    pub tail: Option<(PathBuf, u64)>,
    /// Logs created but never completed (shorter than their header): a
    /// writer removes them (and starts a fresh log when the newest is one).
    pub incomplete: Vec<PathBuf>,
}
