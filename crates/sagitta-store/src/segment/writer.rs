//! Writing a segment file: [`SegmentWriter`], a builder over what a
//! segment holds beside its index (payload columns, a text index analysed
//! now, taken from a mutable part or already encoded, full-precision rows
//! kept elsewhere), and the write itself, section by section (see
//! `stream.rs`), to a temporary file put in place durably.
//!
//! A writer takes its slots from an [`Index`] ([`SegmentWriter::new`]) or,
//! for a Flat or IVF-RaBitQ segment, from rows streamed one slot at a time
//! (`SegmentWriter::streamed`): the optimizer's merges then
//! copy rows from the memory-mapped inputs straight into the file and
//! never hold every row in memory. Both write the same bytes for the same
//! slots.

use super::format::{
    encode_header, encode_table, IvfInfo, SectionKind, SegmentInfo, FORMAT_VERSION, HEADER_LEN,
    NO_ENTRY, SECTION_ENTRY_LEN,
};
use super::stream::SectionWriter;
use crate::durable::{self, tmp_path};
use crate::error::{io, Result, StoreError};
use crate::fault;
use crate::payload::{PayloadError, Schema};
use crate::pindex;
use arrow_array::RecordBatch;
use sagitta_index::{
    Bitset, DType, GraphView, HnswParams, Index, IndexError, IndexKind, IndexRead, IndexView,
    IvfExport, IvfParams, Metric, Space,
};
use sagitta_text::{MemText, TextFieldSpec, TextSection};
use std::io::{BufWriter, Seek, SeekFrom};
use std::path::Path;

/// Full-precision rows of a segment whose index holds codes only:
/// called with a slot and its key, gives that slot's f32 row (at least
/// `dims * 4` bytes) to the sink, or nothing for zeros (a dead slot may).
pub type FullRows<'a> =
    &'a (dyn Fn(u32, u64, &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> + 'a);

/// Where a segment's text section comes from.
enum TextSource<'a> {
    /// Analyse the text columns of the payload.
    Analyse,
    /// A mutable part's index holding every slot's documents (the section
    /// keeps the live slots').
    Indexed(&'a MemText),
    /// Encoded already, for this segment's slots.
    Encoded(Vec<u8>),
}

/// A Flat or IVF-RaBitQ segment's slots given without an [`Index`] (see
/// `SegmentWriter::streamed`).
struct Streamed<'a> {
    /// The segment's space (its stored form).
    space: Space,
    /// The header's `ef_search` / `ef_construction` (a Flat index's
    /// parameters).
    params: HnswParams,
    /// One key per slot.
    keys: &'a [u64],
    /// Each slot's stored vector.
    rows: FullRows<'a>,
    /// For an IVF-RaBitQ segment: its model and partitions over these
    /// slots, with its search defaults.
    ivf: Option<(&'a IvfExport, IvfParams)>,
}

/// Where a segment's slots come from.
enum Source<'a> {
    Index(&'a Index),
    Streamed(Streamed<'a>),
}

/// Writes an index as a segment file, with what the segment keeps beside
/// it:
///
/// ```no_run
/// # fn f(index: &sagitta_index::Index, schema: &sagitta_store::Schema,
/// #      batch: &arrow_array::RecordBatch, text: &[sagitta_store::TextFieldSpec])
/// #      -> sagitta_store::Result<()> {
/// use sagitta_store::segment::SegmentWriter;
/// let info = SegmentWriter::new(index)
///     .payload(schema, batch)
///     .text(text)
///     .write(std::path::Path::new("seg-1.sgt"))?;
/// # Ok(()) }
/// ```
///
/// The write is durable: the bytes go to `path.tmp`, which is fsynced,
/// renamed over `path`, and the directory fsynced.
#[must_use = "a SegmentWriter does nothing until `write`"]
pub struct SegmentWriter<'a> {
    source: Source<'a>,
    payload: Option<(&'a Schema, &'a RecordBatch)>,
    text: &'a [TextFieldSpec],
    text_source: TextSource<'a>,
    full_rows: Option<FullRows<'a>>,
}

impl std::fmt::Debug for SegmentWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentWriter")
            .field("payload", &self.payload.map(|(s, _)| s))
            .field("text", &self.text)
            .field("full_rows", &self.full_rows.is_some())
            .finish_non_exhaustive()
    }
}

