//! Flight search hits come with the id, vector and payload of the version
//! the search found, while the same rows are overwritten and removed over
//! HTTP: `sagitta serve` in this process on loopback sockets, writers on
//! HTTP, readers on a Flight client (DoGet `{"search": ...}` tickets with
//! and without vectors, the `VectorSearch`, `HybridSearch` and
//! `VectorSearchByID` actions).
//!
//! Every write of a key is a new version, unique in the run, kept in the
//! payload (`ver`, beside `key`) and in the vector (component 1 is
//! `ver / 16`). String ids (`k<key>`), so the id too is read from the row
//! (the reserved `_id` column). Each hit must carry its key's id, a payload
//! naming its key and a version written for it, that version's vector when
//! vectors are asked for, and a score equal to that vector's distance to
//! the query. Before the server read the rows with the search, a row
//! removed between the search and the read of its payload came back with
//! every payload column null, and one overwritten with the newer version's
//! payload.

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use arrow_flight::{Action, FlightClient, Ticket};
use futures::StreamExt;
use sagitta_server::ServerConfig;
use serde_json::{json, Value as Json};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

const DIMS: usize = 4;
const KEYS: u64 = 120;
/// Write requests of each writer thread.
const WRITES: usize = 300;
/// Searches of each reader thread, at least (they go on until the writers
/// are done).
const SEARCHES: usize = 800;
const WRITERS: usize = 2;
const READERS: usize = 3;
const K: usize = 10;
const NAME: &str = "c";

