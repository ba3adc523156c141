//! Payload updates: new values for some payload columns of rows already
//! stored, their vectors and other columns kept.
//!
//! An update is written as upserts of whole rows (the stored vector, the
//! merged payload row) through the one write path: logged, synced and
//! applied like any write, so recovery, replacement in sealed segments
//! and the text index need nothing of their own.

use super::write::Encoded;
use super::Collection;
use crate::error::{Result, StoreError};
use crate::filter::Bound;
use crate::ids::STRING_ID_FIELD;
use crate::payload::{Payload, PayloadError, Row, Value};
use sagitta_index::VectorRef;
use std::collections::HashMap;

/// Rows merged and written at a time: an update of many rows holds one
/// piece's vectors and rows, not a copy of every row it touches. Each
/// piece is logged as one write; the writer lock is held throughout, so
/// no other write comes between them.
const PIECE: usize = 8192;

impl Collection {
    /// Sets payload columns of stored rows: row `r` of `payload` gives the
    /// new values of its columns for `keys[r]` (a null clears one); the
    /// columns it does not name and the vectors stay as they are. New
    /// columns join the schema as in [`Collection::upsert_with_payload`].
    /// A key given twice takes its last row. Under an embedding model, a
    /// row whose embedded text field is set is embedded again from its new
    /// text. Everything is checked before anything is written: a key that
    /// is not stored is [`StoreError::KeyNotFound`], a column of the wrong
    /// type a payload error. Many rows are written in pieces of
    /// [`PIECE`], each logged as one write (a crash between two leaves the
    /// earlier ones applied, as a large upsert's pieces are; so does a
    /// merged row over the payload size limit, the one check made per
    /// piece). Returns the rows updated.
    pub fn set_payload(&self, keys: &[u64], payload: &Payload) -> Result<usize> {
        payload.validate(keys.len())?;
        self.check_update(payload)?;
        let mut g = self.writer_guard("set_payload", keys.len())?;
        let w = g
            .as_mut()
            .ok_or(StoreError::ReadOnly { op: "set_payload" })?;
        // The last row of each key.
        let mut last: HashMap<u64, usize> = HashMap::with_capacity(keys.len());
        for (i, &k) in keys.iter().enumerate() {
            last.insert(k, i);
        }
        let rows: Vec<usize> = (0..keys.len())
            .filter(|&i| last.get(&keys[i]) == Some(&i))
            .collect();
        let keys: Vec<u64> = rows.iter().map(|&i| keys[i]).collect();
        if let Some(i) = self.contains_many(&keys).iter().position(|&l| !l) {
            return Err(StoreError::KeyNotFound {
                row: rows[i],
                key: keys[i],
            });
        }
        for (n, part) in keys.chunks(PIECE).enumerate() {
            let at = n * PIECE;
            let e = self.merged(part, payload, |i| rows[at + i])?;
            self.inner.write(w, e, &[])?;
        }
        Ok(keys.len())
    }

    /// Sets the values of `values` (one row) on every live row whose
    /// payload passes `pred`, as [`Collection::set_payload`] would for
    /// each; returns how many. The rows matched are the rows updated (the
    /// writer lock is held from the match to the write).
    pub fn set_payload_where(&self, pred: &Bound, values: &Payload) -> Result<usize> {
        if values.rows != 1 {
            return Err(PayloadError::Malformed(format!(
                "an update by filter takes one row of values, not {}",
                values.rows
            ))
            .into());
        }
        values.validate(1)?;
        self.check_update(values)?;
        let mut g = self.writer_guard("set_payload", 1)?;
        let w = g
            .as_mut()
            .ok_or(StoreError::ReadOnly { op: "set_payload" })?;
        let keys = self.keys_where(Some(pred))?;
        for part in keys.chunks(PIECE) {
            let e = self.merged(part, values, |_| 0)?;
            self.inner.write(w, e, &[])?;
        }
        Ok(keys.len())
    }

