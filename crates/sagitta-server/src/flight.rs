//! Arrow Flight (arrow-flight over tonic). See docs/SERVER.md for the
//! tickets, actions and schemas.

use crate::auth::{self, Role};
use crate::convert::{self, Ingest};
use crate::error::{ApiError, ApiResult};
use crate::exec::Work;
use crate::fastjson::{self, WithVector};
use crate::idfilter;
use crate::longbow;
use crate::ops::{self, Id, Knobs};
use crate::registry::Entry;
use crate::text;
use crate::State;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_descriptor::DescriptorType;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use arrow_ipc::writer::IpcWriteOptions;
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{FutureExt, SinkExt, StreamExt, TryStreamExt};
use sagitta_store::{Answer, Query};
use serde::Deserialize;
use serde_json::{json, Value as Json};
use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tonic::{Request, Response, Status, Streaming};

/// Rows per batch streamed by a DoGet scan.
const SCAN_BATCH: usize = 4096;

/// The Flight service.
#[derive(Debug, Clone)]
pub struct Flight {
    st: Arc<State>,
    ns: Arc<longbow::Namespaces>,
}

impl Flight {
    /// Serves `st`.
    pub fn new(st: Arc<State>) -> Flight {
        Flight {
            st,
            ns: Arc::default(),
        }
    }

    fn auth<T>(&self, req: &Request<T>, need: Role) -> Result<(), Status> {
        let m = req.metadata();
        let key = auth::bearer(
            m.get("authorization").map(|v| v.as_bytes()),
            m.get("x-api-key").map(|v| v.as_bytes()),
        );
        self.st.keys.check(key.as_deref(), need).map_err(|e| {
            self.st.metrics.rejected("unauthenticated");
            e.to_status()
        })
    }

    fn observe<T>(&self, method: &str, coll: &str, t0: Instant, r: &Result<T, Status>) {
        let code = match r {
            Ok(_) => "OK".to_string(),
            Err(s) => format!("{:?}", s.code()),
        };
        let coll = if self.st.registry.contains(coll) {
            coll
        } else {
            ""
        };
        self.st
            .metrics
            .observe("flight", method, coll, &code, t0.elapsed());
    }

    async fn run<T: Send + 'static>(
        &self,
        work: Work,
        f: impl FnOnce() -> ApiResult<T> + Send + 'static,
    ) -> Result<T, Status> {
        if !self.st.accepting.load(Ordering::Acquire) {
            return Err(ApiError::ShuttingDown.to_status());
        }
        self.st.exec.run(work, f).await.map_err(|e| e.to_status())
    }

    fn entry_of(&self, d: &FlightDescriptor) -> Result<Arc<Entry>, Status> {
        self.entry(&path_name(d)?)
    }

    fn entry(&self, name: &str) -> Result<Arc<Entry>, Status> {
        self.st.registry.get(name).map_err(|e| e.to_status())
    }
}

/// A collection's `FlightInfo`: its row schema, live rows, and as
/// `total_bytes` the bytes of its files on disk (segments, WAL, manifest,
/// id, bloom and tombstone files: `disk_bytes` of its description). Reads
/// the collection's directory: run it on a pool.
fn flight_info(e: &Entry) -> ApiResult<FlightInfo> {
    let schema = convert::row_schema(&e.coll);
    let ticket = json!({ "name": e.name }).to_string();
    let bytes = i64::try_from(e.coll.stats().bytes_on_disk).unwrap_or(i64::MAX);
    FlightInfo::new()
        .try_with_schema(&schema)
        .map_err(|err| ApiError::Internal(err.to_string()))
        .map(|i| {
            i.with_descriptor(FlightDescriptor::new_path(vec![e.name.clone()]))
                .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)))
                .with_total_records(e.coll.len() as i64)
                .with_total_bytes(bytes)
        })
}

fn invalid(msg: impl Into<String>) -> Status {
    ApiError::BadRequest(msg.into()).to_status()
}

/// An action type not in [`ACTIONS`]: UNIMPLEMENTED, as Longbow and the
/// Flight convention answer.
fn unknown_action(kind: &str) -> Status {
    ApiError::Unsupported(format!(
        "unknown action {:?}; ListActions names them",
        kind.chars().take(64).collect::<String>()
    ))
    .to_status()
}

fn path_name(d: &FlightDescriptor) -> Result<String, Status> {
    if d.r#type != DescriptorType::Path as i32 || d.path.len() != 1 {
        return Err(invalid(
            "use a PATH flight descriptor with one element: the collection name",
        ));
    }
    let name = d.path[0].clone();
    crate::registry::validate_name(&name).map_err(|e| e.to_status())?;
    Ok(name)
}

fn json_body<T: for<'de> Deserialize<'de>>(what: &str, b: &[u8]) -> Result<T, Status> {
    serde_json::from_slice(b).map_err(|e| invalid(format!("{what}: invalid JSON: {e}")))
}

/// [`json_body`] for a body whose query vector the fast path reads.
fn vector_body<T: WithVector>(what: &str, b: &[u8]) -> Result<T, Status> {
    fastjson::from_slice(b).map_err(|e| invalid(format!("{what}: invalid JSON: {e}")))
}