/// `sagitta serve` in this process on loopback ports; stopped on drop.
struct Serve {
    http: SocketAddr,
    flight: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Serve {
    fn start(data: &Path) -> Serve {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let data = data.to_path_buf();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(4)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let mut cfg = ServerConfig::new();
                cfg.data = data;
                cfg.http = "127.0.0.1:0".parse().unwrap();
                cfg.flight = "127.0.0.1:0".parse().unwrap();
                let bound = sagitta_server::bind(cfg).await.unwrap();
                addr_tx.send((bound.http, bound.flight)).unwrap();
                bound
                    .run(async move {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        let (http, flight) = addr_rx.recv().unwrap();
        Serve {
            http,
            flight,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// One HTTP/1.1 POST; the status and the JSON body.
    fn post(&self, path: &str, body: &Json) -> (u16, Json) {
        let body = body.to_string();
        let mut s = TcpStream::connect(self.http).unwrap();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let status: u16 = out[9..12].parse().unwrap();
        let (head, rest) = out.split_once("\r\n\r\n").unwrap();
        let text = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            rest.lines()
                .find(|l| l.starts_with('{') || l.starts_with('['))
                .unwrap_or("null")
                .to_string()
        } else {
            rest.to_string()
        };
        (status, serde_json::from_str(&text).unwrap_or(Json::Null))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The vector of version `ver` of `key`.
fn vector(key: u64, ver: u64) -> [f32; DIMS] {
    [key as f32, ver as f32 / 16.0, (key % 3) as f32, 1.0]
}

fn l2(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

fn id(key: u64) -> String {
    format!("k{key}")
}

/// The key of each version written (registered before its write is sent).
struct Written {
    key_of: Vec<AtomicU64>,
    next: AtomicU64,
}

impl Written {
    fn new(versions: usize) -> Written {
        Written {
            key_of: (0..versions).map(|_| AtomicU64::new(u64::MAX)).collect(),
            next: AtomicU64::new(1),
        }
    }

    fn version(&self, key: u64) -> u64 {
        let v = self.next.fetch_add(1, Ordering::Relaxed);
        self.key_of[v as usize].store(key, Ordering::Release);
        v
    }

    fn key_of(&self, ver: u64) -> Option<u64> {
        let k = self.key_of.get(ver as usize)?.load(Ordering::Acquire);
        (k != u64::MAX).then_some(k)
    }
}

/// Upserts new versions of `keys` over HTTP; false when the server
/// refused it for now (503: the ingest admission bound).
fn upsert(s: &Serve, w: &Written, keys: &[u64]) -> bool {
    let vers: Vec<u64> = keys.iter().map(|&k| w.version(k)).collect();
    let body = json!({
        "ids": keys.iter().map(|&k| id(k)).collect::<Vec<_>>(),
        "vectors": keys.iter().zip(&vers).map(|(&k, &v)| vector(k, v)).collect::<Vec<_>>(),
        "payload": keys.iter().zip(&vers)
            .map(|(&k, &v)| json!({"key": k, "ver": v}))
            .collect::<Vec<_>>(),
    });
    let (st, r) = s.post(&format!("/collections/{NAME}/upsert"), &body);
    assert!(st == 200 || st == 503, "upsert: {st} {r}");
    st == 200
}

fn some_keys(r: &mut Rng, max: u64) -> Vec<u64> {
    let n = 1 + r.below(max);
    let mut keys: Vec<u64> = (0..n).map(|_| r.below(KEYS)).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

fn write_load(s: &Serve, w: &Written, seed: u64, refused: &AtomicUsize) {
    let mut r = Rng(seed);
    for _ in 0..WRITES {
        if r.below(10) < 6 {
            if !upsert(s, w, &some_keys(&mut r, 16)) {
                refused.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            let ids: Vec<String> = some_keys(&mut r, 8).into_iter().map(id).collect();
            let (st, b) = s.post(
                &format!("/collections/{NAME}/delete"),
                &json!({ "ids": ids }),
            );
            assert!(st == 200 || st == 503, "delete: {st} {b}");
        }
    }
}

/// Checks one hit given as its id, score, payload `key` / `ver` and
/// (when asked for) vector; returns nothing, panics naming `what`.
#[allow(clippy::too_many_arguments)]
fn check_hit(
    w: &Written,
    q: &[f32],
    hit_id: Option<&str>,
    score: f32,
    key: Option<i64>,
    ver: Option<i64>,
    vector_got: Option<Vec<f32>>,
    what: &str,
) {
    let (Some(key), Some(ver)) = (key, ver) else {
        panic!("{what}: hit {hit_id:?} (score {score}) came without its payload");
    };
    let (key, ver) = (key as u64, ver as u64);
    assert_eq!(
        hit_id,
        Some(id(key).as_str()),
        "{what}: hit {hit_id:?} came with the payload of key {key}"
    );
    assert_eq!(
        w.key_of(ver),
        Some(key),
        "{what}: hit {hit_id:?} came with version {ver}, never written for it"
    );
    let want = vector(key, ver);
    if let Some(v) = vector_got {
        assert_eq!(
            v, want,
            "{what}: hit {hit_id:?} came with the payload of version {ver} and another vector"
        );
    }
    let d = l2(q, &want);
    assert!(
        (score - d).abs() <= 1e-4 * d.max(1.0),
        "{what}: hit {hit_id:?} scored {score}, its payload's version {ver} is at {d}"
    );
}

/// Checks every hit of a search batch (`id`, `score`, maybe `vector`,
/// then the payload columns); returns the hits.
fn check_batch(w: &Written, q: &[f32], b: &RecordBatch, vectors: bool, what: &str) -> usize {
    let ids = b.column_by_name("id").unwrap().as_string::<i32>();
    let scores = b
        .column_by_name("score")
        .unwrap()
        .as_primitive::<Float32Type>();
    let keys = b.column_by_name("key").unwrap().as_primitive::<Int64Type>();
    let vers = b.column_by_name("ver").unwrap().as_primitive::<Int64Type>();
    let vcol = b.column_by_name("vector");
    assert_eq!(vcol.is_some(), vectors, "{what}: vector column");
    assert!(b.num_rows() <= K);
    for i in 0..b.num_rows() {
        let v = vcol.map(|c| {
            let l = c.as_fixed_size_list().value(i);
            l.as_primitive::<Float32Type>().values().to_vec()
        });
        let opt = |c: &arrow_array::Int64Array| (!c.is_null(i)).then(|| c.value(i));
        check_hit(
            w,
            q,
            (!ids.is_null(i)).then(|| ids.value(i)),
            scores.value(i),
            opt(keys),
            opt(vers),
            v,
            &format!("{what}, hit {i}"),
        );
    }
    b.num_rows()
}

#[derive(Default)]
struct Seen {
    searches: usize,
    hits: usize,
    by_kind: [usize; 5],
}

async fn read_load(addr: SocketAddr, w: &Written, seed: u64, done: &AtomicBool) -> Seen {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = FlightClient::new(channel);
    let mut r = Rng(seed);
    let mut seen = Seen::default();
    while seen.searches < SEARCHES || !done.load(Ordering::Acquire) {
        let newest = w.next.load(Ordering::Relaxed);
        let q = vector(r.below(KEYS), newest.saturating_sub(r.below(200)));
        let q2 = vector(r.below(KEYS), newest.saturating_sub(r.below(200)));
        let kind = r.below(5) as usize;
        let mut search = json!({"dataset": NAME, "vector": q, "k": K});
        match r.below(4) {
            0 => search["exact"] = json!(true),
            1 => search["filters"] = json!([{"field": "key", "op": "lt", "value": r.below(KEYS)}]),
            _ => {}
        }
        let what = format!("kind {kind}, search {}", seen.searches);
        match kind {
            // DoGet of a search ticket, with and without vectors.
            0 | 1 => {
                let vectors = kind == 0;
                search["include_vectors"] = json!(vectors);
                let ticket = json!({ "search": search }).to_string();
                let mut st = client.do_get(Ticket::new(ticket)).await.unwrap();
                while let Some(b) = st.next().await {
                    seen.hits += check_batch(w, &q, &b.unwrap(), vectors, &what);
                }
            }
            // VectorSearch: one Arrow IPC stream per query.
            2 => {
                search["vectors"] = json!([q2]);
                search["include_vectors"] = json!(true);
                let body = search.to_string();
                let mut st = client
                    .do_action(Action::new("VectorSearch", body))
                    .await
                    .unwrap();
                let mut n = 0;
                while let Some(bytes) = st.next().await {
                    let qv = if n == 0 { &q } else { &q2 };
                    let rd = arrow_ipc::reader::StreamReader::try_new(
                        std::io::Cursor::new(bytes.unwrap()),
                        None,
                    )
                    .unwrap();
                    for b in rd {
                        seen.hits += check_batch(w, qv, &b.unwrap(), true, &what);
                    }
                    n += 1;
                }
                assert_eq!(n, 2, "{what}: one answer per query");
            }
            // HybridSearch without a text: Longbow's JSON rows.
            3 => {
                let body = search.to_string();
                let mut st = client
                    .do_action(Action::new("HybridSearch", body))
                    .await
                    .unwrap();
                let bytes = st.next().await.unwrap().unwrap();
                let rows: Json = serde_json::from_slice(&bytes).unwrap();
                for (i, h) in rows.as_array().unwrap().iter().enumerate() {
                    let m = &h["Metadata"];
                    check_hit(
                        w,
                        &q,
                        h["ID"].as_str(),
                        h["Distance"].as_f64().unwrap() as f32,
                        m["key"].as_i64(),
                        m["ver"].as_i64(),
                        None,
                        &format!("{what}, hit {i}"),
                    );
                    seen.hits += 1;
                }
            }
            // VectorSearchByID: ids only, each the string id of its row.
            _ => {
                let body = json!({"dataset": NAME, "id": id(r.below(KEYS)), "k": K}).to_string();
                match client
                    .do_action(Action::new("VectorSearchByID", body))
                    .await
                {
                    Ok(mut st) => {
                        let bytes = st.next().await.unwrap().unwrap();
                        let out: Json = serde_json::from_slice(&bytes).unwrap();
                        for i in out["ids"].as_array().unwrap() {
                            let s = i.as_str().unwrap_or_else(|| {
                                panic!("{what}: id {i} is not the string id of its row")
                            });
                            assert!(s.starts_with('k'), "{what}: id {s}");
                            seen.hits += 1;
                        }
                    }
                    // The row asked for was removed: NOT_FOUND.
                    Err(arrow_flight::error::FlightError::Tonic(s))
                        if s.code() == tonic::Code::NotFound => {}
                    Err(e) => panic!("{what}: {e}"),
                }
            }
        }
        seen.by_kind[kind] += 1;
        seen.searches += 1;
    }
    seen
}

/// HTTP searches (`include_payload`, every other one `include_vectors`)
/// until `done`; every hit checked as the Flight ones are. Returns the
/// searches and hits.
fn http_read_load(s: &Serve, w: &Written, seed: u64, done: &AtomicBool) -> (usize, usize) {
    let mut r = Rng(seed);
    let (mut searches, mut hits) = (0, 0);
    while !done.load(Ordering::Acquire) || searches < 50 {
        let q = vector(r.below(KEYS), r.below(64));
        let vectors = r.below(2) == 0;
        let (st, b) = s.post(
            &format!("/collections/{NAME}/search"),
            &json!({"vector": q, "k": K, "include_payload": true, "include_vectors": vectors}),
        );
        assert_eq!(st, 200, "http search: {b}");
        for (i, h) in b["hits"].as_array().unwrap().iter().enumerate() {
            let v = h["vector"].as_array().map(|v| {
                v.iter()
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect::<Vec<f32>>()
            });
            assert_eq!(
                v.is_some(),
                vectors,
                "http search {searches}, hit {i}: vector"
            );
            check_hit(
                w,
                &q,
                h["id"].as_str(),
                h["score"].as_f64().unwrap() as f32,
                h["payload"]["key"].as_i64(),
                h["payload"]["ver"].as_i64(),
                v,
                &format!("http search {searches}, hit {i}"),
            );
            hits += 1;
        }
        searches += 1;
    }
    (searches, hits)
}

#[test]
fn flight_search_hits_carry_the_payload_of_their_own_version_under_concurrent_writes() {
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(dir.path());
    let (st, r) = s.post(
        "/collections",
        &json!({
            "name": NAME, "dims": DIMS, "metric": "l2", "id_type": "string",
            // Small parts: frozen, flushed, built and merged under the load.
            "segment_size": 4096, "max_segment_size": 65536, "index_threshold": 0,
            "durability": "off",
        }),
    );
    assert_eq!(st, 201, "{r}");
    let w = Written::new(WRITERS * WRITES * 16 + KEYS as usize + 2);
    assert!(upsert(&s, &w, &(0..KEYS).collect::<Vec<_>>()));
    let done = AtomicBool::new(false);
    let refused = AtomicUsize::new(0);
    let (s, w, done, refused) = (&s, &w, &done, &refused);
    std::thread::scope(|sc| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|i| sc.spawn(move || write_load(s, w, 0x9E37_79B9 + i as u64, refused)))
            .collect();
        let readers: Vec<_> = (0..READERS)
            .map(|i| {
                sc.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    rt.block_on(read_load(s.flight, w, 0xD1B5_4A32 + 7 * i as u64, done))
                })
            })
            .collect();
        let http_reader = sc.spawn(move || http_read_load(s, w, 0x51ED_270B, done));
        for h in writers {
            h.join().unwrap();
        }
        done.store(true, Ordering::Release);
        let (http_searches, http_hits) = http_reader.join().unwrap();
        eprintln!("flight_search_rows: {http_searches} HTTP searches, {http_hits} hits checked");
        assert!(http_hits > http_searches, "too few HTTP hits: {http_hits}");
        let mut total = Seen::default();
        for h in readers {
            let r = h.join().unwrap();
            total.searches += r.searches;
            total.hits += r.hits;
            for (a, b) in total.by_kind.iter_mut().zip(r.by_kind) {
                *a += b;
            }
        }
        let (_, status) = s.post(&format!("/collections/{NAME}/count"), &json!({}));
        eprintln!(
            "flight_search_rows: {} write requests ({} refused for now, {} versions), {} \
             searches (by kind: ticket with vectors, ticket, VectorSearch, HybridSearch, \
             VectorSearchByID = {:?}), {} hits checked; {status}",
            WRITERS * WRITES,
            refused.load(Ordering::Relaxed),
            w.next.load(Ordering::Relaxed) - 1,
            total.searches,
            total.by_kind,
            total.hits,
        );
        assert!(total.searches >= READERS * SEARCHES);
        assert!(total.by_kind.iter().all(|&n| n > 0));
        assert!(total.hits > total.searches, "too few hits: {}", total.hits);
    });
}