    /// Checks an update's columns: not the reserved id column, text within
    /// its limit.
    fn check_update(&self, p: &Payload) -> Result<()> {
        if p.fields.iter().any(|f| f.name == STRING_ID_FIELD) {
            return Err(PayloadError::Value {
                field: STRING_ID_FIELD.into(),
                reason: "the column of string ids cannot be updated".into(),
            }
            .into());
        }
        self.check_text_columns(p)?;
        // Rows whose embedded text is set need text to embed.
        if let Some(col) = self.embedded_column(p) {
            if let Some(row) = p.columns[col]
                .iter()
                .position(|v| !matches!(v, Value::Str(_)))
            {
                return Err(StoreError::InvalidText(format!(
                    "row {row}: no text in {:?} to embed (null)",
                    p.fields[col].name
                )));
            }
        }
        Ok(())
    }

    /// The column of `p` that is the collection's embedded text field
    /// (under an embedding model), if `p` sets it.
    fn embedded_column(&self, p: &Payload) -> Option<usize> {
        let c = &self.inner.config;
        match (&c.embed_model, c.text.first()) {
            (Some(_), Some(t)) => p.fields.iter().position(|f| f.name == t.name),
            _ => None,
        }
    }

    /// The rows of stored `keys` with `payload`'s columns set from its row
    /// `row_of(i)` for key `i`, and their stored vectors (embedded again
    /// where the embedded text changes). Grows the schema; call with the
    /// writer lock held and every key live.
    fn merged(
        &self,
        keys: &[u64],
        payload: &Payload,
        row_of: impl Fn(usize) -> usize,
    ) -> Result<Encoded> {
        let c = &*self.inner;
        let mut schema = c.schema.read().clone();
        schema.merge(&payload.fields)?;
        let old = self.payload_rows(keys)?;
        let raw = self.get_raw_many(keys);
        let at: Vec<usize> = payload
            .fields
            .iter()
            .map(|f| schema.field(&f.name).map(|(i, _)| i))
            .collect::<std::result::Result<_, _>>()?;
        let mut rows: Vec<Row> = Vec::with_capacity(keys.len());
        for (i, row) in old.into_iter().enumerate() {
            let row = row.ok_or(StoreError::KeyNotFound {
                row: i,
                key: keys[i],
            })?;
            let mut row = row.into_vec();
            row.resize(schema.len(), Value::Null);
            for (col, &j) in payload.columns.iter().zip(&at) {
                row[j] = col[row_of(i)].clone();
            }
            rows.push(row.into_boxed_slice());
        }
        let stride = c.config.space.stride();
        let mut stored = vec![0u8; keys.len() * stride];
        for (i, r) in raw.into_iter().enumerate() {
            let r = r.ok_or(StoreError::KeyNotFound {
                row: i,
                key: keys[i],
            })?;
            let n = r.len().min(stride);
            stored[i * stride..i * stride + n].copy_from_slice(&r[..n]);
        }
        // The embedded field set: those rows' vectors follow their text.
        if let Some(col) = self.embedded_column(payload) {
            let texts: Vec<&str> = (0..keys.len())
                .map(|i| match &payload.columns[col][row_of(i)] {
                    Value::Str(s) => Ok(&**s),
                    _ => Err(StoreError::InvalidText(format!(
                        "row {}: no text in {:?} to embed (null)",
                        row_of(i),
                        payload.fields[col].name
                    ))),
                })
                .collect::<Result<_>>()?;
            let vectors = self.embed(&texts)?;
            let refs: Vec<VectorRef<'_>> = vectors
                .chunks_exact(c.config.space.dims)
                .map(VectorRef::F32)
                .collect();
            stored = c.encode(&refs)?;
        }
        // Grown under the writer lock, before the rows are logged (as an
        // upsert does).
        *c.schema.write() = schema;
        Ok(Encoded::new(keys.to_vec(), stored, Some(rows)))
    }
}
