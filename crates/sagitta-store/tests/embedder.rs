//! The store's embedding models through the `Embedder` seam: what a
//! collection naming a model gets with the cargo feature `embed` (the
//! model's own dimensions, checked at create without loading it) and
//! without it (a typed "no embedding models in this build" error). Needs
//! no model files.

#![allow(clippy::unwrap_used)]

use sagitta_index::{DType, Metric, Space};
use sagitta_store::{AnalyzerKind, Collection, CollectionConfig, StoreError, TextFieldSpec};

fn config(dims: usize) -> CollectionConfig {
    let mut c = CollectionConfig::new(Space::new(dims, Metric::Cos, DType::F32).unwrap());
    c.text = vec![TextFieldSpec::new("body", AnalyzerKind::English)];
    c.embed_model = Some("all-minilm-l6-v2".into());
    c
}

/// The dimensions a model gives come from the model: a collection of
/// another size is refused before any model file is looked at, naming the
/// model's 384; an unknown model is refused by name.
#[cfg(feature = "embed")]
#[test]
fn a_models_dimensions_come_from_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let e = Collection::create(dir.path(), config(512)).unwrap_err();
    assert!(
        matches!(&e, StoreError::Config(m) if m.contains("384") && m.contains("512")),
        "{e}"
    );
    let mut c = config(384);
    c.embed_model = Some("no-such-model".into());
    let e = Collection::create(dir.path(), c).unwrap_err();
    assert!(
        matches!(&e, StoreError::Config(m) if m.contains("unknown model")),
        "{e}"
    );
}

/// Built without `embed`, a collection naming a model fails to create with
/// the typed error saying so, and nothing is written.
#[cfg(not(feature = "embed"))]
#[test]
fn without_the_embed_feature_a_model_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let e = Collection::create(&path, config(384)).unwrap_err();
    assert!(
        matches!(e, StoreError::Model(sagitta_store::ModelError::NotBuilt)),
        "{e}"
    );
    assert!(
        e.to_string().contains("rebuild with the `embed` feature"),
        "{e}"
    );
    assert!(!path.join("MANIFEST").exists());
}
