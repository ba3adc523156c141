//! The DoAction handlers of Longbow's Flight protocol that are about the
//! node rather than one collection: cluster and mesh status, readiness,
//! namespaces, snapshots, and the graph actions this server does not offer.
//! Shapes follow Longbow's servers (see docs/SERVER.md, "Longbow's
//! clients"), so its SDK and performance client work unchanged. Their rows
//! (name, role, pool, description) are in [`crate::flight::actions`].

use crate::error::{ApiError, ApiResult};
use crate::flight::handler::{Body, Cx, Handler, NoBody, Reply};
use crate::state::DEFAULT_NAMESPACE;
use crate::State;
use serde::Deserialize;
use serde_json::{json, Value as Json};
use std::sync::atomic::Ordering;
use tonic::Status;

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

/// The body of the namespace, readiness and `delete-dataset` actions:
/// any of `name`, `dataset`, `overwrite`; an empty body is `{}`.
#[derive(Debug, Default, Deserialize)]
pub struct NameBody {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    dataset: Option<String>,
    #[serde(default)]
    overwrite: bool,
}

impl Body for NameBody {
    fn parse(what: &str, b: &[u8]) -> Result<Self, Status> {
        name_body(what, b).map_err(|e| e.to_status())
    }
}

fn name_body(what: &str, b: &[u8]) -> ApiResult<NameBody> {
    if b.iter().all(u8::is_ascii_whitespace) {
        return Ok(NameBody::default());
    }
    serde_json::from_slice(b).map_err(|e| bad(format!("{what}: invalid JSON body: {e}")))
}

impl NameBody {
    /// The namespace named by `name` (INVALID_ARGUMENT without one).
    fn namespace(&self, kind: &str) -> ApiResult<String> {
        self.name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| bad(format!("{kind}: give {{\"name\": NAMESPACE}}")))
    }
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
#[derive(Debug)]
pub struct ClusterStatus;

impl Handler for ClusterStatus {
    type Body = NoBody;
    fn run(cx: &Cx, _: NoBody) -> ApiResult<Reply> {
        let st = &cx.st;
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
        Ok(Reply::Json(json!({
            "self": me,
            "members": [me],
            "count": 1,
            "status": if st.accepting.load(Ordering::Acquire) { "serving" } else { "shutting_down" },
            "mode": "standalone",
            "nodes": [{"id": "local", "http": st.http_addr, "flight": st.flight_addr,
                       "version": env!("CARGO_PKG_VERSION")}],
            "collections": cols,
        })))
    }
}

/// `MeshIdentity`: this node as a mesh member.
#[derive(Debug)]
pub struct MeshIdentity;

impl Handler for MeshIdentity {
    type Body = NoBody;
    fn run(cx: &Cx, _: NoBody) -> ApiResult<Reply> {
        Ok(Reply::Json(member(&cx.st)))
    }
}

/// `MeshStatus`: the members, this node alone.
#[derive(Debug)]
pub struct MeshStatus;

impl Handler for MeshStatus {
    type Body = NoBody;
    fn run(cx: &Cx, _: NoBody) -> ApiResult<Reply> {
        Ok(Reply::Json(Json::Array(vec![member(&cx.st)])))
    }
}

/// `DiscoveryStatus`: no discovery provider, no peers.
#[derive(Debug)]
pub struct DiscoveryStatus;

impl Handler for DiscoveryStatus {
    type Body = NoBody;
    fn run(_: &Cx, _: NoBody) -> ApiResult<Reply> {
        Ok(Reply::Json(json!({"provider": "none", "peers": []})))
    }
}

/// `check_readiness`: `READY`, or `NOT_FOUND` for an unknown dataset. A
/// write is searchable when it is acknowledged, so there is no `BUSY`.
#[derive(Debug)]
pub struct CheckReadiness;

impl Handler for CheckReadiness {
    type Body = NameBody;
    fn run(cx: &Cx, r: NameBody) -> ApiResult<Reply> {
        let Some(ds) = r.dataset.or(r.name) else {
            return Ok(Reply::Json(json!({"status": "READY"})));
        };
        Ok(Reply::Json(match cx.st.registry.get(&ds) {
            Ok(e) => json!({"status": "READY", "index_len": e.coll.len()}),
            Err(_) => json!({"status": "NOT_FOUND", "reason": "dataset not found"}),
        }))
    }
}

/// `delete-dataset`: drops the collection named by `dataset` (Longbow's
/// field) or `name`. Its body always names a dataset, never a namespace:
/// INVALID_ARGUMENT when it names none, NOT_FOUND for an unknown one.
#[derive(Debug)]
pub struct DeleteDataset;

