//! The DoAction table: every action Flight takes, registered once as a
//! row of name, role, where its work runs, description (ListActions) and
//! typed handler ([`super::handler`]). Longbow's names first (its SDK and
//! clients use them; the node-level ones are in [`crate::longbow`]), then
//! Sagitta's own. An action type not in the table is UNIMPLEMENTED, as
//! Longbow and the Flight convention answer.

use super::handler::{call, json_body, vector_body, Action, Body, Cx, Handler, NoBody, On, Reply};
use super::search::{
    dense_rows, filter_of, hybrid_json, ipc_bytes, search_batch, ten, SearchTicket,
};
use crate::api::{self, Id};
use crate::auth::Role;
use crate::error::{ApiError, ApiResult};
use crate::exec::Work;
use crate::longbow;
use crate::ops::{self, Knobs};
use crate::registry::Entry;
use sagitta_store::Query;
use serde::Deserialize;
use serde_json::{json, Value as Json};
use tonic::Status;

const IO: On = On::Io;
const SEARCH: On = On::Pool(Work::Search);
const LOOKUP: On = On::Pool(Work::Lookup);
const INGEST: On = On::Pool(Work::Ingest);
const WAIT: On = On::Wait("optimize");

macro_rules! action {
    ($name:literal, $role:ident, $on:expr, $h:ty, $about:literal) => {
        Action {
            name: $name,
            role: Role::$role,
            on: $on,
            about: $about,
            call: call::<$h>,
        }
    };
}

/// The actions DoAction takes.
#[rustfmt::skip]
pub static ACTIONS: [Action; 27] = [
    action!("delete", Write, INGEST, Delete,
        "Delete rows: {\"dataset\": C, \"id\": ID or [ID, ...]} -> {\"deleted\": n}"),
    action!("Delete", Write, INGEST, Delete,
        "As delete"),
    action!("delete-vector", Write, INGEST, Delete,
        "Delete one row by the id it was put with (not Longbow's row index): {\"dataset\": C, \"vector_id\": ID} -> {\"deleted\": n}"),
    action!("delete-dataset", Admin, INGEST, longbow::DeleteDataset,
        "Drop a collection: {\"dataset\": C} (or {\"name\": C}) -> {\"status\": \"deleted\", \"dataset\": C}"),
    action!("DeleteNamespace", Admin, INGEST, longbow::DeleteNamespace,
        "{\"dataset\": C} drops collection C; {\"name\": N} removes namespace N"),
    action!("CreateNamespace", Admin, INGEST, longbow::CreateNamespace,
        "{\"name\": N, \"overwrite\": bool} -> {\"status\": \"created\"} (namespaces are kept in memory, as in Longbow)"),
    action!("ListNamespaces", Read, SEARCH, longbow::ListNamespaces,
        "-> {\"namespaces\": [...], \"count\": n}"),
    action!("GetNamespaceDatasetCount", Read, SEARCH, longbow::GetNamespaceDatasetCount,
        "{\"name\": N} -> {\"count\": n}"),
    action!("GetTotalNamespaceCount", Read, SEARCH, longbow::GetTotalNamespaceCount,
        "-> {\"count\": n}"),
    action!("VectorSearch", Read, SEARCH, VectorSearch,
        "{\"dataset\": C, \"vector\" or \"vectors\", \"k\", \"filters\", \"text_query\", \"alpha\"} -> one Arrow IPC stream per query"),
    action!("VectorSearchByID", Read, LOOKUP, VectorSearchById,
        "Neighbours of a stored row (itself left out): {\"dataset\": C, \"id\": ID, \"k\": N, \"filters\": [...]} -> {\"ids\": [...], \"scores\": [...]}"),
    action!("HybridSearch", Read, SEARCH, HybridSearch,
        "{\"dataset\", \"vector\", \"text_query\", \"alpha\", \"k\", \"filters\"} -> [{\"ID\", \"Distance\", \"Score\", \"Metadata\"}]"),
    action!("ForceSnapshot", Admin, INGEST, longbow::ForceSnapshot,
        "Write every collection's mutable part as a segment -> {\"status\": \"ok\"}"),
    action!("check_readiness", Read, IO, longbow::CheckReadiness,
        "{\"dataset\": C} (optional) -> {\"status\": \"READY\" | \"NOT_FOUND\"}"),
    action!("cluster-status", Read, IO, longbow::ClusterStatus,
        "Longbow's {\"self\", \"members\", \"count\"} (this node) with Sagitta's node and collection status"),
    action!("MeshIdentity", Read, IO, longbow::MeshIdentity,
        "This node as a mesh member {\"ID\", \"Addr\", \"Status\", ...}"),
    action!("MeshStatus", Read, IO, longbow::MeshStatus,
        "[member]: this node (Sagitta runs standalone)"),
    action!("DiscoveryStatus", Read, IO, longbow::DiscoveryStatus,
        "-> {\"provider\": \"none\", \"peers\": []}"),
    action!("add-edge", Read, IO, longbow::Graph,
        "Not offered (no graph store): UNIMPLEMENTED"),
    action!("traverse-graph", Read, IO, longbow::Graph,
        "Not offered (no graph store): UNIMPLEMENTED"),
    action!("GetGraphStats", Read, IO, longbow::Graph,
        "Not offered (no graph store): UNIMPLEMENTED"),
    action!("list", Read, IO, List,
        "Collection names -> {\"collections\": [...]}"),
    action!("describe", Read, SEARCH, Describe,
        "{\"name\": C} -> the collection's settings and figures (as GET /collections/C)"),
    action!("create-collection", Admin, INGEST, CreateCollection,
        "Body as POST /collections -> the new collection's description"),
    action!("drop-collection", Admin, INGEST, DropCollection,
        "{\"name\": C} -> {\"dropped\": C}"),
    action!("set-payload", Write, INGEST, SetPayload,
        "Set payload columns of stored rows, vectors and other columns kept: {\"name\": C, \"ids\": [...] or \"filter\": ..., \"payload\": {column: value}} -> {\"updated\": n} (as POST /collections/C/set_payload)"),
    action!("optimize", Write, WAIT, Optimize,
        "{\"name\": C, \"compact\": bool} -> the index status once everything written before is built and merged (as POST /collections/C/optimize)"),
];

