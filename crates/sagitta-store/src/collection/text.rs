//! Text and hybrid search over a collection: the BM25 leg (statistics
//! gathered over every part first, so scores of different segments are
//! comparable; each part's best found by MaxScore under its allowed slots:
//! live, not dead, passing the key filter and payload predicate), the
//! dense leg (the ordinary kNN search), and their fusion.

use super::part::Body;
use super::search::Seg;
use super::{Collection, CollectionSearch};
use crate::error::{Result, StoreError};
use parking_lot::RwLockReadGuard;
use sagitta_index::{GraphView, VectorRef};
use sagitta_text::{
    fuse, Accumulator, FieldRead, Fused, Fusion, MemText, TextQuery, TextSection, Wanted,
    MAX_TEXT_BYTES,
};
use std::cell::RefCell;

/// Default fusion of a hybrid search: min-max normalised scores weighted
/// 0.3 dense, 0.7 text. Chosen on debian-pkg-retrieval's dev split (see
/// BENCHMARKS.md "Full-text and hybrid search"), where it gave the best
/// nDCG@10 of the fusions tried (RRF, DBSF, z-scores, alpha sweeps).
pub const DEFAULT_FUSION: Fusion = Fusion::Alpha { alpha: 0.3 };

/// Default candidates per leg: `max(k, DEFAULT_DEPTH)` (depth barely
/// moved the default fusion's quality there; fewer is faster).
pub const DEFAULT_DEPTH: usize = 20;

/// A text or hybrid search.
#[derive(Debug, Clone, Copy)]
pub struct TextSearch<'a> {
    /// The query text (BM25 leg; embedded for the dense leg when the
    /// collection has an embedding model and no vector is given).
    pub text: &'a str,
    /// The dense leg's query vector (None: text only, or embedded).
    pub vector: Option<VectorRef<'a>>,
    /// Results wanted.
    pub k: usize,
    /// How the legs are combined (None: [`DEFAULT_FUSION`]; `Alpha` at 1.0
    /// runs the dense leg only, at 0.0 the text leg only).
    pub fusion: Option<Fusion>,
    /// Candidates taken from each leg (None: `max(k, DEFAULT_DEPTH)`).
    pub depth: Option<usize>,
    /// Filters (both legs) and dense-leg knobs.
    pub opts: CollectionSearch<'a>,
}

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
        let st = self.inner.snapshot();
        let segs = self.inner.segments(&st, opts.filter, opts.predicate)?;
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
    /// when a vector is given or the collection embeds the text.
    pub fn search_text(&self, s: &TextSearch<'_>) -> Result<Vec<TextHit>> {
        check_text(s.text)?;
        crate::limits::check_k(s.k, usize::MAX)?;
        crate::limits::check_knobs(s.opts.ef, s.opts.nprobe, s.opts.refine)?;
        crate::limits::check_depth(s.depth)?;
        let fusion = s.fusion.unwrap_or(DEFAULT_FUSION);
        if let Fusion::Alpha { alpha } = fusion {
            if !(0.0..=1.0).contains(&alpha) {
                return Err(StoreError::InvalidText(format!(
                    "alpha = {alpha}: must be in [0, 1] (1: dense only, 0: text only)"
                )));
            }
        }
        if let Fusion::Rrf { k } = fusion {
            if !(k.is_finite() && k >= 0.0) {
                return Err(StoreError::InvalidText(format!(
                    "rrf_k = {k}: must be a finite number >= 0"
                )));
            }
        }
        let depth = s.depth.unwrap_or(DEFAULT_DEPTH).max(s.k);
        let embedded;
        let vector = match s.vector {
            Some(v) => Some(v),
            None if self.inner.config.embed_model.is_some() => {
                embedded = self.embed(&[s.text])?;
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
        let text = if want_text {
            self.text_leg(s.text, depth, &s.opts)?
        } else {
            Vec::new()
        };
        if !want_dense && text.is_empty() && vector.is_none() {
            let q = TextQuery::new(s.text, &self.inner.config.text, self.inner.config.bm25);
            if q.is_empty() {
                return Err(StoreError::InvalidText(
                    "the text has no searchable terms (empty, or only stop words)".into(),
                ));
            }
        }
        let dense: Vec<(u64, f32)> = match (want_dense, vector) {
            (true, Some(v)) => {
                let live = self.len();
                if live == 0 {
                    Vec::new()
                } else {
                    self.search(&[v], depth.min(live), &s.opts)?
                        .pop()
                        .unwrap_or_default()
                        .into_iter()
                        .map(|n| (n.key, n.distance))
                        .collect()
                }
            }
            _ => Vec::new(),
        };
        let mut hits = fuse(&dense, &text, fusion, s.k);
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
        // A frozen part or the mutable one: an in-memory index.
        body => {
            let index = match body {
                Some(Body::Frozen { index, .. }) => index,
                _ => active,
            };
            let v = index.view();
            run(&|slot| v.is_live(slot), &|slot| v.key(slot));
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
