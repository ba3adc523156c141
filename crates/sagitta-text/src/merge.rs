//! A text section merged from other sections, without analysing any text
//! again: what a segment build or merge writes when every input segment
//! already has the section. The result is the section [`encode`] writes
//! for a [`MemText`](crate::MemText) into which the kept documents were
//! added at their new slots, byte for byte (a test checks it), but it
//! holds only the output and one term's postings at a time, not an
//! inverted index of every document in hash maps.
//!
//! [`encode`]: crate::section::encode

use crate::analyzer::AnalyzerKind;
use crate::field::{le32, FieldRead};
use crate::section::{begin, put_field, FieldSource, SectionField, TermVisitor, TextSection};
use crate::{TextError, TextFieldSpec};

/// Where an input slot goes: the merged segment's slot, or [`DROPPED`].
pub type Remap<'r> = &'r [u32];

/// An input slot that is not in the merged segment (dead, replaced).
pub const DROPPED: u32 = u32::MAX;

/// The text section of a segment of `nslots` slots holding, for the
/// fields `specs`, the documents of the inputs' slots that `remap` keeps
/// (`inputs[i]`'s slot `s` becomes `remaps[i][s]`; slots past a remap are
/// dropped). `Ok(None)` when an input has no field of one of the names
/// or analyses it otherwise (the caller then analyses the texts);
/// an error when an input section is damaged or the result is too large.
pub fn merge(
    inputs: &[&TextSection<'_>],
    remaps: &[Remap<'_>],
    specs: &[TextFieldSpec],
    nslots: u32,
) -> Result<Option<Vec<u8>>, TextError> {
    let mut out = begin(specs.len(), nslots);
    for (fi, spec) in specs.iter().enumerate() {
        let mut parts = Vec::with_capacity(inputs.len());
        for (sec, &remap) in inputs.iter().zip(remaps) {
            match sec.field(&spec.name) {
                Some(f) if f.analyzer() == spec.analyzer => parts.push((f, remap)),
                _ => return Ok(None),
            }
        }
        let src = Merged::new(&spec.name, spec.analyzer, parts, nslots)?;
        put_field(&mut out, fi, &src, nslots)?;
    }
    while !out.len().is_multiple_of(8) {
        out.push(0);
    }
    Ok(Some(out))
}

/// One field of the inputs, merged.
struct Merged<'s, 'a> {
    name: &'s str,
    analyzer: AnalyzerKind,
    /// The inputs' fields with their remaps, ordered by the first slot
    /// each keeps (so one term's postings, input after input, come out in
    /// slot order when each remap keeps its input's order).
    parts: Vec<(&'s SectionField<'a>, Remap<'s>)>,
    lens: Vec<u32>,
    docs: u64,
    total_len: u64,
}

fn corrupt(what: &str) -> TextError {
    TextError::Corrupt(format!("text section: {what}"))
}

impl<'s, 'a> Merged<'s, 'a> {
    fn new(
        name: &'s str,
        analyzer: AnalyzerKind,
        mut parts: Vec<(&'s SectionField<'a>, Remap<'s>)>,
        nslots: u32,
    ) -> Result<Self, TextError> {
        parts.sort_by_key(|(_, r)| r.iter().copied().filter(|&n| n != DROPPED).min());
        let mut lens = vec![0u32; nslots as usize];
        let (mut docs, mut total_len) = (0u64, 0u64);
        for (f, remap) in &parts {
            for (s, &n) in remap.iter().enumerate() {
                if n == DROPPED {
                    continue;
                }
                let slot = lens
                    .get_mut(n as usize)
                    .ok_or_else(|| corrupt("a slot past the merged segment"))?;
                let len = f.doc_len_at(s as u32);
                if len > 0 {
                    *slot = len;
                    docs += 1;
                    total_len += u64::from(len);
                }
            }
        }
        Ok(Merged {
            name,
            analyzer,
            parts,
            lens,
            docs,
            total_len,
        })
    }
}

impl FieldSource for Merged<'_, '_> {
    fn name(&self) -> &str {
        self.name
    }
    fn analyzer(&self) -> AnalyzerKind {
        self.analyzer
    }
    fn docs(&self) -> u64 {
        self.docs
    }
    fn total_len(&self) -> u64 {
        self.total_len
    }
    fn doc_len(&self, slot: u32) -> u32 {
        self.lens.get(slot as usize).copied().unwrap_or(0)
    }

    /// The inputs' term lists merged in byte order; each term's postings
    /// remapped, the dropped left out, in slot order; terms left with no
    /// posting skipped.
    fn each_term(&self, f: &mut TermVisitor<'_>) -> Result<(), TextError> {
        let mut at = vec![0usize; self.parts.len()];
        let mut post: Vec<(u32, u32)> = Vec::new();
        let term = |i: usize, t: usize| -> Result<Option<&[u8]>, TextError> {
            let (field, _) = self.parts[i];
            if t >= field.term_count() {
                return Ok(None);
            }
            field
                .term(t)
                .map(Some)
                .ok_or_else(|| corrupt("a term out of bounds"))
        };
        loop {
            let mut least: Option<&[u8]> = None;
            for (i, &t) in at.iter().enumerate() {
                if let Some(x) = term(i, t)? {
                    if least.is_none_or(|l| x < l) {
                        least = Some(x);
                    }
                }
            }
            let Some(least) = least else {
                return Ok(());
            };
            post.clear();
            for (i, t) in at.iter_mut().enumerate() {
                if term(i, *t)? != Some(least) {
                    continue;
                }
                let (field, remap) = self.parts[i];
                let (slots, tfs) = field
                    .postings_at(*t)
                    .ok_or_else(|| corrupt("postings out of bounds"))?;
                for (s, t) in slots.chunks_exact(4).zip(tfs.chunks_exact(4)) {
                    let n = remap.get(le32(s) as usize).copied().unwrap_or(DROPPED);
                    if n != DROPPED {
                        post.push((n, le32(t)));
                    }
                }
                *t += 1;
            }
            if post.is_empty() {
                continue;
            }
            if !post.is_sorted_by_key(|&(s, _)| s) {
                post.sort_unstable_by_key(|&(s, _)| s);
            }
            f(least, &post);
        }
    }
}
