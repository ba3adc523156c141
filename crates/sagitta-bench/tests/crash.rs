//! Crash safety: a writer process (`sagitta-bench crash-writer`) upserts,
//! removes, seals and compacts a collection whose flush and optimizer
//! threads are kept busy (small segments, small merges, see
//! `src/crash.rs`), while this test SIGKILLs it at random moments. After
//! each kill the collection is reopened (the real recovery path) and must
//! hold exactly the acknowledged state: every key's vector is the one of
//! its last acknowledged write, except keys touched by the one operation
//! in flight, which may show either their old or new value, and no other
//! key appears. The recovered collection is then closed, after which the
//! directory must hold no `*.tmp` file and no segment, tombstone or bloom
//! file the MANIFEST does not name (leftovers of interrupted flushes,
//! builds, merges and compactions are removed at open; checked after the
//! close because the background threads write new files right after the
//! open), and the next writer's open must replay no vector.
//!
//! Each kill is classified by the writer's last `BG` line (the background
//! state when its last operation began): an optimizer task running, frozen
//! parts waiting for the flush thread, or idle; enough kills must land
//! during background work.
//!
//! `SAGITTA_CRASH_ROUNDS` (default [`DEFAULT_ROUNDS`]) sets the number of
//! rounds, `SAGITTA_CRASH_SEED` the seed of the kill points, and
//! `SAGITTA_CRASH_DIR` a directory to run in (kept afterwards) instead of
//! a temporary one, e.g. for a long run:
//! `SAGITTA_CRASH_ROUNDS=500 cargo test --release -p sagitta-bench --test
//! crash -- --nocapture`.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../src/crash.rs"]
mod crash;

use sagitta_store::{Collection, OpenMode};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Rounds (kills) when `SAGITTA_CRASH_ROUNDS` is not set.
const DEFAULT_ROUNDS: u64 = 100;
/// Seed of the kill points when `SAGITTA_CRASH_SEED` is not set.
const DEFAULT_SEED: u64 = 0x1234_5678_9ABC_DEF1;
/// Kills that must land during background work (task running or frozen
/// parts pending), with enough rounds.
const MIN_BACKGROUND_KILLS: usize = 10;

type Model = HashMap<u64, u64>; // key -> version

#[derive(Debug)]
enum Step {
    Put { once: bool, kv: Vec<(u64, u64)> },
    Remove(Vec<u64>),
    Seal,
    Compact,
    Optimize,
}

fn parse(line: &str) -> (u64, Step) {
    let mut it = line.split_whitespace().skip(1);
    let n = it.next().unwrap().parse().unwrap();
    let step = match it.next().unwrap() {
        kind @ ("upsert" | "add_once") => Step::Put {
            once: kind == "add_once",
            kv: it
                .map(|p| {
                    let (k, v) = p.split_once(':').unwrap();
                    (k.parse().unwrap(), v.parse().unwrap())
                })
                .collect(),
        },
        "remove" => Step::Remove(it.map(|k| k.parse().unwrap()).collect()),
        "seal" => Step::Seal,
        "compact" => Step::Compact,
        "optimize" => Step::Optimize,
        other => panic!("unknown operation {other:?} in {line:?}"),
    };
    (n, step)
}

fn apply(m: &mut Model, s: &Step) {
    match s {
        Step::Put { once, kv } => {
            for &(k, v) in kv {
                if !*once || !m.contains_key(&k) {
                    m.insert(k, v);
                }
            }
        }
        Step::Remove(keys) => {
            for k in keys {
                m.remove(k);
            }
        }
        Step::Seal | Step::Compact | Step::Optimize => {}
    }
}

fn bytes_of(version: u64) -> Vec<u8> {
    crash::crash_vector(version)
        .iter()
        .flat_map(|x| x.to_ne_bytes())
        .collect()
}

fn step_name(s: Option<&Step>) -> &'static str {
    match s {
        Some(Step::Put { .. }) => "put",
        Some(Step::Remove(_)) => "remove",
        Some(Step::Seal) => "seal",
        Some(Step::Compact) => "compact",
        Some(Step::Optimize) => "optimize",
        None => "between ops",
    }
}

/// A writer's `BG` line.
#[derive(Debug, Clone, Default)]
struct Bg {
    frozen: usize,
    task: Option<String>,
    errors: u64,
}

fn parse_bg(line: &str) -> Bg {
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(f.len(), 6, "bad BG line {line:?}");
    Bg {
        frozen: f[1].parse().unwrap(),
        task: (f[2] != "-").then(|| f[2].to_string()),
        errors: f[5].parse().unwrap(),
    }
}

