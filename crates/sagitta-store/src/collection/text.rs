//! Text and hybrid search over a collection: the BM25 leg (statistics
//! gathered over every part first, so scores of different segments are
//! comparable; each part's best found by MaxScore under its allowed slots:
//! live, not dead, passing the key filter and payload predicate), the
//! dense leg (the ordinary kNN search), and their fusion.
//!
//! Both legs of a query read one view ([`super::search::View`]): the same
//! parts, the same dead sets, and of the mutable part the same slots
//! (those named by a key when the query began). Rows written while the
//! query runs are seen by neither leg, and rows replaced or removed
//! while it runs stay in both.

use super::part::Body;
use super::search::Seg;
use super::{Collection, State};
use crate::error::{Result, StoreError};
use crate::request::{CollectionSearch, Query};
use parking_lot::RwLockReadGuard;
use sagitta_index::{GraphView, VectorRef};
use sagitta_text::{
    fuse, Accumulator, FieldRead, Fused, Fusion, MemText, TextQuery, TextSection, Wanted,
    MAX_TEXT_BYTES,
};
use std::cell::RefCell;

/// A row of a text or hybrid search.
pub type TextHit = Fused;

thread_local! {
    static ACC: RefCell<Accumulator> = RefCell::new(Accumulator::default());
}

/// A part's text index as a search holds it.
enum PartText<'a> {
    Mem(RwLockReadGuard<'a, MemText>),
    Section(TextSection<'a>),
    None,
}

impl PartText<'_> {
    fn fields(&self) -> Vec<&dyn FieldRead> {
        match self {
            PartText::Mem(m) => m.fields().iter().map(|f| f as &dyn FieldRead).collect(),
            PartText::Section(s) => s.fields().iter().map(|f| f as &dyn FieldRead).collect(),
            PartText::None => Vec::new(),
        }
    }
}

fn check_text(text: &str) -> Result<()> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(StoreError::InvalidText(format!(
            "{} bytes of text: at most {MAX_TEXT_BYTES}",
            text.len()
        )));
    }
    Ok(())
}

impl Collection {
    /// The BM25 leg alone: the `depth` best (key, score) over every part,
    /// best first, ties by smaller key. Empty when the text has no
    /// searchable term.
    pub fn text_leg(
        &self,
        text: &str,
        depth: usize,
        opts: &CollectionSearch<'_>,
    ) -> Result<Vec<(u64, f32)>> {
        check_text(text)?;
        let v = self.inner.view();
        let segs = self.inner.segments(&v, opts.filter, opts.predicate)?;
        self.text_leg_in(&v.st, &segs, text, depth)
    }

    /// The BM25 leg over the parts `segs` of the snapshot `st`.
    fn text_leg_in(
        &self,
        st: &State,
        segs: &[Seg<'_>],
        text: &str,
        depth: usize,
    ) -> Result<Vec<(u64, f32)>> {
        let c = &self.inner.config;
        if c.text.is_empty() {
            return Err(StoreError::InvalidText(
                "this collection has no text fields (create it with text_fields)".into(),
            ));
        }
        let mut q = TextQuery::new(text, &c.text, c.bm25);
        if q.is_empty() || depth == 0 {
            return Ok(Vec::new());
        }
        let texts: Vec<PartText<'_>> = segs
            .iter()
            .map(|s| -> Result<PartText<'_>> {
                let rows = match s.part.map(|p| &p.body) {
                    None => &st.rows,
                    Some(Body::Frozen { rows, .. }) => rows,
                    Some(Body::Sealed { seg, .. }) => {
                        return Ok(seg.text()?.map_or(PartText::None, PartText::Section))
                    }
                };
                Ok(match &rows.text {
                    Some((m, _)) => PartText::Mem(m.read()),
                    None => PartText::None,
                })
            })
            .collect::<Result<_>>()?;
        for t in &texts {
            q.add_stats(t.fields());
        }
        q.finish();
        // The largest parts first: the best `depth` so far is a floor the
        // later parts' documents must reach, and a high one early lets
        // them skip more.
        let mut order: Vec<usize> = (0..segs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(segs[i].live));
        let mut all: Vec<(u64, f32)> = Vec::new();
        ACC.with(|acc| {
            let mut acc = acc.borrow_mut();
            for i in order {
                let (s, t) = (&segs[i], &texts[i]);
                if s.live == 0 || s.allowed == Some(0) {
                    continue;
                }
                let floor = if all.len() == depth {
                    all[depth - 1].1
                } else {
                    0.0
                };
                let want = Wanted { depth, floor };
                collect_allowed(s, &st.active, &q, t.fields(), &mut acc, want, &mut all);
                top(&mut all, depth);
            }
        });
        Ok(all)
    }

    /// A text search (BM25 only), or a hybrid one (dense + BM25, fused)
    /// when a vector is given or the collection embeds the text: the
    /// [`Query`] with a text, checked and run as [`Collection::query`]
    /// runs it.
    pub fn search_text(&self, q: &Query<'_>) -> Result<Vec<TextHit>> {
        q.check()?;
        self.fused(q)
    }

