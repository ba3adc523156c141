//! The text section of a segment file: every text field's term
//! dictionary, postings and document lengths, read in place from the
//! mapped file (nothing is rebuilt or decoded at open). Layout in
//! `docs/FORMAT.md` ("Text section"); the segment's section table holds
//! its CRC32C.
//!
//! Opening checks the header and each field's directory entry (every
//! array inside the section): O(fields). Each read after that is bounds
//! checked, so a damaged section gives wrong answers or
//! [`TextError::Corrupt`], never a panic.

use crate::analyzer::AnalyzerKind;
use crate::field::{le32, DocLens, FieldRead, Postings};
use crate::mem::MemText;
use crate::TextError;
use std::cmp::Ordering;

/// Section magic.
pub const MAGIC: [u8; 4] = *b"SGTX";
/// Version written by this build.
pub const VERSION: u32 = 1;
const HEADER: usize = 16;
const DIR_ENTRY: usize = 16 * 8;

fn pad8(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(8) {
        out.push(0);
    }
}

fn put_u32s(out: &mut Vec<u8>, v: impl IntoIterator<Item = u32>) -> u64 {
    pad8(out);
    let at = out.len() as u64;
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
    at
}

/// A visitor of one term and its (slot, term frequency) postings.
pub(crate) type TermVisitor<'v> = dyn FnMut(&[u8], &[(u32, u32)]) + 'v;

/// One field as a section stores it, for [`put_field`]: its statistics,
/// its terms in byte order each with its postings in slot order (visited
/// once per array of the layout), and its documents' lengths.
pub(crate) trait FieldSource {
    fn name(&self) -> &str;
    fn analyzer(&self) -> AnalyzerKind;
    fn docs(&self) -> u64;
    fn total_len(&self) -> u64;
    /// Calls `f` with each term that has postings and its postings.
    fn each_term(&self, f: &mut TermVisitor<'_>) -> Result<(), TextError>;
    /// The length of `slot`'s document (0: none).
    fn doc_len(&self, slot: u32) -> u32;
}

/// A [`MemField`](crate::MemField)'s terms sorted once.
struct MemSource<'m> {
    field: &'m crate::MemField,
    sorted: Vec<(&'m str, crate::mem::SlotPostings<'m>)>,
}

impl FieldSource for MemSource<'_> {
    fn name(&self) -> &str {
        self.field.name()
    }
    fn analyzer(&self) -> AnalyzerKind {
        self.field.analyzer()
    }
    fn docs(&self) -> u64 {
        self.field.docs()
    }
    fn total_len(&self) -> u64 {
        self.field.total_len()
    }
    fn each_term(&self, f: &mut TermVisitor<'_>) -> Result<(), TextError> {
        for (t, p) in &self.sorted {
            f(t.as_bytes(), p);
        }
        Ok(())
    }
    fn doc_len(&self, slot: u32) -> u32 {
        match self.field.doc_lens() {
            DocLens::Mem(d) => d.get(slot as usize).copied().unwrap_or(0),
            DocLens::Mapped(_) => 0,
        }
    }
}

/// Starts a section of `nfields` fields for `nslots` slots: the header and
/// room for the directory.
pub(crate) fn begin(nfields: usize, nslots: u32) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(nfields as u32).to_le_bytes());
    out.extend_from_slice(&nslots.to_le_bytes());
    out.resize(HEADER + nfields * DIR_ENTRY, 0);
    out
}

