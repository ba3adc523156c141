//! Prometheus metrics in the text exposition format: request latency
//! histograms per route and collection (buckets from 50 µs), request and
//! rejection counters, ingest counters; collection gauges (vectors,
//! segments, WAL bytes) are read at scrape time.

use crate::registry::Registry;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds.
pub const BUCKETS: [f64; 18] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Debug, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

// (protocol, labels...) keys of the metric maps.
type Labels3 = (&'static str, String, String);
type IngestKey = (&'static str, String);

/// The server's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    // (protocol, route, collection) → latency histogram.
    latency: Mutex<BTreeMap<Labels3, Histogram>>,
    // (protocol, route, status) → count.
    requests: Mutex<BTreeMap<Labels3, u64>>,
    // reason → count.
    rejected: Mutex<BTreeMap<&'static str, u64>>,
    // (protocol, collection) → rows, bytes.
    ingest: Mutex<BTreeMap<IngestKey, (u64, u64)>>,
    started: AtomicU64,
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    /// Records one finished request.
    pub fn observe(
        &self,
        protocol: &'static str,
        route: &str,
        collection: &str,
        status: &str,
        elapsed: Duration,
    ) {
        let s = elapsed.as_secs_f64();
        {
            let mut m = self.latency.lock();
            let h = m
                .entry((protocol, route.to_owned(), collection.to_owned()))
                .or_default();
            if let Some(i) = BUCKETS.iter().position(|&b| s <= b) {
                h.counts[i] += 1;
            }
            h.count += 1;
            h.sum += s;
        }
        *self
            .requests
            .lock()
            .entry((protocol, route.to_owned(), status.to_owned()))
            .or_default() += 1;
    }

    /// Counts a request refused for `reason` (a full queue, a timeout, a
    /// too-large body, an unauthenticated call).
    pub fn rejected(&self, reason: &'static str) {
        *self.rejected.lock().entry(reason).or_default() += 1;
    }

    /// Counts rows and bytes written through `protocol`.
    pub fn ingested(&self, protocol: &'static str, collection: &str, rows: u64, bytes: u64) {
        let mut m = self.ingest.lock();
        let e = m.entry((protocol, collection.to_owned())).or_default();
        e.0 += rows;
        e.1 += bytes;
    }

    /// Marks the server start (for the uptime gauge).
    pub fn start(&self) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.started.store(now, Ordering::Relaxed);
    }

    /// The text exposition of everything.
    pub fn render(&self, registry: &Registry, pending: [(&'static str, usize); 2]) -> String {
        let mut o = String::with_capacity(16 << 10);
        o.push_str("# HELP sagitta_request_duration_seconds Request latency.\n# TYPE sagitta_request_duration_seconds histogram\n");
        for ((proto, route, coll), h) in self.latency.lock().iter() {
            let labels = format!(
                "protocol=\"{proto}\",route=\"{}\",collection=\"{}\"",
                escape(route),
                escape(coll)
            );
            let mut cum = 0;
            for (b, c) in BUCKETS.iter().zip(h.counts) {
                cum += c;
                let _ = writeln!(
                    o,
                    "sagitta_request_duration_seconds_bucket{{{labels},le=\"{b}\"}} {cum}"
                );
            }
            let _ = writeln!(
                o,
                "sagitta_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                o,
                "sagitta_request_duration_seconds_sum{{{labels}}} {}",
                h.sum
            );
            let _ = writeln!(
                o,
                "sagitta_request_duration_seconds_count{{{labels}}} {}",
                h.count
            );
        }
        o.push_str("# HELP sagitta_requests_total Requests by route and status.\n# TYPE sagitta_requests_total counter\n");
        for ((proto, route, status), n) in self.requests.lock().iter() {
            let _ = writeln!(
                o,
                "sagitta_requests_total{{protocol=\"{proto}\",route=\"{}\",status=\"{}\"}} {n}",
                escape(route),
                escape(status)
            );
        }
        o.push_str("# HELP sagitta_rejected_requests_total Requests refused before running (full queue, timeout, body too large, unauthenticated).\n# TYPE sagitta_rejected_requests_total counter\n");
        for (reason, n) in self.rejected.lock().iter() {
            let _ = writeln!(
                o,
                "sagitta_rejected_requests_total{{reason=\"{reason}\"}} {n}"
            );
        }
        o.push_str("# HELP sagitta_ingest_rows_total Rows written.\n# TYPE sagitta_ingest_rows_total counter\n");
        let ingest = self.ingest.lock().clone();
        for ((proto, coll), (rows, _)) in &ingest {
            let _ = writeln!(
                o,
                "sagitta_ingest_rows_total{{protocol=\"{proto}\",collection=\"{}\"}} {rows}",
                escape(coll)
            );
        }
        o.push_str("# HELP sagitta_ingest_bytes_total Request bytes of written rows.\n# TYPE sagitta_ingest_bytes_total counter\n");
        for ((proto, coll), (_, bytes)) in &ingest {
            let _ = writeln!(
                o,
                "sagitta_ingest_bytes_total{{protocol=\"{proto}\",collection=\"{}\"}} {bytes}",
                escape(coll)
            );
        }
        o.push_str("# HELP sagitta_pending_jobs Jobs queued or running per pool.\n# TYPE sagitta_pending_jobs gauge\n");
        for (pool, n) in pending {
            let _ = writeln!(o, "sagitta_pending_jobs{{pool=\"{pool}\"}} {n}");
        }
        let gauges: [(&str, &str); 11] = [
            ("sagitta_collection_vectors", "Live vectors."),
            (
                "sagitta_collection_active_vectors",
                "Vectors in the active (in-memory) segment.",
            ),
            (
                "sagitta_collection_segments",
                "Immutable segments (sealed files and frozen parts).",
            ),
            (
                "sagitta_collection_tombstones",
                "Deleted vectors still held by sealed segments.",
            ),
            (
                "sagitta_collection_disk_bytes",
                "Bytes in the collection directory.",
            ),
            ("sagitta_collection_wal_bytes", "Bytes of write-ahead log."),
            (
                "sagitta_collection_memory_bytes",
                "Bytes in memory (mutable and frozen parts, bloom filters).",
            ),
            (
                "sagitta_collection_unindexed_vectors",
                "Live vectors not yet in their index (searched exactly).",
            ),
            (
                "sagitta_optimizer_running",
                "1 while a background build, merge or compaction runs.",
            ),
            (
                "sagitta_optimizer_tasks",
                "Background builds, merges and compactions finished since start.",
            ),
            (
                "sagitta_optimizer_errors",
                "Failed background flushes and tasks since start (e.g. disk full).",
            ),
        ];
        let stats: Vec<(String, [u64; 11])> = registry
            .all()
            .iter()
            .map(|e| {
                let s = e.coll.stats();
                (
                    escape(&e.name),
                    [
                        s.vectors as u64,
                        s.active_vectors as u64,
                        s.segments as u64,
                        s.tombstones as u64,
                        s.bytes_on_disk,
                        s.wal_bytes,
                        s.bytes_in_memory,
                        s.unindexed_vectors as u64,
                        u64::from(s.optimizer.task.is_some()),
                        s.optimizer.tasks_done,
                        s.optimizer.errors,
                    ],
                )
            })
            .collect();
        for (i, (name, help)) in gauges.iter().enumerate() {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (coll, v) in &stats {
                let _ = writeln!(o, "{name}{{collection=\"{coll}\"}} {}", v[i]);
            }
        }
        let _ = writeln!(
            o,
            "# HELP sagitta_start_time_seconds Server start, Unix time.\n# TYPE sagitta_start_time_seconds gauge\nsagitta_start_time_seconds {}",
            self.started.load(Ordering::Relaxed)
        );
        o
    }
}
