//! The growable in-memory inverted index: the mutable part's text index
//! (documents added as rows are written) and the builder a segment's text
//! section is encoded from.

use crate::analyzer::{Analyzer, AnalyzerKind, TermCounts};
use crate::field::{DocLens, FieldRead, Postings};
use std::borrow::Cow;
// foldhash: several times faster than SipHash on short terms, and seeded
// per process, so a crafted text cannot aim at one bucket in advance.
use foldhash::{HashMap, HashMapExt};

/// A text field to index: a payload column and its analyzer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextFieldSpec {
    /// The payload column (a string column).
    pub name: String,
    /// How its text is analysed.
    pub analyzer: AnalyzerKind,
}

impl TextFieldSpec {
    /// A field analysed with `analyzer`.
    pub fn new(name: impl Into<String>, analyzer: AnalyzerKind) -> TextFieldSpec {
        TextFieldSpec {
            name: name.into(),
            analyzer,
        }
    }
}

/// One term's postings, (slot, term frequency) by slot: borrowed from
/// the field when already in order.
pub(crate) type SlotPostings<'a> = Cow<'a, [(u32, u32)]>;

/// One field's inverted index in memory.
#[derive(Debug)]
pub struct MemField {
    name: String,
    analyzer: Analyzer,
    terms: HashMap<Box<str>, u32>,
    postings: Vec<Vec<(u32, u32)>>,
    doc_len: Vec<u32>,
    docs: u64,
    total_len: u64,
    /// Whether documents were added in increasing slot order (so every
    /// term's postings are sorted by slot).
    in_order: bool,
}

impl MemField {
    /// An empty field index.
    pub fn new(spec: &TextFieldSpec) -> MemField {
        MemField {
            name: spec.name.clone(),
            analyzer: spec.analyzer.analyzer(),
            terms: HashMap::new(),
            postings: Vec::new(),
            doc_len: Vec::new(),
            docs: 0,
            total_len: 0,
            in_order: true,
        }
    }

    /// Indexes `text` as the document of `slot`. A slot is added once
    /// (a second call for the same slot is ignored); text with no terms
    /// adds nothing.
    pub fn add(&mut self, slot: u32, text: &str) {
        if self.has(slot) {
            return;
        }
        let counts = self.analyzer.counts(text);
        self.add_counts(slot, &counts);
    }

    /// Whether `slot` already has a document.
    fn has(&self, slot: u32) -> bool {
        self.doc_len.get(slot as usize).is_some_and(|&l| l > 0)
    }

    /// The analysed form of `text` ([`Analyzer::counts`] with this
    /// field's analyzer): what [`MemField::add_counts`] takes. Needs only
    /// a shared reference, so a batch is analysed in parallel before the
    /// index is locked for writing.
    pub fn analyze(&self, text: &str) -> TermCounts {
        self.analyzer.counts(text)
    }

    /// Indexes analysed `counts` (from [`MemField::analyze`]) as the
    /// document of `slot`; the same rules as [`MemField::add`].
    pub fn add_counts(&mut self, slot: u32, counts: &TermCounts) {
        if self.has(slot) {
            return;
        }
        let i = slot as usize;
        let len: u32 = counts.iter().map(|(_, n)| n).sum();
        if len == 0 {
            return;
        }
        if self.doc_len.len() > i + 1 {
            // A slot below one already added.
            self.in_order = false;
        }
        if self.doc_len.len() <= i {
            self.doc_len.resize(i + 1, 0);
        }
        self.doc_len[i] = len;
        self.docs += 1;
        self.total_len += u64::from(len);
        for (term, n) in counts.iter() {
            let id = match self.terms.get(term) {
                Some(&id) => id,
                None => {
                    let id = self.postings.len() as u32;
                    self.terms.insert(term.into(), id);
                    self.postings.push(Vec::new());
                    id
                }
            };
            self.postings[id as usize].push((slot, n));
        }
    }

    /// Distinct terms.
    pub fn term_count(&self) -> usize {
        self.postings.len()
    }