impl WithVector for TicketBody {
    const AT: &'static [&'static str] = &["search"];
    const ONE: Option<&'static str> = Some("vector");
    const MANY: Option<&'static str> = Some("vectors");
    fn set_one(&mut self, v: Vec<f32>) {
        if let Some(s) = &mut self.search {
            s.vector = v;
        }
    }
    fn set_many(&mut self, v: Vec<Vec<f32>>) {
        if let Some(s) = &mut self.search {
            s.vectors = v;
        }
    }
}

impl WithVector for SearchTicket {
    const ONE: Option<&'static str> = Some("vector");
    const MANY: Option<&'static str> = Some("vectors");
    fn set_one(&mut self, v: Vec<f32>) {
        self.vector = v;
    }
    fn set_many(&mut self, v: Vec<Vec<f32>>) {
        self.vectors = v;
    }
}

/// A DoGet ticket.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TicketBody {
    /// Stream a collection's rows.
    #[serde(default)]
    name: Option<String>,
    /// Only rows this filter matches (with `name`; Longbow's clients call
    /// it `filters`). Conditions on the field `id` test the row's id.
    #[serde(default, alias = "filters")]
    filter: Option<Json>,
    /// Search.
    #[serde(default)]
    search: Option<SearchTicket>,
}

/// `{"search": {...}}`. Fields marked "accepted" are taken and not acted on.
/// The answer is [`convert::hits_batch`]: `id`, `score`, with `text_query`
/// each leg's rank and score, with `include_vectors` the `vector`, then
/// every payload column.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchTicket {
    dataset: String,
    /// The dense query; empty or absent with `text_query`: text only (or
    /// the text embedded by the collection's model).
    #[serde(default)]
    vector: Vec<f32>,
    /// Longbow's hybrid / sparse search: BM25 over the text fields.
    #[serde(default)]
    text_query: Option<String>,
    /// More queries (the `VectorSearch` action only).
    #[serde(default)]
    vectors: Vec<Vec<f32>>,
    /// Longbow's fusion weight: 1.0 dense only, 0.0 text only (with
    /// `text_query`; without one the search is dense).
    #[serde(default)]
    alpha: Option<f32>,
    /// `alpha` (default), `rrf` or `dbsf`.
    #[serde(default)]
    fusion: Option<String>,
    /// Candidates per leg.
    #[serde(default)]
    depth: Option<usize>,
    #[serde(default = "ten")]
    k: usize,
    #[serde(default)]
    filters: Option<Json>,
    #[serde(default)]
    ef: Option<usize>,
    #[serde(default)]
    nprobe: Option<usize>,
    #[serde(default)]
    refine: Option<usize>,
    #[serde(default)]
    exact: bool,
    /// Adds a `vector` column to the results.
    #[serde(default)]
    include_vectors: Option<Json>,
    // Accepted, not acted on.
    #[serde(default)]
    #[allow(dead_code)]
    vector_format: Option<Json>,
    #[serde(default)]
    #[allow(dead_code)]
    local_only: Option<Json>,
    #[serde(default)]
    #[allow(dead_code)]
    graph_alpha: Option<Json>,
}

fn ten() -> usize {
    10
}

/// `include_vectors`: true, or a non-empty format name.
fn wants_vectors(v: &Option<Json>) -> bool {
    match v {
        Some(Json::Bool(b)) => *b,
        Some(Json::String(s)) => !s.is_empty() && s != "false",
        _ => false,
    }
}