/// The row of action type `kind`.
pub fn find(kind: &str) -> Option<&'static Action> {
    ACTIONS.iter().find(|a| a.name == kind)
}

/// An action type not in [`ACTIONS`]: UNIMPLEMENTED.
pub fn unknown_action(kind: &str) -> Status {
    ApiError::Unsupported(format!(
        "unknown action {:?}; ListActions names them",
        kind.chars().take(64).collect::<String>()
    ))
    .to_status()
}

impl Body for SearchTicket {
    fn parse(what: &str, b: &[u8]) -> Result<Self, Status> {
        vector_body(what, b)
    }
    fn label(&self) -> &str {
        &self.dataset
    }
}

/// `VectorSearch`: one Arrow IPC stream per query (`vector` first, then
/// `vectors`).
#[derive(Debug)]
pub struct VectorSearch;

impl Handler for VectorSearch {
    type Body = SearchTicket;
    const RESOLVE: bool = true;
    fn run(cx: &Cx, s: SearchTicket) -> ApiResult<Reply> {
        let e = cx.entry()?;
        let mut queries = s.vectors.clone();
        if !s.vector.is_empty() || queries.is_empty() {
            queries.insert(0, s.vector.clone());
        }
        if queries.len() > ops::MAX_BATCH_QUERIES {
            return Err(ApiError::BadRequest(format!(
                "vectors: at most {} queries",
                ops::MAX_BATCH_QUERIES
            )));
        }
        queries
            .into_iter()
            .map(|q| ipc_bytes(&search_batch(e, &s, q)?))
            .collect::<ApiResult<_>>()
            .map(Reply::Bodies)
    }
}

/// `HybridSearch`: Longbow's JSON answer ([`hybrid_json`]).
#[derive(Debug)]
pub struct HybridSearch;

