//! The fault-injection matrix: every step of write, seal, checkpoint,
//! build, merge, compaction and open, against every kind of failing
//! file-system call (`write` with EIO and with ENOSPC after half the bytes,
//! `fsync`, `rename`, `mmap`, reads, file creation, truncation, removal),
//! injected through the store's own I/O layer (feature `failpoints`).
//!
//! Each cell checks what a user is promised: the operation returns a
//! typed error; while the fault lasts the collection keeps answering
//! exactly (compared with a Flat oracle over the acknowledged rows) and a
//! failed write is not half applied; once the fault is gone the same
//! collection object takes writes and finishes the operation without a
//! restart; a reopen finds every acknowledged row and nothing else; no
//! temporary file is left behind. `cargo test -p sagitta-store --features
//! failpoints --test fault_matrix -- --nocapture` prints the matrix.

#![allow(clippy::unwrap_used)]

use sagitta_index::{DType, Index, IndexRead, IndexWrite, Metric, SearchOptions, Space, VectorRef};
use sagitta_store::failpoints::{self, Fault, IoOp};
use sagitta_store::{
    Collection, CollectionConfig, CollectionSearch, Durability, OpenMode, StoreError, MAX_FROZEN,
};
use std::collections::BTreeMap;
use std::path::Path;

const DIMS: usize = 8;

