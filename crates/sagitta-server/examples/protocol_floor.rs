//! The floor of a search request over each protocol: servers that do no
//! work, on the same stacks and socket options as `sagitta serve`, less
//! the Flight port's one-send wrappers (`wire.rs` in the server, which
//! came later): this is tonic's own floor, which the figures in
//! bench/results/journal-2026-11.md ("The floor of a request on this
//! host") measured.
//! * Flight (tonic): DoGet answers every ticket with the same 10-row
//!   batch of `id` and `score`, the shape of a search answer.
//! * HTTP (axum): every request's body is read and answered with the same
//!   10-hit JSON answer.
//!
//! `sagitta-bench bench-serve --modes http,flight` against it measures what
//! each protocol costs on its own.
//!
//! `cargo run --release -p sagitta-server --example protocol_floor`
//! prints the Flight address, then the HTTP one, and serves until killed.
//! `FLOOR_THREADS=N` sets the runtime's worker threads (default 2, as
//! `sagitta serve`'s I/O threads; 0: one current-thread runtime);
//! `FLOOR_SPIN_US=N` makes each HTTP answer wait N µs on the CPU first
//! (a stand-in for a search run inline).

use arrow_array::{Float32Array, RecordBatch, UInt64Array};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use std::sync::Arc;
use tonic::{Request, Response, Status, Streaming};

type S<T> = BoxStream<'static, Result<T, Status>>;

struct Floor {
    answer: RecordBatch,
}

fn no<T>() -> Result<T, Status> {
    Err(Status::unimplemented("the floor server answers DoGet only"))
}

#[tonic::async_trait]
impl FlightService for Floor {
    type HandshakeStream = S<HandshakeResponse>;
    type ListFlightsStream = S<FlightInfo>;
    type DoGetStream = S<FlightData>;
    type DoPutStream = S<PutResult>;
    type DoExchangeStream = S<FlightData>;
    type DoActionStream = S<arrow_flight::Result>;
    type ListActionsStream = S<ActionType>;

    async fn handshake(
        &self,
        _: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        no()
    }
    async fn list_flights(
        &self,
        _: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        no()
    }
    async fn get_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        no()
    }
    async fn poll_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        no()
    }
    async fn get_schema(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        no()
    }
    async fn do_get(&self, _: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        let batch = self.answer.clone();
        let out = FlightDataEncoderBuilder::new()
            .with_schema(batch.schema())
            .build(stream::once(async { Ok(batch) }))
            .map_err(|e| Status::internal(e.to_string()));
        Ok(Response::new(out.boxed()))
    }
    async fn do_put(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        no()
    }
    async fn do_exchange(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        no()
    }
    async fn do_action(
        &self,
        _: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        no()
    }
    async fn list_actions(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        no()
    }
}

fn spin_us() -> u64 {
    static US: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *US.get_or_init(|| {
        std::env::var("FLOOR_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let answer = RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(UInt64Array::from_iter_values(0..10)) as arrow_array::ArrayRef,
        ),
        (
            "score",
            Arc::new(Float32Array::from_iter_values((0..10).map(|i| i as f32))),
        ),
    ])?;
    let threads: usize = std::env::var("FLOOR_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let rt = if threads == 0 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
    };
    rt.block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let hl = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("{}", l.local_addr()?);
        println!("{}", hl.local_addr()?);
        let incoming = tonic::transport::server::TcpIncoming::from(l).with_nodelay(Some(true));
        let flight = tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .add_service(FlightServiceServer::new(Floor { answer }))
            .serve_with_incoming(incoming);
        let hits: Vec<serde_json::Value> = (0..10)
            .map(|i| serde_json::json!({"id": i, "score": i as f32}))
            .collect();
        let body = serde_json::json!({ "hits": hits }).to_string();
        let app = axum::Router::new().fallback(axum::routing::any(
            move |req: axum::body::Bytes| async move {
                let _ = req.len();
                let t0 = std::time::Instant::now();
                while t0.elapsed() < std::time::Duration::from_micros(spin_us()) {
                    std::hint::spin_loop();
                }
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    body,
                )
            },
        ));
        use axum::serve::ListenerExt;
        let http = axum::serve(
            hl.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            }),
            app,
        );
        let (f, h) = tokio::join!(flight, async { http.await });
        f?;
        h?;
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}
