//! Reads: kNN search over every part (parallel over parts for one query,
//! over queries for a batch) merged by (distance, key); filters turned
//! into per-part bitmaps; counts, key scans, payload tables and lazy
//! iteration (lookups by key are in `lookup.rs`).

use super::part::{Body, Dead, Part};
use super::write::row_err;
use super::{Collection, Inner, ScanBatch, State};
use crate::error::{Result, StoreError};
use crate::filter::Bound;
use crate::payload::{self, Field, Row, Schema, Value};
use crate::request::{Answer, CollectionSearch, Query};
use rayon::prelude::*;
use sagitta_index::{Bitset, GraphView, IndexError, IndexRead, Neighbor, SearchOptions, VectorRef};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One moment of the collection as a read sees it: the state, and what
/// of it was visible, taken together while no write became visible
/// ([`Inner::view`]). Every part of one read (both legs of a hybrid
/// query, a count, a search and the rows it returns) uses one view, so it
/// sees each write whole or not at all: never a key twice or a key
/// missing because a write replacing it was half done.
pub(super) struct View {
    pub st: Arc<State>,
    /// The mutable part's slots the read may return: named by a key when
    /// the view was taken (written by a write that had completed, not
    /// replaced or removed since).
    cut: Bitset,
    /// Each immutable part's dead set at that moment.
    dead: Vec<Arc<Dead>>,
}

impl View {
    /// Live rows in the view.
    pub fn live(&self) -> usize {
        self.cut.count()
            + self
                .st
                .parts
                .iter()
                .zip(&self.dead)
                .map(|(p, d)| p.read().len().saturating_sub(d.keys.len()))
                .sum::<usize>()
    }
}

impl Inner {
    /// The view of the collection now (see [`View`]).
    pub(super) fn view(&self) -> View {
        let (_g, st) = self.visible_state();
        let done = st.rows.complete.load(Ordering::Acquire);
        let live = st.active.view().live_slots();
        let mut words = live.words().to_vec();
        let n = live.len().min(done);
        words.truncate(n.div_ceil(64));
        if !n.is_multiple_of(64) {
            if let Some(last) = words.last_mut() {
                *last &= (1u64 << (n % 64)) - 1;
            }
        }
        words.resize(live.len().div_ceil(64), 0);
        let cut = Bitset::from_words(words, live.len());
        let dead = st.parts.iter().map(|p| p.dead()).collect();
        View { st, cut, dead }
    }
}

/// One part as a search sees it.
pub(super) struct Seg<'a> {
    pub seg: &'a dyn IndexRead,
    /// The immutable part (None for the mutable one).
    pub part: Option<&'a Part>,
    pub live: usize,
    pub dead: Option<Arc<Dead>>,
    /// The caller's key filter and payload predicate, intersected with the
    /// dead bitmap.
    pub combined: Option<Bitset>,
    /// Slots set in `combined`.
    pub allowed: Option<usize>,
}

impl Seg<'_> {
    /// Whether the part can return anything.
    fn answers(&self) -> bool {
        self.live > 0 && self.allowed != Some(0)
    }

    /// The `k` (checked, at least 1) nearest of `q` in this part.
    fn search(
        &self,
        q: VectorRef<'_>,
        k: usize,
        opts: &CollectionSearch<'_>,
    ) -> Result<Vec<Neighbor>> {
        // The mutable part has fewer rows than the view when rows were
        // removed since: its cut still allows them (a snapshot filter).
        let now = match self.part {
            Some(_) => self.seg.len(),
            None => usize::MAX,
        };
        let kk = k
            .min(self.live)
            .min(now)
            .min(self.allowed.unwrap_or(usize::MAX));
        if kk == 0 {
            return Ok(Vec::new());
        }
        let o = SearchOptions {
            ef: opts.ef,
            filter: self.filter(),
            exact: opts.exact,
            nprobe: opts.nprobe,
            refine: opts.refine,
            snapshot: self.part.is_none(),
        };
        let found = self.seg.search(q, kk, &o)?;
        if found.len() < kk && !opts.exact && self.combined.is_some() {
            // A filtered walk (or probe) that came back short while
            // enough vectors match: scan the allowed slots exactly,
            // so a search never returns fewer than k matches when
            // k exist.
            return Ok(self
                .seg
                .search(q, kk, &SearchOptions { exact: true, ..o })?);
        }
        Ok(found)
    }

    fn filter(&self) -> Option<&Bitset> {
        self.combined
            .as_ref()
            .or_else(|| self.dead.as_ref().and_then(|d| d.allowed.as_ref()))
    }

    /// Keys of the slots set in `combined` (live ones).
    fn allowed_keys(&self, out: &mut Vec<u64>) {
        let Some(c) = &self.combined else {
            return;
        };
        match self.part.map(|p| &p.body) {
            Some(Body::Sealed { seg, .. }) => out.extend(
                c.iter()
                    .filter(|&s| seg.is_live(s as u32))
                    .map(|s| seg.key(s as u32)),
            ),
            Some(Body::Frozen { index, .. }) => {
                let v = index.view();
                out.extend(
                    c.iter()
                        .filter(|&s| v.is_live(s as u32))
                        .map(|s| v.key(s as u32)),
                )
            }
            None => {}
        }
    }
}

