//! Running one task of the plan: its inputs' live rows copied a chunk at
//! a time into a new index (a base segment's graph imported when the plan
//! says so), the new segment file written (payload, a text section merged
//! from the inputs', full-precision rows read from the inputs) and
//! committed in place of the inputs, deletes made meanwhile carried over.
//!
//! Flat and IVF-RaBitQ results hold no index of their rows: the rows go
//! from the (memory-mapped) inputs straight into the new file, a row at a
//! time ([`SegmentWriter::streamed`]); an IVF model is trained on the
//! sample its parameters pick ([`sagitta_index::IvfParams::training_sample`],
//! the rows an index would have trained on) and the rows encoded into
//! their partitions a chunk at a time. Such a task holds the keys, where
//! each row comes from, one chunk, and the IVF codes, never every row.

use super::super::commit::Change;
use super::super::files::segment_file;
use super::super::part::{Body, Dead, Part};
use super::super::{Inner, State};
use super::policy::Plan;
use super::pools::{Pools, Priority};
use crate::error::{Result, StoreError};
use crate::payload;
use crate::segment::SegmentWriter;
use sagitta_index::{GraphView, HnswParams, Index, IndexKind, IndexRead, IvfBuilder, IvfExport};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Rows inserted between two checks for shutdown, once writes have paused
/// or while a caller waits.
const CHUNK: usize = 1024;
/// Rows inserted in one background step: a step begun at nice 19 finishes
/// there (a thread cannot take its priority back), so a caller who starts
/// waiting meanwhile waits for at most this many inserts at that priority
/// (1,024 rows of 384 dims kept `optimize()` waiting 11 s beside two
/// CPU-bound processes).
const BACKGROUND_CHUNK: usize = 128;
/// Rows encoded into IVF partitions in one step (an encode costs
/// microseconds, an HNSW insert far more).
const IVF_CHUNK: usize = 8192;