impl Handler for DeleteDataset {
    type Body = NameBody;
    fn run(cx: &Cx, r: NameBody) -> ApiResult<Reply> {
        let ds = r
            .dataset
            .or(r.name)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| bad("delete-dataset: give {\"dataset\": NAME}"))?;
        cx.st.registry.drop_collection(&ds)?;
        Ok(Reply::Json(json!({"status": "deleted", "dataset": ds})))
    }
}

/// `CreateNamespace`: `{"name": N, "overwrite": bool}`.
#[derive(Debug)]
pub struct CreateNamespace;

impl Handler for CreateNamespace {
    type Body = NameBody;
    fn run(cx: &Cx, r: NameBody) -> ApiResult<Reply> {
        let n = r.namespace(cx.kind)?;
        let mut set = cx.st.namespaces.0.lock();
        if set.contains(&n) && !r.overwrite {
            return Err(ApiError::Exists(format!("namespace {n:?}")));
        }
        set.insert(n);
        Ok(Reply::Json(json!({"status": "created"})))
    }
}

/// `DeleteNamespace`: with `{"dataset": C}` drops collection C (what
/// Longbow's SDK sends for `delete(dataset)`); with `{"name": N}` removes
/// namespace N.
#[derive(Debug)]
pub struct DeleteNamespace;

impl Handler for DeleteNamespace {
    type Body = NameBody;
    fn run(cx: &Cx, r: NameBody) -> ApiResult<Reply> {
        if let Some(ds) = r.dataset.clone() {
            cx.st.registry.drop_collection(&ds)?;
            return Ok(Reply::Json(json!({"status": "deleted", "dataset": ds})));
        }
        let n = r.namespace(cx.kind)?;
        if n == DEFAULT_NAMESPACE {
            return Err(bad("the default namespace cannot be deleted"));
        }
        if !cx.st.namespaces.0.lock().remove(&n) {
            return Err(ApiError::Missing(format!("namespace {n:?} not found")));
        }
        Ok(Reply::Json(json!({"status": "deleted"})))
    }
}

/// `ListNamespaces`.
#[derive(Debug)]
pub struct ListNamespaces;

impl Handler for ListNamespaces {
    type Body = NameBody;
    fn run(cx: &Cx, _: NameBody) -> ApiResult<Reply> {
        let names: Vec<String> = cx.st.namespaces.0.lock().iter().cloned().collect();
        Ok(Reply::Json(
            json!({"count": names.len(), "namespaces": names}),
        ))
    }
}

/// `GetTotalNamespaceCount`.
#[derive(Debug)]
pub struct GetTotalNamespaceCount;

impl Handler for GetTotalNamespaceCount {
    type Body = NameBody;
    fn run(cx: &Cx, _: NameBody) -> ApiResult<Reply> {
        Ok(Reply::Json(
            json!({"count": cx.st.namespaces.0.lock().len()}),
        ))
    }
}

/// `GetNamespaceDatasetCount`: every collection is in `default`.
#[derive(Debug)]
pub struct GetNamespaceDatasetCount;

impl Handler for GetNamespaceDatasetCount {
    type Body = NameBody;
    fn run(cx: &Cx, r: NameBody) -> ApiResult<Reply> {
        let n = r.namespace(cx.kind)?;
        if !cx.st.namespaces.0.lock().contains(&n) {
            return Err(ApiError::Missing(format!("namespace {n:?} not found")));
        }
        let count = if n == DEFAULT_NAMESPACE {
            cx.st.registry.all().len()
        } else {
            0
        };
        Ok(Reply::Json(json!({"count": count})))
    }
}

/// `ForceSnapshot`: every collection's mutable part written as a segment
/// (nothing left to replay after a restart; writes were already durable
/// when acknowledged).
#[derive(Debug)]
pub struct ForceSnapshot;

impl Handler for ForceSnapshot {
    type Body = NoBody;
    fn run(cx: &Cx, _: NoBody) -> ApiResult<Reply> {
        let all = cx.st.registry.all();
        for e in &all {
            e.coll.seal()?;
        }
        Ok(Reply::Json(
            json!({"status": "ok", "collections": all.len()}),
        ))
    }
}

/// `add-edge`, `traverse-graph`, `GetGraphStats`: not offered
/// (UNIMPLEMENTED).
#[derive(Debug)]
pub struct Graph;

impl Handler for Graph {
    type Body = NoBody;
    fn run(cx: &Cx, _: NoBody) -> ApiResult<Reply> {
        Err(graph_unsupported(cx.kind))
    }
}

fn graph_unsupported(kind: &str) -> ApiError {
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
        let r: NameBody = name_body("x", b"").unwrap();
        assert!(r.name.is_none());
        assert!(name_body("x", b"{").is_err());
        assert!(graph_unsupported("add-edge")
            .to_string()
            .contains("no graph"));
    }
}