fn vector(key: u64, version: u64) -> Vec<f32> {
    let mut z = (key ^ version.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..DIMS)
        .map(|_| {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            (z >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

/// The acknowledged state: key to vector.
#[derive(Default, Clone)]
struct Model(BTreeMap<u64, Vec<f32>>);

impl Model {
    /// Upserts `keys` (vector version `v`); records them only when the
    /// collection acknowledged the write.
    fn upsert(
        &mut self,
        c: &Collection,
        keys: std::ops::Range<u64>,
        v: u64,
    ) -> Result<(), StoreError> {
        let keys: Vec<u64> = keys.collect();
        let rows: Vec<Vec<f32>> = keys.iter().map(|&k| vector(k, v)).collect();
        let refs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
        c.upsert(&keys, &refs)?;
        for (k, r) in keys.into_iter().zip(rows) {
            self.0.insert(k, r);
        }
        Ok(())
    }

    fn remove(&mut self, c: &Collection, keys: &[u64]) -> Result<(), StoreError> {
        c.remove(keys)?;
        for k in keys {
            self.0.remove(k);
        }
        Ok(())
    }
}

/// The collection holds exactly the model: count, every key's vector,
/// keys outside it absent, and exact searches equal to a Flat oracle.
fn check(c: &Collection, m: &Model, absent: &[u64]) {
    assert_eq!(c.len(), m.0.len());
    for (&k, v) in &m.0 {
        let raw = c
            .get_raw(k)
            .unwrap_or_else(|| panic!("acknowledged key {k} lost"));
        let got: Vec<f32> = raw[..DIMS * 4]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(&got, v, "key {k} has another vector");
    }
    for k in absent {
        if !m.0.contains_key(k) {
            assert!(
                !c.contains(*k),
                "key {k} was never acknowledged, yet is there"
            );
        }
    }
    let flat = Index::flat(Space::new(DIMS, Metric::L2, DType::F32).unwrap()).unwrap();
    for (&k, v) in &m.0 {
        flat.add(k, VectorRef::F32(v)).unwrap();
    }
    let exact = CollectionSearch {
        exact: true,
        ..Default::default()
    };
    for qi in 0..10u64 {
        let q = vector(9_000_000 + qi, 0);
        let want: Vec<u64> = flat
            .search(VectorRef::F32(&q), 10, &SearchOptions::default())
            .unwrap()
            .iter()
            .map(|n| n.key)
            .collect();
        let got: Vec<u64> = c.search(&[VectorRef::F32(&q)], 10, &exact).unwrap()[0]
            .iter()
            .map(|n| n.key)
            .collect();
        assert_eq!(got, want);
    }
}

fn no_temporary_files(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.ends_with(".tmp"), "{name} left behind");
    }
}

fn config(index_threshold: u64, durability: Durability) -> CollectionConfig {
    let mut cfg = CollectionConfig::new(Space::new(DIMS, Metric::L2, DType::F32).unwrap());
    cfg.segment_size = 400 * cfg.bytes_per_vector();
    cfg.idle_seal_ms = 0;
    cfg.index_threshold = Some(index_threshold);
    cfg.durability = durability;
    cfg
}

/// One fault of a row of the matrix: its call, file and error.
struct Cell {
    op: IoOp,
    file: &'static str,
    after: u64,
    errno: i32,
}

const fn cell(op: IoOp, file: &'static str, errno: i32) -> Cell {
    Cell {
        op,
        file,
        after: 0,
        errno,
    }
}

const EIO: i32 = libc::EIO;
const ENOSPC: i32 = libc::ENOSPC;

fn errno_name(e: i32) -> &'static str {
    match e {
        libc::EIO => "EIO",
        libc::ENOSPC => "ENOSPC",
        libc::ENOMEM => "ENOMEM",
        _ => "errno",
    }
}

fn label(c: &Cell) -> String {
    let what = if c.op == IoOp::Fsync && c.after == 1 {
        "fsync dir".to_string()
    } else {
        format!("{:?}", c.op).to_lowercase()
    };
    format!(
        "{what} {} {}",
        if c.file.is_empty() { "any" } else { c.file },
        errno_name(c.errno)
    )
}

fn arm(dir: &Path, c: &Cell) {
    failpoints::inject(Fault::new(c.op, dir, c.errno).named(c.file).after(c.after));
}

fn row(operation: &str, c: &Cell, outcome: &str) {
    println!("| {operation} | {} | {outcome} |", label(c));
}

/// The optimizer's retries succeed once the fault is gone (a task that
/// failed just before may still report its error once).
fn settles(mut f: impl FnMut() -> Result<(), StoreError>) {
    let mut last = None;
    for _ in 0..3 {
        match f() {
            Ok(()) => return,
            Err(e) => last = Some(e),
        }
    }
    panic!("did not settle after the fault was cleared: {last:?}");
}

/// A typed I/O error naming the failed call, directly or as the
/// optimizer's report.
fn typed(e: &StoreError) -> String {
    match e {
        StoreError::Io { op, .. } => format!("Io({op})"),
        StoreError::Optimizer(m) => {
            assert!(
                ["Input/output", "No space", "Cannot allocate"]
                    .iter()
                    .any(|s| m.contains(s)),
                "{m}"
            );
            "Optimizer(io)".into()
        }
        other => panic!("not an I/O error: {other}"),
    }
}

#[test]
fn writes_fail_whole_and_resume() {
    let cells = [
        cell(IoOp::Write, "wal-", EIO),
        cell(IoOp::Write, "wal-", ENOSPC),
        cell(IoOp::Fsync, "wal-", EIO),
    ];
    for c in &cells {
        for remove in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let d = dir.path();
            let col = Collection::create(d, config(0, Durability::Batch)).unwrap();
            let mut m = Model::default();
            m.upsert(&col, 0..300, 0).unwrap();
            arm(d, c);
            let e = if remove {
                m.clone().remove(&col, &[1, 2, 3]).unwrap_err()
            } else {
                m.clone().upsert(&col, 1000..1050, 0).unwrap_err()
            };
            let kind = typed(&e);
            // Not half applied, still serving, still refusing while the
            // fault lasts.
            check(&col, &m, &(1000..1050).collect::<Vec<_>>());
            assert!(m.clone().upsert(&col, 2000..2010, 0).is_err());
            assert!(failpoints::clear(d) >= 2);
            // Writes resume on the same object; a reopen agrees.
            m.upsert(&col, 3000..3050, 1).unwrap();
            m.remove(&col, &[4, 5]).unwrap();
            check(
                &col,
                &m,
                &(1000..1050).chain(2000..2010).collect::<Vec<_>>(),
            );
            // A crash now: the log is what the reopen replays.
            col.abandon();
            let col = Collection::open(d, OpenMode::ReadWrite).unwrap();
            check(
                &col,
                &m,
                &(1000..1050).chain(2000..2010).collect::<Vec<_>>(),
            );
            no_temporary_files(d);
            let what = if remove { "delete" } else { "upsert" };
            row(what, c, &format!("{kind}; not applied; 0 lost; resumed"));
        }
    }
    // A failed fsync whose repair (cutting the log back) fails too.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let col = Collection::create(d, config(0, Durability::Batch)).unwrap();
    let mut m = Model::default();
    m.upsert(&col, 0..100, 0).unwrap();
    let both = [
        cell(IoOp::Fsync, "wal-", EIO),
        cell(IoOp::Truncate, "wal-", EIO),
    ];
    arm(d, &both[0]);
    arm(d, &both[1]);
    let e = m.clone().upsert(&col, 1000..1010, 0).unwrap_err();
    let kind = typed(&e);
    assert!(m.clone().upsert(&col, 2000..2010, 0).is_err());
    check(&col, &m, &(1000..1010).collect::<Vec<_>>());
    failpoints::clear(d);
    m.upsert(&col, 3000..3010, 0).unwrap();
    col.abandon();
    let col = Collection::open(d, OpenMode::ReadWrite).unwrap();
    check(
        &col,
        &m,
        &(1000..1010).chain(2000..2010).collect::<Vec<_>>(),
    );
    row(
        "upsert",
        &both[0],
        &format!("{kind}, and its repair's truncate fails too: not applied; 0 lost; resumed"),
    );
}

