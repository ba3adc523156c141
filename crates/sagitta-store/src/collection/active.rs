//! Payload rows of a mutable part, by slot, and the filters evaluated
//! over them. A slot's row never changes once written (an upsert takes a
//! new slot), so a cached evaluation stays true for the slots it covers
//! and is only extended over slots added since.

use crate::filter::{Bound, FilterCache};
use crate::payload::{Row, Schema, Value};
use parking_lot::RwLock;
use rayon::prelude::*;
use sagitta_index::Bitset;
use sagitta_text::{MemText, TextFieldSpec};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[derive(Debug, Default)]
pub(crate) struct ActiveRows {
    pub rows: RwLock<Vec<Option<Row>>>,
    /// The full-text index of the part's text fields (None when the
    /// collection has none), with each field's schema position.
    pub text: Option<(RwLock<MemText>, Vec<String>)>,
    cache: FilterCache,
    /// Slots below this have their final row (set after each write has
    /// stored its rows); only those are cached.
    pub complete: AtomicUsize,
}

impl ActiveRows {
    /// Empty rows for a part of a collection with text fields `text`.
    pub fn new(text: &[TextFieldSpec]) -> ActiveRows {
        ActiveRows {
            text: (!text.is_empty()).then(|| {
                (
                    RwLock::new(MemText::new(text)),
                    text.iter().map(|f| f.name.clone()).collect(),
                )
            }),
            ..ActiveRows::default()
        }
    }

    /// Indexes the text fields of `row` (laid out by `schema`) as `slot`'s.
    ///
    /// `docs` holds (slot, row) pairs. The texts are analysed in parallel
    /// (the current rayon pool) under a shared lock, so searches go on,
    /// then added under the write lock in order.
    pub fn index_text(&self, schema: &Schema, docs: &[(u32, &[Value])]) {
        let Some((mem, names)) = &self.text else {
            return;
        };
        let cols: Vec<(usize, usize)> = names
            .iter()
            .enumerate()
            .filter_map(|(fi, name)| schema.index_of(name).map(|c| (fi, c)))
            .collect();
        if cols.is_empty() || docs.is_empty() {
            return;
        }
        type Analysed = (u32, usize, sagitta_text::TermCounts);
        let analysed: Vec<Analysed> = {
            let mem = mem.read();
            docs.par_iter()
                .with_min_len(32)
                .flat_map_iter(|&(slot, row)| {
                    let mem = &*mem;
                    cols.iter().filter_map(move |&(fi, c)| match row.get(c) {
                        Some(Value::Str(s)) => Some((slot, fi, mem.analyze(fi, s))),
                        _ => None,
                    })
                })
                .collect()
        };
        let mut mem = mem.write();
        for (slot, fi, counts) in analysed {
            mem.add_counts(fi, slot, &counts);
        }
    }

    pub fn get(&self, slot: u32) -> Option<Row> {
        self.rows.read().get(slot as usize).cloned().flatten()
    }

    /// Column `col` of `slot`'s row (null where the row is shorter or
    /// absent), without copying the rest of the row.
    pub fn value(&self, slot: u32, col: usize) -> Value {
        self.rows
            .read()
            .get(slot as usize)
            .and_then(|r| r.as_deref())
            .and_then(|r| r.get(col).cloned())
            .unwrap_or(Value::Null)
    }

    pub fn mark_complete(&self, slots: usize) {
        self.complete.store(slots, Ordering::Release);
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
    pub fn matching(&self, b: &Bound, n: usize) -> Arc<Bitset> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// One column of a row is read as the whole row has it: a row shorter
    /// than the schema (trailing nulls dropped) and a slot without a row
    /// read as null.
    #[test]
    fn one_value_is_the_rows_value_at_that_column() {
        let rows = ActiveRows::new(&[]);
        *rows.rows.write() = vec![
            Some(vec![Value::Int(7), Value::Str("a".into())].into_boxed_slice()),
            None,
            Some(vec![Value::Int(9)].into_boxed_slice()),
        ];
        assert_eq!(rows.value(0, 0), Value::Int(7));
        assert_eq!(rows.value(0, 1), Value::Str("a".into()));
        assert_eq!(rows.value(1, 0), Value::Null);
        assert_eq!(rows.value(2, 1), Value::Null);
        assert_eq!(rows.value(5, 0), Value::Null);
        for slot in 0..3 {
            for col in 0..2 {
                let whole = rows.get(slot).and_then(|r| r.get(col).cloned());
                assert_eq!(rows.value(slot, col), whole.unwrap_or(Value::Null));
            }
        }
    }
}
