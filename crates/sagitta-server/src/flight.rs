//! Arrow Flight (arrow-flight over tonic): the service's calls. Searches
//! ([`search`]) and DoAction's table of typed handlers ([`actions`],
//! [`handler`]) have modules of their own. See docs/SERVER.md for the
//! tickets, actions and schemas.

pub mod actions;
pub mod handler;
pub mod search;

use crate::auth::{self, Role};
use crate::convert::{self, Ingest};
use crate::error::{ApiError, ApiResult};
use crate::exec::Work;
use crate::fastjson::WithVector;
use crate::idfilter;
use crate::ops;
use crate::registry::Entry;
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
use handler::{invalid, vector_body};
use search::{filter_of, search_batch, SearchTicket};
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
}

impl Flight {
    /// Serves `st`.
    pub fn new(st: Arc<State>) -> Flight {
        Flight { st }
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
        let Some(row) = actions::find(&a.r#type) else {
            return Err(actions::unknown_action(&a.r#type));
        };
        self.auth(&req, row.role)?;
        let a = req.into_inner();
        let (label, r) = (row.call)(self.st.clone(), row, a.body).await;
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
        let list: Vec<Result<ActionType, Status>> = actions::ACTIONS
            .iter()
            .map(|a| {
                Ok(ActionType {
                    r#type: a.name.into(),
                    description: a.about.into(),
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
                                // settings (create it beforehand for others), and as
                                // text fields the batch's columns the server's
                                // `text_columns` names (its string columns by default).
                                let dtype = convert::dtype_for(&ing.element);
                                let mut req = crate::api::CreateCollection {
                                    name: name2.clone(),
                                    dims: ing.vectors.width(),
                                    dtype: Some(dtype.name().into()),
                                    text_fields: crate::text::first_put_text_fields(
                                        &st.text_columns,
                                        ing.payload.as_ref(),
                                    ),
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
                // The first write to a collection without an id type fixes
                // it: keys the type refused before the write exist now.
                let keys = keys.or_else(|| ing.ids.keys(e.coll.id_type()).ok());
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
                let (filter, on_id) = idfilter::split(filter.as_ref())?;
                let pred = filter.map(|f| e2.coll.bind_filter(&f)).transpose()?;
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
