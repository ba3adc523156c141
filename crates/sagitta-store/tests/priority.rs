//! Work a caller waits for runs at the caller's priority: `optimize()`
//! builds on the optimizer's second pool, whose threads keep the nice
//! value of the thread that opened the collection, while work nobody waits
//! for runs at nice 19. (Beside two CPU-bound processes, a nice-19 build
//! made `optimize()` of 20,000 rows take 94 s instead of 1.1 s.)
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

#[test]
fn optimize_builds_at_the_callers_priority() {
    let dir = tempfile::tempdir().unwrap();
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

    let c = Collection::create(dir.path(), cfg).unwrap();
    c.add(&keys, &refs).unwrap();
    c.optimize().unwrap();
    let stats = c.stats();
    assert_eq!(stats.optimizer.rows_indexed, keys.len() as u64);

    let mine = own_nice();
    let all = threads();
    let pool = |prefix: &str| -> Vec<&Thread> {
        all.iter().filter(|t| t.name.starts_with(prefix)).collect()
    };
    let (background, urgent) = (pool("sagitta-build-"), pool("sagitta-urgent-"));
    assert_eq!(background.len(), 2);
    assert_eq!(urgent.len(), 2);
    assert!(background.iter().all(|t| t.nice == 19), "background at 19");
    assert!(
        urgent.iter().all(|t| t.nice == mine),
        "the waited-for pool keeps the opener's nice {mine}"
    );
    // The graph was built on the waited-for pool, not the background one.
    let cpu = |ts: &[&Thread]| ts.iter().map(|t| t.cpu_ns).sum::<u64>();
    assert!(
        cpu(&urgent) > 10 * cpu(&background).max(1_000_000),
        "urgent pool {} ns, background pool {} ns",
        cpu(&urgent),
        cpu(&background)
    );
    c.close().unwrap();
}
