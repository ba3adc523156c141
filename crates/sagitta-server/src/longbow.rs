//! The DoAction names of Longbow's Flight protocol that are about the node
//! rather than one collection: cluster and mesh status, readiness,
//! namespaces, snapshots, and the graph actions this server does not offer.
//! Shapes follow Longbow's servers (see docs/SERVER.md, "Longbow's
//! clients"), so its SDK and performance client work unchanged.

use crate::error::{ApiError, ApiResult};
use crate::State;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{json, Value as Json};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

/// The namespace every collection belongs to.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Namespaces: `default` (every collection) and the names made by
/// `CreateNamespace`. As in Longbow, they live in memory only (a
/// collection does not need one; its name is its identity).
#[derive(Debug)]
pub struct Namespaces(Mutex<BTreeSet<String>>);

impl Default for Namespaces {
    fn default() -> Self {
        Namespaces(Mutex::new(BTreeSet::from([DEFAULT_NAMESPACE.to_string()])))
    }
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

fn body<T: for<'de> Deserialize<'de> + Default>(what: &str, b: &[u8]) -> ApiResult<T> {
    if b.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(b).map_err(|e| bad(format!("{what}: invalid JSON body: {e}")))
}

#[derive(Debug, Default, Deserialize)]
struct NameBody {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    dataset: Option<String>,
    #[serde(default)]
    overwrite: bool,
}

/// This node as a Longbow mesh member (Go field names; `Status` 0 is
/// alive).
pub fn member(st: &State) -> Json {
    json!({
        "ID": format!("sagitta@{}", st.flight_addr),
        "Addr": st.flight_addr,
        "GRPCAddr": st.flight_addr,
        "MetaAddr": st.flight_addr,
        "Tags": {"engine": "sagitta", "version": env!("CARGO_PKG_VERSION"), "http": st.http_addr},
        "Status": 0,
        "Incarnation": 0,
    })
}

/// `cluster-status`: Longbow's `{self, members, count}` (one member: this
/// node; Sagitta runs standalone) with Sagitta's own figures beside it.
pub fn cluster_status(st: &State) -> Json {
    let cols: Vec<Json> = st
        .registry
        .all()
        .iter()
        .map(|e| {
            let s = e.coll.stats();
            json!({"name": e.name, "rows": s.vectors,
                   "segments": s.segments, "active_rows": s.active_vectors})
        })
        .collect();
    let me = member(st);
    json!({
        "self": me,
        "members": [me],
        "count": 1,
        "status": if st.accepting.load(Ordering::Acquire) { "serving" } else { "shutting_down" },
        "mode": "standalone",
        "nodes": [{"id": "local", "http": st.http_addr, "flight": st.flight_addr,
                   "version": env!("CARGO_PKG_VERSION")}],
        "collections": cols,
    })
}

/// `check_readiness`: `READY`, or `NOT_FOUND` for an unknown dataset. A
/// write is searchable when it is acknowledged, so there is no `BUSY`.
pub fn check_readiness(st: &State, b: &[u8]) -> ApiResult<Json> {
    let r: NameBody = body("check_readiness", b)?;
    let Some(ds) = r.dataset.or(r.name) else {
        return Ok(json!({"status": "READY"}));
    };
    Ok(match st.registry.get(&ds) {
        Ok(e) => json!({"status": "READY", "index_len": e.coll.len()}),
        Err(_) => json!({"status": "NOT_FOUND", "reason": "dataset not found"}),
    })
}

/// `delete-dataset`: drops the collection named by `dataset` (Longbow's
/// field) or `name`. Its body always names a dataset, never a namespace:
/// INVALID_ARGUMENT when it names none, NOT_FOUND for an unknown one.
pub fn delete_dataset(st: &State, b: &[u8]) -> ApiResult<Json> {
    let r: NameBody = body("delete-dataset", b)?;
    let ds = r
        .dataset
        .or(r.name)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad("delete-dataset: give {\"dataset\": NAME}"))?;
    st.registry.drop_collection(&ds)?;
    Ok(json!({"status": "deleted", "dataset": ds}))
}

/// The namespace actions. `DeleteNamespace` with `{"dataset": C}` drops
/// collection C (what Longbow's SDK sends for `delete(dataset)`); with
/// `{"name": N}` it removes namespace N.
pub fn namespace_action(st: &State, ns: &Namespaces, kind: &str, b: &[u8]) -> ApiResult<Json> {
    let r: NameBody = body(kind, b)?;
    let named = || {
        r.name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| bad(format!("{kind}: give {{\"name\": NAMESPACE}}")))
    };
    match kind {
        "CreateNamespace" => {
            let n = named()?;
            let mut set = ns.0.lock();
            if set.contains(&n) && !r.overwrite {
                return Err(ApiError::Exists(format!("namespace {n:?}")));
            }
            set.insert(n);
            Ok(json!({"status": "created"}))
        }
        "DeleteNamespace" => {
            if let Some(ds) = r.dataset.clone() {
                st.registry.drop_collection(&ds)?;
                return Ok(json!({"status": "deleted", "dataset": ds}));
            }
            let n = named()?;
            if n == DEFAULT_NAMESPACE {
                return Err(bad("the default namespace cannot be deleted"));
            }
            if !ns.0.lock().remove(&n) {
                return Err(ApiError::Missing(format!("namespace {n:?} not found")));
            }
            Ok(json!({"status": "deleted"}))
        }
        "ListNamespaces" => {
            let names: Vec<String> = ns.0.lock().iter().cloned().collect();
            Ok(json!({"count": names.len(), "namespaces": names}))
        }
        "GetTotalNamespaceCount" => Ok(json!({"count": ns.0.lock().len()})),
        "GetNamespaceDatasetCount" => {
            let n = named()?;
            if !ns.0.lock().contains(&n) {
                return Err(ApiError::Missing(format!("namespace {n:?} not found")));
            }
            let count = if n == DEFAULT_NAMESPACE {
                st.registry.all().len()
            } else {
                0
            };
            Ok(json!({"count": count}))
        }
        _ => Err(bad(format!("unknown namespace action {kind:?}"))),
    }
}

/// `ForceSnapshot`: every collection's mutable part written as a segment
/// (nothing left to replay after a restart; writes were already durable
/// when acknowledged).
pub fn force_snapshot(st: &State) -> ApiResult<Json> {
    let all = st.registry.all();
    for e in &all {
        e.coll.seal()?;
    }
    Ok(json!({"status": "ok", "collections": all.len()}))
}

/// `add-edge`, `traverse-graph`, `GetGraphStats`: not offered.
pub fn graph_unsupported(kind: &str) -> ApiError {
    ApiError::Unsupported(format!(
        "{kind}: Sagitta has no graph (edge) store; it keeps vectors, payload and text. \
         Keep relations in payload columns (filterable) or in a graph database"
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn bodies_may_be_empty_but_not_malformed() {
        let r: NameBody = body("x", b"").unwrap();
        assert!(r.name.is_none());
        assert!(body::<NameBody>("x", b"{").is_err());
        assert!(graph_unsupported("add-edge")
            .to_string()
            .contains("no graph"));
    }
}