/// Executes `p` on the parts of `st`; returns the rows inserted.
pub(super) fn run(c: &Inner, st: &State, p: &Plan, pools: &Pools) -> Result<u64> {
    let inputs: Vec<Arc<Part>> = p
        .inputs
        .iter()
        .filter_map(|id| {
            st.parts
                .iter()
                .find(|x| x.id == *id && !x.is_frozen())
                .cloned()
        })
        .collect();
    if inputs.len() != p.inputs.len() {
        return Ok(0);
    }
    let dead0: Vec<Arc<Dead>> = inputs.iter().map(|x| x.dead()).collect();
    let base = p.base.and_then(|b| inputs.iter().position(|x| x.id == b));
    // Only a graph stored the way built segments are can be imported.
    let built = c.config.built_space();
    let base = base.filter(|&b| {
        !p.flat
            && inputs[b]
                .segment()
                .is_some_and(|s| s.info().space == built && s.info().kind == IndexKind::Hnsw)
    });
    // Rows in the collection's space (f32 rows where built segments keep
    // them beside codes): copied as stored, or, into an index keeping full
    // rows beside codes, encoded like user vectors. The inputs are
    // immutable, so the live rows are listed once (keys and where each
    // is) and copied a chunk at a time as they are inserted: the task
    // holds one chunk of rows besides the index it builds, not a second
    // copy of every row.
    let stride = c.config.space.stride();
    // Built segments that keep full-precision rows beside codes: the graph
    // is built over the codes, so the index holds codes only and the rows
    // go from the inputs straight into the new file (no second copy of
    // every row in memory).
    let full = c.config.keeps_full() && !p.flat;
    let (mut keys, mut origin) = (Vec::new(), Vec::new());
    for (i, x) in inputs.iter().enumerate() {
        if Some(i) != base {
            x.for_each_live(|slot, key, _| {
                keys.push(key);
                origin.push((i, slot));
            });
        }
    }
    c.opt.status.lock().stats.task_rows_total = keys.len() as u64;
    // A Flat or IVF result: written from the inputs, no index of its rows.
    let streamed = match c.config.kind {
        _ if base.is_some() => None,
        _ if p.flat => Some((HnswParams::default(), false)),
        IndexKind::Flat => Some((c.build_hnsw(), false)),
        IndexKind::IvfRq => Some((HnswParams::default(), true)),
        IndexKind::Hnsw => None,
    };
    if let Some((params, ivf)) = streamed {
        // A key live in two inputs (not expected: an upsert kills the
        // older row) keeps its last row, as an index's upserts in this
        // order would.
        last_of_each_key(&mut keys, &mut origin);
        let out = if keys.is_empty() {
            None
        } else {
            let ivf = if ivf {
                Some(build_ivf(c, &inputs, &origin, pools)?.export())
            } else {
                None
            };
            let id = c.next_id.fetch_add(1, Ordering::AcqRel);
            let part = pools.install(c, || {
                write_streamed(c, &inputs, &keys, &origin, params, ivf, id)
            })?;
            Some(part)
        };
        return commit(c, p, inputs, dead0, out, pools, keys.len());
    }
    let index = pools.install(c, || -> Result<Index> {
        let index = match base.and_then(|b| inputs[b].segment().map(|s| (b, s))) {
            Some((b, seg)) => {
                let dead = &dead0[b];
                let import = if full {
                    Index::from_graph_codes
                } else {
                    Index::from_graph
                };
                import(
                    c.config.built_space(),
                    c.build_hnsw(),
                    seg,
                    &|slot| dead.keys.is_empty() || !dead.keys.contains(&seg.key(slot)),
                    keys.len(),
                )?
            }
            None if p.flat => Index::flat(c.config.space)?,
            None if full => Index::new(c.config.built_space(), c.config.kind, c.build_hnsw())?,
            None => c.config.sealed_index_with(c.build_hnsw())?,
        };
        // Sized once for every row: no capacity doubling (a copy of all
        // that is built so far, both held at once) and no slack past it.
        index.reserve(keys.len())?;
        Ok(index)
    })?;
    // The copy runs on this thread (at its priority: a copy begun on the
    // background pool kept a caller who came meanwhile waiting seconds).
    let mut chunk = Vec::new();
    let mut at = 0;
    while at < keys.len() {
        if c.opt.stopping() {
            return Err(StoreError::Optimizer("stopped".into()));
        }
        let step = if c.build_priority() != Priority::Background {
            CHUNK
        } else {
            BACKGROUND_CHUNK
        };
        let end = (at + step).min(keys.len());
        copy_rows(&inputs, &origin[at..end], stride, &mut chunk);
        pools.install(c, || {
            if full {
                index.upsert_f32_rows(&keys[at..end], &chunk, stride, 0)
            } else {
                index.upsert_encoded_batch(&keys[at..end], &chunk, 0)
            }
        })?;
        c.opt.progress(end as u64);
        at = end;
    }
    drop(chunk);
    let rows = keys.len() as u64;
    let id = c.next_id.fetch_add(1, Ordering::AcqRel);
    let out = if index.is_empty() {
        None
    } else {
        let written = pools.install(c, || {
            write(c, &index, &inputs, base, &keys, origin, full, id)
        })?;
        Some(written)
    };
    commit(c, p, inputs, dead0, out, pools, rows as usize)
}

/// Drops every row of a key but its last from `keys` and `origin` (in
/// step); does nothing, past a sorted copy of the keys, when each key
/// comes once.
fn last_of_each_key(keys: &mut Vec<u64>, origin: &mut Vec<(usize, u32)>) {
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    if sorted.windows(2).all(|w| w[0] != w[1]) {
        return;
    }
    drop(sorted);
    let mut last: HashMap<u64, usize> = HashMap::with_capacity(keys.len());
    for (i, &k) in keys.iter().enumerate() {
        last.insert(k, i);
    }
    let keep: Vec<bool> = keys.iter().enumerate().map(|(i, k)| last[k] == i).collect();
    drop(last);
    let mut at = keep.iter();
    keys.retain(|_| at.next() == Some(&true));
    let mut at = keep.iter();
    origin.retain(|_| at.next() == Some(&true));
}