/// Appends field `fi` of a section begun by [`begin`] and fills in its
/// directory entry. Fails when the field has 2³² postings or more, 4 GiB
/// of terms, or a document past `nslots`.
pub(crate) fn put_field(
    out: &mut Vec<u8>,
    fi: usize,
    f: &dyn FieldSource,
    nslots: u32,
) -> Result<(), TextError> {
    let too_big = |what: &str| TextError::TooLarge(format!("field {}: {what}", f.name()));
    let (mut nterms, mut npost, mut term_bytes, mut past) = (0usize, 0usize, 0u64, false);
    f.each_term(&mut |t, p| {
        nterms += 1;
        npost += p.len();
        term_bytes += t.len() as u64;
        past |= p.iter().any(|&(s, _)| s >= nslots);
    })?;
    if npost > u32::MAX as usize {
        return Err(too_big("2^32 postings or more"));
    }
    if term_bytes > u64::from(u32::MAX) {
        return Err(too_big("4 GiB of terms"));
    }
    if past {
        return Err(too_big("a document past the segment's slots"));
    }
    let name_off = out.len() as u64;
    out.extend_from_slice(f.name().as_bytes());
    pad8(out);
    let term_ends_off = out.len() as u64;
    let mut end = 0u32;
    f.each_term(&mut |t, _| {
        end += t.len() as u32;
        out.extend_from_slice(&end.to_le_bytes());
    })?;
    pad8(out);
    let term_bytes_off = out.len() as u64;
    f.each_term(&mut |t, _| out.extend_from_slice(t))?;
    pad8(out);
    let post_ends_off = out.len() as u64;
    let mut n = 0u32;
    f.each_term(&mut |_, p| {
        n += p.len() as u32;
        out.extend_from_slice(&n.to_le_bytes());
    })?;
    pad8(out);
    let slots_off = out.len() as u64;
    f.each_term(&mut |_, p| {
        for &(s, _) in p {
            out.extend_from_slice(&s.to_le_bytes());
        }
    })?;
    pad8(out);
    let tfs_off = out.len() as u64;
    f.each_term(&mut |_, p| {
        for &(_, t) in p {
            out.extend_from_slice(&t.to_le_bytes());
        }
    })?;
    let doc_len_off = put_u32s(out, (0..nslots).map(|s| f.doc_len(s)));
    let dir = [
        name_off,
        f.name().len() as u64,
        u64::from(f.analyzer().code()),
        f.docs(),
        f.total_len(),
        nterms as u64,
        npost as u64,
        term_ends_off,
        term_bytes_off,
        term_bytes,
        post_ends_off,
        slots_off,
        tfs_off,
        doc_len_off,
        0,
        0,
    ];
    let at = HEADER + fi * DIR_ENTRY;
    for (i, v) in dir.iter().enumerate() {
        out[at + i * 8..at + i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    Ok(())
}

/// Encodes `text` for a segment of `nslots` slots. Fails when a field
/// has 2³² postings or more, or a document sits past `nslots`.
pub fn encode(text: &MemText, nslots: u32) -> Result<Vec<u8>, TextError> {
    let fields = text.fields();
    let mut out = begin(fields.len(), nslots);
    for (fi, f) in fields.iter().enumerate() {
        let src = MemSource {
            field: f,
            sorted: f.sorted(),
        };
        put_field(&mut out, fi, &src, nslots)?;
    }
    pad8(&mut out);
    Ok(out)
}

/// A parsed text section, borrowing the mapped bytes.
#[derive(Debug)]
pub struct TextSection<'a> {
    fields: Vec<SectionField<'a>>,
    nslots: u32,
}

impl<'a> TextSection<'a> {
    /// Parses the header and directory; `nslots` is the segment's slot
    /// count, which the section must match.
    pub fn parse(b: &'a [u8], nslots: u32) -> Result<TextSection<'a>, TextError> {
        let bad = |what: String| TextError::Corrupt(format!("text section: {what}"));
        if b.len() < HEADER || b[..4] != MAGIC {
            return Err(bad("bad magic or truncated header".into()));
        }
        let version = le32(&b[4..]);
        if version != VERSION {
            return Err(TextError::Version(version));
        }
        let nfields = le32(&b[8..]) as usize;
        if le32(&b[12..]) != nslots {
            return Err(bad(format!(
                "{} slots for a segment of {nslots}",
                le32(&b[12..])
            )));
        }
        let dir_end = nfields
            .checked_mul(DIR_ENTRY)
            .and_then(|d| d.checked_add(HEADER))
            .filter(|&e| e <= b.len())
            .ok_or_else(|| bad(format!("{nfields} fields do not fit")))?;
        let mut fields = Vec::with_capacity(nfields);
        for fi in 0..nfields {
            let d: Vec<u64> = b[HEADER + fi * DIR_ENTRY..HEADER + (fi + 1) * DIR_ENTRY]
                .chunks_exact(8)
                .map(|c| {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(c);
                    u64::from_le_bytes(a)
                })
                .collect();
            let slice = |off: u64, len: u64, what: &str| -> Result<&'a [u8], TextError> {
                let s = usize::try_from(off).ok();
                let e = usize::try_from(len)
                    .ok()
                    .and_then(|l| s?.checked_add(l))
                    .filter(|&e| e <= b.len());
                match (s, e) {
                    (Some(s), Some(e)) if s >= dir_end || len == 0 => Ok(&b[s.min(e)..e]),
                    _ => Err(bad(format!("field {fi}: {what} out of bounds"))),
                }
            };
            let words = |n: u64| n.saturating_mul(4);
            let (nterms, npost) = (d[5], d[6]);
            let name = std::str::from_utf8(slice(d[0], d[1], "name")?)
                .map_err(|_| bad(format!("field {fi}: name is not UTF-8")))?;
            let analyzer = u32::try_from(d[2])
                .ok()
                .and_then(AnalyzerKind::from_code)
                .ok_or_else(|| bad(format!("field {name}: unknown analyzer {}", d[2])))?;
            fields.push(SectionField {
                name,
                analyzer,
                docs: d[3],
                total_len: d[4],
                nterms: usize::try_from(nterms).map_err(|_| bad("term count".into()))?,
                term_ends: slice(d[7], words(nterms), "term ends")?,
                term_bytes: slice(d[8], d[9], "terms")?,
                post_ends: slice(d[10], words(nterms), "posting ends")?,
                slots: slice(d[11], words(npost), "slots")?,
                tfs: slice(d[12], words(npost), "frequencies")?,
                doc_len: slice(d[13], words(u64::from(nslots)), "document lengths")?,
            });
        }
        Ok(TextSection { fields, nslots })
    }

    /// The fields, in the order they were declared.
    pub fn fields(&self) -> &[SectionField<'a>] {
        &self.fields
    }

    /// The field named `name`.
    pub fn field(&self, name: &str) -> Option<&SectionField<'a>> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The segment's slot count.
    pub fn nslots(&self) -> u32 {
        self.nslots
    }
}

/// One field of a mapped text section.
#[derive(Debug)]
pub struct SectionField<'a> {
    name: &'a str,
    analyzer: AnalyzerKind,
    docs: u64,
    total_len: u64,
    nterms: usize,
    term_ends: &'a [u8],
    term_bytes: &'a [u8],
    post_ends: &'a [u8],
    slots: &'a [u8],
    tfs: &'a [u8],
    doc_len: &'a [u8],
}