    /// Every (term, postings sorted by slot), terms sorted: the order a
    /// segment section stores them in. Postings are borrowed when the
    /// documents came in slot order (a segment build adds them so), so
    /// encoding a section does not hold a second copy of every posting.
    pub(crate) fn sorted(&self) -> Vec<(&str, SlotPostings<'_>)> {
        let mut out: Vec<(&str, SlotPostings<'_>)> = self
            .terms
            .iter()
            .map(|(t, &id)| {
                let p = &self.postings[id as usize];
                let p = if self.in_order {
                    Cow::Borrowed(&p[..])
                } else {
                    let mut p = p.clone();
                    p.sort_unstable_by_key(|&(s, _)| s);
                    Cow::Owned(p)
                };
                (t.as_ref(), p)
            })
            .collect();
        out.sort_unstable_by(|a, b| a.0.cmp(b.0));
        out
    }

    /// This field with only the documents of slots for which `live` holds:
    /// what indexing those slots' texts afresh would give (terms left
    /// with no document dropped, counts and lengths of the rest).
    fn live_only(&self, live: &dyn Fn(u32) -> bool) -> MemField {
        let mut out = MemField {
            name: self.name.clone(),
            analyzer: self.analyzer.kind().analyzer(),
            terms: HashMap::with_capacity(self.terms.len()),
            postings: Vec::with_capacity(self.postings.len()),
            doc_len: vec![0; self.doc_len.len()],
            docs: 0,
            total_len: 0,
            in_order: self.in_order,
        };
        for (slot, &len) in self.doc_len.iter().enumerate() {
            if len > 0 && live(slot as u32) {
                out.doc_len[slot] = len;
                out.docs += 1;
                out.total_len += u64::from(len);
            }
        }
        for (term, &id) in &self.terms {
            let kept: Vec<(u32, u32)> = self.postings[id as usize]
                .iter()
                .copied()
                .filter(|&(slot, _)| out.doc_len[slot as usize] > 0)
                .collect();
            if !kept.is_empty() {
                out.terms.insert(term.clone(), out.postings.len() as u32);
                out.postings.push(kept);
            }
        }
        out
    }

    /// Bytes held (approximate).
    pub fn memory_usage(&self) -> usize {
        let terms: usize = self.terms.keys().map(|t| t.len() + 32).sum();
        let post: usize = self.postings.iter().map(|p| p.capacity() * 8 + 24).sum();
        terms + post + self.doc_len.capacity() * 4
    }
}

impl FieldRead for MemField {
    fn name(&self) -> &str {
        &self.name
    }
    fn analyzer(&self) -> AnalyzerKind {
        self.analyzer.kind()
    }
    fn docs(&self) -> u64 {
        self.docs
    }
    fn total_len(&self) -> u64 {
        self.total_len
    }
    fn postings(&self, term: &str) -> Postings<'_> {
        match self.terms.get(term) {
            Some(&id) => Postings::Mem(&self.postings[id as usize]),
            None => Postings::Empty,
        }
    }
    fn doc_lens(&self) -> DocLens<'_> {
        DocLens::Mem(&self.doc_len)
    }
    fn postings_sorted(&self) -> bool {
        self.in_order
    }
}

/// The in-memory text index of a part: one [`MemField`] per text field.
#[derive(Debug)]
pub struct MemText {
    fields: Vec<MemField>,
}

impl MemText {
    /// An empty index over `specs`.
    pub fn new(specs: &[TextFieldSpec]) -> MemText {
        MemText {
            fields: specs.iter().map(MemField::new).collect(),
        }
    }

    /// The fields, in declaration order.
    pub fn fields(&self) -> &[MemField] {
        &self.fields
    }

    /// Indexes `text` as field `field`'s document for `slot`.
    pub fn add(&mut self, field: usize, slot: u32, text: &str) {
        if let Some(f) = self.fields.get_mut(field) {
            f.add(slot, text);
        }
    }

    /// Field `field`'s analysis of `text` (empty for a field it lacks).
    pub fn analyze(&self, field: usize, text: &str) -> TermCounts {
        self.fields
            .get(field)
            .map(|f| f.analyze(text))
            .unwrap_or_default()
    }

    /// Indexes analysed `counts` as field `field`'s document for `slot`.
    pub fn add_counts(&mut self, field: usize, slot: u32, counts: &TermCounts) {
        if let Some(f) = self.fields.get_mut(field) {
            f.add_counts(slot, counts);
        }
    }

    /// Whether this index has exactly the fields `specs` (names and
    /// analyzers, in order).
    pub fn has_fields(&self, specs: &[TextFieldSpec]) -> bool {
        self.fields.len() == specs.len()
            && self
                .fields
                .iter()
                .zip(specs)
                .all(|(f, s)| f.name == s.name && f.analyzer.kind() == s.analyzer)
    }

    /// The index of the documents of slots for which `live` holds only:
    /// the same as indexing those slots' texts into a new index, without
    /// analysing any text again (how a part's index becomes its segment's
    /// text section once overwritten and removed rows are left out).
    pub fn live_only(&self, live: &dyn Fn(u32) -> bool) -> MemText {
        MemText {
            fields: self.fields.iter().map(|f| f.live_only(live)).collect(),
        }
    }

    /// Bytes held (approximate).
    pub fn memory_usage(&self) -> usize {
        self.fields.iter().map(MemField::memory_usage).sum()
    }
}