/// Commits the task's segment `out` (none when no row was live) in place
/// of its inputs, deletes made since `dead0` carried over; returns `rows`.
fn commit(
    c: &Inner,
    p: &Plan,
    inputs: Vec<Arc<Part>>,
    dead0: Vec<Arc<Dead>>,
    out: Option<Arc<Part>>,
    pools: &Pools,
    rows: usize,
) -> Result<u64> {
    let carry: Vec<(Arc<Part>, Arc<Dead>)> = inputs.into_iter().zip(dead0).collect();
    pools.install(c, || {
        c.commit(
            Change {
                remove: p.inputs.clone(),
                add: out.into_iter().collect(),
                wal_seq: None,
                what: Some(p.kind.name()),
                full_bloom: false,
            },
            &carry,
        )
    })?;
    Ok(rows as u64)
}

/// The IVF partitions of the rows at `origin`: the model trained on the
/// sample the collection's IVF parameters pick of them, then every row
/// encoded, a chunk at a time, in order (row `i` is slot `i`).
fn build_ivf(
    c: &Inner,
    inputs: &[Arc<Part>],
    origin: &[(usize, u32)],
    pools: &Pools,
) -> Result<IvfBuilder> {
    let stride = c.config.space.stride();
    let params = c.config.ivf;
    let mut chunk = Vec::new();
    let at: Vec<(usize, u32)> = params
        .training_sample(origin.len())
        .into_iter()
        .map(|i| origin[i])
        .collect();
    copy_rows(inputs, &at, stride, &mut chunk);
    drop(at);
    let mut b = pools.install(c, || {
        IvfBuilder::train(c.config.space, &params, origin.len(), &chunk, &mut |_| {})
    })?;
    let mut done = 0;
    for rows in origin.chunks(IVF_CHUNK) {
        if c.opt.stopping() {
            return Err(StoreError::Optimizer("stopped".into()));
        }
        copy_rows(inputs, rows, stride, &mut chunk);
        pools.install(c, || b.push_rows(&chunk))?;
        done += rows.len();
        c.opt.progress(done as u64);
    }
    Ok(b)
}

/// Writes a Flat (or, with `ivf`, IVF-RaBitQ) segment of the rows at
/// `origin` (slot `i` holds `keys[i]`, read from input `origin[i].0` at
/// slot `origin[i].1`) as part `id` and opens it. The rows go from the
/// inputs into the file one at a time.
#[allow(clippy::too_many_arguments)]
fn write_streamed(
    c: &Inner,
    inputs: &[Arc<Part>],
    keys: &[u64],
    origin: &[(usize, u32)],
    params: HnswParams,
    ivf: Option<IvfExport>,
    id: u64,
) -> Result<Arc<Part>> {
    let file = segment_file(id);
    let path = c.dir.join(&file);
    let schema = c.schema.read().clone();
    let batch = if schema.is_empty() {
        None
    } else {
        // A row at a time into the batch, read from its input.
        let mut b = payload::BatchBuilder::new(&schema, keys.len());
        for &(i, s) in origin {
            let r = inputs[i].payload_row(&schema, s)?;
            b.push((!r.is_empty()).then_some(&r[..]));
        }
        Some(b.finish()?)
    };
    let stride = c.config.space.stride();
    let rows = |slot: u32, _key: u64, put: &mut dyn FnMut(&[u8]) -> Result<()>| {
        if (slot as usize).is_multiple_of(CHUNK) {
            if c.opt.stopping() {
                return Err(StoreError::Optimizer("stopped".into()));
            }
            if ivf.is_none() {
                c.opt.progress(slot as u64);
            }
        }
        let (i, s) = origin[slot as usize];
        inputs[i].with_view(|g| {
            let r = g.full(s).unwrap_or_else(|| g.vector(s));
            put(&r[..stride.min(r.len())])
        })
    };
    let specs = c.config.text_fields();
    let mut w = SegmentWriter::streamed(
        c.config.space,
        params,
        keys,
        &rows,
        ivf.as_ref().map(|x| (x, c.config.ivf)),
    )
    .text(&specs);
    if let Some(b) = &batch {
        w = w.payload(&schema, b);
    }
    let section = merged_text(inputs, &specs, keys.len(), &mut |f| {
        for (slot, &o) in origin.iter().enumerate() {
            f(slot as u32, o);
        }
    });
    if let Some(section) = section {
        w = w.text_section(section);
    }
    w.write(&path)?;
    let seg = super::super::commit::open_written(&path)?;
    Ok(Arc::new(Part::new(id, Body::Sealed { file, seg })))
}

