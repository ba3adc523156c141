//! `sagitta serve` and the server half of `sagitta demo`.

use anyhow::{bail, Context, Result};
use sagitta_server::{Keys, ServerConfig};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Options of `sagitta serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Data directory (one subdirectory per collection; created if missing).
    #[arg(long, default_value = "sagitta-data")]
    pub data: PathBuf,
    /// HTTP/JSON listen address (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:7080")]
    pub http: SocketAddr,
    /// Arrow Flight listen address (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:7081")]
    pub flight: SocketAddr,
    /// Another address serving the same Flight service (repeatable): for
    /// clients written for Longbow's separate data and control ports
    /// (e.g. --flight 127.0.0.1:3000 --flight-also 127.0.0.1:3001).
    #[arg(long)]
    pub flight_also: Vec<SocketAddr>,
    /// API keys file: one `ROLE KEY` per line (roles: read, write, admin).
    /// Also read from SAGITTA_API_KEYS as `ROLE:KEY,ROLE:KEY`.
    #[arg(long)]
    pub api_keys: Option<PathBuf>,
    /// Listen on non-loopback addresses without API keys.
    #[arg(long)]
    pub allow_unauthenticated_remote: bool,
    /// Search threads (default: one per core).
    #[arg(long)]
    pub search_threads: Option<usize>,
    /// Ingest lanes (requests written at once), run at lower CPU priority,
    /// each with a thread per core for its parallel work (default: one per
    /// core, at most 4).
    #[arg(long)]
    pub ingest_threads: Option<usize>,
    /// Searches queued or running before new ones get 503 / UNAVAILABLE
    /// (default: 64 per core).
    #[arg(long)]
    pub max_pending_searches: Option<usize>,
    /// Ingest requests queued or running before new ones get 503 /
    /// UNAVAILABLE (default: 4 per core).
    #[arg(long)]
    pub max_pending_ingest: Option<usize>,
    /// Per-request timeout, milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub timeout_ms: u64,
    /// Largest HTTP body / Flight message, MiB.
    #[arg(long, default_value_t = 64)]
    pub max_body_mib: usize,
    /// Threads of the I/O runtime (sockets, parsing, encoding; a search of
    /// one query vector runs there when the search pool is idle, every
    /// other search and all ingest work on their own pools).
    #[arg(long, default_value_t = 2)]
    pub io_threads: usize,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// Log format: text or json.
    #[arg(long, default_value = "text")]
    pub log_format: String,
    /// Index text columns for BM25 in datasets a Flight DoPut creates
    /// (true or false; Longbow's setting; default true). Also read from
    /// LONGBOW_HYBRID_SEARCH_ENABLED, else HYBRID_SEARCH_ENABLED.
    #[arg(long, value_name = "BOOL", value_parser = parse_go_bool)]
    pub hybrid_search_enabled: Option<bool>,
    /// The columns indexed for BM25 in datasets a Flight DoPut creates,
    /// comma-separated (Longbow's setting; default: every string column of
    /// the first batch). Also read from LONGBOW_HYBRID_TEXT_COLUMNS, else
    /// HYBRID_TEXT_COLUMNS.
    #[arg(long, value_name = "COLUMNS")]
    pub hybrid_text_columns: Option<String>,
}

/// A boolean as Longbow's settings take it (Go's `strconv.ParseBool`).
fn parse_go_bool(s: &str) -> std::result::Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("{s:?}: expected true or false")),
    }
}

/// A Longbow setting: the flag, else `LONGBOW_<NAME>`, else `<NAME>` (as
/// Longbow's envconfig reads it).
fn longbow_env(name: &str) -> Option<(String, String)> {
    [format!("LONGBOW_{name}"), name.to_string()]
        .into_iter()
        .find_map(|k| std::env::var(&k).ok().map(|v| (k, v)))
}

impl ServeArgs {
    fn config(&self) -> Result<ServerConfig> {
        let mut cfg = ServerConfig::new();
        cfg.data = self.data.clone();
        cfg.http = self.http;
        cfg.flight = self.flight;
        cfg.flight_also = self.flight_also.clone();
        cfg.allow_unauthenticated_remote = self.allow_unauthenticated_remote;
        let mut keys = Keys::default();
        if let Some(p) = &self.api_keys {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading API keys from {}", p.display()))?;
            keys.extend(
                Keys::parse_file(&text)
                    .map_err(|e| anyhow::anyhow!("API keys file {}: {e}", p.display()))?,
            );
        }
        if let Ok(env) = std::env::var("SAGITTA_API_KEYS") {
            keys.extend(
                Keys::parse_env(&env).map_err(|e| anyhow::anyhow!("SAGITTA_API_KEYS: {e}"))?,
            );
        }
        cfg.keys = keys;
        let d = &mut cfg.exec;
        if let Some(n) = self.search_threads {
            d.search_threads = n;
        }
        if let Some(n) = self.ingest_threads {
            d.ingest_threads = n;
        }
        if let Some(n) = self.max_pending_searches {
            d.max_pending_searches = n;
        }
        if let Some(n) = self.max_pending_ingest {
            d.max_pending_ingest = n;
        }
        if self.timeout_ms == 0 {
            bail!("--timeout-ms must be at least 1");
        }
        d.timeout = Duration::from_millis(self.timeout_ms);
        cfg.max_body = self.max_body_mib.max(1) << 20;
        let enabled = match (
            self.hybrid_search_enabled,
            longbow_env("HYBRID_SEARCH_ENABLED"),
        ) {
            (Some(b), _) => Some(b),
            (None, Some((k, v))) => {
                Some(parse_go_bool(&v).map_err(|e| anyhow::anyhow!("{k}: {e}"))?)
            }
            (None, None) => None,
        };
        let columns = self
            .hybrid_text_columns
            .clone()
            .or_else(|| longbow_env("HYBRID_TEXT_COLUMNS").map(|(_, v)| v));
        cfg.text_columns = sagitta_store::TextColumns::from_settings(enabled, columns.as_deref());
        Ok(cfg)
    }
}

fn init_logs(level: &str, format: &str) -> Result<()> {
    let level: tracing::level_filters::LevelFilter = level
        .parse()
        .map_err(|_| anyhow::anyhow!("--log-level: expected error, warn, info, debug or trace"))?;
    let b = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let r = match format {
        "json" => b.json().try_init(),
        "text" => b.try_init(),
        _ => bail!("--log-format: expected text or json"),
    };
    r.map_err(|e| anyhow::anyhow!("logging: {e}"))
}

fn runtime(threads: usize) -> Result<tokio::runtime::Runtime> {
    // The runtime moves bytes; compute runs on the server's pools, but
    // for a single-query search while the search pool is idle (SERVER.md).
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name("sagitta-io")
        .on_thread_start(|| {
            sagitta_index::sched::priority::latency_sensitive();
        })
        .enable_all()
        .build()
        .context("starting the I/O runtime")
}

/// `sagitta serve`: prints `{"http": ..., "flight": ...}` as the first line
/// of stdout once both sockets listen, then serves until SIGTERM / Ctrl-C.
pub fn serve(args: &ServeArgs) -> Result<()> {
    init_logs(&args.log_level, &args.log_format)?;
    let cfg = args.config()?;
    tracing::info!(text_columns = ?cfg.text_columns, "text fields of datasets a DoPut creates");
    runtime(args.io_threads)?.block_on(async move {
        let bound = sagitta_server::bind(cfg).await?;
        {
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "{}",
                serde_json::json!({"http": bound.http.to_string(), "flight": bound.flight.to_string(),
                                   "flight_also": bound.flight_also.iter().map(ToString::to_string).collect::<Vec<_>>()})
            )?;
            out.flush()?;
        }
        tracing::info!(http = %bound.http, flight = %bound.flight, data = %args.data.display(), "serving");
        bound.run(sagitta_server::shutdown_signal()).await?;
        Ok(())
    })
}

/// One HTTP/1.1 request over a fresh connection; returns (status, body).
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let (head, body) = resp
        .split_once("\r\n\r\n")
        .context("malformed HTTP response")?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("malformed HTTP status line")?;
    Ok((status, body.to_string()))
}

/// The server part of the demo: loads the sample (vectors + passage text
/// as payload) into a collection in a fresh data directory, serves it,
/// queries it over HTTP and Flight, and keeps serving if asked.
/// The demo collection's embedding model: all-MiniLM-L6-v2 when its files
/// are there, after fetching them with `scripts/fetch-model` if needed
/// (None, with a note, when that fails: text queries are then BM25, or
/// hybrid with a given vector).
fn demo_model() -> Option<String> {
    use std::sync::OnceLock;
    static MODEL: OnceLock<Option<String>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let name = sagitta_embed::DEFAULT_MODEL;
            let dir = sagitta_embed::model_dir(name);
            let present = || dir.join(sagitta_embed::WEIGHTS_FILE).is_file();
            if !present() {
                println!("fetching the embedding model (scripts/fetch-model) ...");
                let ok = std::process::Command::new("scripts/fetch-model")
                    .stdout(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if !ok || !present() {
                    println!(
                        "  could not fetch it: text queries will use BM25 (and given vectors) only"
                    );
                    return None;
                }
            }
            Some(name.to_string())
        })
        .clone()
}

pub fn demo_server(
    ds: &sagitta_cli::data::Dataset,
    data: Option<PathBuf>,
    http: SocketAddr,
    flight: SocketAddr,
    keep_serving: bool,
) -> Result<()> {
    use sagitta_index::{DType, Metric, Space, VectorRef};
    use sagitta_store::{Collection, CollectionConfig, Field, FieldType, Payload, Value};
    let (dir, temp) = match data {
        Some(d) => (d, false),
        None => (
            std::env::temp_dir().join(format!("sagitta-demo-data-{}", std::process::id())),
            true,
        ),
    };
    if dir.join("sample").exists() {
        bail!(
            "{} already holds a collection named `sample`; point --data at a fresh directory",
            dir.display()
        );
    }
    std::fs::create_dir_all(&dir)?;
    let t = Instant::now();
    let space = Space::new(ds.base.cols, Metric::Cos, DType::F32)?;
    {
        let mut config = CollectionConfig::new(space);
        config.text = vec![sagitta_store::TextFieldSpec::new(
            "text",
            sagitta_store::AnalyzerKind::English,
        )];
        config.embed_model = demo_model();
        let c = Collection::create(&dir.join("sample"), config)?;
        let keys: Vec<u64> = (0..ds.base.rows as u64).collect();
        let vecs: Vec<VectorRef<'_>> = (0..ds.base.rows)
            .map(|i| VectorRef::F32(ds.base.row(i)))
            .collect();
        let payload = Payload {
            fields: vec![Field {
                name: "text".into(),
                ty: FieldType::String,
            }],
            columns: vec![(0..ds.base.rows)
                .map(|i| {
                    ds.base_texts
                        .get(i)
                        .map_or(Value::Null, |s| Value::Str(s.clone()))
                })
                .collect()],
            rows: ds.base.rows,
        };
        c.upsert_with_payload(&keys, &vecs, Some(&payload))?;
        c.close()?;
    }
    println!(
        "\nloaded the sample into collection `sample` (vectors + passage text as payload) in {} in {:.1} s",
        dir.display(),
        t.elapsed().as_secs_f64()
    );
    let mut cfg = ServerConfig::new();
    cfg.data = dir.clone();
    cfg.http = http;
    cfg.flight = flight;
    let embeds = demo_model().is_some();
    let query: Vec<f32> = ds.queries.row(0).to_vec();
    let query_text = ds.query_texts.first().cloned().unwrap_or_default();
    runtime(2)?.block_on(async move {
        let bound = sagitta_server::bind(cfg).await?;
        let (h, f) = (bound.http, bound.flight);
        println!("serving: {}", serde_json::json!({"http": h.to_string(), "flight": f.to_string()}));
        println!("  HTTP API + OpenAPI: http://{h}/docs  http://{h}/openapi.json   metrics: http://{h}/metrics");
        println!("  web console: http://{h}/ui/  (collections, segments, a search playground, live charts)");
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(bound.run(async move {
            tokio::select! {
                _ = stop_rx => {}
                _ = sagitta_server::shutdown_signal() => {}
            }
        }));
        // A sample query over a real HTTP connection.
        let body = serde_json::json!({"vector": query, "k": 3, "columns": ["text"]}).to_string();
        let (status, resp) = tokio::task::spawn_blocking(move || {
            http_request(h, "POST", "/collections/sample/search", &body)
        })
        .await??;
        if status != 200 {
            bail!("sample HTTP query answered {status}: {resp}");
        }
        println!("\nsample query over HTTP (POST /collections/sample/search, k=3) for:\n> {query_text}");
        let v: serde_json::Value = serde_json::from_str(&resp)?;
        for hit in v["hits"].as_array().into_iter().flatten() {
            let text: String = hit["payload"]["text"].as_str().unwrap_or("?").chars().take(100).collect();
            println!("  {:.3}  #{:<5} {}", hit["score"].as_f64().unwrap_or(f64::NAN), hit["id"], text);
        }
        // A text query over HTTP: BM25 over the passages, fused with the
        // dense leg of the text embedded by the engine (or, without the
        // model, of the query vector above).
        let text_q = "XML parser library for Python";
        let body = if embeds {
            serde_json::json!({"text": text_q, "k": 3, "columns": ["text"]})
        } else {
            serde_json::json!({"text": text_q, "vector": query, "k": 3, "columns": ["text"]})
        }
        .to_string();
        let (status, resp) = tokio::task::spawn_blocking(move || {
            http_request(h, "POST", "/collections/sample/search", &body)
        })
        .await??;
        if status != 200 {
            bail!("sample text query answered {status}: {resp}");
        }
        if embeds {
            println!("\ntext query over HTTP (BM25 fused with the text embedded by all-MiniLM-L6-v2 in Rust): {text_q:?}");
        } else {
            println!("\nhybrid query over HTTP (text {text_q:?} + the vector above; scripts/fetch-model enables text-only hybrid queries):");
        }
        let v: serde_json::Value = serde_json::from_str(&resp)?;
        for hit in v["hits"].as_array().into_iter().flatten() {
            let text: String = hit["payload"]["text"].as_str().unwrap_or("?").chars().take(90).collect();
            println!(
                "  {:.4}  #{:<5} dense rank {:<4} text rank {:<4} {}",
                hit["score"].as_f64().unwrap_or(f64::NAN),
                hit["id"],
                hit["dense_rank"].as_u64().map_or("-".into(), |r| r.to_string()),
                hit["text_rank"].as_u64().map_or("-".into(), |r| r.to_string()),
                text
            );
        }
        // The same query over Arrow Flight (DoGet with a search ticket).
        let ticket = serde_json::json!({"search": {"dataset": "sample", "vector": query, "k": 3}}).to_string();
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{f}"))?
            .connect()
            .await?;
        let mut client = arrow_flight::FlightClient::new(channel);
        let mut stream = client.do_get(arrow_flight::Ticket::new(ticket)).await?;
        let mut ids = Vec::new();
        use futures::StreamExt;
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            let col = batch
                .column_by_name("id")
                .context("Flight search answer without an id column")?;
            let col = col
                .as_any()
                .downcast_ref::<arrow_array::UInt64Array>()
                .context("id column is not uint64")?;
            ids.extend(col.values().iter().copied());
        }
        println!("same query over Arrow Flight (DoGet search ticket): ids {ids:?}");
        println!("\ntry it:\n  curl -s http://{h}/collections/sample/search -d '{{\"text\": \"XML parser library for Python\", \"k\": 5, \"columns\": [\"text\"]}}'");
        println!("  python -c \"import sagitta; c = sagitta.Client('http://{h}'); print(c.list_collections())\"");
        if keep_serving {
            println!("\nserving until Ctrl-C or SIGTERM ...");
        } else {
            let _ = stop_tx.send(());
        }
        server.await??;
        Ok::<(), anyhow::Error>(())
    })?;
    if temp {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}
