//! `sagitta-bench bench-serve`: search latency of a running server from lean
//! Rust clients (a keep-alive HTTP/1.1 client over a plain socket with the
//! request bytes built beforehand; the arrow-flight `FlightClient`), next
//! to the same queries in-process on the server's own collection directory
//! (opened read-only). One client thread and connection per unit of
//! concurrency; one query per request. Prints one JSON line per (mode,
//! concurrency). Driven by `python -m sagitta_bench server`.

use anyhow::{bail, Context, Result};
use sagitta_index::VectorRef;
use sagitta_store::{Collection, CollectionSearch, OpenMode};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// Options.
#[derive(clap::Args, Debug)]
pub struct BenchServeArgs {
    /// Server HTTP address.
    #[arg(long)]
    http: SocketAddr,
    /// Server Flight address.
    #[arg(long)]
    flight: SocketAddr,
    /// Collection name.
    #[arg(long)]
    collection: String,
    /// The collection's directory (for the in-process baseline).
    #[arg(long)]
    dir: PathBuf,
    /// Queries (.npy, f16 or f32).
    #[arg(long)]
    queries: PathBuf,
    /// Ground truth (.npy, int32, one row per query) for recall.
    #[arg(long)]
    gt: PathBuf,
    #[arg(long, default_value_t = 10)]
    k: usize,
    /// Comma-separated concurrency levels.
    #[arg(long, default_value = "1,4,16")]
    concurrency: String,
    /// Comma-separated modes: in-process, http, flight.
    #[arg(long, default_value = "in-process,http,flight")]
    modes: String,
}

struct HttpConn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl HttpConn {
    fn new(addr: SocketAddr) -> Result<HttpConn> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        Ok(HttpConn {
            r: BufReader::new(s.try_clone()?),
            w: s,
        })
    }

    /// Sends prebuilt request bytes; returns the body.
    fn call(&mut self, req: &[u8]) -> Result<Vec<u8>> {
        self.w.write_all(req)?;
        let mut len = None;
        let mut status = String::new();
        let mut line = String::new();
        loop {
            line.clear();
            if self.r.read_line(&mut line)? == 0 {
                bail!("connection closed");
            }
            if status.is_empty() {
                status = line.clone();
                continue;
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = Some(v.trim().parse::<usize>()?);
                }
            }
        }
        let mut body = vec![0; len.context("no content-length")?];
        self.r.read_exact(&mut body)?;
        if !status.contains(" 200 ") {
            bail!("{}: {}", status.trim(), String::from_utf8_lossy(&body));
        }
        Ok(body)
    }
}

fn ids_of(body: &[u8]) -> Result<Vec<u64>> {
    let v: serde_json::Value = serde_json::from_slice(body)?;
    Ok(v["hits"]
        .as_array()
        .context("no hits")?
        .iter()
        .filter_map(|h| h["id"].as_u64())
        .collect())
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1e3
}

type Worker = Box<dyn FnMut(usize) -> Result<Vec<u64>> + Send>;

/// Runs the queries round-robin over `conc` threads, each with its own
/// worker (built on that thread); returns (latency ns per query, ids per
/// query, wall seconds).
fn run_concurrent(
    n: usize,
    conc: usize,
    make: Arc<dyn Fn() -> Result<Worker> + Send + Sync>,
) -> Result<(Vec<u64>, Vec<Vec<u64>>, f64)> {
    let barrier = Arc::new(Barrier::new(conc + 1));
    let handles: Vec<_> = (0..conc)
        .map(|t| {
            let barrier = barrier.clone();
            let make = make.clone();
            std::thread::spawn(move || -> Result<Vec<(usize, u64, Vec<u64>)>> {
                let w = make();
                let mut w = match w {
                    Ok(w) => w,
                    Err(e) => {
                        barrier.wait();
                        return Err(e);
                    }
                };
                let warm = w(t % n);
                barrier.wait();
                warm?;
                let mut out = Vec::new();
                for i in (t..n).step_by(conc) {
                    let t0 = Instant::now();
                    let ids = w(i)?;
                    out.push((i, t0.elapsed().as_nanos() as u64, ids));
                }
                Ok(out)
            })
        })
        .collect();
    barrier.wait();
    let t0 = Instant::now();
    let mut lat = vec![0; n];
    let mut found = vec![Vec::new(); n];
    for h in handles {
        for (i, l, ids) in h.join().map_err(|_| anyhow::anyhow!("worker panicked"))?? {
            lat[i] = l;
            found[i] = ids;
        }
    }
    Ok((lat, found, t0.elapsed().as_secs_f64()))
}