#[test]
fn background_fsync_failures_keep_acknowledged_rows() {
    // Durability of an interval: rows are acknowledged before their
    // fsync; a failed fsync keeps them and writes them again.
    let c = cell(IoOp::Fsync, "wal-", EIO);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let col = Collection::create(d, config(0, Durability::IntervalMs(3_600_000))).unwrap();
    let mut m = Model::default();
    m.upsert(&col, 0..100, 0).unwrap();
    col.flush().unwrap();
    // Armed first: the sync thread (woken by the flush above) may sync
    // at any moment; whichever fsync of the new rows comes first fails.
    arm(d, &c);
    m.upsert(&col, 100..200, 0).unwrap(); // acknowledged, not yet synced
    let e = col.flush().unwrap_err();
    let kind = typed(&e);
    check(&col, &m, &[]);
    // While the disk fails, new writes are refused (the log cannot be
    // repaired), the acknowledged ones still answer.
    assert!(m.clone().upsert(&col, 1000..1010, 0).is_err());
    check(&col, &m, &(1000..1010).collect::<Vec<_>>());
    failpoints::clear(d);
    m.upsert(&col, 300..310, 0).unwrap();
    // A crash before any further sync: the log must hold every
    // acknowledged row, those written again after the failure included.
    col.abandon();
    let col = Collection::open(d, OpenMode::ReadWrite).unwrap();
    check(&col, &m, &(1000..1010).collect::<Vec<_>>());
    col.flush().unwrap();
    row(
        "background fsync (interval durability)",
        &c,
        &format!("{kind}; unsynced rows kept and rewritten; 0 lost; resumed"),
    );
}

/// Runs `op` with each fault of `cells` armed on a collection prepared by
/// `setup`, and checks the promises around it.
fn matrix(
    operation: &str,
    cells: &[Cell],
    index_threshold: u64,
    setup: impl Fn(&Collection, &mut Model),
    op: impl Fn(&Collection) -> Result<(), StoreError>,
) {
    for c in cells {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let col = Collection::create(d, config(index_threshold, Durability::Batch)).unwrap();
        let mut m = Model::default();
        setup(&col, &mut m);
        let errors = col.stats().optimizer.errors;
        arm(d, c);
        let r = op(&col);
        let fired = failpoints::fired(d);
        assert!(fired > 0, "{operation}: {} never fired", label(c));
        let kind = match &r {
            Err(e) => typed(e),
            // The background flush thread, woken by the freeze, may run
            // the step first: then it reports the failure.
            Ok(()) => {
                // (its report follows its release of the flush lock)
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while col.stats().optimizer.errors == errors && std::time::Instant::now() < deadline
                {
                    std::thread::yield_now();
                }
                let s = col.stats().optimizer;
                assert!(
                    s.errors > errors,
                    "{operation}: {} fired, the operation succeeded and nothing reported it",
                    label(c)
                );
                typed(&StoreError::Optimizer(s.last_error.unwrap_or_default()))
                    .replace("Optimizer", "reported by the flush thread")
            }
        };
        // Serving and writable meanwhile (faults on the log aside).
        check(&col, &m, &[]);
        let writable = !c.file.starts_with("wal-");
        if writable {
            m.upsert(&col, 50_000..50_020, 0).unwrap();
            check(&col, &m, &[]);
        }
        failpoints::clear(d);
        settles(|| op(&col));
        m.upsert(&col, 60_000..60_020, 0).unwrap();
        check(&col, &m, &[]);
        // Background work settled first: a build started by the flush
        // writes its file under a temporary name until it commits.
        col.optimize().unwrap();
        no_temporary_files(d);
        col.abandon();
        let col = Collection::open(d, OpenMode::ReadWrite).unwrap();
        check(&col, &m, &[]);
        drop(col);
        let col = Collection::open(d, OpenMode::ReadOnly).unwrap();
        check(&col, &m, &[]);
        row(
            operation,
            c,
            &format!(
                "{kind}; serving{}; retried ok; 0 lost",
                if writable { ", writable" } else { "" }
            ),
        );
    }
}

