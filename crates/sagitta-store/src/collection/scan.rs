//! A streaming scan: the live rows of a collection (key, vector, payload),
//! optionally only those a filter passes, read part by part in batches
//! from one snapshot. Nothing is listed up front and no row is looked up
//! by key: each batch is read in slot order straight from its part.

use super::part::Part;
use super::{Collection, State};
use crate::error::Result;
use crate::filter::Bound;
use crate::payload::{Row, Schema};
use sagitta_index::{Bitset, GraphView};
use std::sync::Arc;

/// Rows of one scan batch.
#[derive(Debug, Default)]
pub struct ScanBatch {
    /// Keys.
    pub keys: Vec<u64>,
    /// Vectors in the collection's space, `vector_bytes` each, contiguous.
    pub vectors: Vec<u8>,
    /// Payload rows laid out by [`Scan::schema`].
    pub rows: Vec<Row>,
}

impl ScanBatch {
    /// Rows in the batch.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// The iterator [`Collection::scan`] returns: batches of up to `batch`
/// rows; every batch but the last is full.
#[derive(Debug)]
pub struct Scan {
    st: Arc<State>,
    /// Per part (0: the mutable part, then `st.parts`): the slots the
    /// filter passes (dead ones removed), or `None` for all live slots.
    masks: Vec<Option<Bitset>>,
    schema: Schema,
    /// Slots of the mutable part when the scan started (it grows in place).
    active_slots: u32,
    part: usize,
    next: u32,
    batch: usize,
    vb: usize,
}

impl Collection {
    /// Streams the live rows that `pred` passes (all live rows for
    /// `None`), `batch` rows at a time, from the parts as they are now.
    /// Every row live for the whole scan is returned once; rows written
    /// after this call are not returned; a row removed or replaced during
    /// the scan may or may not be.
    pub fn scan(&self, pred: Option<&Bound>, batch: usize) -> Result<Scan> {
        let v = self.inner.view();
        let st = &v.st;
        let masks = match pred {
            None => vec![None; st.parts.len() + 1],
            Some(_) => self
                .inner
                .segments(&v, None, pred)?
                .into_iter()
                .map(|s| s.combined)
                .collect(),
        };
        Ok(Scan {
            // Slots past the completed ones belong to a write in flight.
            active_slots: st.rows.complete.load(std::sync::atomic::Ordering::Acquire) as u32,
            masks,
            schema: self.inner.schema.read().clone(),
            part: 0,
            next: 0,
            batch: batch.max(1),
            vb: self.inner.config.space.vector_bytes(),
            st: v.st.clone(),
        })
    }
}

impl Scan {
    /// The payload schema of the rows (the collection's at the start).
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Fills `out` from the mutable part; true when it is done.
    fn fill_active(&mut self, out: &mut ScanBatch) -> bool {
        let n = self.active_slots;
        let mask = self.masks[0].as_ref();
        let mut slots = Vec::new();
        {
            let view = self.st.active.view();
            while self.next < n && out.len() < self.batch {
                let slot = self.next;
                self.next += 1;
                if !view.is_live(slot) || mask.is_some_and(|m| !m.contains(slot as usize)) {
                    continue;
                }
                out.keys.push(view.key(slot));
                out.vectors.extend_from_slice(&view.vector(slot)[..self.vb]);
                slots.push(slot);
            }
        }
        // Rows after the view is let go: a write holds the rows' lock
        // while it may need the index's exclusively (to grow it).
        out.rows.extend(
            slots
                .into_iter()
                .map(|s| self.st.rows.get(s).unwrap_or_default()),
        );
        self.next >= n
    }

    /// Fills `out` from immutable part `p`; true when it is done.
    fn fill_part(
        &mut self,
        p: &Arc<Part>,
        mask: Option<&Bitset>,
        out: &mut ScanBatch,
    ) -> Result<bool> {
        let mut last = None;
        let mut err = None;
        let (vb, batch, schema) = (self.vb, self.batch, &self.schema);
        p.walk_live(self.next, |slot, key, row| {
            last = Some(slot);
            if mask.is_some_and(|m| !m.contains(slot as usize)) {
                return true;
            }
            match p.payload_row(schema, slot) {
                Ok(r) => out.rows.push(r),
                Err(e) => {
                    err = Some(e);
                    return false;
                }
            }
            out.keys.push(key);
            out.vectors.extend_from_slice(&row[..vb.min(row.len())]);
            out.len() < batch
        });
        if let Some(e) = err {
            return Err(e);
        }
        match last {
            Some(s) if out.len() >= batch => {
                self.next = s + 1;
                Ok(self.next as usize >= p.slot_count())
            }
            _ => Ok(true),
        }
    }
}

impl Iterator for Scan {
    type Item = Result<ScanBatch>;

    fn next(&mut self) -> Option<Result<ScanBatch>> {
        let mut out = ScanBatch::default();
        while out.len() < self.batch && self.part <= self.st.parts.len() {
            let done = if self.part == 0 {
                self.fill_active(&mut out)
            } else {
                let p = self.st.parts[self.part - 1].clone();
                let mask = self.masks[self.part].take();
                let r = self.fill_part(&p, mask.as_ref(), &mut out);
                self.masks[self.part] = mask;
                match r {
                    Ok(d) => d,
                    Err(e) => {
                        // Stop after an error: a corrupt part ends the scan.
                        self.part = self.st.parts.len() + 1;
                        return Some(Err(e));
                    }
                }
            };
            if done {
                self.part += 1;
                self.next = 0;
            }
        }
        (!out.is_empty()).then_some(Ok(out))
    }
}
