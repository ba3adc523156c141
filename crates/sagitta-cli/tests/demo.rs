//! Runs the real `sagitta demo` binary (the README's main job) and checks
//! what it prints.

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use std::process::Command;

#[test]
fn demo_prints_neighbours_and_high_recall() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new(env!("CARGO_BIN_EXE_sagitta"))
        .arg("demo")
        .current_dir(root)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("> Utilities provided by ZXing library"),
        "{stdout}"
    );
    assert!(
        stdout.contains("This package provides python3 binding for zxing-cpp library."),
        "{stdout}"
    );
    let line = stdout.lines().find(|l| l.starts_with("recall@10")).unwrap();
    let recall: f64 = line
        .split(": ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(recall >= 0.95, "{line}");
    // The server part: addresses, then the sample query answered over HTTP
    // (with the passages) and over Flight, with the same nearest passage.
    let serving = stdout.lines().find(|l| l.starts_with("serving: ")).unwrap();
    assert!(serving.contains("\"http\":\"127.0.0.1:"), "{serving}");
    let http_hits: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("sample query over HTTP"))
        .skip(2)
        .take(3)
        .collect();
    assert_eq!(http_hits.len(), 3, "{stdout}");
    let first_id: u64 = http_hits[0]
        .split('#')
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let flight = stdout
        .lines()
        .find(|l| l.starts_with("same query over Arrow Flight"))
        .unwrap();
    assert!(flight.contains(&format!("ids [{first_id}, ")), "{flight}");
}

#[test]
fn bad_arguments_fail_cleanly() {
    let out = Command::new(env!("CARGO_BIN_EXE_sagitta"))
        .args(["inspect", "/nonexistent.sgt"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent.sgt"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