impl Inner {
    /// Every part of the view `v` with the slots a search or count may
    /// return: the view's, the caller's keys and the payload predicate,
    /// ANDed. The mutable part always has its slots listed (the view's
    /// cut: each key there has one slot, whose row never changes however
    /// many writes land while the read runs).
    pub(super) fn segments<'s>(
        &self,
        v: &'s View,
        keys: Option<&[u64]>,
        pred: Option<&Bound>,
    ) -> Result<Vec<Seg<'s>>> {
        let st = &*v.st;
        let mut out = Vec::with_capacity(st.parts.len() + 1);
        // The mutable part: rows are evaluated in place.
        {
            let active = &*st.active;
            let mut combined = v.cut.clone();
            if let Some(k) = keys {
                combined = combined.and(&active.filter_for_keys(k));
            }
            if let Some(b) = pred {
                combined = combined.and(&st.rows.matching(b, combined.len()));
            }
            let allowed = combined.count();
            out.push(Seg {
                seg: active,
                part: None,
                live: allowed,
                dead: None,
                allowed: Some(allowed),
                combined: Some(combined),
            });
        }
        for (s, dead) in st.parts.iter().zip(&v.dead) {
            let dead = dead.clone();
            let read = s.read();
            let mut combined: Option<Bitset> = keys.map(|k| read.filter_for_keys(k));
            if let Some(b) = pred {
                let f: Option<Arc<Bitset>> = match &s.body {
                    Body::Frozen { index, rows, .. } => {
                        let live = index.view().live_slots();
                        Some(Arc::new(rows.matching(b, live.len()).and(&live)))
                    }
                    Body::Sealed { seg, .. } => match seg.payload()? {
                        Some(p) => {
                            Some(p.eval_cached(b, || seg.live_slots()).map_err(|reason| {
                                StoreError::Corrupt {
                                    file: seg.path().to_path_buf(),
                                    offset: 0,
                                    reason,
                                }
                            })?)
                        }
                        // No payload in this segment: every row is null, so
                        // the predicate is the same for all of them.
                        None if b.matches(&[]) => None,
                        None => Some(Arc::new(Bitset::new(seg.slot_count()))),
                    },
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
                seg: read,
                part: Some(s),
                live: read.len().saturating_sub(dead.keys.len()),
                allowed: combined.as_ref().map(Bitset::count),
                combined,
                dead: Some(dead),
            });
        }
        Ok(out)
    }
}

impl Collection {
    /// Live vectors whose payload passes `pred` (all live vectors for
    /// `None`).
    pub fn count(&self, pred: Option<&Bound>) -> Result<usize> {
        let Some(pred) = pred else {
            return Ok(self.len());
        };
        let v = self.inner.view();
        let segs = self.inner.segments(&v, None, Some(pred))?;
        Ok(segs.iter().map(|s| s.allowed.unwrap_or(s.live)).sum())
    }