impl<'a> SegmentWriter<'a> {
    /// A writer of `index` alone (no payload, no text).
    pub fn new(index: &'a Index) -> SegmentWriter<'a> {
        Self::from_source(Source::Index(index))
    }

    /// A writer of slots streamed from elsewhere rather than held by an
    /// index: slot `s` holds `keys[s]` and is live, and `rows` gives its
    /// stored vector (in `space`'s stored form, at least
    /// `space.vector_bytes()`; the file keeps those bytes zero-padded to
    /// the stride, as an index stores them; a slot without one fails the
    /// write). A Flat segment, or with `ivf` an IVF-RaBitQ one of that
    /// model and partitions over these slots and those search defaults.
    /// `params` gives the header's `ef_search` / `ef_construction`.
    /// Payload and text as for [`SegmentWriter::new`]; no full-precision
    /// rows. For the same slots the file is the one `new` writes.
    pub(crate) fn streamed(
        space: Space,
        params: HnswParams,
        keys: &'a [u64],
        rows: FullRows<'a>,
        ivf: Option<(&'a IvfExport, IvfParams)>,
    ) -> SegmentWriter<'a> {
        Self::from_source(Source::Streamed(Streamed {
            space,
            params,
            keys,
            rows,
            ivf,
        }))
    }

    fn from_source(source: Source<'a>) -> SegmentWriter<'a> {
        SegmentWriter {
            source,
            payload: None,
            text: &[],
            text_source: TextSource::Analyse,
            full_rows: None,
        }
    }

    /// Payload columns: `batch` holds one row per slot of the index, in
    /// slot order; the schema's fields become the Arrow section's columns
    /// and each gets a payload index.
    pub fn payload(mut self, schema: &'a Schema, batch: &'a RecordBatch) -> Self {
        self.payload = Some((schema, batch));
        self
    }

    /// The payload's string columns that get a full-text index (a text
    /// section, over the live slots; only with a payload). Analysed at
    /// write time unless [`SegmentWriter::analysed`] or
    /// [`SegmentWriter::text_section`] gives it.
    pub fn text(mut self, fields: &'a [TextFieldSpec]) -> Self {
        self.text = fields;
        self
    }

    /// The text already indexed: `mem`, when it is over the same fields as
    /// [`SegmentWriter::text`], holds every slot's documents (a mutable
    /// part's index); the section keeps the live slots' and no text is
    /// analysed again.
    pub fn analysed(mut self, mem: &'a MemText) -> Self {
        self.text_source = TextSource::Indexed(mem);
        self
    }

    /// The text section already encoded for this segment's slots
    /// (`sagitta_text::merge` of the input segments' sections): nothing is
    /// analysed, and no inverted index of every document is built in
    /// memory.
    pub fn text_section(mut self, section: Vec<u8>) -> Self {
        self.text_source = TextSource::Encoded(section);
        self
    }

    /// For an index that holds codes only, whose full-precision rows are
    /// elsewhere: `rows` gives each slot's f32 row, and the segment keeps
    /// them beside the codes as if the index had held them (an optimizer
    /// build holds no second copy of every row).
    pub fn full_rows(mut self, rows: FullRows<'a>) -> Self {
        self.full_rows = Some(rows);
        self
    }

    /// Writes the segment file at `path`, durably: the bytes go to
    /// `path.tmp`, which is fsynced, renamed over `path`, and the
    /// directory fsynced. Returns the header written.
    pub fn write(self, path: &Path) -> Result<SegmentInfo> {
        let tmp = tmp_path(path);
        let r = self.write_file(&tmp);
        durable::publish(r, &tmp, path)
    }

    /// Writes the whole file at `tmp` and syncs it.
    fn write_file(self, tmp: &Path) -> Result<SegmentInfo> {
        match self.source {
            Source::Index(index) => {
                let view = index.view();
                let ivf = if index.kind() == IndexKind::IvfRq {
                    Some(index.ivf_export().ok_or_else(|| {
                        StoreError::Index(IndexError::InvalidParameter {
                            name: "index",
                            value: "ivf_rq".into(),
                            reason: "an untrained IVF index cannot be written",
                        })
                    })?)
                } else {
                    None
                };
                // (The view holds the store's read lock: ask it, not the
                // index.)
                let has_full = self.full_rows.is_some() || view.full(0).is_some();
                let body = Body {
                    slots: &view,
                    space: index.space(),
                    kind: index.kind(),
                    params: index.params(),
                    vector: &|s: u32, put: &mut dyn FnMut(&[u8]) -> Result<()>| put(view.vector(s)),
                    graph: (index.kind() == IndexKind::Hnsw).then_some(&view),
                    full: has_full.then_some((&view, index.full_stride(), self.full_rows)),
                    ivf: ivf
                        .as_ref()
                        .map(|x| (x, index.ivf_params().unwrap_or_default())),
                };
                write_body(tmp, &body, self.payload, self.text, self.text_source)
            }
            Source::Streamed(st) => {
                let table = AllLive(st.keys);
                let (vb, stride) = (st.space.vector_bytes(), st.space.stride());
                let zeros = vec![0u8; stride];
                let vector = |s: u32, put: &mut dyn FnMut(&[u8]) -> Result<()>| {
                    let mut given = false;
                    (st.rows)(s, st.keys[s as usize], &mut |row: &[u8]| {
                        if row.len() < vb {
                            return Err(short_row(s, row.len(), vb));
                        }
                        put(&row[..vb])?;
                        put(&zeros[vb..])?;
                        given = true;
                        Ok(())
                    })?;
                    if given {
                        Ok(())
                    } else {
                        Err(short_row(s, 0, vb))
                    }
                };
                let body = Body {
                    slots: &table,
                    space: st.space,
                    kind: if st.ivf.is_some() {
                        IndexKind::IvfRq
                    } else {
                        IndexKind::Flat
                    },
                    params: st.params,
                    vector: &vector,
                    graph: None,
                    full: None,
                    ivf: st.ivf,
                };
                write_body(tmp, &body, self.payload, self.text, self.text_source)
            }
        }
    }
}

/// A streamed slot whose row is missing or shorter than the space's
/// stored vectors.
fn short_row(slot: u32, got: usize, want: usize) -> StoreError {
    StoreError::Index(IndexError::InvalidParameter {
        name: "rows",
        value: format!("slot {slot}: {got} of {want} bytes"),
        reason: "a streamed segment needs every slot's stored vector",
    })
}

/// The slots of a segment as its writer reads them: count, keys and
/// liveness.
trait SlotTable {
    fn count(&self) -> usize;
    fn key_of(&self, slot: u32) -> u64;
    fn live(&self, slot: u32) -> bool;
}

impl SlotTable for IndexView<'_> {
    fn count(&self) -> usize {
        GraphView::slots(self)
    }
    fn key_of(&self, slot: u32) -> u64 {
        GraphView::key(self, slot)
    }
    fn live(&self, slot: u32) -> bool {
        GraphView::is_live(self, slot)
    }
}

/// Streamed slots: every one live, `keys[slot]` its key.
struct AllLive<'a>(&'a [u64]);

