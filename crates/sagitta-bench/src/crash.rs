//! `sagitta-bench crash-writer`: the writer process of the crash-safety test
//! (`tests/crash.rs`), which SIGKILLs it at random moments.
//!
//! The collection is configured so that background work never stops
//! while it writes: a mutable part of [`SEGMENT_ROWS`] rows (frozen and
//! flushed every dozen or so operations), merges up to four of those, an
//! idle freeze after [`IDLE_SEAL_MS`], HNSW builds of parts past
//! [`INDEX_THRESHOLD`] rows; the random updates and removes keep the
//! optimizer compacting.
//!
//! Protocol on stdout, one line per event:
//!
//! * `OPENED <replayed> <wal_bytes> <active_vectors> <frozen_segments>`
//!   once, right after the open: `replayed` is the number of log records
//!   (puts and removes) the open replayed (the last sequence number after
//!   the open minus the manifest's `wal_seq` before it), the rest are
//!   [`CollectionStats`](sagitta_store::CollectionStats) figures of that
//!   moment;
//! * before each operation, and whenever it changes, `BG <frozen_segments>
//!   <task|-> <tasks_done> <flushes> <errors>`: the background state
//!   (frozen parts waiting for the flush thread, the optimizer's task in
//!   progress, tasks and flushes done since the open, background
//!   failures);
//! * `BEGIN <n> <kind> [<key>:<version> | <key>]...` when the operation
//!   starts and `ACK <n>` once it returned (was acknowledged).
//!
//! The vector of a (key, version) is [`crash_vector`]`(version)`; versions
//! are unique.

use anyhow::{Context, Result};
use sagitta_index::{DType, Metric, Space, VectorRef};
use sagitta_store::{Collection, CollectionConfig, CollectionStats, Durability, OpenMode};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Dimensions of the crash-test vectors.
pub const DIMS: usize = 8;
/// Rows of a full mutable part (`segment_size`).
pub const SEGMENT_ROWS: u64 = 300;
/// Merges go up to this many mutable parts (`max_segment_size`).
pub const MAX_SEGMENT_PARTS: u64 = 4;
/// Live rows from which a segment is indexed (HNSW); smaller ones stay
/// Flat.
pub const INDEX_THRESHOLD: u64 = SEGMENT_ROWS / 2;
/// Idle time after which the mutable part is frozen anyway.
pub const IDLE_SEAL_MS: u64 = 10;

/// The vector logged for `version` (finite, distinct per version).
pub fn crash_vector(version: u64) -> Vec<f32> {
    let mut z = version.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    (0..DIMS)
        .map(|_| {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            (z >> 40) as f32 / (1u64 << 20) as f32
        })
        .collect()
}

/// The JSON part of the collection's MANIFEST (the text before its
/// `crc32c:` line; the checksum is the store's to check).
pub fn manifest_json(dir: &Path) -> Result<serde_json::Value> {
    let path = dir.join("MANIFEST");
    let text = std::fs::read_to_string(&path).with_context(|| format!("read {path:?}"))?;
    let body = text.rfind("crc32c:").map_or(&text[..], |at| &text[..at]);
    serde_json::from_str(body).with_context(|| format!("parse {path:?}"))
}

/// Runs `ops` random operations against the collection in `dir`
/// (created on first use), printing the protocol lines.
pub fn run(dir: &Path, round: u64, ops: usize, keys: u64) -> Result<()> {
    let c = if dir.join("MANIFEST").exists() {
        let wal_seq = manifest_json(dir)?["wal_seq"]
            .as_u64()
            .context("MANIFEST: no wal_seq")?;
        let c = Collection::open(dir, OpenMode::ReadWrite)?;
        let s = c.stats();
        println!(
            "OPENED {} {} {} {}",
            s.wal_seq.saturating_sub(wal_seq),
            s.wal_bytes,
            s.active_vectors,
            s.frozen_segments
        );
        c
    } else {
        let mut cfg = CollectionConfig::new(Space::new(DIMS, Metric::L2, DType::F32)?);
        cfg.segment_size = SEGMENT_ROWS * cfg.bytes_per_vector();
        cfg.max_segment_size = MAX_SEGMENT_PARTS * cfg.segment_size;
        cfg.idle_seal_ms = IDLE_SEAL_MS;
        // Parts past half a mutable part get a graph: the optimizer then
        // builds, merges (importing graphs) and compacts HNSW segments,
        // and kills land in all three.
        cfg.index_threshold = Some(INDEX_THRESHOLD);
        cfg.durability = Durability::Batch;
        let c = Collection::create(dir, cfg)?;
        println!("OPENED 0 0 0 0");
        c
    };
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        // Between operations too, a BG line whenever the background state
        // changes, so a kill is classified by what ran when it landed.
        scope.spawn(|| {
            let mut last = (usize::MAX, None);
            while !done.load(Ordering::Relaxed) {
                let s = c.stats();
                let now = (s.frozen_segments, s.optimizer.task.clone());
                if now != last {
                    println!("{}", bg_line(&s));
                    last = now;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let r = operations(&c, round, ops, keys);
        done.store(true, Ordering::Relaxed);
        r
    })
}

fn bg_line(s: &CollectionStats) -> String {
    let o = &s.optimizer;
    format!(
        "BG {} {} {} {} {}",
        s.frozen_segments,
        o.task.as_deref().unwrap_or("-"),
        o.tasks_done,
        o.flushes,
        o.errors
    )
}

fn operations(c: &Collection, round: u64, ops: usize, keys: u64) -> Result<()> {
    let mut z = round.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    let mut rand = move |n: u64| {
        z ^= z << 13;
        z ^= z >> 7;
        z ^= z << 17;
        z % n.max(1)
    };
    for n in 0..ops as u64 {
        println!("{}", bg_line(&c.stats()));
        // compact() waits for the optimizer to settle (seconds, see
        // Inner::wait_settled): rare (1 in 400), so rounds stay short; the
        // optimizer compacts on its own anyway. seal() is cheap.
        let kind = rand(400);
        let size = 1 + rand(60) as usize;
        let mut line = format!("BEGIN {n}");
        match kind {
            0..=287 | 348..=367 => {
                let once = kind >= 348;
                let mut ks = Vec::with_capacity(size);
                let mut rows = Vec::with_capacity(size);
                line.push_str(if once { " add_once" } else { " upsert" });
                for i in 0..size as u64 {
                    let key = rand(keys);
                    if ks.contains(&key) {
                        continue;
                    }
                    let version = round * 1_000_000_000 + n * 1000 + i;
                    let _ = write!(line, " {key}:{version}");
                    ks.push(key);
                    rows.push(crash_vector(version));
                }
                println!("{line}");
                let refs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
                if once {
                    c.add_once(&ks, &refs)?;
                } else {
                    c.upsert(&ks, &refs)?;
                }
            }
            288..=347 => {
                line.push_str(" remove");
                let ks: Vec<u64> = (0..size).map(|_| rand(keys)).collect();
                for k in &ks {
                    let _ = write!(line, " {k}");
                }
                println!("{line}");
                c.remove(&ks)?;
            }
            // With a large key space (few updates, so few compactions):
            // optimize() now and then, so merges run while writes go on.
            368..=383 if keys > 100_000 => {
                println!("{line} optimize");
                c.optimize()?;
            }
            368..=398 => {
                println!("{line} seal");
                c.seal()?;
            }
            _ => {
                println!("{line} compact");
                c.compact()?;
            }
        }
        println!("ACK {n}");
    }
    Ok(())
}
