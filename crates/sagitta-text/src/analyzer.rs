//! Analyzers: text → terms. A field is analysed the same way when it is
//! indexed and when it is queried, so the analyzer's name is stored with
//! the field (collection config, segment text section).
//!
//! Every analyzer splits on characters that are not alphanumeric
//! (Unicode), lower-cases and drops tokens longer than
//! [`MAX_TOKEN_BYTES`]. `en` then drops English stop words and stems
//! with the Snowball English (Porter 2) stemmer; `simple` stops there.

use foldhash::{HashMap, HashMapExt};
use rust_stemmers::{Algorithm, Stemmer};
use std::cell::RefCell;
use std::fmt;

/// Tokens longer than this (in UTF-8 bytes) are dropped, as base64 blobs
/// and hashes carry no meaning for ranking.
pub const MAX_TOKEN_BYTES: usize = 40;

/// Defines the stop list and its test from one list of words: the test is a
/// `match`, which the compiler turns into a switch on length and a few
/// compares (a scan of the list compared every word).
macro_rules! stop_words {
    ($($w:literal),+ $(,)?) => {
        /// Lucene's classic English stop set.
        #[cfg(test)]
        const STOP_WORDS: &[&str] = &[$($w),+];

        /// Whether `t` is in the English stop set.
        fn is_stop_word(t: &str) -> bool {
            matches!(t, $($w)|+)
        }
    };
}

stop_words!(
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
);

/// Words whose stems each thread keeps: natural text repeats a small
/// vocabulary, and a lookup costs a fraction of stemming (Snowball was
/// about a third of a DoPut of text rows). A full cache takes no more
/// words (the frequent ones come early), so it stays under about 2 MB per
/// thread and never thrashes.
const STEM_CACHE: usize = 16 * 1024;

thread_local! {
    /// This thread's English stems by word (the stemmer is deterministic,
    /// so a cached stem is the stem).
    static STEMS: RefCell<HashMap<Box<str>, Box<str>>> = RefCell::new(HashMap::new());
}

/// The English stem of `word`, from this thread's cache when it has it.
fn stem_cached(stemmer: &Stemmer, word: &str, f: &mut impl FnMut(&str)) {
    STEMS.with(|cell| {
        // A caller that analyses text inside `f` finds the cache borrowed:
        // it stems without it.
        let Ok(mut cache) = cell.try_borrow_mut() else {
            f(&stemmer.stem(word));
            return;
        };
        if let Some(stem) = cache.get(word) {
            f(stem);
            return;
        }
        let stem: Box<str> = stemmer.stem(word).into();
        if cache.len() < STEM_CACHE {
            cache.insert(word.into(), stem.clone());
        }
        drop(cache);
        f(&stem);
    });
}

/// The analyzers a text field can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AnalyzerKind {
    /// Split, lower-case, English stop words, Snowball English stemming.
    English = 1,
    /// Split and lower-case only.
    Simple = 2,
}

impl AnalyzerKind {
    /// Every analyzer, for error messages.
    pub const ALL: [AnalyzerKind; 2] = [AnalyzerKind::English, AnalyzerKind::Simple];

    /// The name used in configs and APIs.
    pub fn name(self) -> &'static str {
        match self {
            AnalyzerKind::English => "en",
            AnalyzerKind::Simple => "simple",
        }
    }

    /// Parses a name (`en` / `english`, `simple`).
    pub fn parse(s: &str) -> Option<AnalyzerKind> {
        match s {
            "en" | "english" => Some(AnalyzerKind::English),
            "simple" => Some(AnalyzerKind::Simple),
            _ => None,
        }
    }

    /// The stored code (segment text sections).
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The analyzer for a stored code.
    pub fn from_code(c: u32) -> Option<AnalyzerKind> {
        AnalyzerKind::ALL.into_iter().find(|k| k.code() == c)
    }

    /// The analyzer itself.
    pub fn analyzer(self) -> Analyzer {
        Analyzer::new(self)
    }
}

impl fmt::Display for AnalyzerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Turns text into index terms.
pub struct Analyzer {
    kind: AnalyzerKind,
    stemmer: Option<Stemmer>,
}

impl fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Analyzer")
            .field("kind", &self.kind)
            .finish()
    }
}

impl Analyzer {
    /// The analyzer of `kind`.
    pub fn new(kind: AnalyzerKind) -> Analyzer {
        let stemmer = match kind {
            AnalyzerKind::English => Some(Stemmer::create(Algorithm::English)),
            AnalyzerKind::Simple => None,
        };
        Analyzer { kind, stemmer }
    }