/// `sagitta-bench bench-serve`.
pub fn run(a: &BenchServeArgs) -> Result<()> {
    let q = sagitta_cli::npy::read_f32(&a.queries)?;
    let gt = sagitta_cli::npy::read_i32(&a.gt)?;
    let n = q.rows.min(gt.rows);
    let k = a.k;
    let queries: Arc<Vec<Vec<f32>>> = Arc::new((0..n).map(|i| q.row(i).to_vec()).collect());
    let path = format!("/collections/{}/search", a.collection);
    let http_reqs: Arc<Vec<Vec<u8>>> = Arc::new(
        queries
            .iter()
            .map(|v| {
                let body = serde_json::json!({"vector": v, "k": k}).to_string();
                format!(
                    "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    a.http,
                    body.len()
                )
                .into_bytes()
            })
            .collect(),
    );
    let tickets: Arc<Vec<String>> = Arc::new(
        queries
            .iter()
            .map(|v| {
                serde_json::json!({"search": {"dataset": a.collection, "vector": v, "k": k}})
                    .to_string()
            })
            .collect(),
    );
    let coll = Arc::new(Collection::open(&a.dir, OpenMode::ReadOnly)?);
    for conc in a.concurrency.split(',') {
        let conc: usize = conc.trim().parse()?;
        for mode in a.modes.split(',') {
            let make: Arc<dyn Fn() -> Result<Worker> + Send + Sync> = match mode {
                "in-process" => {
                    let coll = coll.clone();
                    let queries = queries.clone();
                    Arc::new(move || {
                        let coll = coll.clone();
                        let queries = queries.clone();
                        Ok(Box::new(move |i: usize| {
                            let r = coll.search(
                                &[VectorRef::F32(&queries[i])],
                                k,
                                &CollectionSearch::default(),
                            )?;
                            Ok(r[0].iter().map(|n| n.key).collect())
                        }) as Worker)
                    })
                }
                "http" => {
                    let reqs = http_reqs.clone();
                    let addr = a.http;
                    Arc::new(move || {
                        let mut c = HttpConn::new(addr)?;
                        let reqs = reqs.clone();
                        Ok(Box::new(move |i: usize| ids_of(&c.call(&reqs[i])?)) as Worker)
                    })
                }
                "flight" => {
                    let tickets = tickets.clone();
                    let addr = a.flight;
                    Arc::new(move || {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()?;
                        let channel = rt.block_on(
                            tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
                                .tcp_nodelay(true)
                                .connect(),
                        )?;
                        let mut client = arrow_flight::FlightClient::new(channel);
                        let tickets = tickets.clone();
                        Ok(Box::new(move |i: usize| {
                            rt.block_on(async {
                                use futures::StreamExt;
                                let mut s = client
                                    .do_get(arrow_flight::Ticket::new(tickets[i].clone()))
                                    .await?;
                                let mut ids = Vec::new();
                                while let Some(b) = s.next().await {
                                    let b = b?;
                                    let col = b
                                        .column_by_name("id")
                                        .and_then(|c| {
                                            c.as_any().downcast_ref::<arrow_array::UInt64Array>()
                                        })
                                        .context("no uint64 id column")?;
                                    ids.extend(col.values().iter().copied());
                                }
                                Ok::<_, anyhow::Error>(ids)
                            })
                        }) as Worker)
                    })
                }
                m => bail!("unknown mode {m}"),
            };
            let (mut lat, found, wall) = run_concurrent(n, conc, make)?;
            let hits: usize = found
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let t = gt.row(i);
                    f.iter()
                        .take(k)
                        .filter(|&&id| t[..k.min(t.len())].contains(&(id as i32)))
                        .count()
                })
                .sum();
            lat.sort_unstable();
            println!(
                "{}",
                serde_json::json!({
                    "client": "rust",
                    "mode": mode,
                    "concurrency": conc,
                    "qps": n as f64 / wall,
                    "recall": hits as f64 / (n * k) as f64,
                    "p50_us": pct(&lat, 0.50),
                    "p95_us": pct(&lat, 0.95),
                    "p99_us": pct(&lat, 0.99),
                    "mean_us": lat.iter().sum::<u64>() as f64 / n as f64 / 1e3,
                })
            );
        }
    }
    Ok(())
}
