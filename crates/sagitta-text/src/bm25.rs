//! BM25 with collection-wide statistics. A query is analysed once per
//! field, then every part adds its document counts, lengths and
//! document frequencies ([`TextQuery::add_stats`]) before any part is
//! scored ([`TextQuery::score`]), so the scores of different segments are
//! on one scale. Scoring is term-at-a-time into a per-part accumulator
//! that remembers which slots it touched; a search for the best documents
//! skips most postings of common terms ([`TextQuery::top`], MaxScore).
//!
//! idf = ln(1 + (N − df + 0.5) / (df + 0.5)) and a term scores
//! idf · tf · (k1 + 1) / (tf + k1 · (1 − b + b · dl / avgdl)), summed over
//! the query's distinct terms and the fields searched (Lucene's BM25; a
//! term repeated in the query counts once, measured slightly better on
//! debian-pkg-retrieval than weighting it by its count).

use crate::field::FieldRead;
use crate::mem::TextFieldSpec;

/// BM25 parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bm25 {
    /// Term-frequency saturation.
    pub k1: f32,
    /// Length normalisation (0 = none, 1 = full).
    pub b: f32,
}

/// The default: k1 = 0.9, b = 0.4 (Anserini's defaults). On
/// debian-pkg-retrieval's dev split (BENCHMARKS.md), Lucene's textbook
/// k1 = 1.2, b = 0.75 gives nDCG@10 0.374 and these about 0.44: its
/// relevant rows are long paragraphs competing with short titles, and
/// strong length normalisation favours the short ones. b = 0.2 measured
/// higher still there (0.462) and is a per-collection setting.
impl Default for Bm25 {
    fn default() -> Self {
        Bm25 { k1: 0.9, b: 0.4 }
    }
}

impl Bm25 {
    /// Checks the parameters: k1 ≥ 0 and b in [0, 1], both finite.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.k1.is_finite() && self.k1 >= 0.0) {
            return Err(format!(
                "bm25_k1 = {}: must be a finite number >= 0",
                self.k1
            ));
        }
        if !(0.0..=1.0).contains(&self.b) {
            return Err(format!("bm25_b = {}: must be in [0, 1]", self.b));
        }
        Ok(())
    }
}

#[derive(Debug)]
pub(crate) struct FieldQuery {
    pub(crate) name: String,
    /// (term, weight in the query: 1, distinct terms).
    pub(crate) terms: Vec<(String, u32)>,
    df: Vec<u64>,
    pub(crate) weights: Vec<f32>,
    docs: u64,
    total_len: u64,
    pub(crate) avgdl: f32,
}

/// A text query with its collection-wide statistics.
#[derive(Debug)]
pub struct TextQuery {
    pub(crate) fields: Vec<FieldQuery>,
    pub(crate) params: Bm25,
}

impl TextQuery {
    /// Analyses `text` with each field's analyzer.
    pub fn new(text: &str, fields: &[TextFieldSpec], params: Bm25) -> TextQuery {
        let fields = fields
            .iter()
            .map(|f| {
                let mut terms = f.analyzer.analyzer().term_counts(text);
                for t in &mut terms {
                    t.1 = 1;
                }
                FieldQuery {
                    name: f.name.clone(),
                    df: vec![0; terms.len()],
                    weights: vec![0.0; terms.len()],
                    terms,
                    docs: 0,
                    total_len: 0,
                    avgdl: 1.0,
                }
            })
            .collect();
        TextQuery { fields, params }
    }

    /// Whether no field has a term to look for (empty text, or only stop
    /// words).
    pub fn is_empty(&self) -> bool {
        self.fields.iter().all(|f| f.terms.is_empty())
    }

    /// Adds one part's statistics for its fields.
    pub fn add_stats<'a>(&mut self, fields: impl IntoIterator<Item = &'a dyn FieldRead>) {
        for f in fields {
            let Some(q) = self.fields.iter_mut().find(|q| q.name == f.name()) else {
                continue;
            };
            q.docs += f.docs();
            q.total_len += f.total_len();
            for (i, (t, _)) in q.terms.iter().enumerate() {
                q.df[i] += f.postings(t).len() as u64;
            }
        }
    }

    /// Computes the term weights once every part's statistics are in.
    pub fn finish(&mut self) {
        let k1 = self.params.k1;
        for q in &mut self.fields {
            let n = q.docs as f64;
            q.avgdl = if q.docs == 0 {
                1.0
            } else {
                (q.total_len as f64 / n).max(1e-9) as f32
            };
            for (i, (_, qtf)) in q.terms.iter().enumerate() {
                let df = q.df[i] as f64;
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln().max(0.0);
                q.weights[i] = (idf * f64::from(*qtf) * f64::from(k1 + 1.0)) as f32;
            }
        }
    }

    /// Scores one part's fields into `acc` (sized to the part's slots):
    /// every posting, term at a time, the terms by weight, largest first
    /// (the order [`TextQuery::top`] sums in too).
    pub fn score<'a>(
        &self,
        fields: impl IntoIterator<Item = &'a dyn FieldRead>,
        acc: &mut Accumulator,
    ) {
        let fields: Vec<&dyn FieldRead> = fields.into_iter().collect();
        for c in self.cursors(&fields) {
            c.score_all(acc);
        }
    }
}

/// Scores by slot for one part, and the slots touched.
#[derive(Debug, Default)]
pub struct Accumulator {
    pub(crate) scores: Vec<f32>,
    pub(crate) touched: Vec<u32>,
}

impl Accumulator {
    /// Empties it for a part of `nslots` slots.
    pub fn reset(&mut self, nslots: usize) {
        for &s in &self.touched {
            if let Some(x) = self.scores.get_mut(s as usize) {
                *x = 0.0;
            }
        }
        self.touched.clear();
        self.scores.truncate(nslots);
        self.scores.resize(nslots, 0.0);
    }

    /// Adds `s` to `slot`'s score and returns the new score (0 for a
    /// slot past the part).
    #[inline]
    pub(crate) fn add_get(&mut self, slot: u32, s: f32) -> f32 {
        match self.scores.get_mut(slot as usize) {
            Some(x) => {
                if *x == 0.0 {
                    self.touched.push(slot);
                }
                *x += s;
                *x
            }
            None => 0.0,
        }
    }

    /// Every touched slot with its score, in the order first touched.
    pub fn hits(&self) -> impl Iterator<Item = (u32, f32)> + '_ {
        self.touched
            .iter()
            .map(|&s| (s, self.scores[s as usize]))
            .filter(|&(_, x)| x > 0.0)
    }

    /// Slots touched.
    pub fn touched(&self) -> usize {
        self.touched.len()
    }
}
