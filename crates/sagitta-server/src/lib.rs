//! # sagitta-server
//!
//! `sagitta serve`: the collections under one data directory, served over
//! HTTP/JSON ([`http`], axum) and Arrow Flight ([`flight`], tonic) from one
//! tokio runtime that only does I/O. Searches and writes run on two
//! bounded rayon pools ([`exec`]); requests past their bounds are refused
//! (503 / UNAVAILABLE) rather than queued. Thin by design: requests map
//! onto `sagitta-store` calls ([`ops`]) and errors onto statuses in one
//! place ([`error`]). See docs/SERVER.md.

pub mod api;
pub mod auth;
pub mod browse;
pub mod classify;
pub mod convert;
pub mod error;
pub mod exec;
pub mod fastjson;
pub mod flight;
pub mod http;
pub mod idfilter;
pub mod longbow;
pub mod metrics;
pub mod opener;
pub mod ops;
pub mod registry;
pub mod state;
pub mod text;
pub mod ui;
mod wire;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub use auth::Keys;
pub use error::ApiError;
pub use exec::ExecConfig;
pub use state::State;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Data directory (one subdirectory per collection).
    pub data: PathBuf,
    /// HTTP listen address (port 0: any free port).
    pub http: SocketAddr,
    /// Flight listen address (port 0: any free port).
    pub flight: SocketAddr,
    /// More addresses serving the same Flight service (e.g. the control
    /// port of clients written for Longbow's two ports).
    pub flight_also: Vec<SocketAddr>,
    /// API keys; none: no authentication, loopback only.
    pub keys: Keys,
    /// Listen on non-loopback addresses without API keys.
    pub allow_unauthenticated_remote: bool,
    /// Pools and timeouts.
    pub exec: ExecConfig,
    /// Largest HTTP body and Flight message, bytes.
    pub max_body: usize,
    /// The text (BM25) fields of a collection a Flight DoPut creates:
    /// Longbow's `HYBRID_SEARCH_ENABLED` / `HYBRID_TEXT_COLUMNS`, chosen
    /// by the store from the first batch's columns (default: its string
    /// columns).
    pub text_columns: sagitta_store::TextColumns,
}