impl Handler for HybridSearch {
    type Body = SearchTicket;
    const RESOLVE: bool = true;
    fn run(cx: &Cx, s: SearchTicket) -> ApiResult<Reply> {
        hybrid_json(cx.entry()?, &s).map(Reply::Json)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteAction {
    dataset: String,
    /// `vector_id` in Longbow's `delete-vector`.
    #[serde(alias = "vector_id")]
    id: IdOrIds,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum IdOrIds {
    One(Id),
    Many(Vec<Id>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchByIdAction {
    dataset: String,
    id: Id,
    #[serde(default = "ten")]
    k: usize,
    #[serde(default)]
    filters: Option<Json>,
    #[serde(default)]
    ef: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NameAction {
    name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetPayloadAction {
    name: String,
    #[serde(default)]
    ids: Option<Vec<Id>>,
    #[serde(default)]
    filter: Option<Json>,
    payload: Json,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizeAction {
    name: String,
    #[serde(default)]
    compact: bool,
}

impl Body for DeleteAction {
    fn parse(_: &str, b: &[u8]) -> Result<Self, Status> {
        json_body("delete", b)
    }
    fn label(&self) -> &str {
        &self.dataset
    }
}

/// `delete`, `Delete`, `delete-vector`: rows by id.
#[derive(Debug)]
pub struct Delete;

impl Handler for Delete {
    type Body = DeleteAction;
    const RESOLVE: bool = true;
    fn run(cx: &Cx, a: DeleteAction) -> ApiResult<Reply> {
        let e = cx.entry()?;
        let ids = match a.id {
            IdOrIds::One(i) => vec![i],
            IdOrIds::Many(v) => v,
        };
        let keys = ops::live_keys_of(&e.coll, &ids)?;
        let n = ops::ingest(e, 0, || Ok(e.coll.remove(&keys)?))?;
        Ok(Reply::Json(json!({ "deleted": n })))
    }
}

impl Body for SearchByIdAction {
    fn parse(what: &str, b: &[u8]) -> Result<Self, Status> {
        json_body(what, b)
    }
    fn label(&self) -> &str {
        &self.dataset
    }
}

/// `VectorSearchByID`: the neighbours of a stored row.
#[derive(Debug)]
pub struct VectorSearchById;

impl Handler for VectorSearchById {
    type Body = SearchByIdAction;
    const RESOLVE: bool = true;
    fn run(cx: &Cx, a: SearchByIdAction) -> ApiResult<Reply> {
        search_by_id(cx.entry()?, a).map(Reply::Json)
    }
}

/// `list`: the collections' names.
#[derive(Debug)]
pub struct List;

impl Handler for List {
    type Body = NoBody;
    fn run(cx: &Cx, _: NoBody) -> ApiResult<Reply> {
        let names: Vec<String> = cx
            .st
            .registry
            .all()
            .iter()
            .map(|e| e.name.clone())
            .collect();
        Ok(Reply::Json(json!({ "collections": names })))
    }
}

impl Body for NameAction {
    fn parse(what: &str, b: &[u8]) -> Result<Self, Status> {
        json_body(what, b)
    }
    fn label(&self) -> &str {
        &self.name
    }
}

fn to_json(v: impl serde::Serialize) -> ApiResult<Reply> {
    serde_json::to_value(v)
        .map(Reply::Json)
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// `describe`: as `GET /collections/C`.
#[derive(Debug)]
pub struct Describe;

impl Handler for Describe {
    type Body = NameAction;
    const RESOLVE: bool = true;
    fn run(cx: &Cx, _: NameAction) -> ApiResult<Reply> {
        to_json(ops::describe(cx.entry()?))
    }
}

/// `drop-collection`.
#[derive(Debug)]
pub struct DropCollection;

impl Handler for DropCollection {
    type Body = NameAction;
    fn run(cx: &Cx, a: NameAction) -> ApiResult<Reply> {
        cx.st.registry.drop_collection(&a.name)?;
        Ok(Reply::Json(json!({ "dropped": a.name })))
    }
}

impl Body for api::CreateCollection {
    fn parse(what: &str, b: &[u8]) -> Result<Self, Status> {
        json_body(what, b)
    }
    fn label(&self) -> &str {
        &self.name
    }
}

/// `create-collection`: as `POST /collections`.
#[derive(Debug)]
pub struct CreateCollection;

impl Handler for CreateCollection {
    type Body = api::CreateCollection;
    fn run(cx: &Cx, req: api::CreateCollection) -> ApiResult<Reply> {
        let cfg = ops::config_from(&req)?;
        let e = cx.st.registry.create(&req.name, cfg)?;
        to_json(ops::describe(&e))
    }
}

impl Body for SetPayloadAction {
    fn parse(what: &str, b: &[u8]) -> Result<Self, Status> {
        json_body(what, b)
    }
    fn label(&self) -> &str {
        &self.name
    }
}

/// `set-payload`: as `POST /collections/C/set_payload`.
#[derive(Debug)]
pub struct SetPayload;

impl Handler for SetPayload {
    type Body = SetPayloadAction;
    const RESOLVE: bool = true;
    fn run(cx: &Cx, a: SetPayloadAction) -> ApiResult<Reply> {
        let req = api::SetPayloadRequest {
            ids: a.ids,
            filter: a.filter,
            payload: a.payload,
        };
        let r = ops::run_set_payload(cx.entry()?, req)?;
        Ok(Reply::Json(json!({ "updated": r.updated })))
    }
}

impl Body for OptimizeAction {
    fn parse(what: &str, b: &[u8]) -> Result<Self, Status> {
        json_body(what, b)
    }
    fn label(&self) -> &str {
        &self.name
    }
}

/// `optimize`: as `POST /collections/C/optimize`; waits for the build.
#[derive(Debug)]
pub struct Optimize;

impl Handler for Optimize {
    type Body = OptimizeAction;
    const RESOLVE: bool = true;
    fn run(cx: &Cx, a: OptimizeAction) -> ApiResult<Reply> {
        let req = api::OptimizeRequest { compact: a.compact };
        to_json(ops::run_optimize(cx.entry()?, &req)?)
    }
}

fn search_by_id(e: &Entry, a: SearchByIdAction) -> ApiResult<Json> {
    let key = e.coll.key_of(&a.id.to_store())?;
    let q = ops::stored_vector(&e.coll, key).ok_or_else(|| {
        ApiError::Missing(format!("id {} is not in {:?}", a.id.to_store(), e.name))
    })?;
    let pred = ops::bind(&e.coll, filter_of(a.filters).as_ref())?;
    let knobs = Knobs {
        ef: a.ef,
        ..Knobs::default()
    };
    // k + 1 (the row itself is dropped), unless k is 0 or at the limit:
    // the store decides those (refused, or capped).
    let k = if a.k == 0 || a.k >= ops::MAX_K {
        a.k
    } else {
        a.k + 1
    };
    let query = Query {
        opts: knobs.opts(pred.as_ref()),
        ..Query::dense(vec![q.as_ref()], k)
    };
    // Ids from the rows the search found (a hashed id is kept in its row),
    // not read again by key.
    let (hits, rows, schema) = dense_rows(&e.coll, &query, false)?;
    let ids = ops::ids_of_rows(&e.coll, &rows, &schema);
    let (ids, scores): (Vec<Id>, Vec<f32>) = hits
        .iter()
        .zip(ids)
        .filter(|(h, _)| h.key != key)
        .take(a.k)
        .map(|(h, id)| (id, h.distance))
        .unzip();
    Ok(json!({ "ids": ids, "scores": scores }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_action_is_registered_once() {
        let names: HashSet<&str> = ACTIONS.iter().map(|a| a.name).collect();
        assert_eq!(names.len(), ACTIONS.len());
        assert!(find("VectorSearch").is_some() && find("vectorsearch").is_none());
        assert_eq!(unknown_action("nope").code(), tonic::Code::Unimplemented);
    }
}
