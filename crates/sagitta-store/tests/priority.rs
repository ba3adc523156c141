//! The optimizer builds on one of three pools: while writes arrive at
//! nice 19, once they pause at nice 10, and while a caller waits in
//! `optimize()` at the nice value of the thread that opened the
//! collection. (Beside two CPU-bound processes, a
//! nice-19 build made `optimize()` of 20,000 rows take 94 s instead of
//! 1.1 s, and the server's indexing of an upload made no visible progress
//! in 9 minutes.)
//! Alone in its test binary: it reads this process's threads.

#![allow(clippy::unwrap_used)]
#![cfg(target_os = "linux")]

use sagitta_index::{DType, Metric, Space, VectorRef};
use sagitta_store::{Collection, CollectionConfig};

/// A thread of this process: its name, nice value and time on a CPU (ns).
struct Thread {
    name: String,
    nice: i64,
    cpu_ns: u64,
}

fn threads() -> Vec<Thread> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| {
            let dir = e.ok()?.path();
            let name = std::fs::read_to_string(dir.join("comm")).ok()?;
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // Fields after the parenthesised name: state is field 3, nice
            // field 19.
            let rest = &stat[stat.rfind(')')? + 2..];
            let nice = rest.split(' ').nth(16)?.parse().ok()?;
            let sched = std::fs::read_to_string(dir.join("schedstat")).ok()?;
            let cpu_ns = sched.split(' ').next()?.parse().ok()?;
            Some(Thread {
                name: name.trim().to_string(),
                nice,
                cpu_ns,
            })
        })
        .collect()
}

/// The calling thread's nice value.
fn own_nice() -> i64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(16).unwrap().parse().unwrap()
}

/// A collection of 20,000 rows of 16 dims, every part to be built as a
/// graph by two threads of each pool.
fn loaded(dir: &std::path::Path) -> (Collection, usize) {
    let dims = 16;
    let space = Space::new(dims, Metric::L2, DType::F32).unwrap();
    let mut cfg = CollectionConfig::new(space);
    // Built as a graph whatever its size, by two threads of each pool.
    cfg.index_threshold = Some(0);
    cfg.optimizer_threads = 2;
    let keys: Vec<u64> = (0..20_000).collect();
    let rows: Vec<Vec<f32>> = keys
        .iter()
        .map(|&k| {
            (0..dims)
                .map(|d| ((k * 7919 + d as u64 * 104_729) % 1_009) as f32)
                .collect()
        })
        .collect();
    let refs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();

    let c = Collection::create(dir, cfg).unwrap();
    c.add(&keys, &refs).unwrap();
    (c, keys.len())
}

/// Checks the pools' nice values, and that the graph was built on the one
/// named `on` (its threads did at least ten times the work of the
/// other two together).
fn built_on(c: &Collection, rows: usize, on: &str) {
    let stats = c.stats();
    assert_eq!(stats.optimizer.rows_indexed, rows as u64);

    let mine = own_nice();
    let all = threads();
    let pool = |name: &str| -> Vec<&Thread> {
        let prefix = format!("sagitta-{name}-");
        all.iter().filter(|t| t.name.starts_with(&prefix)).collect()
    };
    let want = [
        ("build", 19.max(mine)),
        ("idle", 10.max(mine)),
        ("urgent", mine),
    ];
    // Pools are started on first use: `on` is, the others may be.
    for (name, nice) in want {
        let p = pool(name);
        let started = p.len() == 2 || (p.is_empty() && name != on);
        assert!(started, "{name}: {} threads", p.len());
        assert!(p.iter().all(|t| t.nice == nice), "{name} at nice {nice}");
    }
    let cpu = |name: &str| pool(name).iter().map(|t| t.cpu_ns).sum::<u64>();
    let others: u64 = want.iter().filter(|w| w.0 != on).map(|w| cpu(w.0)).sum();
    assert!(
        cpu(on) > 10 * others.max(1_000_000),
        "{on} pool {} ns, the others {others} ns",
        cpu(on)
    );
}

/// One test, the two cases in turn: each reads every thread of the
/// process, and a closed collection has joined its own.
#[test]
fn builds_run_at_the_openers_priority_when_waited_for_and_at_10_after_writes() {
    // optimize(): a caller waits.
    let dir = tempfile::tempdir().unwrap();
    let (c, rows) = loaded(dir.path());
    c.optimize().unwrap();
    built_on(&c, rows, "urgent");
    c.close().unwrap();

    // No optimize(): the optimizer builds on its own once writes have
    // paused for 300 ms. Waited for by its counters, up to a minute.
    let dir = tempfile::tempdir().unwrap();
    let (c, rows) = loaded(dir.path());
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while c.stats().optimizer.rows_indexed < rows as u64 {
        assert!(std::time::Instant::now() < until, "{:?}", c.stats());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    built_on(&c, rows, "idle");
    c.close().unwrap();
}