/// The first `stride` bytes of the rows at `at` (input, slot) into `out`
/// (cleared first), in order.
fn copy_rows(inputs: &[Arc<Part>], at: &[(usize, u32)], stride: usize, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(at.len() * stride);
    let mut i = 0;
    while i < at.len() {
        // One view per run of rows from the same input.
        let part = at[i].0;
        let run = at[i..].iter().take_while(|(p, _)| *p == part).count();
        inputs[part].with_view(|g| {
            for &(_, slot) in &at[i..i + run] {
                let row = g.full(slot).unwrap_or_else(|| g.vector(slot));
                out.extend_from_slice(&row[..stride]);
            }
        });
        i += run;
    }
}

/// Writes a task's segment file (vectors, payload, text; with `full`,
/// the full-precision rows read from the inputs) as part `id` and opens
/// it.
#[allow(clippy::too_many_arguments)]
fn write(
    c: &Inner,
    index: &Index,
    inputs: &[Arc<Part>],
    base: Option<usize>,
    keys: &[u64],
    origin: Vec<(usize, u32)>,
    full: bool,
    id: u64,
) -> Result<Arc<Part>> {
    let file = segment_file(id);
    let path = c.dir.join(&file);
    let schema = c.schema.read().clone();
    let from = Origins {
        base,
        base_slots: base.map_or(0, |b| inputs[b].slot_count()),
        of_key: keys.iter().copied().zip(origin).collect(),
    };
    let failure: RefCell<Option<StoreError>> = RefCell::new(None);
    let batch = c.payload_batch(index, |key, slot| {
        let (i, s) = from.of(key, slot)?;
        match inputs[i].payload_row(&schema, s) {
            Ok(r) => (!r.is_empty()).then_some(r),
            Err(e) => {
                failure.borrow_mut().get_or_insert(e);
                None
            }
        }
    })?;
    if let Some(e) = failure.into_inner() {
        return Err(e);
    }
    let specs = c.config.text_fields();
    let mut w = SegmentWriter::new(index).text(&specs);
    if let Some((schema, b)) = &batch {
        w = w.payload(schema, b);
    }
    if full {
        // Each slot's row as its input keeps it: a built input's full row,
        // an unbuilt one's stored row (the collection's f32 space).
        let stride = c.config.space.stride();
        let need = c.config.space.dims * 4;
        let rows = |slot: u32, key: u64, put: &mut dyn FnMut(&[u8]) -> Result<()>| match from
            .of(key, slot)
        {
            Some((i, s)) => inputs[i].with_view(|g| {
                let r = g.full(s).unwrap_or_else(|| g.vector(s));
                // Never codes taken for a row (an input without f32 rows).
                if r.len() < need {
                    return Err(StoreError::Optimizer(format!(
                        "input part {}: slot {s} has no f32 row to write",
                        inputs[i].id
                    )));
                }
                put(&r[..stride.min(r.len())])
            }),
            None => Ok(()),
        };
        if let Some(section) = indexed_text(index, inputs, &from, &specs) {
            w = w.text_section(section);
        }
        w.full_rows(&rows).write(&path)?;
        let seg = super::super::commit::open_written(&path)?;
        return Ok(Arc::new(Part::new(id, Body::Sealed { file, seg })));
    }
    if let Some(section) = indexed_text(index, inputs, &from, &specs) {
        w = w.text_section(section);
    }
    w.write(&path)?;
    let seg = super::super::commit::open_written(&path)?;
    Ok(Arc::new(Part::new(id, Body::Sealed { file, seg })))
}