impl SlotTable for AllLive<'_> {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn key_of(&self, slot: u32) -> u64 {
        self.0[slot as usize]
    }
    fn live(&self, slot: u32) -> bool {
        (slot as usize) < self.0.len()
    }
}

/// Gives one slot's stored vector to the sink.
type VectorOf<'a> = &'a dyn Fn(u32, &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()>;

/// What a segment file is written from, whatever its source.
struct Body<'a> {
    slots: &'a dyn SlotTable,
    space: Space,
    kind: IndexKind,
    params: HnswParams,
    vector: VectorOf<'a>,
    /// An HNSW index's graph.
    graph: Option<&'a IndexView<'a>>,
    /// Full-precision rows: the index's view, the row stride, and where
    /// they come from when the index holds codes only.
    full: Option<(&'a IndexView<'a>, usize, Option<FullRows<'a>>)>,
    ivf: Option<(&'a IvfExport, IvfParams)>,
}

/// Writes the segment file of `b` at `tmp` and syncs it.
fn write_body(
    tmp: &Path,
    b: &Body<'_>,
    payload: Option<(&Schema, &RecordBatch)>,
    text: &[TextFieldSpec],
    text_source: TextSource<'_>,
) -> Result<SegmentInfo> {
    let n = b.slots.count();
    let space = b.space;
    let params = b.params;
    let hnsw = b.kind == IndexKind::Hnsw;
    let has_full = b.full.is_some();
    let nsec = if hnsw {
        6
    } else if b.ivf.is_some() {
        10
    } else {
        4
    } + usize::from(has_full);
    let text = text_bytes(b.slots, payload, text, text_source)?;
    let payload = payload_sections(b.slots, payload)?;
    let nsec = nsec + if payload.is_some() { 2 } else { 0 } + usize::from(text.is_some());
    let file = fault::create(tmp)?;
    let mut w = SectionWriter::new(BufWriter::with_capacity(1 << 20, file), tmp);
    w.raw(&vec![0u8; HEADER_LEN + nsec * SECTION_ENTRY_LEN])?;

    let (live, key_range) = write_rows(&mut w, b.slots, b.vector)?;
    let (entry, top) = match b.graph {
        Some(view) if hnsw => write_graph(&mut w, view, params.m0())?,
        _ => (NO_ENTRY, 0),
    };
    if let Some((view, fstride, rows)) = b.full {
        write_full(&mut w, view, fstride, rows)?;
    }
    let ivf_info = match b.ivf {
        Some((x, p)) => Some(write_ivf(&mut w, p, space, x)?),
        None => None,
    };
    if let Some((batch, idx)) = &payload {
        w.begin(SectionKind::Payload)?;
        w.put_ipc(batch)?;
        w.end();
        w.begin(SectionKind::PayloadIndex)?;
        w.put(idx)?;
        w.end();
    }
    if let Some(t) = &text {
        w.begin(SectionKind::Text)?;
        w.put(t)?;
        w.end();
    }
    let info = SegmentInfo {
        version: FORMAT_VERSION,
        space,
        kind: b.kind,
        slots: n as u64,
        live,
        m: if hnsw { params.m as u32 } else { 0 },
        m0: if hnsw { params.m0() as u32 } else { 0 },
        entry: (entry != NO_ENTRY).then_some(entry),
        top_level: top,
        ef_search: params.ef_search as u32,
        ef_construction: params.ef_construction as u32,
        file_len: w.pos(),
        ivf: ivf_info,
        key_range,
    };
    let table = encode_table(w.sections());
    let header = encode_header(
        &info,
        nsec as u32,
        entry,
        crc32c::crc32c(&table),
        if keeps_cos_as_given(space, has_full) {
            5
        } else if text.is_some() {
            4
        } else if payload.is_some() {
            3
        } else {
            0
        },
    );
    let mut file = w.into_file()?;
    file.seek(SeekFrom::Start(0)).map_err(io("seek", tmp))?;
    fault::write_all(&mut file, &header, tmp)?;
    fault::write_all(&mut file, &table, tmp)?;
    fault::sync_all(&file, tmp)?;
    Ok(info)
}

/// The text section's bytes, when the segment gets one: text fields are
/// named and the payload has one row per slot.
fn text_bytes(
    view: &dyn SlotTable,
    payload: Option<(&Schema, &RecordBatch)>,
    text: &[TextFieldSpec],
    source: TextSource<'_>,
) -> Result<Option<Vec<u8>>> {
    let batch = match payload {
        Some((_, batch)) if !text.is_empty() && batch.num_rows() == view.count() => batch,
        _ => return Ok(None),
    };
    Ok(Some(match source {
        TextSource::Encoded(bytes) => {
            // Made for these slots: a section that does not parse
            // as such would make the segment unopenable.
            TextSection::parse(&bytes, view.count() as u32)
                .map_err(|e| StoreError::Payload(PayloadError::Malformed(e.to_string())))?;
            bytes
        }
        TextSource::Indexed(m) => text_section(view, batch, text, Some(m))?,
        TextSource::Analyse => text_section(view, batch, text, None)?,
    }))
}

/// The payload batch and its encoded indexes, when the payload has
/// columns (it must have one row per slot).
fn payload_sections<'b>(
    view: &dyn SlotTable,
    payload: Option<(&Schema, &'b RecordBatch)>,
) -> Result<Option<(&'b RecordBatch, Vec<u8>)>> {
    match payload {
        Some((schema, batch)) if !schema.is_empty() => {
            if batch.num_rows() != view.count() {
                return Err(StoreError::Payload(PayloadError::Malformed(format!(
                    "{} payload rows for {} slots",
                    batch.num_rows(),
                    view.count()
                ))));
            }
            Ok(Some((batch, pindex::build(schema, batch))))
        }
        _ => Ok(None),
    }
}

/// The sections every segment has: vectors (each slot's from `vector`),
/// slot keys, the sorted key index and the tombstones. Returns the live
/// count and the range of the live keys.
fn write_rows(
    w: &mut SectionWriter<'_>,
    view: &dyn SlotTable,
    vector: VectorOf<'_>,
) -> Result<(u64, Option<(u64, u64)>)> {
    let n = view.count();
    let live: Vec<u32> = (0..n as u32).filter(|&s| view.live(s)).collect();
    w.begin(SectionKind::Vectors)?;
    for s in 0..n as u32 {
        vector(s, &mut |row: &[u8]| w.put(row))?;
    }
    w.end();
    w.begin(SectionKind::SlotKeys)?;
    for s in 0..n as u32 {
        w.put(&view.key_of(s).to_le_bytes())?;
    }
    w.end();
    let mut recs: Vec<(u64, u32)> = live.iter().map(|&s| (view.key_of(s), s)).collect();
    recs.sort_unstable();
    w.begin(SectionKind::KeyIndex)?;
    for (k, s) in &recs {
        w.put(&k.to_le_bytes())?;
        w.put(&u64::from(*s).to_le_bytes())?;
    }
    w.end();
    let mut tomb = Bitset::new(n);
    for s in 0..n {
        if !view.live(s as u32) {
            tomb.insert(s);
        }
    }
    w.begin(SectionKind::Tombstones)?;
    for word in tomb.words() {
        w.put(&word.to_le_bytes())?;
    }
    w.end();
    let range = recs.first().zip(recs.last()).map(|(a, b)| (a.0, b.0));
    Ok((live.len() as u64, range))
}

/// An HNSW graph's sections: level 0 at a fixed width of `m0` links, the
/// upper levels in CSR form. Returns the raw entry slot and top level.
fn write_graph(w: &mut SectionWriter<'_>, view: &IndexView<'_>, m0: usize) -> Result<(u32, u32)> {
    let n = view.count();
    let (mut entry, mut top) = (NO_ENTRY, 0u32);
    let mut buf = Vec::new();
    let mut rec: Vec<u8> = Vec::with_capacity((1 + m0) * 4);
    w.begin(SectionKind::Level0)?;
    for s in 0..n as u32 {
        view.neighbors(0, s, &mut buf);
        let count = buf.len().min(m0);
        rec.clear();
        rec.extend_from_slice(&(count as u32).to_le_bytes());
        for &x in &buf[..count] {
            rec.extend_from_slice(&x.to_le_bytes());
        }
        rec.resize((1 + m0) * 4, 0);
        w.put(&rec)?;
    }
    w.end();
    if let Some((e, t)) = view.entry_point() {
        entry = e;
        top = t as u32;
    }
    // Upper levels in CSR form.
    let mut per_level: Vec<Vec<u32>> = vec![Vec::new(); top as usize];
    for s in 0..n as u32 {
        let lvl = view.level(s).min(top as usize);
        for l in 1..=lvl {
            per_level[l - 1].push(s);
        }
    }
    let mut body: Vec<u8> = Vec::new();
    let dir_len = 8 + 16 * top as usize;
    let mut dir = Vec::with_capacity(dir_len);
    dir.extend_from_slice(&top.to_le_bytes());
    dir.extend_from_slice(&0u32.to_le_bytes());
    for (li, nodes) in per_level.iter().enumerate() {
        let off = dir_len + body.len();
        dir.extend_from_slice(&(off as u64).to_le_bytes());
        dir.extend_from_slice(&(nodes.len() as u64).to_le_bytes());
        let mut offsets = vec![0u32];
        let mut adj = Vec::new();
        for &s in nodes {
            view.neighbors(li + 1, s, &mut buf);
            adj.extend_from_slice(&buf);
            offsets.push(adj.len() as u32);
        }
        for x in nodes.iter().chain(&offsets).chain(&adj) {
            body.extend_from_slice(&x.to_le_bytes());
        }
    }
    w.begin(SectionKind::Upper)?;
    w.put(&dir)?;
    w.put(&body)?;
    w.end();
    Ok((entry, top))
}

/// Whether a file of `space` (with full-precision rows or not) holds
/// cosine vectors as given rather than at unit length (format 5): f32 /
/// f16 rows, or the f32 rows of section 13. A reader before format 5
/// would compare them as unit vectors, so such a file needs a version-5
/// reader. (i8 cosine has always been compared by the full cosine, and
/// sq8 / sq16 codes stay unit length.)
fn keeps_cos_as_given(space: Space, has_full: bool) -> bool {
    space.metric == Metric::Cos && (matches!(space.dtype, DType::F32 | DType::F16) || has_full)
}

/// The full-precision rows, `fstride` bytes per slot: from `full_rows`
/// when given, else the index's own, zeros where a slot has none.
fn write_full(
    w: &mut SectionWriter<'_>,
    view: &IndexView<'_>,
    fstride: usize,
    full_rows: Option<FullRows<'_>>,
) -> Result<()> {
    w.begin(SectionKind::FullVectors)?;
    let zeros = vec![0u8; fstride];
    for s in 0..view.count() as u32 {
        match (full_rows, view.full(s)) {
            (Some(src), _) => {
                let mut given = false;
                src(s, view.key(s), &mut |row: &[u8]| {
                    let row = &row[..row.len().min(fstride)];
                    w.put(row)?;
                    w.put(&zeros[row.len()..])?;
                    given = true;
                    Ok(())
                })?;
                if !given {
                    w.put(&zeros)?;
                }
            }
            (None, Some(row)) => w.put(&row[..fstride])?,
            (None, None) => w.put(&zeros)?,
        }
    }
    w.end();
    Ok(())
}

/// An IVF index's sections (centroids, directory, list slots, codes,
/// factors, extra bits). Returns the header's IVF fields.
fn write_ivf(
    w: &mut SectionWriter<'_>,
    p: IvfParams,
    space: Space,
    x: &IvfExport,
) -> Result<IvfInfo> {
    let parts = x.lists.len();
    let dims = space.dims;
    w.begin(SectionKind::IvfCentroids)?;
    for c in &x.model.centroids()[..parts * dims] {
        w.put(&c.to_le_bytes())?;
    }
    w.end();
    let mut lists = vec![0u64];
    let mut blocks = vec![0u64];
    for l in &x.lists {
        lists.push(lists[lists.len() - 1] + l.slots.len() as u64);
        blocks.push(blocks[blocks.len() - 1] + l.slots.len().div_ceil(32) as u64);
    }
    w.begin(SectionKind::IvfDirectory)?;
    for v in lists.iter().chain(&blocks) {
        w.put(&v.to_le_bytes())?;
    }
    w.end();
    w.begin(SectionKind::IvfSlots)?;
    for l in &x.lists {
        for s in &l.slots {
            w.put(&s.to_le_bytes())?;
        }
    }
    w.end();
    w.begin(SectionKind::IvfCodes)?;
    for l in &x.lists {
        w.put(&l.codes)?;
    }
    w.end();
    w.begin(SectionKind::IvfFactors)?;
    for l in &x.lists {
        for f in &l.factors {
            w.put(&f.to_le_bytes())?;
        }
    }
    w.end();
    w.begin(SectionKind::IvfExtra)?;
    for l in &x.lists {
        w.put(&l.ex)?;
    }
    w.end();
    Ok(IvfInfo {
        partitions: parts as u32,
        bits: x.model.bits(),
        seed: x.model.seed(),
        nprobe: p.nprobe as u32,
        refine: p.refine.map(|r| r.min(u32::MAX as usize - 1) as u32),
        listed: lists[parts],
    })
}

/// The text section of a segment: the `text` fields' string columns of
/// `batch` (one row per slot), live slots only; taken from `analysed`
/// (every slot's documents, over the same fields) when given.
fn text_section(
    view: &dyn SlotTable,
    batch: &RecordBatch,
    text: &[TextFieldSpec],
    analysed: Option<&MemText>,
) -> Result<Vec<u8>> {
    use arrow_array::cast::AsArray;
    use arrow_array::Array;
    let encode = |mem: &MemText| {
        sagitta_text::section::encode(mem, view.count() as u32)
            .map_err(|e| StoreError::Payload(PayloadError::Malformed(e.to_string())))
    };
    if let Some(mem) = analysed.filter(|m| m.has_fields(text)) {
        let slots = view.count();
        return encode(&mem.live_only(&|s| (s as usize) < slots && view.live(s)));
    }
    let mut mem = MemText::new(text);
    for (fi, f) in text.iter().enumerate() {
        let Some(col) = batch.column_by_name(&f.name) else {
            continue;
        };
        let Some(strings) = col.as_string_opt::<i32>() else {
            return Err(StoreError::Payload(PayloadError::Malformed(format!(
                "text field {:?} is not a string column",
                f.name
            ))));
        };
        for slot in 0..view.count().min(strings.len()) {
            if view.live(slot as u32) && strings.is_valid(slot) {
                mem.add(fi, slot as u32, strings.value(slot));
            }
        }
    }
    encode(&mem)
}
