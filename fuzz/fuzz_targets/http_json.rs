//! HTTP JSON bodies, as the server's handlers run them (after axum's
//! routing): the first byte picks the request kind (create, search,
//! upsert, get, delete, set_payload, count, scroll, classify), the rest is
//! its body, parsed into the request type and run against a real
//! collection.
//! Search and upsert bodies are also read by the server's fast path
//! (`sagitta_server::fastjson`), which must agree with serde_json.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use sagitta_server::api::{self, CreateCollection};
use sagitta_server::ops;
use sagitta_server::registry::{Entry, Registry};
use std::sync::{Arc, OnceLock};

fn entry() -> &'static Arc<Entry> {
    static E: OnceLock<(Registry, Arc<Entry>)> = OnceLock::new();
    &E.get_or_init(|| {
        let dir = common::scratch().join("registry");
        let _ = std::fs::remove_dir_all(&dir);
        let reg = Registry::open(&dir).expect("registry");
        let req: CreateCollection =
            serde_json::from_str(r#"{"name": "c", "dims": 4, "metric": "l2"}"#).expect("create");
        let e = reg
            .create("c", ops::config_from(&req).expect("config"))
            .expect("collection");
        let seed = r#"{"ids": [1, 2, 3], "vectors": [[1,0,0,0],[0,1,0,0],[0,0,1,0]],
            "payload": [{"lang": "en", "n": 1}, {"lang": "de", "n": 2}, null]}"#;
        ops::run_upsert(&e, serde_json::from_str(seed).expect("seed")).expect("seed rows");
        (reg, e)
    })
    .1
}

/// The body read by serde_json, after checking that the server's fast
/// path reads it the same: the same request, or the same error.
fn both<T: sagitta_server::fastjson::WithVector + std::fmt::Debug>(
    body: &[u8],
) -> serde_json::Result<T> {
    let fast = sagitta_server::fastjson::from_slice::<T>(body);
    let slow = serde_json::from_slice::<T>(body);
    assert_eq!(
        format!("{:?}", fast.as_ref().map_err(|e| e.to_string())),
        format!("{:?}", slow.as_ref().map_err(|e| e.to_string()))
    );
    slow
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    let e = entry();
    match kind % 9 {
        0 => {
            if let Ok(req) = serde_json::from_slice::<CreateCollection>(body) {
                let _ = ops::config_from(&req);
            }
        }
        1 => {
            if let Ok(req) = both::<api::SearchRequest>(body) {
                let _ = ops::run_search(e, req);
            }
        }
        2 => {
            if let Ok(req) = both::<api::UpsertRequest>(body) {
                let _ = ops::run_upsert(e, req);
            }
        }
        3 => {
            if let Ok(req) = serde_json::from_slice(body) {
                let _ = ops::run_get(e, req);
            }
        }
        4 => {
            if let Ok(req) = serde_json::from_slice(body) {
                let _ = ops::run_delete(e, req);
            }
        }
        5 => {
            if let Ok(req) = serde_json::from_slice(body) {
                let _ = ops::run_set_payload(e, req);
            }
        }
        6 => {
            if let Ok(req) = serde_json::from_slice(body) {
                let _ = ops::run_count(e, req);
            }
        }
        7 => {
            if let Ok(req) = serde_json::from_slice(body) {
                let _ = sagitta_server::browse::run_scroll(e, req);
            }
        }
        _ => {
            if let Ok(req) = serde_json::from_slice(body) {
                let _ = sagitta_server::classify::run_classify(e, req);
            }
        }
    }
});
