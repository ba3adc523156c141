//! Crash safety: a writer process (`sagitta crash-writer`) upserts,
//! removes, seals and compacts a collection while this test SIGKILLs it at
//! random moments, 100 times. After each kill the collection is reopened
//! (the real recovery path) and must hold exactly the acknowledged state:
//! every key's vector is the one of its last acknowledged write, except
//! keys touched by the one operation in flight, which may show either
//! their old or new value, and no other key appears.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../src/crash.rs"]
mod crash;

use sagitta_store::{Collection, OpenMode};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

type Model = HashMap<u64, u64>; // key -> version

#[derive(Debug)]
enum Step {
    Put { once: bool, kv: Vec<(u64, u64)> },
    Remove(Vec<u64>),
    Other,
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
        _ => Step::Other,
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
        Step::Other => {}
    }
}

fn bytes_of(version: u64) -> Vec<u8> {
    crash::crash_vector(version)
        .iter()
        .flat_map(|x| x.to_ne_bytes())
        .collect()
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_sagitta");
    let mut model = Model::new();
    let mut rng = 0x1234_5678_9ABC_DEF1u64;
    let mut total_acks = 0;
    let mut kills_in = HashMap::<&'static str, usize>::new();
    for round in 1..=100u64 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let target = 1 + rng % 40;
        let mut child = Command::new(bin)
            .args(["crash-writer", "--round", &round.to_string(), "--dir"])
            .arg(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut acked = model.clone();
        let mut pending: Option<(u64, Step)> = None;
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
            } else if let Some(n) = line.strip_prefix("ACK ") {
                let (pn, step) = pending.take().expect("ACK without BEGIN");
                assert_eq!(pn, n.trim().parse::<u64>().unwrap());
                apply(&mut acked, &step);
                acks += 1;
                if acks == target && !killed {
                    child.kill().unwrap(); // SIGKILL
                    killed = true;
                }
            }
        }
        let status = child.wait().unwrap();
        assert!(
            killed && !status.success(),
            "round {round}: writer exited early: {status}"
        );
        total_acks += acks;
        let in_flight = pending.as_ref().map(|(_, s)| match s {
            Step::Put { .. } => "put",
            Step::Remove(_) => "remove",
            Step::Other => "seal/compact",
        });
        *kills_in
            .entry(in_flight.unwrap_or("between ops"))
            .or_default() += 1;

        // Recover and compare with the acknowledged model.
        let mut after = acked.clone();
        if let Some((_, s)) = &pending {
            apply(&mut after, s);
        }
        let c = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
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
                "round {round}: key {k}: neither the acknowledged ({:?}) nor the in-flight ({:?}) value",
                acked.get(&k),
                after.get(&k)
            );
            if let Some(v) = if ok_old { acked.get(&k) } else { after.get(&k) } {
                recovered.insert(k, *v);
            }
        }
        assert_eq!(
            c.len(),
            recovered.len(),
            "round {round}: unexpected keys present"
        );
        assert!(
            c.keys().all(|k| recovered.contains_key(&k)),
            "round {round}: garbage key"
        );
        model = recovered;
    }
    println!("100 rounds, {total_acks} acknowledged operations, kills landed: {kills_in:?}");
    assert!(total_acks >= 100);
    assert!(
        kills_in.get("put").copied().unwrap_or(0) > 0,
        "{kills_in:?}"
    );
}