    /// Which analyzer this is.
    pub fn kind(&self) -> AnalyzerKind {
        self.kind
    }

    /// Calls `f` with each term of `text`, in order (repeats included).
    pub fn for_each_term(&self, text: &str, mut f: impl FnMut(&str)) {
        if text.is_ascii() {
            self.ascii_terms(text, &mut f);
        } else {
            self.unicode_terms(text, &mut f);
        }
    }

    /// The terms of any text: tokens split at every character that is not
    /// alphanumeric, lower-cased.
    fn unicode_terms(&self, text: &str, f: &mut impl FnMut(&str)) {
        let mut lower = String::new();
        for token in text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|t| !t.is_empty() && t.len() <= MAX_TOKEN_BYTES)
        {
            let token: &str = if token.chars().any(char::is_uppercase) {
                lower.clear();
                lower.extend(token.chars().flat_map(char::to_lowercase));
                lower.as_str()
            } else {
                token
            };
            self.term(token, f);
        }
    }

    /// [`Analyzer::unicode_terms`] for ASCII text, byte by byte (the same
    /// tokens: on ASCII, Unicode's alphanumerics and case are ASCII's).
    fn ascii_terms(&self, text: &str, f: &mut impl FnMut(&str)) {
        let mut lower = String::new();
        let bytes = text.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            if !bytes[at].is_ascii_alphanumeric() {
                at += 1;
                continue;
            }
            let start = at;
            let mut upper = false;
            while at < bytes.len() && bytes[at].is_ascii_alphanumeric() {
                upper |= bytes[at].is_ascii_uppercase();
                at += 1;
            }
            if at - start > MAX_TOKEN_BYTES {
                continue;
            }
            // ASCII: every byte index is a character boundary.
            let token = &text[start..at];
            let token = if upper {
                lower.clear();
                lower.push_str(token);
                lower.make_ascii_lowercase();
                lower.as_str()
            } else {
                token
            };
            self.term(token, f);
        }
    }

    /// One lower-cased token: dropped as a stop word, or stemmed, per the
    /// analyzer.
    #[inline]
    fn term(&self, token: &str, f: &mut impl FnMut(&str)) {
        if self.stemmer.is_some() && is_stop_word(token) {
            return;
        }
        match &self.stemmer {
            Some(s) => stem_cached(s, token, f),
            None => f(token),
        }
    }

    /// The distinct terms of `text` with their counts, sorted by term.
    pub fn term_counts(&self, text: &str) -> Vec<(String, u32)> {
        self.counts(text)
            .iter()
            .map(|(t, n)| (t.to_owned(), n))
            .collect()
    }

    /// [`Analyzer::term_counts`] in one buffer: what indexing a document
    /// takes, with no allocation per term.
    pub fn counts(&self, text: &str) -> TermCounts {
        let mut all = String::new();
        // (first 8 bytes, big-endian, zero-padded: orders as the terms
        // do, and terms hold no zero byte), start, end.
        let mut spans: Vec<(u64, usize, usize)> = Vec::new();
        self.for_each_term(text, |t| {
            let mut head = [0u8; 8];
            let n = t.len().min(8);
            head[..n].copy_from_slice(&t.as_bytes()[..n]);
            spans.push((u64::from_be_bytes(head), all.len(), all.len() + t.len()));
            all.push_str(t);
        });
        spans.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| all[a.1..a.2].cmp(&all[b.1..b.2]))
        });
        let mut out = TermCounts {
            bytes: String::with_capacity(all.len()),
            terms: Vec::with_capacity(spans.len()),
        };
        let mut last: Option<&str> = None;
        for (_, a, b) in spans {
            let t = &all[a..b];
            match out.terms.last_mut() {
                Some((_, n)) if last == Some(t) => *n += 1,
                _ => {
                    out.bytes.push_str(t);
                    out.terms.push((out.bytes.len(), 1));
                    last = Some(t);
                }
            }
        }
        out
    }
}

/// The distinct terms of one text with their counts, sorted by term
/// ([`Analyzer::counts`]), held in one string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TermCounts {
    bytes: String,
    /// Each term's end in `bytes`, and its count.
    terms: Vec<(usize, u32)>,
}

impl TermCounts {
    /// Distinct terms.
    pub fn len(&self) -> usize {
        self.terms.len()
    }