/// The faults of a segment-writing task: the new segment file, the
/// tombstone and bloom files, the manifest, and removing the replaced
/// files.
fn segment_task_cells() -> Vec<Cell> {
    vec![
        cell(IoOp::Create, ".sgt", ENOSPC),
        cell(IoOp::Write, ".sgt", ENOSPC),
        cell(IoOp::Write, ".sgt", EIO),
        cell(IoOp::Fsync, ".sgt", EIO),
        cell(IoOp::Rename, ".sgt", EIO),
        cell(IoOp::Mmap, ".sgt", libc::ENOMEM),
        cell(IoOp::Write, "tomb-", ENOSPC),
        cell(IoOp::Fsync, "bloom-", EIO),
        cell(IoOp::Write, "MANIFEST", ENOSPC),
        cell(IoOp::Fsync, "MANIFEST", EIO),
        cell(IoOp::Rename, "MANIFEST", EIO),
        Cell {
            after: 1,
            ..cell(IoOp::Fsync, "MANIFEST", EIO)
        },
    ]
}

#[test]
fn seal() {
    let mut cells = segment_task_cells();
    cells.push(cell(IoOp::Create, "wal-", ENOSPC));
    cells.push(cell(IoOp::Remove, "wal-", EIO));
    matrix(
        "seal",
        &cells,
        0,
        |c, m| {
            m.upsert(c, 0..100, 0).unwrap();
            c.seal().unwrap();
            m.upsert(c, 100..250, 0).unwrap();
        },
        |c| c.seal(),
    );
}

#[test]
fn checkpoint() {
    let cells = [
        cell(IoOp::Create, "wal-", ENOSPC),
        cell(IoOp::Write, "tomb-", EIO),
        cell(IoOp::Rename, "tomb-", EIO),
        cell(IoOp::Create, "bloom-", ENOSPC),
        cell(IoOp::Rename, "MANIFEST", EIO),
        Cell {
            after: 1,
            ..cell(IoOp::Fsync, "MANIFEST", EIO)
        },
        cell(IoOp::Remove, "wal-", EIO),
    ];
    matrix(
        "checkpoint",
        &cells,
        0,
        |c, m| {
            m.upsert(c, 0..200, 0).unwrap();
            c.seal().unwrap();
            // A log tail of removes only: a checkpoint folds it.
            m.remove(c, &[3, 4, 5, 6]).unwrap();
        },
        |c| c.seal(),
    );
}

#[test]
fn build() {
    let mut cells = segment_task_cells();
    cells.push(cell(IoOp::Remove, ".sgt", EIO));
    matrix(
        "build (Flat to HNSW)",
        &cells,
        0,
        |c, m| {
            m.upsert(c, 0..300, 0).unwrap();
            c.seal().unwrap();
        },
        |c| c.optimize(),
    );
}

#[test]
fn merge() {
    let mut cells = segment_task_cells();
    cells.push(cell(IoOp::Remove, ".sgt", EIO));
    matrix(
        "merge",
        &cells,
        100_000, // small segments stay Flat and merge
        |c, m| {
            m.upsert(c, 0..150, 0).unwrap();
            c.seal().unwrap();
            m.upsert(c, 150..300, 0).unwrap();
            c.seal().unwrap();
        },
        |c| c.optimize(),
    );
}

#[test]
fn compaction() {
    let mut cells = segment_task_cells();
    cells.push(cell(IoOp::Remove, ".sgt", EIO));
    matrix(
        "compaction",
        &cells,
        100_000,
        |c, m| {
            m.upsert(c, 0..300, 0).unwrap();
            c.seal().unwrap();
            c.optimize().unwrap();
            // A dead share under the policy's ratio: the optimizer leaves
            // it alone, compact() rewrites it.
            m.remove(c, &(0..30).collect::<Vec<_>>()).unwrap();
            c.seal().unwrap();
            c.optimize().unwrap();
        },
        |c| c.compact(),
    );
}

