//! The store's view of a text embedding model: the [`Embedder`] trait, and
//! the models this build knows by name.
//!
//! A collection created with `embed_model` embeds rows written with text
//! and no vector, and searches given only text (see `Collection::embed`).
//! The store itself runs no model: it calls one through [`Embedder`]. The
//! models come from `sagitta-embed` (all-MiniLM-L6-v2 on the kernels'
//! packed products, tokenizers), an optional dependency behind the cargo feature `embed`,
//! on by default. Built without it (`--no-default-features`), the store
//! pulls in neither, and creating or opening a collection that names a
//! model fails with [`ModelError::NotBuilt`].
//!
//! A model's dimensions come from the model ([`Embedder::dims`], or
//! `sagitta_embed::dims_of` before its weights are loaded), never from a
//! literal.

use crate::error::{ModelError, Result, StoreError};
use std::sync::Arc;

/// A text embedding model, as the store calls it. Shared between threads
/// and collections: `embed` takes `&self`.
pub trait Embedder: Send + Sync + std::fmt::Debug {
    /// Dimensions of one embedding.
    fn dims(&self) -> usize;

    /// Embeds `texts`: `texts.len() × dims()` floats, row major, rows in
    /// the order of `texts`, each of unit length. Runs on the calling
    /// rayon pool.
    fn embed(&self, texts: &[&str]) -> Result<Vec<f32>>;
}

/// Checks, without loading it, that model `name` is one this build
/// knows, that it gives `dims`-dimensional vectors, and that its files are
/// present.
pub(crate) fn check(name: &str, dims: usize) -> Result<()> {
    let model_dims = backend::dims(name)?;
    if dims != model_dims {
        return Err(StoreError::Config(format!(
            "embed_model = {name:?} gives {model_dims}-dimensional vectors, the collection has {dims}"
        )));
    }
    backend::check_files(name)
}

/// Loads model `name` (hundreds of milliseconds: callers cache it).
pub(crate) fn load(name: &str) -> Result<Arc<dyn Embedder>> {
    backend::load(name)
}

/// The models of `sagitta-embed`.
#[cfg(feature = "embed")]
mod backend {
    use super::{Embedder, ModelError};
    use crate::error::{Result, StoreError};
    use sagitta_embed::{DEFAULT_MODEL, TOKENIZER_FILE, WEIGHTS_FILE};
    use std::sync::Arc;

    /// Word pieces a text is truncated to before it is embedded:
    /// 128, as the model's tokenizer.json says and as debian-minilm's
    /// vectors were made (sentence-transformers uses 256; the first 128
    /// pieces agree, and 94% of that corpus's passages are shorter). Also
    /// the faster of the two.
    const QUERY_TOKENS: usize = 128;

    fn failed(e: sagitta_embed::EmbedError) -> StoreError {
        ModelError::Failed(e.to_string()).into()
    }

    impl Embedder for sagitta_embed::Embedder {
        fn dims(&self) -> usize {
            sagitta_embed::Embedder::dims(self)
        }

        fn embed(&self, texts: &[&str]) -> Result<Vec<f32>> {
            sagitta_embed::Embedder::embed(self, texts).map_err(failed)
        }
    }

    /// The dimensions of model `name` (a config error if it is unknown).
    pub(super) fn dims(name: &str) -> Result<usize> {
        sagitta_embed::dims_of(name).map_err(|_| {
            StoreError::Config(format!(
                "embed_model = {name:?}: unknown model (known: {DEFAULT_MODEL:?})"
            ))
        })
    }

    /// Checks that the files of model `name` are present.
    pub(super) fn check_files(name: &str) -> Result<()> {
        let dir = sagitta_embed::model_dir(name);
        for f in [WEIGHTS_FILE, TOKENIZER_FILE] {
            let p = dir.join(f);
            if !p.is_file() {
                return Err(ModelError::MissingFile(p).into());
            }
        }
        Ok(())
    }

    pub(super) fn load(name: &str) -> Result<Arc<dyn Embedder>> {
        let m = sagitta_embed::Embedder::open(name)
            .and_then(|e| e.with_max_tokens(QUERY_TOKENS))
            .map_err(failed)?;
        Ok(Arc::new(m))
    }
}

/// No models: the store was built without the feature `embed`.
#[cfg(not(feature = "embed"))]
mod backend {
    use super::{Embedder, ModelError};
    use crate::error::Result;
    use std::sync::Arc;

    pub(super) fn dims(_name: &str) -> Result<usize> {
        Err(ModelError::NotBuilt.into())
    }

    pub(super) fn check_files(_name: &str) -> Result<()> {
        Err(ModelError::NotBuilt.into())
    }

    pub(super) fn load(_name: &str) -> Result<Arc<dyn Embedder>> {
        Err(ModelError::NotBuilt.into())
    }
}