impl<'a> SectionField<'a> {
    fn end(ends: &[u8], i: usize) -> usize {
        ends.get(i * 4..i * 4 + 4).map_or(0, le32) as usize
    }

    fn range(ends: &[u8], i: usize) -> (usize, usize) {
        let start = if i == 0 { 0 } else { Self::end(ends, i - 1) };
        (start, Self::end(ends, i))
    }

    /// The postings of term `i` as stored: slots and term frequencies,
    /// little-endian `u32`s (None when the section is damaged there).
    pub(crate) fn postings_at(&self, i: usize) -> Option<(&'a [u8], &'a [u8])> {
        let (s, e) = Self::range(self.post_ends, i);
        let (s, e) = (s.checked_mul(4)?, e.checked_mul(4)?);
        Some((self.slots.get(s..e)?, self.tfs.get(s..e)?))
    }

    /// The length of `slot`'s document (0: none, or past the section).
    pub(crate) fn doc_len_at(&self, slot: u32) -> u32 {
        let i = slot as usize * 4;
        self.doc_len.get(i..i + 4).map_or(0, le32)
    }

    /// Term `i` (None when the section is damaged there).
    pub(crate) fn term(&self, i: usize) -> Option<&'a [u8]> {
        let (s, e) = Self::range(self.term_ends, i);
        self.term_bytes.get(s..e)
    }

    /// Index of `term`, by binary search.
    fn find(&self, term: &str) -> Option<usize> {
        let (mut lo, mut hi) = (0usize, self.nterms);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.term(mid)?.cmp(term.as_bytes()) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    /// Distinct terms.
    pub fn term_count(&self) -> usize {
        self.nterms
    }
}

impl FieldRead for SectionField<'_> {
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
    fn postings(&self, term: &str) -> Postings<'_> {
        let Some(i) = self.find(term) else {
            return Postings::Empty;
        };
        let (s, e) = Self::range(self.post_ends, i);
        match (
            self.slots.get(s * 4..e.saturating_mul(4)),
            self.tfs.get(s * 4..e.saturating_mul(4)),
        ) {
            (Some(slots), Some(tfs)) => Postings::Mapped { slots, tfs },
            _ => Postings::Empty,
        }
    }
    fn doc_lens(&self) -> DocLens<'_> {
        DocLens::Mapped(self.doc_len)
    }
    /// Written in slot order ([`encode`]); a damaged section that is not
    /// gives wrong answers, never a panic.
    fn postings_sorted(&self) -> bool {
        true
    }
}