/// Where a kill landed, by the last `BG` line.
fn bg_class(bg: Option<&Bg>) -> &'static str {
    match bg {
        Some(Bg { task: Some(t), .. }) => match t.as_str() {
            "build" => "task:build",
            "merge" => "task:merge",
            "compact" => "task:compact",
            _ => "task:other",
        },
        Some(b) if b.frozen > 0 => "frozen pending",
        Some(_) => "idle",
        None => "no BG line",
    }
}

/// Files in `dir` that no manifest needs: `*.tmp`, and segment, tombstone
/// and bloom files the MANIFEST does not name.
fn leftovers(dir: &Path) -> Vec<String> {
    let m = crash::manifest_json(dir).unwrap();
    let mut named: HashSet<String> = m["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["file"].as_str().unwrap().to_string())
        .collect();
    for f in ["tombstones", "bloom"] {
        if let Some(name) = m[f].as_str() {
            named.insert(name.to_string());
        }
    }
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.ends_with(".tmp")
                || (!named.contains(n)
                    && ((n.starts_with("seg-") && n.ends_with(".sgt"))
                        || (n.starts_with("tomb-") && n.ends_with(".bin"))
                        || (n.starts_with("bloom-") && n.ends_with(".bin"))))
        })
        .collect();
    out.sort();
    out
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(s) => {
            let s = s.trim();
            let v = match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => s.parse(),
            };
            v.unwrap_or_else(|_| panic!("{name}={s:?}: not a number"))
        }
        Err(_) => default,
    }
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_write() {
    let rounds = env_u64("SAGITTA_CRASH_ROUNDS", DEFAULT_ROUNDS);
    let seed = env_u64("SAGITTA_CRASH_SEED", DEFAULT_SEED) | 1;
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = match std::env::var_os("SAGITTA_CRASH_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            assert!(
                !d.join("MANIFEST").exists(),
                "SAGITTA_CRASH_DIR {d:?} already holds a collection"
            );
            std::fs::create_dir_all(&d).unwrap();
            d
        }
        None => tmp.path().to_path_buf(),
    };
    let repro = format!("SAGITTA_CRASH_SEED={seed:#x} SAGITTA_CRASH_ROUNDS={rounds}");
    let started = std::time::Instant::now();
    let bin = env!("CARGO_BIN_EXE_sagitta-bench");
    let mut model = Model::new();
    let mut rng = seed;
    let mut total_acks = 0;
    let mut by_bg = BTreeMap::<&'static str, usize>::new();
    let mut by_op = BTreeMap::<&'static str, usize>::new();
    let mut replayed = Vec::new();
    let (mut leftover_files, mut leftover_rounds) = (0, 0);
    // Records replayed by writer opens (after a close()) that replayed any.
    let mut writer_replays = Vec::new();
    let mut acked_by_kind = BTreeMap::<&'static str, usize>::new();
    for round in 1..=rounds {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let target = 1 + rng % 40;
        let ctx = format!("round {round} (kill after ACK {target}; {repro}; dir {dir:?})");
        // Every other round writes mostly new keys (the optimizer then
        // builds and merges graphs), the others update a small key space
        // (it compacts).
        let keys: u64 = if round % 2 == 0 { 3000 } else { 1 << 40 };
        let mut child = Command::new(bin)
            .args(["crash-writer", "--round", &round.to_string()])
            .args(["--keys", &keys.to_string(), "--dir"])
            .arg(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut acked = model.clone();
        let mut pending: Option<(u64, Step)> = None;
        let mut bg: Option<Bg> = None;
        let mut acks = 0;
        let mut line = String::new();
        let mut killed = false;
        loop {
            line.clear();
            if out.read_line(&mut line).unwrap() == 0 {
                break;
            }
            if line.starts_with("BEGIN") {
                pending = Some(parse(&line));
            } else if line.starts_with("BG ") {
                let b = parse_bg(&line);
                assert_eq!(b.errors, 0, "{ctx}: background failure in the writer");
                bg = Some(b);
            } else if let Some(rest) = line.strip_prefix("OPENED ") {
                let f: Vec<u64> = rest
                    .split_whitespace()
                    .map(|x| x.parse().unwrap())
                    .collect();
                let [records, _wal_bytes, active, frozen] = f[..] else {
                    panic!("{ctx}: bad OPENED line {line:?}");
                };
                // The previous round closed the collection: nothing is
                // replayed, not even a tail of removes.
                assert!(
                    records == 0 && active == 0 && frozen == 0,
                    "{ctx}: the writer's open after close() replayed records: {}",
                    line.trim()
                );
                if records > 0 {
                    writer_replays.push(records);
                }
            } else if let Some(n) = line.strip_prefix("ACK ") {
                let (pn, step) = pending.take().expect("ACK without BEGIN");
                assert_eq!(pn, n.trim().parse::<u64>().unwrap());
                apply(&mut acked, &step);
                *acked_by_kind.entry(step_name(Some(&step))).or_default() += 1;
                acks += 1;
                if acks == target && !killed {
                    child.kill().unwrap(); // SIGKILL
                    killed = true;
                }
            } else {
                panic!("{ctx}: unexpected line {line:?}");
            }
        }
        let status = child.wait().unwrap();
        assert!(
            killed && !status.success(),
            "{ctx}: writer exited early: {status}"
        );
        total_acks += acks;
        *by_op
            .entry(step_name(pending.as_ref().map(|(_, s)| s)))
            .or_default() += 1;
        *by_bg.entry(bg_class(bg.as_ref())).or_default() += 1;

        // What the killed process left behind, for the summary.
        let found = leftovers(&dir);
        if !found.is_empty() {
            leftover_files += found.len();
            leftover_rounds += 1;
        }

        // Recover and compare with the acknowledged model.
        let wal_seq = crash::manifest_json(&dir).unwrap()["wal_seq"]
            .as_u64()
            .unwrap();
        let c = Collection::open(&dir, OpenMode::ReadWrite)
            .unwrap_or_else(|e| panic!("{ctx}: recovery open failed: {e}"));
        replayed.push(c.stats().wal_seq.saturating_sub(wal_seq));
        let mut after = acked.clone();
        if let Some((_, s)) = &pending {
            apply(&mut after, s);
        }
        let mut recovered = Model::new();
        let mut keys: Vec<u64> = acked.keys().chain(after.keys()).copied().collect();
        keys.sort_unstable();
        keys.dedup();
        for &k in &keys {
            let got = c.get_raw(k);
            let ok_old = match acked.get(&k) {
                Some(&v) => got.as_deref() == Some(&bytes_of(v)[..]),
                None => got.is_none(),
            };
            let ok_new = match after.get(&k) {
                Some(&v) => got.as_deref() == Some(&bytes_of(v)[..]),
                None => got.is_none(),
            };
            assert!(
                ok_old || ok_new,
                "{ctx}: key {k}: neither the acknowledged ({:?}) nor the in-flight ({:?}) value",
                acked.get(&k),
                after.get(&k)
            );
            if let Some(v) = if ok_old { acked.get(&k) } else { after.get(&k) } {
                recovered.insert(k, *v);
            }
        }
        assert_eq!(c.len(), recovered.len(), "{ctx}: unexpected keys present");
        assert!(
            c.keys().all(|k| recovered.contains_key(&k)),
            "{ctx}: garbage key"
        );
        let opt = c.stats().optimizer;
        assert_eq!(
            opt.errors, 0,
            "{ctx}: background failure after recovery: {:?}",
            opt.last_error
        );
        // Closing stops the background threads (which may be writing new
        // files right after the open), so what is left now is a leftover.
        c.close()
            .unwrap_or_else(|e| panic!("{ctx}: close after recovery failed: {e}"));
        let left = leftovers(&dir);
        assert!(
            left.is_empty(),
            "{ctx}: files not named by the MANIFEST after recovery: {left:?}"
        );
        model = recovered;
    }
    let in_background: usize = by_bg
        .iter()
        .filter(|(k, _)| k.starts_with("task:") || **k == "frozen pending")
        .map(|(_, n)| n)
        .sum();
    let mean = replayed.iter().sum::<u64>() as f64 / replayed.len().max(1) as f64;
    let max = replayed.iter().copied().max().unwrap_or(0);
    println!(
        "crash: {rounds} rounds, {total_acks} acknowledged ops {acked_by_kind:?}, {:.1} s; \
         kills by background state: {by_bg:?} ({in_background} during background work); \
         by operation in flight: {by_op:?}; records replayed per recovery open: mean \
         {mean:.1}, max {max}; leftover files before recovery: {leftover_files} in \
         {leftover_rounds} rounds, none after; writer opens after close() that replayed \
         records: {} (max {}); {repro}",
        started.elapsed().as_secs_f64(),
        writer_replays.len(),
        writer_replays.iter().max().unwrap_or(&0),
    );
    assert!(total_acks >= rounds);
    assert!(
        in_background >= MIN_BACKGROUND_KILLS.min(rounds as usize / 5),
        "only {in_background} of {rounds} kills during background work: {by_bg:?}"
    );
}