/// Where each row of a task's new segment comes from: its input and slot
/// there.
struct Origins {
    /// The input whose graph was imported (its rows keep their slots).
    base: Option<usize>,
    base_slots: usize,
    /// The other inputs' rows, by key.
    of_key: HashMap<u64, (usize, u32)>,
}

impl Origins {
    /// The (input, slot) of the new segment's row `slot` holding `key`.
    fn of(&self, key: u64, slot: u32) -> Option<(usize, u32)> {
        match (self.base, self.of_key.get(&key)) {
            (_, Some(&o)) => Some(o),
            (Some(b), None) if (slot as usize) < self.base_slots => Some((b, slot)),
            _ => None,
        }
    }
}

/// [`merged_text`] for a segment written from `index`: its live slots,
/// each from where `from` says.
fn indexed_text(
    index: &Index,
    inputs: &[Arc<Part>],
    from: &Origins,
    specs: &[sagitta_text::TextFieldSpec],
) -> Option<Vec<u8>> {
    if specs.is_empty() {
        return None;
    }
    let view = index.view();
    merged_text(inputs, specs, view.slots(), &mut |f| {
        for slot in 0..view.slots() as u32 {
            if !view.is_live(slot) {
                continue;
            }
            if let Some(o) = from.of(view.key(slot), slot) {
                f(slot, o);
            }
        }
    })
}

/// Takes a slot of a new segment and the (input, slot) its row comes from.
type Sink<'a> = &'a mut dyn FnMut(u32, (usize, u32));

/// The new segment's text section merged from its inputs' sections
/// (`sagitta_text::merge`): no text analysed again, and only the section
/// itself held, not an inverted index of every row in hash maps. The new
/// segment has `nslots` slots; `origins` calls its sink with each live
/// one and the (input, slot) it comes from. `None` (the texts are then
/// analysed from the payload) when the collection has no text fields, an
/// input is not a segment with a section of those fields and analyzers,
/// or a section cannot be read (the payload is the source the section is
/// rebuilt from).
fn merged_text(
    inputs: &[Arc<Part>],
    specs: &[sagitta_text::TextFieldSpec],
    nslots: usize,
    origins: &mut dyn FnMut(Sink<'_>),
) -> Option<Vec<u8>> {
    if specs.is_empty() {
        return None;
    }
    let sections: Vec<sagitta_text::TextSection<'_>> = inputs
        .iter()
        .map(|p| p.segment()?.text().ok().flatten())
        .collect::<Option<_>>()?;
    let mut remaps: Vec<Vec<u32>> = inputs
        .iter()
        .map(|p| vec![sagitta_text::merge::DROPPED; p.slot_count()])
        .collect();
    origins(&mut |slot, (i, s)| {
        if let Some(r) = remaps[i].get_mut(s as usize) {
            *r = slot;
        }
    });
    let refs: Vec<&sagitta_text::TextSection<'_>> = sections.iter().collect();
    let rm: Vec<&[u32]> = remaps.iter().map(Vec::as_slice).collect();
    sagitta_text::merge::merge(&refs, &rm, specs, nslots as u32)
        .ok()
        .flatten()
}

impl Inner {
    /// The HNSW parameters of graphs built now (the config's, with
    /// `ef_construction` as [`crate::Collection::set_expansion_add`] left
    /// it).
    fn build_hnsw(&self) -> sagitta_index::HnswParams {
        sagitta_index::HnswParams {
            ef_construction: self.build_ef.load(Ordering::Relaxed),
            ..self.config.hnsw
        }
    }
}