/// A filter in either form: a list of conditions (AND) or an expression;
/// an empty list is no filter.
fn filter_of(f: Option<Json>) -> Option<Json> {
    match f {
        Some(Json::Array(a)) if a.is_empty() => None,
        Some(Json::Null) | None => None,
        f => f,
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteAction {
    dataset: String,
    /// `vector_id` in Longbow's `delete-vector`.
    #[serde(alias = "vector_id")]
    id: IdOrIds,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum IdOrIds {
    One(Id),
    Many(Vec<Id>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchByIdAction {
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
struct DropAction {
    name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetPayloadAction {
    name: String,
    #[serde(default)]
    ids: Option<Vec<ops::Id>>,
    #[serde(default)]
    filter: Option<Json>,
    payload: Json,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OptimizeAction {
    name: String,
    #[serde(default)]
    compact: bool,
}

/// The actions DoAction takes: (type, description, role). Longbow's
/// names first (its SDK and clients use them), then Sagitta's own.
const ACTIONS: [(&str, &str, Role); 27] = [
    ("delete", "Delete rows: {\"dataset\": C, \"id\": ID or [ID, ...]} -> {\"deleted\": n}", Role::Write),
    ("Delete", "As delete", Role::Write),
    ("delete-vector", "Delete one row by the id it was put with (not Longbow's row index): {\"dataset\": C, \"vector_id\": ID} -> {\"deleted\": n}", Role::Write),
    ("delete-dataset", "Drop a collection: {\"dataset\": C} (or {\"name\": C}) -> {\"status\": \"deleted\", \"dataset\": C}", Role::Admin),
    ("DeleteNamespace", "{\"dataset\": C} drops collection C; {\"name\": N} removes namespace N", Role::Admin),
    ("CreateNamespace", "{\"name\": N, \"overwrite\": bool} -> {\"status\": \"created\"} (namespaces are kept in memory, as in Longbow)", Role::Admin),
    ("ListNamespaces", "-> {\"namespaces\": [...], \"count\": n}", Role::Read),
    ("GetNamespaceDatasetCount", "{\"name\": N} -> {\"count\": n}", Role::Read),
    ("GetTotalNamespaceCount", "-> {\"count\": n}", Role::Read),
    ("VectorSearch", "{\"dataset\": C, \"vector\" or \"vectors\", \"k\", \"filters\", \"text_query\", \"alpha\"} -> one Arrow IPC stream per query", Role::Read),
    ("VectorSearchByID", "Neighbours of a stored row (itself left out): {\"dataset\": C, \"id\": ID, \"k\": N, \"filters\": [...]} -> {\"ids\": [...], \"scores\": [...]}", Role::Read),
    ("HybridSearch", "{\"dataset\", \"vector\", \"text_query\", \"alpha\", \"k\", \"filters\"} -> [{\"ID\", \"Distance\", \"Score\", \"Metadata\"}]", Role::Read),
    ("ForceSnapshot", "Write every collection's mutable part as a segment -> {\"status\": \"ok\"}", Role::Admin),
    ("check_readiness", "{\"dataset\": C} (optional) -> {\"status\": \"READY\" | \"NOT_FOUND\"}", Role::Read),
    ("cluster-status", "Longbow's {\"self\", \"members\", \"count\"} (this node) with Sagitta's node and collection status", Role::Read),
    ("MeshIdentity", "This node as a mesh member {\"ID\", \"Addr\", \"Status\", ...}", Role::Read),
    ("MeshStatus", "[member]: this node (Sagitta runs standalone)", Role::Read),
    ("DiscoveryStatus", "-> {\"provider\": \"none\", \"peers\": []}", Role::Read),
    ("add-edge", "Not offered (no graph store): UNIMPLEMENTED", Role::Read),
    ("traverse-graph", "Not offered (no graph store): UNIMPLEMENTED", Role::Read),
    ("GetGraphStats", "Not offered (no graph store): UNIMPLEMENTED", Role::Read),
    ("list", "Collection names -> {\"collections\": [...]}", Role::Read),
    ("describe", "{\"name\": C} -> the collection's settings and figures (as GET /collections/C)", Role::Read),
    ("create-collection", "Body as POST /collections -> the new collection's description", Role::Admin),
    ("drop-collection", "{\"name\": C} -> {\"dropped\": C}", Role::Admin),
    ("set-payload", "Set payload columns of stored rows, vectors and other columns kept: {\"name\": C, \"ids\": [...] or \"filter\": ..., \"payload\": {column: value}} -> {\"updated\": n} (as POST /collections/C/set_payload)", Role::Write),
    ("optimize", "{\"name\": C, \"compact\": bool} -> the index status once everything written before is built and merged (as POST /collections/C/optimize)", Role::Write),
];

type Stream<T> = BoxStream<'static, Result<T, Status>>;

#[tonic::async_trait]
impl FlightService for Flight {
    type HandshakeStream = Stream<HandshakeResponse>;
    type ListFlightsStream = Stream<FlightInfo>;
    type DoGetStream = Stream<FlightData>;
    type DoPutStream = Stream<PutResult>;
    type DoExchangeStream = Stream<FlightData>;
    type DoActionStream = Stream<arrow_flight::Result>;
    type ListActionsStream = Stream<ActionType>;

    async fn handshake(
        &self,
        _req: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        // Keys travel with every call (authorization metadata); the
        // handshake has nothing to negotiate.
        Ok(Response::new(
            stream::once(async { Ok(HandshakeResponse::default()) }).boxed(),
        ))
    }

    async fn list_flights(
        &self,
        req: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        self.auth(&req, Role::Read)?;
        let all = self.st.registry.all();
        let infos = self
            .run(Work::Search, move || {
                all.iter()
                    .map(|e| flight_info(e))
                    .collect::<ApiResult<Vec<_>>>()
            })
            .await?;
        Ok(Response::new(
            stream::iter(infos.into_iter().map(Ok)).boxed(),
        ))
    }

    async fn get_flight_info(
        &self,
        req: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.auth(&req, Role::Read)?;
        let e = self.entry_of(req.get_ref())?;
        let info = self.run(Work::Search, move || flight_info(&e)).await?;
        Ok(Response::new(info))
    }

    async fn poll_flight_info(
        &self,
        _req: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented(
            "PollFlightInfo: queries finish at once; use GetFlightInfo",
        ))
    }

    async fn get_schema(
        &self,
        req: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        self.auth(&req, Role::Read)?;
        let e = self.entry_of(req.get_ref())?;
        let schema = convert::row_schema(&e.coll);
        let r: SchemaResult = SchemaAsIpc::new(&schema, &IpcWriteOptions::default())
            .try_into()
            .map_err(|err: arrow_schema::ArrowError| {
                ApiError::Internal(err.to_string()).to_status()
            })?;
        Ok(Response::new(r))
    }

    async fn do_get(&self, req: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        let t0 = Instant::now();
        self.auth(&req, Role::Read)?;
        let t: TicketBody = vector_body("ticket", &req.get_ref().ticket)?;
        let (label, r) = match (t.name, t.search) {
            (Some(name), None) => (name.clone(), self.scan(name, filter_of(t.filter)).await),
            (None, Some(s)) => (s.dataset.clone(), self.search(s).await),
            _ => (
                String::new(),
                Err(invalid(
                    "ticket: give {\"name\": C} to read rows or {\"search\": {...}} to search",
                )),
            ),
        };
        self.observe("DoGet", &label, t0, &r);
        r.map(Response::new)
    }

    async fn do_put(
        &self,
        req: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        self.auth(&req, Role::Write)?;
        let mut input = req.into_inner();
        let first = input
            .message()
            .await?
            .ok_or_else(|| invalid("DoPut: empty stream"))?;
        let desc = first
            .flight_descriptor
            .clone()
            .ok_or_else(|| invalid("DoPut: the first message must carry a flight descriptor"))?;
        let name = path_name(&desc)?;
        // Every message's buffers are bounded by its body before Arrow's
        // decoder reads it (Arrow panics on ones past it; see
        // sagitta_store::ipc).
        let data = stream::once(async { Ok(first) })
            .chain(input)
            .map_err(|s| FlightError::Tonic(Box::new(s)))
            .and_then(|fd| async move {
                if !fd.data_header.is_empty() {
                    sagitta_store::ipc::check_message(&fd.data_header, fd.data_body.len(), true)
                        .map_err(|e| FlightError::DecodeError(format!("DoPut: {e}")))?;
                }
                Ok(fd)
            });
        let mut batches = arrow_flight::decode::FlightRecordBatchStream::new_from_flight_data(data);
        // The next batch is received and decoded while this one is
        // written: one batch ahead at most (a slot is reserved before the
        // next is read), so an upload is never held in memory beyond that.
        let (next_tx, mut next_rx) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            while let Ok(slot) = next_tx.reserve().await {
                // Arrow's decoder may panic on a message whose nodes are
                // longer than its (in-body) buffers: that message is
                // refused, the stream ends, the server goes on.
                let next = AssertUnwindSafe(batches.next())
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|_| {
                        Some(Err(FlightError::DecodeError(
                            "DoPut: malformed Arrow data".into(),
                        )))
                    });
                let Some(b) = next else { break };
                let failed = b.is_err();
                slot.send(b);
                if failed {
                    break;
                }
            }
        });
        let (mut tx, rx) = futures::channel::mpsc::channel::<Result<PutResult, Status>>(2);
        let this = self.clone();
        tokio::spawn(async move {
            let mut total = 0usize;
            // The collection this stream writes to, fixed by its first batch.
            let mut target: Option<Arc<Entry>> = None;
            let mut seen = SeenKeys::default();
            while let Some(b) = next_rx.recv().await {
                let t0 = Instant::now();
                let r = match b {
                    Ok(batch) => this.put_batch(&name, batch, &mut target, &mut seen).await,
                    Err(FlightError::Tonic(s)) => Err(*s),
                    Err(e) => Err(invalid(format!("DoPut: bad Arrow data: {e}"))),
                };
                this.observe("DoPut", &name, t0, &r);
                match r {
                    Ok(n) => {
                        total += n;
                        let ack = json!({ "rows": n, "total": total }).to_string();
                        let msg = PutResult {
                            app_metadata: Bytes::from(ack),
                        };
                        if tx.send(Ok(msg)).await.is_err() {
                            break;
                        }
                    }
                    Err(s) => {
                        let _ = tx.send(Err(s)).await;
                        break;
                    }
                }
            }
        });
        Ok(Response::new(rx.boxed()))
    }

    async fn do_exchange(
        &self,
        _req: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented(
            "DoExchange is not supported; use DoPut and DoGet",
        ))
    }

    async fn do_action(
        &self,
        req: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        let t0 = Instant::now();
        let a = req.get_ref();
        let Some(&(_, _, need)) = ACTIONS.iter().find(|x| x.0 == a.r#type) else {
            return Err(unknown_action(&a.r#type));
        };
        self.auth(&req, need)?;
        let a = req.into_inner();
        let (label, r) = self.action(&a.r#type, &a.body).await;
        self.observe(&a.r#type, &label, t0, &r);
        let out: Vec<Result<arrow_flight::Result, Status>> = r?
            .into_iter()
            .map(|body| Ok(arrow_flight::Result { body }))
            .collect();
        Ok(Response::new(stream::iter(out).boxed()))
    }

    async fn list_actions(
        &self,
        _req: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        let list: Vec<Result<ActionType, Status>> = ACTIONS
            .iter()
            .map(|(t, d, _)| {
                Ok(ActionType {
                    r#type: (*t).into(),
                    description: (*d).into(),
                })
            })
            .collect();
        Ok(Response::new(stream::iter(list).boxed()))
    }
}

impl Flight {
    /// Writes one DoPut batch. The first batch of a stream finds or creates
    /// the collection (`target`); later batches write to that collection
    /// only, so a stream does not recreate a collection dropped under it.
    /// A batch with an id an earlier batch of the stream wrote (`seen`) is
    /// refused whole.
    async fn put_batch(
        &self,
        name: &str,
        batch: arrow_array::RecordBatch,
        target: &mut Option<Arc<Entry>>,
        seen: &mut SeenKeys,
    ) -> Result<usize, Status> {
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(0);
        }
        let bytes = batch.get_array_memory_size();
        let name2 = name.to_string();
        let st = self.st.clone();
        let fixed = target.clone();
        let mut seen2 = std::mem::take(seen);
        let (n, e, seen2) = self
            .run(Work::Ingest, move || {
                let ing: Ingest = convert::ingest_batch(&batch)?;
                let e = match fixed {
                    Some(e) => match st.registry.get(&name2) {
                        Ok(now) if Arc::ptr_eq(&now, &e) => e,
                        _ => {
                            return Err(ApiError::NotFound(format!(
                                "{name2} (dropped during this put)"
                            )))
                        }
                    },
                    None => {
                        st.registry
                            .get_or_create(&name2, || {
                                // A collection created by its first put: cosine, the
                                // storage type of the vector elements, default index
                                // settings (create it beforehand for others).
                                let dtype = convert::dtype_for(&ing.element);
                                let mut req = ops::CreateCollection {
                                    name: name2.clone(),
                                    dims: ing.vectors.width(),
                                    dtype: Some(dtype.name().into()),
                                    ..Default::default()
                                };
                                if dtype == sagitta_index::DType::B1 {
                                    req.metric = Some("hamming".into());
                                    req.dims *= 8;
                                }
                                let mut cfg = ops::config_from(&req)?;
                                // Ids come back in the type they were put.
                                cfg.id_type = ing.ids.id_type();
                                cfg.key_bits = cfg.id_type.key_bits();
                                Ok(cfg)
                            })?
                            .0
                    }
                };
                convert::check_space(&e.coll.config().space, &ing.vectors)?;
                // Keys of ids that are not of the collection's type are
                // not checked here: the write refuses them, naming the row.
                let keys = ing.ids.keys(e.coll.id_type()).ok();
                if let Some(keys) = &keys {
                    seen2.refuse_repeats(&e.coll, &ing.ids, keys)?;
                }
                let refs: Vec<sagitta_index::VectorRef<'_>> =
                    (0..ing.ids.len()).map(|i| ing.vectors.row(i)).collect();
                let n = ops::upsert(&e, &ing.ids, &refs, ing.payload.as_ref())?;
                if let Some(keys) = keys {
                    seen2.insert(e.coll.id_type(), &keys);
                }
                Ok((n, e, seen2))
            })
            .await?;
        *seen = seen2;
        *target = Some(e);
        self.st
            .metrics
            .ingested("flight", name, n as u64, bytes as u64);
        Ok(n)
    }

    /// Streams a collection's rows from the store's scan, one batch of
    /// up to [`SCAN_BATCH`] rows at a time (each read on the search pool
    /// when the client asks for it: a slow client holds a snapshot, not
    /// the rows).
    async fn scan(&self, name: String, filter: Option<Json>) -> Result<Stream<FlightData>, Status> {
        let e = self.entry(&name)?;
        let e2 = e.clone();
        let (schema, scan, on_id) = self
            .run(Work::Search, move || {
                let (filter, on_id) = idfilter::split(filter)?;
                let pred = ops::bind(&e2.coll, filter.as_ref())?;
                let schema = convert::row_schema(&e2.coll);
                let scan = e2.coll.scan(pred.as_ref(), SCAN_BATCH)?;
                Ok((schema, scan, on_id))
            })
            .await?;
        let on_id = Arc::new(on_id);
        let st = self.st.clone();
        let schema2 = schema.clone();
        let batches = stream::try_unfold(Some(scan), move |scan| {
            let (e, st, schema, on_id) = (e.clone(), st.clone(), schema2.clone(), on_id.clone());
            async move {
                let Some(scan) = scan else {
                    return Ok(None);
                };
                st.exec
                    .run(Work::Search, move || {
                        let mut scan = scan;
                        loop {
                            let Some(b) = scan.next().transpose()? else {
                                return Ok(None);
                            };
                            let keep = |id: &sagitta_store::Id| on_id.iter().all(|c| c.test(id));
                            if let Some(rb) =
                                convert::scan_batch(&e.coll, &schema, scan.schema(), b, keep)?
                            {
                                return Ok(Some((rb, Some(scan))));
                            }
                        }
                    })
                    .await
                    .map_err(|err| FlightError::Tonic(Box::new(err.to_status())))
            }
        });
        let out = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(batches)
            .map_err(|e| match e {
                FlightError::Tonic(s) => *s,
                e => ApiError::Internal(e.to_string()).to_status(),
            });
        Ok(out.boxed())
    }

    async fn search(&self, s: SearchTicket) -> Result<Stream<FlightData>, Status> {
        let e = self.entry(&s.dataset)?;
        let work = Work::search(s.vectors.is_empty(), s.text_query.is_some(), s.exact);
        let batch = self
            .run(work, move || {
                if !s.vectors.is_empty() {
                    return Err(ApiError::BadRequest(
                        "a search ticket takes one `vector`; the VectorSearch action takes `vectors`"
                            .into(),
                    ));
                }
                search_batch(&e, &s, s.vector.clone())
            })
            .await?;
        let out = FlightDataEncoderBuilder::new()
            .with_schema(batch.schema())
            .build(stream::once(async { Ok(batch) }))
            .map_err(|e| ApiError::Internal(e.to_string()).to_status());
        Ok(out.boxed())
    }

    /// Runs an action: one result body (JSON), or for `VectorSearch` one
    /// Arrow IPC stream per query.
    async fn action(&self, kind: &str, body: &[u8]) -> (String, Result<Vec<Bytes>, Status>) {
        let json = |r: Result<Json, Status>| r.map(|j| vec![Bytes::from(j.to_string())]);
        match kind {
            "VectorSearch" => {
                let s: SearchTicket = match vector_body("VectorSearch", body) {
                    Ok(s) => s,
                    Err(st) => return (String::new(), Err(st)),
                };
                let label = s.dataset.clone();
                let r = async {
                    let e = self.entry(&s.dataset)?;
                    self.run(Work::Search, move || {
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
                            .map(|q| ipc_bytes(&search_batch(&e, &s, q)?))
                            .collect()
                    })
                    .await
                }
                .await;
                (label, r)
            }
            "HybridSearch" => {
                let s: SearchTicket = match vector_body("HybridSearch", body) {
                    Ok(s) => s,
                    Err(st) => return (String::new(), Err(st)),
                };
                let label = s.dataset.clone();
                let r = async {
                    let e = self.entry(&s.dataset)?;
                    self.run(Work::Search, move || hybrid_json(&e, &s)).await
                }
                .await;
                (label, json(r))
            }
            "add-edge" | "traverse-graph" | "GetGraphStats" => (
                String::new(),
                Err(longbow::graph_unsupported(kind).to_status()),
            ),
            "cluster-status" => (String::new(), json(Ok(longbow::cluster_status(&self.st)))),
            "MeshIdentity" => (String::new(), json(Ok(longbow::member(&self.st)))),
            "MeshStatus" => (
                String::new(),
                json(Ok(Json::Array(vec![longbow::member(&self.st)]))),
            ),
            "DiscoveryStatus" => (
                String::new(),
                json(Ok(json!({"provider": "none", "peers": []}))),
            ),
            "check_readiness" => (
                String::new(),
                json(longbow::check_readiness(&self.st, body).map_err(|e| e.to_status())),
            ),
            "CreateNamespace"
            | "DeleteNamespace"
            | "ListNamespaces"
            | "GetTotalNamespaceCount"
            | "GetNamespaceDatasetCount" => {
                let st = self.st.clone();
                let ns = self.ns.clone();
                let (kind2, body2) = (kind.to_string(), body.to_vec());
                // Reads wait behind searches, not behind a queue of writes.
                let reads = [
                    "ListNamespaces",
                    "GetTotalNamespaceCount",
                    "GetNamespaceDatasetCount",
                ];
                let work = if reads.contains(&kind) {
                    Work::Search
                } else {
                    Work::Ingest
                };
                let r = self
                    .run(work, move || {
                        longbow::namespace_action(&st, &ns, &kind2, &body2)
                    })
                    .await;
                (String::new(), json(r))
            }
            "delete-dataset" => {
                let st = self.st.clone();
                let body = body.to_vec();
                let r = self
                    .run(Work::Ingest, move || longbow::delete_dataset(&st, &body))
                    .await;
                (String::new(), json(r))
            }
            "ForceSnapshot" => {
                let st = self.st.clone();
                let r = self
                    .run(Work::Ingest, move || longbow::force_snapshot(&st))
                    .await;
                (String::new(), json(r))
            }
            kind => {
                let (label, r) = self.json_action(kind, body).await;
                (label, json(r))
            }
        }
    }

    async fn json_action(&self, kind: &str, body: &[u8]) -> (String, Result<Json, Status>) {
        match kind {
            "delete" | "Delete" | "delete-vector" => {
                let a: DeleteAction = match json_body("delete", body) {
                    Ok(a) => a,
                    Err(s) => return (String::new(), Err(s)),
                };
                let label = a.dataset.clone();
                let r = async {
                    let e = self.entry(&a.dataset)?;
                    let ids = match a.id {
                        IdOrIds::One(i) => vec![i],
                        IdOrIds::Many(v) => v,
                    };
                    let keys = ops::live_keys_of(&e.coll, &ids)?;
                    let n = self
                        .run(Work::Ingest, move || {
                            ops::ingest(&e, 0, || Ok(e.coll.remove(&keys)?))
                        })
                        .await?;
                    Ok(json!({ "deleted": n }))
                }
                .await;
                (label, r)
            }
            "VectorSearchByID" => {
                let a: SearchByIdAction = match json_body("VectorSearchByID", body) {
                    Ok(a) => a,
                    Err(s) => return (String::new(), Err(s)),
                };
                let label = a.dataset.clone();
                let r = async {
                    let e = self.entry(&a.dataset)?;
                    self.run(Work::Lookup, move || search_by_id(&e, a)).await
                }
                .await;
                (label, r)
            }
            "list" => {
                let names: Vec<String> = self
                    .st
                    .registry
                    .all()
                    .iter()
                    .map(|e| e.name.clone())
                    .collect();
                (String::new(), Ok(json!({ "collections": names })))
            }
            "describe" => {
                let a: DropAction = match json_body("describe", body) {
                    Ok(a) => a,
                    Err(s) => return (String::new(), Err(s)),
                };
                let r = match self.st.registry.get(&a.name) {
                    Ok(e) => {
                        self.run(Work::Search, move || {
                            serde_json::to_value(ops::describe(&e))
                                .map_err(|e| ApiError::Internal(e.to_string()))
                        })
                        .await
                    }
                    Err(e) => Err(e.to_status()),
                };
                (a.name, r)
            }
            "set-payload" => {
                let a: SetPayloadAction = match json_body("set-payload", body) {
                    Ok(a) => a,
                    Err(s) => return (String::new(), Err(s)),
                };
                let label = a.name.clone();
                let r = async {
                    let e = self.entry(&a.name)?;
                    let req = ops::SetPayloadRequest {
                        ids: a.ids,
                        filter: a.filter,
                        payload: a.payload,
                    };
                    let r = self
                        .run(Work::Ingest, move || ops::run_set_payload(&e, req))
                        .await?;
                    Ok(json!({ "updated": r.updated }))
                }
                .await;
                (label, r)
            }
            "optimize" => {
                let a: OptimizeAction = match json_body("optimize", body) {
                    Ok(a) => a,
                    Err(s) => return (String::new(), Err(s)),
                };
                let req = ops::OptimizeRequest { compact: a.compact };
                let r = match self.st.registry.get(&a.name) {
                    Ok(e) if self.st.accepting.load(Ordering::Acquire) => self
                        .st
                        .exec
                        .run_wait("optimize", move || {
                            let s = ops::run_optimize(&e, &req)?;
                            serde_json::to_value(s).map_err(|e| ApiError::Internal(e.to_string()))
                        })
                        .await
                        .map_err(|e| e.to_status()),
                    Ok(_) => Err(ApiError::ShuttingDown.to_status()),
                    Err(e) => Err(e.to_status()),
                };
                (a.name, r)
            }
            "create-collection" => {
                let req: ops::CreateCollection = match json_body("create-collection", body) {
                    Ok(a) => a,
                    Err(s) => return (String::new(), Err(s)),
                };
                let label = req.name.clone();
                let st = self.st.clone();
                let r = self
                    .run(Work::Ingest, move || {
                        let cfg = ops::config_from(&req)?;
                        let e = st.registry.create(&req.name, cfg)?;
                        serde_json::to_value(ops::describe(&e))
                            .map_err(|e| ApiError::Internal(e.to_string()))
                    })
                    .await;
                (label, r)
            }
            "drop-collection" => {
                let a: DropAction = match json_body("drop-collection", body) {
                    Ok(a) => a,
                    Err(s) => return (String::new(), Err(s)),
                };
                let st = self.st.clone();
                let name = a.name.clone();
                let r = self
                    .run(Work::Ingest, move || {
                        st.registry.drop_collection(&name)?;
                        Ok(json!({ "dropped": name }))
                    })
                    .await;
                (a.name, r)
            }
            kind => (String::new(), Err(unknown_action(kind))),
        }
    }
}

/// The keys a DoPut stream has written, so that an id coming again in a
/// later batch of the same upload is refused (within one batch the store
/// refuses it). Integer ids, whose keys cluster, go in a roaring treemap
/// (a few bits per row for ids in runs); hashed ids (string, uint128),
/// whose keys spread over 64 bits, in a hash set (about 16 bytes a row).
#[derive(Debug, Default)]
struct SeenKeys {
    ints: roaring::RoaringTreemap,
    hashed: HashSet<u64>,
}

impl SeenKeys {
    fn contains(&self, t: sagitta_store::IdType, key: u64) -> bool {
        if t.hashed() {
            self.hashed.contains(&key)
        } else {
            self.ints.contains(key)
        }
    }

    fn insert(&mut self, t: sagitta_store::IdType, keys: &[u64]) {
        if t.hashed() {
            self.hashed.extend(keys.iter().copied());
        } else {
            self.ints.extend(keys.iter().copied());
        }
    }

    /// INVALID_ARGUMENT naming the first id of `ids` (with `keys` in
    /// `coll`) that an earlier batch wrote. A hashed key seen before
    /// under another id is a collision, left to the store to refuse.
    fn refuse_repeats(
        &self,
        coll: &sagitta_store::Collection,
        ids: &sagitta_store::IdColumn,
        keys: &[u64],
    ) -> ApiResult<()> {
        let t = coll.id_type();
        for (row, &k) in keys.iter().enumerate() {
            if !self.contains(t, k) {
                continue;
            }
            let Ok(id) = t.canonical(&ids.get(row)) else {
                continue;
            };
            if t.hashed() && coll.ids_of(&[k])?.pop().flatten().as_ref() != Some(&id) {
                continue;
            }
            return Err(ApiError::BadRequest(format!(
                "DoPut: row {row}: id {id} came already in an earlier batch of this upload \
                 (DoPut stream); an upload writes each id once. Nothing of this batch was \
                 written; the earlier batches stay"
            )));
        }
        Ok(())
    }
}

/// One query of a search ticket or action: dense, text or hybrid (with
/// `text_query`), as a batch of [`convert::hits_batch`].
fn search_batch(
    e: &Entry,
    s: &SearchTicket,
    vector: Vec<f32>,
) -> ApiResult<arrow_array::RecordBatch> {
    let space = e.coll.config().space;
    let pred = ops::bind(&e.coll, filter_of(s.filters.clone()).as_ref())?;
    let knobs = Knobs {
        ef: s.ef,
        nprobe: s.nprobe,
        refine: s.refine,
        exact: s.exact,
    };
    let with_vectors = wants_vectors(&s.include_vectors);
    let text = text_of(s);
    let v = match text {
        Some(_) if vector.is_empty() => None,
        _ => Some(ops::json_vector(&space, vector, 0)?),
    };
    let q = query_of(s, text, v.as_ref(), &knobs, pred.as_ref())?;
    match ops::query(&e.coll, &q)? {
        Answer::Dense(mut d) => {
            let hits = d.pop().unwrap_or_default();
            let keys: Vec<u64> = hits.iter().map(|h| h.key).collect();
            let scores: Vec<f32> = hits.iter().map(|h| h.distance).collect();
            convert::hits_batch(&e.coll, &keys, scores, Vec::new(), with_vectors)
        }
        Answer::Fused(hits) => convert::text_hits_batch(&e.coll, &hits, with_vectors),
    }
}

/// A search ticket's text query: Longbow's `text_query`, unless blank (a
/// blank one is a dense search, as Longbow treats it).
fn text_of(s: &SearchTicket) -> Option<&str> {
    s.text_query.as_deref().filter(|t| !t.trim().is_empty())
}

/// The store's query for one query of a search ticket: dense, or with
/// `text` a text or hybrid one (Longbow's `alpha` and Sagitta's `fusion`
/// and `depth` apply to those only; a dense ticket's `alpha` is ignored,
/// as Longbow ignores it).
fn query_of<'a>(
    s: &'a SearchTicket,
    text: Option<&'a str>,
    vector: Option<&'a ops::OwnedVector>,
    knobs: &Knobs,
    pred: Option<&'a sagitta_store::filter::Bound>,
) -> ApiResult<Query<'a>> {
    let vectors = vector.map(ops::OwnedVector::as_ref).into_iter().collect();
    Ok(match text {
        None => Query {
            opts: knobs.opts(pred),
            ..Query::dense(vectors, s.k)
        },
        Some(t) => Query {
            vectors,
            text: Some(t),
            fusion: text::fusion_of(s.fusion.as_deref(), s.alpha, None)?,
            depth: s.depth,
            k: s.k,
            opts: knobs.opts(pred),
        },
    })
}

/// A batch as one Arrow IPC stream (schema, then the batch).
fn ipc_bytes(b: &arrow_array::RecordBatch) -> ApiResult<Bytes> {
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &b.schema())
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    w.write(b).map_err(|e| ApiError::Internal(e.to_string()))?;
    w.finish().map_err(|e| ApiError::Internal(e.to_string()))?;
    drop(w);
    Ok(Bytes::from(out))
}

/// Longbow's `HybridSearch` result: a JSON array of `{ID, Distance, Score,
/// Metadata}` (Distance: the dense distance, null where the row came from
/// the text leg only; Score: the fused score, larger is better; without
/// `text_query` both are the distance).
fn hybrid_json(e: &Entry, s: &SearchTicket) -> ApiResult<Json> {
    let space = e.coll.config().space;
    let pred = ops::bind(&e.coll, filter_of(s.filters.clone()).as_ref())?;
    let knobs = Knobs {
        ef: s.ef,
        nprobe: s.nprobe,
        refine: s.refine,
        exact: s.exact,
    };
    let text = text_of(s);
    let v = match text {
        Some(_) if s.vector.is_empty() => None,
        _ => Some(ops::json_vector(&space, s.vector.clone(), 0)?),
    };
    let q = query_of(s, text, v.as_ref(), &knobs, pred.as_ref())?;
    let rows: Vec<(u64, Json, f32)> = match ops::query(&e.coll, &q)? {
        Answer::Dense(mut d) => d
            .pop()
            .unwrap_or_default()
            .into_iter()
            .map(|n| (n.key, json!(n.distance), n.distance))
            .collect(),
        Answer::Fused(hits) => hits
            .into_iter()
            .map(|h| (h.key, h.dense.map_or(Json::Null, |d| json!(d.1)), h.score))
            .collect(),
    };
    let keys: Vec<u64> = rows.iter().map(|r| r.0).collect();
    let ids = ops::ids_of(&e.coll, &keys)?;
    let meta = ops::payload_json(&e.coll, &keys, None)?;
    Ok(Json::Array(
        rows.into_iter()
            .zip(ids)
            .zip(meta)
            .map(|(((_, dist, score), id), m)| {
                json!({"ID": id, "Distance": dist, "Score": score, "Metadata": m.unwrap_or_default()})
            })
            .collect(),
    ))
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
    let mut hits = ops::search(&e.coll, &[q], k, &knobs, pred.as_ref())?
        .pop()
        .unwrap_or_default();
    hits.retain(|h| h.0 != key);
    hits.truncate(a.k);
    let keys: Vec<u64> = hits.iter().map(|h| h.0).collect();
    Ok(json!({
        "ids": ops::ids_of(&e.coll, &keys)?,
        "scores": hits.iter().map(|h| h.1).collect::<Vec<_>>(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sagitta_store::IdType;

    #[test]
    fn seen_keys_keep_what_a_put_wrote_by_kind_of_id() {
        let mut s = SeenKeys::default();
        s.insert(IdType::Int64, &[1, 2, (-5i64) as u64]);
        s.insert(IdType::String, &[u64::MAX - 1]);
        assert!(s.contains(IdType::Int64, (-5i64) as u64) && s.contains(IdType::UInt64, 2));
        assert!(!s.contains(IdType::Int64, 3) && !s.contains(IdType::Int64, u64::MAX - 1));
        assert!(s.contains(IdType::String, u64::MAX - 1) && !s.contains(IdType::UInt128, 1));
    }
}
