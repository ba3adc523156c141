//! The collection's built-in embedding model: rows written with text and
//! no vector, and searches given only text, are embedded by the engine.
//!
//! Opening a collection checks that the model's files are present (a
//! missing file fails the open, naming it and `scripts/fetch-model`); the
//! weights are loaded on first use, once per process and model, and
//! shared by every collection that names the model.

use super::Collection;
use crate::error::{Result, StoreError};
use crate::payload::{Payload, Value};
use parking_lot::Mutex;
use sagitta_embed::{model_dir, Embedder, DEFAULT_MODEL, TOKENIZER_FILE, WEIGHTS_FILE};
use sagitta_index::VectorRef;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

/// Word pieces a text is truncated to before it is embedded.
pub const QUERY_TOKENS: usize = 128;

/// Loaded models, by name.
static MODELS: LazyLock<Mutex<HashMap<String, Arc<Embedder>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn model_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Model(e.to_string())
}

/// Checks that model `name` is known, has `dims` dimensions, and that its
/// files are present (without loading them).
pub(crate) fn check_model(name: &str, dims: usize) -> Result<()> {
    if name != DEFAULT_MODEL {
        return Err(StoreError::Config(format!(
            "embed_model = {name:?}: unknown model (known: {DEFAULT_MODEL:?})"
        )));
    }
    if dims != 384 {
        return Err(StoreError::Config(format!(
            "embed_model = {name:?} gives 384-dimensional vectors, the collection has {dims}"
        )));
    }
    let dir = model_dir(name);
    for f in [WEIGHTS_FILE, TOKENIZER_FILE] {
        let p = dir.join(f);
        if !p.is_file() {
            return Err(StoreError::Model(format!(
                "model file {} is missing: run scripts/fetch-model (or set SAGITTA_MODELS)",
                p.display()
            )));
        }
    }
    Ok(())
}

/// The loaded model `name` (loaded on the first call in this process).
pub(crate) fn model(name: &str) -> Result<Arc<Embedder>> {
    if let Some(m) = MODELS.lock().get(name) {
        return Ok(m.clone());
    }
    // Loaded outside the lock (hundreds of milliseconds); a racing loader
    // just loses its copy.
    // Truncation at 128 word pieces, as the model's tokenizer.json says
    // and as debian-minilm's vectors were made (sentence-transformers
    // uses 256; the first 128 pieces agree, and 94% of that corpus's
    // passages are shorter). Also the faster of the two.
    let m = Embedder::open(name)
        .and_then(|e| e.with_max_tokens(QUERY_TOKENS))
        .map_err(model_err)?;
    let m = Arc::new(m);
    Ok(MODELS.lock().entry(name.to_string()).or_insert(m).clone())
}

impl Collection {
    /// Embeds `texts` with the collection's model (row-major, `dims` per
    /// text, unit length).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<f32>> {
        let Some(name) = &self.inner.config.embed_model else {
            return Err(StoreError::Model(
                "this collection has no embedding model (create it with embed_model)".into(),
            ));
        };
        let m = model(name)?;
        // Run inside the rayon pool (one hand-off), so the model's matrix
        // products split their work there instead of each handing it to
        // the pool from outside and waiting (two dozen hand-offs a query).
        rayon::scope(|_| m.embed(texts)).map_err(model_err)
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
