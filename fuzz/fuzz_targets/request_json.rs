//! The store's request model (`sagitta_store::request`) from the JSON the
//! server reads. The first byte picks:
//!
//! - 0: a create body, parsed by [`CollectionOptions::to_config`] (through
//!   the server's translation); a config it accepts must come back equal
//!   from [`CollectionOptions::from_config`] (how the manifest records
//!   it) and from a collection created with it and opened again (the
//!   manifest written and read), and never be refused by the store.
//! - 1: a search body (the server's fast path and serde_json must agree)
//!   run as a [`sagitta_store::Query`], dense, text or hybrid (fusion,
//!   alpha, rrf_k, depth, filters), against a collection with string ids,
//!   payload and two text fields, on sealed and mutable rows.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use sagitta_server::api::{CreateCollection, SearchRequest};
use sagitta_server::ops;
use sagitta_server::registry::{Entry, Registry};
use sagitta_store::{Collection, CollectionOptions, OpenMode};
use std::sync::{Arc, OnceLock};

fn entry() -> &'static Arc<Entry> {
    static E: OnceLock<(Registry, Arc<Entry>)> = OnceLock::new();
    &E.get_or_init(|| {
        let dir = common::scratch().join("request");
        let _ = std::fs::remove_dir_all(&dir);
        let reg = Registry::open(&dir).expect("registry");
        let req: CreateCollection = serde_json::from_str(
            r#"{"name": "t", "dims": 4, "metric": "cos", "id_type": "string",
                "text_fields": ["title", {"name": "body", "analyzer": "simple"}]}"#,
        )
        .expect("create");
        let e = reg
            .create("t", ops::config_from(&req).expect("config"))
            .expect("collection");
        let sealed = r#"{"ids": ["a", "b", "c"],
            "vectors": [[1,0,0,0],[0,1,0,0],[0,0,1,0]],
            "payload": [{"title": "red fox", "body": "The quick fox", "n": 1},
                        {"title": "blue <b>fox</b> jumps", "n": 2, "tags": ["x"]},
                        null]}"#;
        ops::run_upsert(&e, serde_json::from_str(sealed).expect("seed")).expect("seed rows");
        e.coll.seal().expect("seal");
        let mutable = r#"{"ids": ["d", "e"], "vectors": [[1,1,0,0],[0,0,1,1]],
            "payload": [{"title": "lazy dog", "body": "over the dog"}, {"n": 3}]}"#;
        ops::run_upsert(&e, serde_json::from_str(mutable).expect("seed")).expect("seed rows");
        (reg, e)
    })
    .1
}

/// A create body's config, checked against its two readings back.
fn create(body: &[u8]) {
    let Ok(req) = serde_json::from_slice::<CreateCollection>(body) else {
        return;
    };
    let Ok(cfg) = ops::config_from(&req) else {
        return;
    };
    let back = CollectionOptions::from_config(&cfg).to_config();
    assert_eq!(back.as_ref().ok(), Some(&cfg), "from_config: {back:?}");
    // A model is not loaded here (the build has no model files).
    if cfg.embed_model.is_some() {
        return;
    }
    let dir = common::scratch().join("created");
    let _ = std::fs::remove_dir_all(&dir);
    let c = Collection::create(&dir, cfg.clone())
        .unwrap_or_else(|e| panic!("a config the parser accepts is refused: {e}"));
    drop(c);
    let c = Collection::open(&dir, OpenMode::ReadOnly).expect("reopen");
    assert_eq!(c.config(), &cfg, "the config read back from the manifest");
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    match kind % 2 {
        0 => create(body),
        _ => {
            let fast = sagitta_server::fastjson::from_slice::<SearchRequest>(body);
            let slow = serde_json::from_slice::<SearchRequest>(body);
            assert_eq!(
                format!("{:?}", fast.as_ref().map_err(|e| e.to_string())),
                format!("{:?}", slow.as_ref().map_err(|e| e.to_string()))
            );
            if let Ok(req) = slow {
                let _ = ops::run_search(entry(), req);
            }
        }
    }
});
