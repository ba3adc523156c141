//! The collection's built-in embedding model: rows written with text and
//! no vector, and searches given only text, are embedded by the engine.
//!
//! The model is called through [`Embedder`] (see the `embedder` module:
//! which models this build has, behind the cargo feature `embed`).
//! Opening a collection checks that the model's files are present (a
//! missing file fails the open, naming it and `scripts/fetch-model`) and
//! starts loading the weights on a thread of their own ([`preload`]), so
//! the open returns at once and the first query does not pay for the load
//! (one that comes sooner waits for it rather than loading a second copy).
//! A model is loaded once per process and shared by every collection that
//! names it.

use super::Collection;
use crate::embedder::{self, Embedder};
use crate::error::ModelError;
use crate::error::{Result, StoreError};
use crate::payload::{Payload, Value};
use parking_lot::Mutex;
use sagitta_index::VectorRef;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

/// A model's place in [`MODELS`]: empty until loaded. Its lock is held
/// for the whole load, so callers wait for a load under way instead of
/// starting another.
type Slot = Arc<Mutex<Option<Arc<dyn Embedder>>>>;

/// Models, by name.
static MODELS: LazyLock<Mutex<HashMap<String, Slot>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn slot(name: &str) -> Slot {
    MODELS.lock().entry(name.to_string()).or_default().clone()
}

/// Checks that model `name` is known, has `dims` dimensions, and that its
/// files are present (without loading them).
pub(crate) fn check_model(name: &str, dims: usize) -> Result<()> {
    embedder::check(name, dims)
}

/// Loads of a model this process has started (each distinct from the
/// last: a caller finding a load under way waits for it).
static LOADS: AtomicUsize = AtomicUsize::new(0);

fn load(name: &str) -> Result<Arc<dyn Embedder>> {
    LOADS.fetch_add(1, Ordering::Relaxed);
    embedder::load(name)
}

/// The loaded model `name` (loaded by the first call in this process that
/// finds it missing; callers meanwhile wait for that load).
pub(crate) fn model(name: &str) -> Result<Arc<dyn Embedder>> {
    let slot = slot(name);
    let mut loaded = slot.lock();
    if let Some(m) = &*loaded {
        return Ok(m.clone());
    }
    let m = load(name)?;
    *loaded = Some(m.clone());
    Ok(m)
}

/// Starts loading model `name` on a thread of its own unless it is loaded
/// or loading, then embeds one short text with it so its first query finds
/// every buffer and page in place. The slot is locked before this returns,
/// so a query made after it waits for this load. A failed load is left
/// for the next [`model`] call to retry and report.
pub(crate) fn preload(name: &str) {
    let Some(loaded) = slot(name).try_lock_arc() else {
        return;
    };
    if loaded.is_some() {
        return;
    }
    let name = name.to_string();
    let mut loaded = loaded;
    // If no thread can be started, the guard is dropped with the closure
    // and the first query loads the model instead.
    let _ = std::thread::Builder::new()
        .name("sagitta-model-load".into())
        .spawn(move || {
            if let Ok(m) = load(&name) {
                *loaded = Some(m.clone());
                drop(loaded);
                let _ = m.embed(&["warm up"]);
            }
        });
}

impl Collection {
    /// Embeds `texts` with the collection's model (row-major, `dims` per
    /// text, unit length).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<f32>> {
        let Some(name) = &self.inner.config.embed_model else {
            return Err(ModelError::NoModel(" (create it with embed_model)").into());
        };
        let m = model(name)?;
        if texts.len() == 1 {
            // A query: embedded on this thread (see `sagitta_embed`).
            return m.embed(texts);
        }
        // Run inside the rayon pool (one hand-off): the model splits its
        // batches over the pool's threads.
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

#[cfg(all(test, feature = "embed"))]
mod tests {
    use super::*;

    /// A query made while the model loads in the background waits for that
    /// load: the model is loaded once, and every caller gets that copy.
    /// (Needs the model: `scripts/fetch-model`.)
    #[test]
    fn preload_loads_once_and_queries_wait_for_it() {
        let name = sagitta_embed::DEFAULT_MODEL;
        let before = LOADS.load(Ordering::Relaxed);
        preload(name);
        let s = slot(name);
        assert!(
            s.is_locked() || s.lock().is_some(),
            "preload neither loading nor loaded"
        );
        preload(name);
        let first = model(name).expect("model loads (run scripts/fetch-model)");
        let again = model(name).expect("model");
        assert!(Arc::ptr_eq(&first, &again));
        assert!(LOADS.load(Ordering::Relaxed) - before <= 1, "loaded twice");
        assert_eq!(
            first.embed(&["a query"]).expect("embeds").len(),
            first.dims()
        );
    }
}
