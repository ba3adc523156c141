//! The collection's built-in embedding model: rows written with text and
//! no vector, and searches given only text, are embedded by the engine.
//!
//! The model is called through [`Embedder`] (see the `embedder` module:
//! which models this build has, behind the cargo feature `embed`).
//! Opening a collection checks that the model's files are present (a
//! missing file fails the open, naming it and `scripts/fetch-model`); the
//! weights are loaded on first use, once per process and model, and
//! shared by every collection that names the model.

use super::Collection;
use crate::embedder::{self, Embedder};
use crate::error::ModelError;
use crate::error::{Result, StoreError};
use crate::payload::{Payload, Value};
use parking_lot::Mutex;
use sagitta_index::VectorRef;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

/// Loaded models, by name.
static MODELS: LazyLock<Mutex<HashMap<String, Arc<dyn Embedder>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Checks that model `name` is known, has `dims` dimensions, and that its
/// files are present (without loading them).
pub(crate) fn check_model(name: &str, dims: usize) -> Result<()> {
    embedder::check(name, dims)
}

/// The loaded model `name` (loaded on the first call in this process).
pub(crate) fn model(name: &str) -> Result<Arc<dyn Embedder>> {
    if let Some(m) = MODELS.lock().get(name) {
        return Ok(m.clone());
    }
    // Loaded outside the lock (hundreds of milliseconds); a racing loader
    // just loses its copy.
    let m = embedder::load(name)?;
    Ok(MODELS.lock().entry(name.to_string()).or_insert(m).clone())
}

impl Collection {
    /// Embeds `texts` with the collection's model (row-major, `dims` per
    /// text, unit length).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<f32>> {
        let Some(name) = &self.inner.config.embed_model else {
            return Err(ModelError::NoModel(" (create it with embed_model)").into());
        };
        let m = model(name)?;
        // Run inside the rayon pool (one hand-off), so the model's matrix
        // products split their work there instead of each handing it to
        // the pool from outside and waiting (two dozen hand-offs a query).
        rayon::scope(|_| m.embed(texts))
    }

    /// Upserts rows given by their payload only: the collection's model
    /// embeds each row's text (the first text field, which every row must
    /// hold), then the rows are written as by
    /// [`Collection::upsert_with_payload`].
    pub fn upsert_embedding(&self, keys: &[u64], payload: &Payload) -> Result<()> {
        let c = &self.inner.config;
        let (Some(_), Some(field)) = (&c.embed_model, c.text.first()) else {
            return Err(
                ModelError::NoModel(": give vectors (or create it with embed_model)").into(),
            );
        };
        payload.validate(keys.len())?;
        self.check_text_columns(payload)?;
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