impl ServerConfig {
    /// Defaults: `./sagitta-data`, HTTP on 127.0.0.1:7080, Flight on
    /// 127.0.0.1:7081, 64 MiB bodies.
    pub fn new() -> ServerConfig {
        ServerConfig {
            data: PathBuf::from("sagitta-data"),
            http: SocketAddr::from(([127, 0, 0, 1], 7080)),
            flight: SocketAddr::from(([127, 0, 0, 1], 7081)),
            flight_also: Vec::new(),
            keys: Keys::default(),
            allow_unauthenticated_remote: false,
            exec: ExecConfig::default(),
            max_body: 64 << 20,
            text_columns: sagitta_store::TextColumns::default(),
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig::new()
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The data directory could not be opened.
    #[error("data directory {path}: {source}")]
    Data {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Non-loopback address without keys.
    #[error("refusing to listen on {0} without API keys: configure keys (--api-keys FILE or SAGITTA_API_KEYS) or pass --allow-unauthenticated-remote")]
    Unprotected(SocketAddr),
    /// A server failed while running.
    #[error("{0}")]
    Runtime(String),
}

/// A server with its sockets bound, not yet serving.
#[derive(Debug)]
pub struct Bound {
    /// HTTP address.
    pub http: SocketAddr,
    /// Flight address.
    pub flight: SocketAddr,
    /// The other Flight addresses.
    pub flight_also: Vec<SocketAddr>,
    state: Arc<State>,
    http_listener: tokio::net::TcpListener,
    flight_listeners: Vec<tokio::net::TcpListener>,
}

/// Opens the data directory and binds both sockets (call inside a tokio
/// runtime).
pub async fn bind(cfg: ServerConfig) -> Result<Bound, ServeError> {
    if !cfg.keys.enabled() && !cfg.allow_unauthenticated_remote {
        for &a in [cfg.http, cfg.flight].iter().chain(&cfg.flight_also) {
            if !a.ip().is_loopback() {
                return Err(ServeError::Unprotected(a));
            }
        }
    }
    let registry = registry::Registry::open(&cfg.data).map_err(|source| ServeError::Data {
        path: cfg.data.clone(),
        source,
    })?;
    let bind = |addr: SocketAddr| async move {
        tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { addr, source })
    };
    let http_listener = bind(cfg.http).await?;
    let flight_listener = bind(cfg.flight).await?;
    let local = |l: &tokio::net::TcpListener, addr| {
        l.local_addr()
            .map_err(|source| ServeError::Bind { addr, source })
    };
    let http = local(&http_listener, cfg.http)?;
    let flight = local(&flight_listener, cfg.flight)?;
    let mut flight_listeners = vec![flight_listener];
    let mut flight_also = Vec::new();
    for &a in &cfg.flight_also {
        let l = bind(a).await?;
        flight_also.push(local(&l, a)?);
        flight_listeners.push(l);
    }
    let metrics = Arc::new(metrics::Metrics::default());
    metrics.start();
    let exec = exec::Exec::new(&cfg.exec, metrics.clone())
        .map_err(|e| ServeError::Runtime(format!("cannot start thread pools: {e}")))?;
    let state = Arc::new(State {
        registry: Arc::new(registry),
        exec,
        metrics,
        keys: cfg.keys.clone(),
        accepting: AtomicBool::new(true),
        max_body: cfg.max_body,
        text_columns: cfg.text_columns.clone(),
        http_addr: http.to_string(),
        flight_addr: flight.to_string(),
        namespaces: state::Namespaces::default(),
    });
    Ok(Bound {
        http,
        flight,
        flight_also,
        state,
        http_listener,
        flight_listeners,
    })
}

impl Bound {
    /// The shared state (for in-process use, e.g. the demo).
    pub fn state(&self) -> &Arc<State> {
        &self.state
    }

    /// Serves until `shutdown` completes, then stops accepting
    /// connections, lets in-flight requests finish, and flushes every
    /// collection's WAL.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let st = self.state.clone();
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|&v| v).await;
        };
        let app = http::router(st.clone());
        use axum::serve::ListenerExt;
        let listener = self.http_listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let http_srv = axum::serve(listener, app).with_graceful_shutdown(wait(stop_rx.clone()));
        let svc = arrow_flight::flight_service_server::FlightServiceServer::new(
            flight::Flight::new(st.clone()),
        )
        .max_decoding_message_size(st.max_body)
        .max_encoding_message_size(st.max_body);
        let incoming = futures::stream::select_all(self.flight_listeners.into_iter().map(|l| {
            use futures::TryStreamExt;
            let accepted = tonic::transport::server::TcpIncoming::from(l).with_nodelay(Some(true));
            Box::pin(accepted.map_ok(wire::Gathered::new))
        }));
        let flight_srv = tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .add_service(wire::OneSend(svc))
            .serve_with_incoming_shutdown(incoming, wait(stop_rx.clone()));
        let st2 = st.clone();
        let grace = st.exec.timeout();
        let mut stopping = stop_rx.clone();
        tokio::spawn(async move {
            shutdown.await;
            tracing::info!("shutting down: refusing new work, finishing in-flight requests");
            st2.accepting.store(false, Ordering::Release);
            let _ = stop_tx.send(true);
        });
        let servers = async {
            tokio::join!(
                async {
                    http_srv
                        .await
                        .map_err(|e| ServeError::Runtime(format!("http: {e}")))
                },
                async {
                    flight_srv
                        .await
                        .map_err(|e| ServeError::Runtime(format!("flight: {e}")))
                }
            )
        };
        // In-flight requests get the request timeout to finish; a client
        // holding a stream open longer does not keep the process alive.
        let deadline = async move {
            let _ = stopping.wait_for(|&v| v).await;
            tokio::time::sleep(grace).await;
        };
        let (h, f) = tokio::select! {
            r = servers => r,
            _ = deadline => {
                tracing::warn!(grace_ms = grace.as_millis() as u64, "shutdown grace period over; closing open connections");
                (Ok(()), Ok(()))
            }
        };
        st.registry.flush_all();
        tracing::info!("stopped; every collection flushed");
        h.and(f)
    }
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}