    /// Keys of the live vectors whose payload passes `pred`, part by part
    /// (the mutable part first).
    pub fn keys_where(&self, pred: Option<&Bound>) -> Result<Vec<u64>> {
        let Some(pred) = pred else {
            return Ok(self.keys().collect());
        };
        let v = self.inner.view();
        let segs = self.inner.segments(&v, None, Some(pred))?;
        let mut out = Vec::new();
        if let Some(c) = &segs[0].combined {
            let view = v.st.active.view();
            out.extend(c.iter().map(|slot| view.key(slot as u32)));
        }
        for s in &segs[1..] {
            s.allowed_keys(&mut out);
        }
        Ok(out)
    }

    /// The payload of `keys` as an Arrow record batch, one row per key
    /// (all null where a key is missing), restricted to `columns` when
    /// given (an unknown column is [`crate::PayloadError::UnknownField`]).
    pub fn payload_table(
        &self,
        keys: &[u64],
        columns: Option<&[String]>,
    ) -> Result<arrow_array::RecordBatch> {
        let schema = self.inner.schema.read().clone();
        let rows = self.payload_rows(keys)?;
        rows_table(&schema, rows, columns)
    }

    /// Live vectors (at one moment between whole writes).
    pub fn len(&self) -> usize {
        let (_g, st) = self.inner.visible_state();
        st.live()
    }

    /// Whether no vector is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs a [`Query`]: checked ([`Query::check`]), then a dense search
    /// ([`Answer::Dense`]) or a text / hybrid one ([`Answer::Fused`], both
    /// legs on one snapshot). The one entry every front end calls.
    pub fn query(&self, q: &Query<'_>) -> Result<Answer> {
        q.check()?;
        if q.text.is_some() {
            return self.fused(q).map(Answer::Fused);
        }
        self.search(&q.vectors, q.k, &q.opts).map(Answer::Dense)
    }