#[test]
fn open() {
    let cells = [
        cell(IoOp::Read, "MANIFEST", EIO),
        cell(IoOp::Read, ".sgt", EIO),
        cell(IoOp::Mmap, ".sgt", libc::ENOMEM),
        cell(IoOp::Read, "tomb-", EIO),
        cell(IoOp::Read, "wal-", EIO),
        cell(IoOp::Create, "wal-", ENOSPC),
        cell(IoOp::Read, "bloom-", EIO),
        cell(IoOp::Mmap, "bloom-", libc::ENOMEM),
    ];
    for c in &cells {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mut m = Model::default();
        {
            let col = Collection::create(d, config(0, Durability::Batch)).unwrap();
            m.upsert(&col, 0..300, 0).unwrap();
            col.optimize().unwrap();
            m.remove(&col, &[7, 8, 9]).unwrap();
            m.upsert(&col, 300..320, 0).unwrap(); // a log tail to replay
            col.abandon();
        }
        arm(d, c);
        let r = Collection::open(d, OpenMode::ReadWrite);
        let fired = failpoints::fired(d);
        let outcome = match r {
            Err(e) => {
                assert!(fired > 0, "{}", label(c));
                format!("{}; nothing changed", typed(&e))
            }
            // A bloom filter that cannot be read is rebuilt from the keys.
            Ok(col) => {
                assert!(
                    c.file.starts_with("bloom-"),
                    "{} did not fail the open",
                    label(c)
                );
                check(&col, &m, &[]);
                "opens (filter rebuilt from the keys)".into()
            }
        };
        failpoints::clear(d);
        let col = Collection::open(d, OpenMode::ReadWrite).unwrap();
        check(&col, &m, &[]);
        m.upsert(&col, 400..410, 0).unwrap();
        drop(col);
        let col = Collection::open(d, OpenMode::ReadOnly).unwrap();
        check(&col, &m, &[]);
        row(
            "open (with a log tail)",
            c,
            &format!("{outcome}; opens once cleared; 0 lost"),
        );
    }
}

/// The flush fails (no space for segment files) while the log still
/// grows: writes go on until MAX_FROZEN frozen parts wait and the mutable
/// part is full, then are refused with `Stalled` (typed as disk full,
/// nothing logged) instead of growing the mutable part without bound;
/// once the flush gets through, the next write waits for it and goes on.
#[test]
fn a_batch_past_the_frozen_parts_is_logged_in_whole_parts() {
    // The flush fails, so after four parts freeze the mutable part stays
    // full; the rest of one large batch used to be logged one row (and
    // one log sync) at a time: 2,400 syncs for this batch. Forty are
    // let through, which whole-part pieces need far fewer of.
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(u64::MAX, Durability::Batch)).unwrap();
    failpoints::inject(Fault::new(IoOp::Create, dir.path(), ENOSPC).named("seg-"));
    failpoints::inject(
        Fault::new(IoOp::Fsync, dir.path(), EIO)
            .named("wal-")
            .after(40),
    );
    let mut m = Model::default();
    m.upsert(&c, 0..4_000, 0).unwrap();
    assert_eq!(c.stats().frozen_segments, MAX_FROZEN);
    assert!(failpoints::clear(dir.path()) > 0, "the flush never failed");
    check(&c, &m, &[]);
    settles(|| c.optimize());
    check(&c, &m, &[]);
    c.close().unwrap();
    let c = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    check(&c, &m, &[]);
}

#[test]
fn a_failing_flush_stalls_writes_with_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(u64::MAX, Durability::Batch);
    let part_rows = 400;
    let c = Collection::create(dir.path(), cfg).unwrap();
    failpoints::inject(Fault::new(IoOp::Create, dir.path(), ENOSPC).named("seg-"));
    let mut m = Model::default();
    let (mut next, mut max_active) = (0u64, 0usize);
    let stall = loop {
        assert!(next < 100 * part_rows, "never stalled: {:?}", c.stats());
        match m.upsert(&c, next..next + 50, 0) {
            Ok(()) => next += 50,
            Err(e) => break e,
        }
        max_active = max_active.max(c.stats().active_vectors);
    };
    match &stall {
        StoreError::Stalled { frozen, reason } => {
            assert_eq!(*frozen, MAX_FROZEN);
            assert!(reason.contains("No space left"), "{reason}");
        }
        other => panic!("expected Stalled, got {other}"),
    }
    assert!(stall.is_disk_full(), "{stall}");
    let s = c.stats();
    assert_eq!(s.frozen_segments, MAX_FROZEN, "{s:?}");
    // Refused again at once, and nothing of the refused writes is there.
    for _ in 0..3 {
        let e = m.upsert(&c, next..next + 50, 0).unwrap_err();
        assert!(matches!(e, StoreError::Stalled { .. }), "{e}");
    }
    assert!(
        max_active <= part_rows as usize + 50,
        "mutable part reached {max_active} rows"
    );
    // Reads and removes still work (a remove adds no row).
    check(&c, &m, &(next..next + 50).collect::<Vec<_>>());
    // The fault goes: the next write waits for the flush, then lands.
    assert!(failpoints::clear(dir.path()) > 0);
    m.upsert(&c, next..next + 50, 0).unwrap();
    settles(|| c.optimize());
    check(&c, &m, &[]);
    c.close().unwrap();
    let c = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    check(&c, &m, &[]);
}
