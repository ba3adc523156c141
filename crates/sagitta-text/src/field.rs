//! One indexed text field as a search reads it, whether it lives in memory
//! (the mutable part, [`crate::MemField`]) or in a mapped segment section
//! ([`crate::SectionField`]).

use crate::analyzer::AnalyzerKind;

/// Postings per block of [`Postings::for_each_block`].
pub const BLOCK: usize = 64;

/// The postings of one term: (slot, term frequency) pairs.
#[derive(Clone, Copy, Debug)]
pub enum Postings<'a> {
    /// No document has the term.
    Empty,
    /// In memory.
    Mem(&'a [(u32, u32)]),
    /// Little-endian u32 slots and u32 term frequencies, same length.
    Mapped { slots: &'a [u8], tfs: &'a [u8] },
}

impl Postings<'_> {
    /// Number of postings (the term's document frequency).
    pub fn len(&self) -> usize {
        match self {
            Postings::Empty => 0,
            Postings::Mem(p) => p.len(),
            Postings::Mapped { slots, .. } => slots.len() / 4,
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The slot of posting `i` (`u32::MAX` past the end).
    #[inline]
    pub fn slot(&self, i: usize) -> u32 {
        match self {
            Postings::Empty => u32::MAX,
            Postings::Mem(p) => p.get(i).map_or(u32::MAX, |e| e.0),
            Postings::Mapped { slots, .. } => slots.get(i * 4..i * 4 + 4).map_or(u32::MAX, le32),
        }
    }

    /// The term frequency of posting `i` (0 past the end).
    #[inline]
    pub fn tf(&self, i: usize) -> u32 {
        match self {
            Postings::Empty => 0,
            Postings::Mem(p) => p.get(i).map_or(0, |e| e.1),
            Postings::Mapped { tfs, .. } => tfs.get(i * 4..i * 4 + 4).map_or(0, le32),
        }
    }

    /// Calls `f(slots, tfs)` for the postings in blocks of up to
    /// [`BLOCK`] (decoded into arrays, for loops the compiler can
    /// vectorise).
    #[inline]
    pub fn for_each_block(&self, mut f: impl FnMut(&[u32], &[u32])) {
        let mut s = [0u32; BLOCK];
        let mut t = [0u32; BLOCK];
        match self {
            Postings::Empty => {}
            Postings::Mem(p) => {
                for chunk in p.chunks(BLOCK) {
                    for (k, &(slot, tf)) in chunk.iter().enumerate() {
                        s[k] = slot;
                        t[k] = tf;
                    }
                    f(&s[..chunk.len()], &t[..chunk.len()]);
                }
            }
            Postings::Mapped { slots, tfs } => {
                for (cs, ct) in slots.chunks(BLOCK * 4).zip(tfs.chunks(BLOCK * 4)) {
                    let m = (cs.len() / 4).min(ct.len() / 4);
                    for k in 0..m {
                        s[k] = le32(&cs[k * 4..]);
                        t[k] = le32(&ct[k * 4..]);
                    }
                    f(&s[..m], &t[..m]);
                }
            }
        }
    }

    /// Calls `f(slot, tf)` for each posting.
    #[inline]
    pub fn for_each(&self, mut f: impl FnMut(u32, u32)) {
        match self {
            Postings::Empty => {}
            Postings::Mem(p) => p.iter().for_each(|&(s, t)| f(s, t)),
            Postings::Mapped { slots, tfs } => {
                for (s, t) in slots.chunks_exact(4).zip(tfs.chunks_exact(4)) {
                    f(le32(s), le32(t));
                }
            }
        }
    }
}

/// Token counts of the documents, by slot (0: no text).
#[derive(Clone, Copy, Debug)]
pub enum DocLens<'a> {
    /// In memory.
    Mem(&'a [u32]),
    /// Little-endian u32s.
    Mapped(&'a [u8]),
}

impl DocLens<'_> {
    /// The length of `slot`'s document (0 when out of range).
    #[inline]
    pub fn get(&self, slot: u32) -> u32 {
        let i = slot as usize;
        match self {
            DocLens::Mem(d) => d.get(i).copied().unwrap_or(0),
            DocLens::Mapped(b) => b.get(i * 4..i * 4 + 4).map_or(0, le32),
        }
    }
}

#[inline]
pub(crate) fn le32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

/// A text field of one part (segment or mutable part).
pub trait FieldRead {
    /// The field's name.
    fn name(&self) -> &str;
    /// How its text was analysed.
    fn analyzer(&self) -> AnalyzerKind;
    /// Documents with text in this field (deleted ones included until the
    /// part is rewritten, as in Lucene).
    fn docs(&self) -> u64;
    /// Terms over all those documents.
    fn total_len(&self) -> u64;
    /// The postings of `term`.
    fn postings(&self, term: &str) -> Postings<'_>;
    /// Document lengths by slot.
    fn doc_lens(&self) -> DocLens<'_>;
    /// Whether every term's postings are in increasing slot order (what
    /// the lookups of [`crate::TextQuery::top`] need; otherwise it scores
    /// every posting).
    fn postings_sorted(&self) -> bool;
}