    /// The k nearest live vectors to each query, over every part (in
    /// parallel), merged by distance with ties broken by key.
    pub fn search(
        &self,
        queries: &[VectorRef<'_>],
        k: usize,
        opts: &CollectionSearch<'_>,
    ) -> Result<Vec<Vec<Neighbor>>> {
        // Write and build threads give way while this search runs (and
        // for a moment after it).
        let _running = sagitta_index::sched::foreground::search();
        let v = self.inner.view();
        let k = crate::limits::check_k(k, v.live())?;
        crate::limits::check_knobs(opts.ef, opts.nprobe, opts.refine)?;
        if k == 0 {
            return Ok(vec![Vec::new(); queries.len()]);
        }
        let segs = self.inner.segments(&v, opts.filter, opts.predicate)?;
        self.dense_in(&segs, queries, k, opts)
    }

    /// A dense [`Query`] ([`Collection::query`] without a text), each hit
    /// with its row as the search found it: the payload row (and with
    /// `with_vectors` the stored vector) of the very part and slot that
    /// answered, in the same snapshot. A hit therefore always comes with
    /// the payload written together with the vector it was scored on,
    /// whatever is overwritten, removed, frozen, flushed or merged while
    /// the query runs, where a lookup by key after the search
    /// ([`Collection::payload_rows`]) can find a newer version, or none.
    /// Of the mutable part, the search sees the rows whose writes had
    /// completed when it began. A text or hybrid query is
    /// [`StoreError::InvalidQuery`].
    pub fn search_rows(&self, q: &Query<'_>, with_vectors: bool) -> Result<SearchRows> {
        q.check()?;
        if q.text.is_some() {
            return Err(StoreError::InvalidQuery(
                "search_rows runs dense queries; a text or hybrid query runs in query".into(),
            ));
        }
        let opts = &q.opts;
        let _running = sagitta_index::sched::foreground::search();
        let v = self.inner.view();
        let st = &*v.st;
        let k = crate::limits::check_k(q.k, v.live())?;
        crate::limits::check_knobs(opts.ef, opts.nprobe, opts.refine)?;
        let segs = self.inner.segments(&v, opts.filter, opts.predicate)?;
        let found = if k == 0 {
            vec![Vec::new(); q.vectors.len()]
        } else {
            dense_tagged(&segs, &q.vectors, k, opts)?
        };
        // Taken after the search: every row it can return was written
        // under this schema or a shorter one (schemas only grow).
        let schema = self.inner.schema.read().clone();
        let vb = with_vectors.then(|| self.inner.config.space.vector_bytes());
        let rows = found
            .iter()
            .map(|f| self.rows_found(st, &segs, f, &schema, vb))
            .collect::<Result<_>>()?;
        Ok(SearchRows {
            schema,
            hits: found
                .into_iter()
                .map(|f| f.into_iter().map(|(n, _)| n).collect())
                .collect(),
            rows,
        })
    }

    /// The rows of `found` (hits tagged with the index of the part in
    /// `segs` that returned them): keys, payload rows laid out by
    /// `schema`, and with `vb` the first `vb` bytes of each stored vector.
    fn rows_found(
        &self,
        st: &State,
        segs: &[Seg<'_>],
        found: &[(Neighbor, usize)],
        schema: &Schema,
        vb: Option<usize>,
    ) -> Result<ScanBatch> {
        let n = found.len();
        let mut out = ScanBatch {
            keys: found.iter().map(|(h, _)| h.key).collect(),
            vectors: vec![0; n * vb.unwrap_or(0)],
            rows: Vec::with_capacity(n),
        };
        // Where each key of the mutable part is now (its key map, read
        // before the view is taken).
        let now: Vec<Option<u32>> = found
            .iter()
            .map(|&(h, i)| match segs[i].part {
                None => st.active.slot_of(h.key),
                Some(_) => None,
            })
            .collect();
        // Slots, and the mutable part's vectors under its view; its rows
        // are read after the view is let go (a write holds the rows' lock
        // while it may need the index's exclusively, to grow it).
        let mut slots = Vec::with_capacity(n);
        {
            let view = st.active.view();
            for (j, &(h, i)) in found.iter().enumerate() {
                let part = segs[i].part;
                let slot = match part {
                    None => active_slot(&view, segs[i].combined.as_ref(), now[j], h.key),
                    Some(p) => p.read().slot_of(h.key),
                };
                let Some(slot) = slot else {
                    return Err(StoreError::Corrupt {
                        file: self.inner.dir.clone(),
                        offset: 0,
                        reason: format!(
                            "in memory: key {} of a search hit is not in the part that \
                             returned it",
                            h.key
                        ),
                    });
                };
                match (part, vb) {
                    (None, Some(vb)) => {
                        out.vectors[j * vb..(j + 1) * vb].copy_from_slice(&view.vector(slot)[..vb])
                    }
                    (Some(p), _) => p.prefetch_payload(slot),
                    (None, None) => {}
                }
                slots.push(slot);
            }
        }
        for (j, (&(_, i), &slot)) in found.iter().zip(&slots).enumerate() {
            let row: Row = match segs[i].part {
                None => st.rows.get(slot).unwrap_or_default(),
                Some(p) => {
                    if let Some(vb) = vb {
                        let to = &mut out.vectors[j * vb..(j + 1) * vb];
                        p.with_view(|g| {
                            let r = g.full(slot).unwrap_or_else(|| g.vector(slot));
                            let m = vb.min(r.len());
                            to[..m].copy_from_slice(&r[..m]);
                        });
                    }
                    p.payload_row(schema, slot)?
                }
            };
            out.rows.push(row);
        }
        Ok(out)
    }

    /// A dense search of the parts `segs` of one snapshot for the `k`
    /// (checked, at least 1) nearest of each query.
    pub(super) fn dense_in(
        &self,
        segs: &[Seg<'_>],
        queries: &[VectorRef<'_>],
        k: usize,
        opts: &CollectionSearch<'_>,
    ) -> Result<Vec<Vec<Neighbor>>> {
        // Parts with nothing to return are dropped up front, so a query
        // only fans out over threads when two or more parts can answer.
        let segs: Vec<&Seg<'_>> = segs.iter().filter(|s| s.answers()).collect();
        let per_seg = |s: &Seg<'_>, q: VectorRef<'_>| s.search(q, k, opts);
        let finish = |all: Vec<Neighbor>, merged: bool| finish_hits(all, merged, k, opts.radius);
        if queries.len() == 1 {
            let q = queries[0];
            let all: Vec<Neighbor> = match segs.len() {
                0 => Vec::new(),
                1 => per_seg(segs[0], q)?,
                _ => {
                    let parts: Vec<Vec<Neighbor>> = segs
                        .par_iter()
                        .map(|s| per_seg(s, q))
                        .collect::<Result<_>>()?;
                    parts.into_iter().flatten().collect()
                }
            };
            return Ok(vec![finish(all, segs.len() > 1)]);
        }
        if segs.len() <= 1 {
            return queries
                .par_iter()
                .enumerate()
                .map(|(i, &q)| match segs.first() {
                    None => Ok(Vec::new()),
                    Some(s) => per_seg(s, q).map_err(|e| at_row(i, e)),
                })
                .collect();
        }
        self.search_segment_major(queries, &segs, &per_seg, &finish, &at_row)
    }

    /// A batch over several parts, segment by segment: each task searches
    /// one part for a run of queries, so that part's graph and codes stay
    /// in cache across the run; tasks run in parallel (over parts and
    /// runs), then each query's hits are merged.
    fn search_segment_major(
        &self,
        queries: &[VectorRef<'_>],
        segs: &[&Seg<'_>],
        per_seg: &(dyn Fn(&Seg<'_>, VectorRef<'_>) -> Result<Vec<Neighbor>> + Sync),
        finish: &(dyn Fn(Vec<Neighbor>, bool) -> Vec<Neighbor> + Sync),
        at_row: &(dyn Fn(usize, StoreError) -> StoreError + Sync),
    ) -> Result<Vec<Vec<Neighbor>>> {
        let nq = queries.len();
        // Runs long enough to reuse a part's cache lines, short enough to
        // give every thread work when there are few parts.
        let threads = rayon::current_num_threads().max(1);
        let per_part = (threads * 4).div_ceil(segs.len()).max(1);
        let run = nq.div_ceil(per_part).clamp(8, 256);
        let runs = nq.div_ceil(run);
        let tasks: Vec<(usize, usize)> = (0..segs.len())
            .flat_map(|s| (0..runs).map(move |r| (s, r)))
            .collect();
        let found: Vec<RunHits> = tasks
            .par_iter()
            .map(|&(s, r)| {
                let lo = r * run;
                let hi = (lo + run).min(nq);
                (lo..hi)
                    .map(|i| per_seg(segs[s], queries[i]).map_err(|e| (i, e)))
                    .collect()
            })
            .collect();
        let mut hits: Vec<Vec<Vec<Neighbor>>> = Vec::with_capacity(tasks.len());
        let mut first_err: Option<(usize, StoreError)> = None;
        for f in found {
            match f {
                Ok(h) => hits.push(h),
                Err((i, e)) => {
                    if first_err.as_ref().is_none_or(|(j, _)| i < *j) {
                        first_err = Some((i, e));
                    }
                    hits.push(Vec::new());
                }
            }
        }
        if let Some((i, e)) = first_err {
            return Err(at_row(i, e));
        }
        // hits[s * runs + r][i - r * run] holds part s's hits for query i.
        Ok((0..nq)
            .into_par_iter()
            .map(|i| {
                let (r, j) = (i / run, i % run);
                let n: usize = (0..segs.len()).map(|s| hits[s * runs + r][j].len()).sum();
                let mut all = Vec::with_capacity(n);
                for s in 0..segs.len() {
                    all.extend_from_slice(&hits[s * runs + r][j]);
                }
                finish(all, true)
            })
            .collect())
    }

    /// Every live key, part by part, without loading the vectors.
    pub fn keys(&self) -> impl Iterator<Item = u64> + Send + 'static {
        self.items_inner(false).map(|(k, _)| k)
    }

    /// Every live (key, stored vector bytes), read lazily part by part.
    pub fn items(&self) -> impl Iterator<Item = (u64, Vec<u8>)> + Send + 'static {
        self.items_inner(true)
    }

    fn items_inner(&self, vectors: bool) -> impl Iterator<Item = (u64, Vec<u8>)> + Send + 'static {
        let st = self.inner.snapshot();
        let vb = if vectors {
            self.inner.config.space.vector_bytes()
        } else {
            0
        };
        let active = st.active.clone();
        // Slots past the completed ones belong to a write in flight.
        let active_slots = st.rows.complete.load(Ordering::Acquire) as u32;
        let active_iter = (0..active_slots).filter_map(move |slot| {
            let view = active.view();
            if !view.is_live(slot) {
                return None;
            }
            Some((view.key(slot), view.vector(slot)[..vb].to_vec()))
        });
        let parts = st.parts.clone();
        let parts_iter = parts.into_iter().flat_map(move |p| PartIter {
            part: p,
            next: 0,
            buf: Vec::new(),
            vb,
        });
        active_iter.chain(parts_iter)
    }
}

/// One task's hits (per query of its run), or the first failing query.
type RunHits = std::result::Result<Vec<Vec<Neighbor>>, (usize, StoreError)>;

/// What [`Collection::search_rows`] returns: per query, its hits and the
/// rows the search found them in.
#[derive(Debug, Default)]
pub struct SearchRows {
    /// The payload schema the rows are laid out by (the collection's when
    /// the search ended).
    pub schema: Schema,
    /// Per query: the hits, as [`Collection::search`] returns them.
    pub hits: Vec<Vec<Neighbor>>,
    /// Per query, one row per hit in hit order: its key, payload row
    /// (empty for a row written without payload) and, when asked for,
    /// stored vector (`vector_bytes` each, contiguous; else empty).
    pub rows: Vec<ScanBatch>,
}

/// [`Collection::dense_in`] with each hit tagged by the index in `segs`
/// of the part that returned it (the same hits: one part's in its order;
/// from several, by distance, ties by key, then the mutable part and the
/// newest part first; one hit per key). Queries of a batch run in
/// parallel, the parts of one query too.
fn dense_tagged(
    segs: &[Seg<'_>],
    queries: &[VectorRef<'_>],
    k: usize,
    opts: &CollectionSearch<'_>,
) -> Result<Vec<Vec<(Neighbor, usize)>>> {
    let answer: Vec<usize> = (0..segs.len()).filter(|&i| segs[i].answers()).collect();
    let one = |q: VectorRef<'_>, fan_out: bool| -> Result<Vec<(Neighbor, usize)>> {
        let per = |i: &usize| segs[*i].search(q, k, opts);
        let parts: Vec<Vec<Neighbor>> = if fan_out && answer.len() > 1 {
            answer.par_iter().map(per).collect::<Result<_>>()?
        } else {
            answer.iter().map(per).collect::<Result<_>>()?
        };
        let mut all: Vec<(Neighbor, usize)> = parts
            .into_iter()
            .zip(&answer)
            .flat_map(|(hits, &i)| hits.into_iter().map(move |h| (h, i)))
            .collect();
        if answer.len() > 1 {
            // Part 0 is the mutable part, the others oldest first.
            let rank = |i: usize| if i == 0 { 0 } else { segs.len() - i };
            all.sort_unstable_by(|(a, i), (b, j)| {
                a.distance
                    .total_cmp(&b.distance)
                    .then(a.key.cmp(&b.key))
                    .then(rank(*i).cmp(&rank(*j)))
            });
            let mut seen = HashSet::with_capacity(all.len());
            all.retain(|(h, _)| seen.insert(h.key));
        }
        if let Some(r) = opts.radius {
            all.retain(|(h, _)| h.distance <= r);
        }
        all.truncate(k);
        Ok(all)
    };
    if queries.len() == 1 {
        return Ok(vec![one(queries[0], true)?]);
    }
    queries
        .par_iter()
        .enumerate()
        .map(|(i, &q)| one(q, false).map_err(|e| at_row(i, e)))
        .collect()
}

/// The slot of the mutable part's `view` holding `key` among the slots
/// `cut` allows ([`View`]'s cut: at most one per key): `now`, where
/// the key is now, unless it was overwritten or removed since the cut,
/// then found by a walk of the cut.
fn active_slot(
    view: &sagitta_index::IndexView<'_>,
    cut: Option<&Bitset>,
    now: Option<u32>,
    key: u64,
) -> Option<u32> {
    let cut = cut?;
    if let Some(s) = now {
        if cut.contains(s as usize) {
            return Some(s);
        }
    }
    cut.iter().map(|s| s as u32).find(|&s| view.key(s) == key)
}

/// A query's hits from every part, `merged` (from several parts: sorted
/// by distance, ties by key, one hit per key) or not (one part's, in its
/// order), then cut at `radius` and `k`.
fn finish_hits(
    mut all: Vec<Neighbor>,
    merged: bool,
    k: usize,
    radius: Option<f32>,
) -> Vec<Neighbor> {
    if merged {
        all.sort_unstable_by(|a, b| a.distance.total_cmp(&b.distance).then(a.key.cmp(&b.key)));
        dedup_keys(&mut all, k);
    }
    if let Some(r) = radius {
        all.retain(|n| n.distance <= r);
    }
    all.truncate(k);
    all
}

/// An error of query `i` of a batch: one about the query vector itself
/// names its row.
fn at_row(i: usize, e: StoreError) -> StoreError {
    match e {
        StoreError::Index(
            e @ (IndexError::Dimensions { .. }
            | IndexError::NotFinite { .. }
            | IndexError::WrongInputKind { .. }
            | IndexError::Kernel(_)),
        ) => row_err(i, e),
        e => e,
    }
}

/// Keeps the first (nearest) hit of each key among the sorted `all`,
/// stopping at `k` kept; short lists are checked in place, without a set.
fn dedup_keys(all: &mut Vec<Neighbor>, k: usize) {
    if all.len() <= 64 {
        let mut kept = 0;
        for i in 0..all.len() {
            if kept == k {
                break;
            }
            let n = all[i];
            if !all[..kept].iter().any(|m| m.key == n.key) {
                all[kept] = n;
                kept += 1;
            }
        }
        all.truncate(kept);
    } else {
        let mut seen = HashSet::with_capacity(k * 2);
        all.retain(|n| seen.insert(n.key));
    }
}

/// Lazy live rows of one part, read a block at a time.
struct PartIter {
    part: Arc<Part>,
    next: u32,
    buf: Vec<(u32, u64, Vec<u8>)>,
    vb: usize,
}

impl Iterator for PartIter {
    type Item = (u64, Vec<u8>);

    fn next(&mut self) -> Option<(u64, Vec<u8>)> {
        loop {
            if let Some((_, k, v)) = self.buf.pop() {
                return Some((k, v));
            }
            if self.next as usize >= self.part.slot_count() {
                return None;
            }
            let mut block = self.part.live_keys_from(self.next, 1024, self.vb);
            self.next = block
                .last()
                .map_or(self.part.slot_count() as u32, |b| b.0 + 1);
            block.reverse();
            self.buf = block;
        }
    }
}

/// Payload rows (`None`: all null) laid out by `schema` as an Arrow record
/// batch, restricted to `columns` when given (an unknown column is
/// [`crate::PayloadError::UnknownField`]).
fn rows_table(
    schema: &Schema,
    rows: Vec<Option<Row>>,
    columns: Option<&[String]>,
) -> Result<arrow_array::RecordBatch> {
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

impl SearchRows {
    /// The payload of the hits as one Arrow record batch of `k` rows per
    /// query, hit order (all null past a query's last hit), restricted to
    /// `columns` when given: the rows the search found, as
    /// [`Collection::payload_table`] lays out rows read by key.
    pub fn payload_table(
        &self,
        k: usize,
        columns: Option<&[String]>,
    ) -> Result<arrow_array::RecordBatch> {
        let mut rows = Vec::with_capacity(self.rows.len() * k);
        for b in &self.rows {
            rows.extend(b.rows.iter().take(k).cloned().map(Some));
            rows.extend((b.rows.len().min(k)..k).map(|_| None));
        }
        rows_table(&self.schema, rows, columns)
    }
}
