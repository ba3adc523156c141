//! Flight tickets and action bodies, as the Flight service runs them
//! (after tonic has decoded the request): the first byte picks DoGet
//! (a ticket), GetFlightInfo (a descriptor path) or one of the actions
//! (a body), the rest is the bytes the client sent. Run against a real
//! collection with payload and a text field; every response stream is
//! drained, as a client would.
#![no_main]

mod common;

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{Action, FlightDescriptor, Ticket};
use futures::StreamExt;
use libfuzzer_sys::fuzz_target;
use sagitta_server::api::CreateCollection;
use sagitta_server::flight::Flight;
use sagitta_server::ops;
use sagitta_server::{ServerConfig, State};
use std::sync::{Arc, OnceLock};
use tonic::Request;

/// Action names the service serves (and one it does not).
const ACTIONS: [&str; 27] = [
    "delete",
    "Delete",
    "delete-vector",
    "delete-dataset",
    "DeleteNamespace",
    "CreateNamespace",
    "ListNamespaces",
    "GetNamespaceDatasetCount",
    "GetTotalNamespaceCount",
    "VectorSearch",
    "VectorSearchByID",
    "HybridSearch",
    "ForceSnapshot",
    "check_readiness",
    "cluster-status",
    "MeshIdentity",
    "MeshStatus",
    "DiscoveryStatus",
    "add-edge",
    "traverse-graph",
    "GetGraphStats",
    "list",
    "describe",
    "create-collection",
    "drop-collection",
    "set-payload",
    "no-such-action",
];

struct World {
    rt: tokio::runtime::Runtime,
    st: Arc<State>,
    flight: Flight,
    /// The sockets stay bound and unserved; the service is called
    /// directly.
    _bound: sagitta_server::Bound,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let dir = common::scratch().join("server");
        let _ = std::fs::remove_dir_all(&dir);
        let mut cfg = ServerConfig::new();
        cfg.data = dir;
        cfg.http = "127.0.0.1:0".parse().expect("addr");
        cfg.flight = "127.0.0.1:0".parse().expect("addr");
        let bound = rt.block_on(sagitta_server::bind(cfg)).expect("bind");
        let st = bound.state().clone();
        let flight = Flight::new(st.clone());
        World {
            rt,
            st,
            flight,
            _bound: bound,
        }
    })
}

/// (Re)creates collection `c` when an input dropped it, and keeps the
/// number of collections bounded.
fn ensure(st: &State) {
    for e in st.registry.all() {
        if e.name != "c" && e.name != "d" {
            let _ = st.registry.drop_collection(&e.name);
        }
    }
    for name in ["c", "d"] {
        if st.registry.contains(name) {
            continue;
        }
        let req: CreateCollection = serde_json::from_str(&format!(
            r#"{{"name": "{name}", "dims": 4, "metric": "l2", "id_type": "{}",
                "text_fields": ["title"]}}"#,
            if name == "c" { "uint64" } else { "string" }
        ))
        .expect("create");
        let e = st
            .registry
            .create(name, ops::config_from(&req).expect("config"))
            .expect("collection");
        let ids = if name == "c" {
            "[1, 2, 3]"
        } else {
            r#"["a", "b", "c"]"#
        };
        let seed = format!(
            r#"{{"ids": {ids}, "vectors": [[1,0,0,0],[0,1,0,0],[0,0,1,0]],
            "payload": [{{"title": "red fox", "n": 1}}, {{"title": "blue <b>fox</b>", "n": 2}}, null]}}"#
        );
        ops::run_upsert(&e, serde_json::from_str(&seed).expect("seed")).expect("seed rows");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    let w = world();
    ensure(&w.st);
    w.rt.block_on(async {
        match kind as usize % (ACTIONS.len() + 2) {
            0 => {
                if let Ok(resp) = w
                    .flight
                    .do_get(Request::new(Ticket::new(body.to_vec())))
                    .await
                {
                    let mut s = resp.into_inner();
                    while s.next().await.is_some() {}
                }
            }
            1 => {
                let path = String::from_utf8_lossy(body).into_owned();
                let d = FlightDescriptor::new_path(vec![path]);
                let _ = w.flight.get_flight_info(Request::new(d)).await;
            }
            n => {
                let a = Action::new(ACTIONS[n - 2], body.to_vec());
                if let Ok(resp) = w.flight.do_action(Request::new(a)).await {
                    let mut s = resp.into_inner();
                    while s.next().await.is_some() {}
                }
            }
        }
    });
});