    /// Whether the text had no term.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The terms and their counts, in term order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u32)> + '_ {
        let starts = std::iter::once(0).chain(self.terms.iter().map(|&(end, _)| end));
        starts
            .zip(&self.terms)
            .map(|(start, &(end, n))| (&self.bytes[start..end], n))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn terms(kind: AnalyzerKind, s: &str) -> Vec<String> {
        let mut out = Vec::new();
        kind.analyzer().for_each_term(s, |t| out.push(t.to_owned()));
        out
    }

    #[test]
    fn english_splits_lowercases_drops_stop_words_and_stems() {
        assert_eq!(
            terms(
                AnalyzerKind::English,
                "The Libraries for running python3-foo's tests!"
            ),
            ["librari", "run", "python3", "foo", "s", "test"]
        );
    }

    proptest::proptest! {
        /// ASCII text takes the byte-wise path: the same terms as the
        /// Unicode path, and `counts` is `term_counts` in one buffer.
        #[test]
        fn ascii_path_equals_unicode_path(s in "([ -~\t\n]{0,40}[A-Za-z0-9]{0,50}){0,4}") {
            for kind in AnalyzerKind::ALL {
                let a = kind.analyzer();
                let (mut fast, mut slow) = (Vec::new(), Vec::new());
                a.ascii_terms(&s, &mut |t: &str| fast.push(t.to_owned()));
                a.unicode_terms(&s, &mut |t: &str| slow.push(t.to_owned()));
                proptest::prop_assert_eq!(&fast, &slow);
                let mut want: Vec<(String, u32)> = Vec::new();
                slow.sort();
                for t in slow {
                    match want.last_mut() {
                        Some((l, n)) if *l == t => *n += 1,
                        _ => want.push((t, 1)),
                    }
                }
                let got: Vec<(String, u32)> =
                    a.counts(&s).iter().map(|(t, n)| (t.to_owned(), n)).collect();
                proptest::prop_assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn simple_keeps_every_word() {
        assert_eq!(
            terms(AnalyzerKind::Simple, "The Running-TESTS"),
            ["the", "running", "tests"]
        );
    }

    #[test]
    fn long_tokens_unicode_and_empty_text() {
        let long = "x".repeat(MAX_TOKEN_BYTES + 1);
        assert_eq!(
            terms(AnalyzerKind::Simple, &format!("{long} Ärger über")),
            ["ärger", "über"]
        );
        assert!(terms(AnalyzerKind::English, "").is_empty());
        assert!(terms(AnalyzerKind::English, "the and of").is_empty());
    }

    #[test]
    fn term_counts_are_sorted_and_counted() {
        let c = AnalyzerKind::Simple.analyzer().term_counts("b a b");
        assert_eq!(c, [("a".to_string(), 1), ("b".to_string(), 2)]);
        for k in AnalyzerKind::ALL {
            assert_eq!(AnalyzerKind::from_code(k.code()), Some(k));
            assert_eq!(AnalyzerKind::parse(k.name()), Some(k));
        }
    }

    #[test]
    fn stop_word_test_is_the_list() {
        for w in STOP_WORDS {
            assert!(is_stop_word(w), "{w}");
            assert!(!is_stop_word(&format!("{w}x")), "{w}x");
        }
        for w in ["", "x", "th", "thes", "wit", "a1", "theirs"] {
            assert!(!is_stop_word(w), "{w}");
        }
    }

    /// Stems from the cache are the stemmer's, whether the word was cached
    /// before, is cached now, or came after the cache filled; an analysis
    /// run inside another's callback (the cache then borrowed) agrees too.
    #[test]
    fn cached_stems_are_the_stemmers() {
        let direct = Stemmer::create(Algorithm::English);
        let a = AnalyzerKind::English.analyzer();
        // More distinct words than the cache holds, each seen twice.
        let words: Vec<String> = (0..STEM_CACHE + 500)
            .map(|i| format!("running{}ations", i % 7919 * 31 + i / 7919))
            .chain(["happiness", "libraries", "generously", "running"].map(String::from))
            .collect();
        for pass in 0..2 {
            for w in &words {
                let mut got = Vec::new();
                a.for_each_term(w, |t| got.push(t.to_owned()));
                assert_eq!(got, [direct.stem(w).into_owned()], "pass {pass}: {w}");
            }
        }
        let mut nested = Vec::new();
        a.for_each_term("connections happiness", |outer| {
            a.for_each_term("connections happiness", |inner| {
                nested.push((outer.to_owned(), inner.to_owned()));
            });
        });
        assert_eq!(nested.len(), 4);
        assert_eq!(nested[0], ("connect".to_owned(), "connect".to_owned()));
        assert_eq!(nested[3], ("happi".to_owned(), "happi".to_owned()));
    }
}