    /// Runs a checked text or hybrid query: both legs over one snapshot.
    pub(super) fn fused(&self, q: &Query<'_>) -> Result<Vec<TextHit>> {
        let Some(text) = q.text else {
            return Err(StoreError::InvalidQuery(
                "a text search needs a text".into(),
            ));
        };
        let fusion = q.fusion_or_default();
        let depth = q.depth_or_default();
        // Embedded before the snapshot is taken (the slow step), so the
        // snapshot is as fresh as the legs that read it.
        let embedded;
        let vector = match q.vectors.first() {
            Some(&v) => Some(v),
            None if self.inner.config.embed_model.is_some() => {
                embedded = self.embed(&[text])?;
                Some(VectorRef::F32(&embedded))
            }
            None => None,
        };
        let (want_dense, want_text) = match (fusion, vector) {
            (_, None) => (false, true),
            (Fusion::Alpha { alpha }, Some(_)) if alpha >= 1.0 => (true, false),
            (Fusion::Alpha { alpha }, Some(_)) if alpha <= 0.0 => (false, true),
            _ => (true, true),
        };
        if want_text && self.inner.config.text.is_empty() {
            return Err(StoreError::InvalidText(
                "this collection has no text fields (create it with text_fields)".into(),
            ));
        }
        if !want_dense
            && TextQuery::new(text, &self.inner.config.text, self.inner.config.bm25).is_empty()
        {
            return Err(StoreError::InvalidText(
                "the text has no searchable terms (empty, or only stop words)".into(),
            ));
        }
        let _running = sagitta_index::sched::foreground::search();
        let v = self.inner.view();
        let st = &*v.st;
        let segs = self.inner.segments(&v, q.opts.filter, q.opts.predicate)?;
        let live: usize = segs.iter().map(|s| s.allowed.unwrap_or(s.live)).sum();
        let k = crate::limits::check_k(q.k, live)?;
        if k == 0 {
            return Ok(Vec::new());
        }
        let text_hits = if want_text {
            self.text_leg_in(st, &segs, text, depth)?
        } else {
            Vec::new()
        };
        let dense: Vec<(u64, f32)> = match (want_dense, vector) {
            (true, Some(v)) => self
                .dense_in(&segs, &[v], depth, &q.opts)?
                .pop()
                .unwrap_or_default()
                .into_iter()
                .map(|n| (n.key, n.distance))
                .collect(),
            _ => Vec::new(),
        };
        let mut hits = fuse(&dense, &text_hits, fusion, k);
        if !want_dense {
            // One leg: its own score, not a rank transform of it.
            for h in &mut hits {
                h.score = h.text.map_or(0.0, |t| t.1);
            }
        }
        Ok(hits)
    }
}

/// Appends the `depth` best accepted hits of one part (live, not dead, in
/// the part's combined filter) as (key, score), plus any tied with the
/// last of them (so ties can go to the smaller key at the merge). Only
/// those are mapped to keys.
fn collect_allowed(
    s: &Seg<'_>,
    active: &sagitta_index::Index,
    q: &TextQuery,
    fields: Vec<&dyn FieldRead>,
    acc: &mut Accumulator,
    want: Wanted,
    out: &mut Vec<(u64, f32)>,
) {
    let allowed = s
        .combined
        .as_ref()
        .or_else(|| s.dead.as_ref().and_then(|d| d.allowed.as_ref()));
    let ok = |slot: u32| allowed.is_none_or(|b| b.contains(slot as usize));
    let nslots = s.seg.slot_count();
    let mut slots: Vec<(u32, f32)> = Vec::new();
    let mut run = |live: &dyn Fn(u32) -> bool, key: &dyn Fn(u32) -> u64| {
        q.top(
            fields.iter().copied(),
            nslots,
            want,
            |slot| ok(slot) && live(slot),
            acc,
            &mut slots,
        );
        out.extend(slots.iter().map(|&(slot, x)| (key(slot), x)));
    };
    match s.part.map(|p| &p.body) {
        Some(Body::Sealed { seg, .. }) => run(&|slot| seg.is_live(slot), &|slot| seg.key(slot)),
        Some(Body::Frozen { index, .. }) => {
            let v = index.view();
            run(&|slot| v.is_live(slot), &|slot| v.key(slot));
        }
        // The mutable part: the view's cut alone says which slots are
        // live (a slot replaced or removed since is still the query's).
        None => {
            let v = active.view();
            run(&|_| true, &|slot| v.key(slot));
        }
    }
}

/// Keeps the `depth` best of `v` (score descending, key ascending),
/// sorted.
fn top(v: &mut Vec<(u64, f32)>, depth: usize) {
    let cmp = |a: &(u64, f32), b: &(u64, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if v.len() > depth && depth > 0 {
        v.select_nth_unstable_by(depth - 1, cmp);
    }
    v.truncate(depth.min(v.len()));
    v.sort_unstable_by(cmp);
}
