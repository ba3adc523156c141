//! The real `sagitta-fraud` binary: `build` over the contest's 100k
//! references, `serve` on an ephemeral loopback port (balancer + two API
//! processes), driven over real sockets: answers against the contest's
//! expected responses, keep-alive and pipelining, and every kind of bad
//! input — while other connections keep being served.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sagitta-fraud");

fn rinha() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/rinha")
}

struct Service {
    child: Child,
    port: u16,
    _dir: PathBuf,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One service for the whole file (built once, ~1 s).
fn service() -> &'static Service {
    static S: OnceLock<Service> = OnceLock::new();
    S.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("sagitta-fraud-test-{}", std::process::id()));
        let out = Command::new(BIN)
            .arg("build")
            .arg(rinha().join("references-100k.json.gz"))
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut child = Command::new(BIN)
            .args([
                "serve",
                "--die-with-parent",
                "--port",
                "0",
                "--bind",
                "127.0.0.1",
                "--index",
            ])
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line
            .split("127.0.0.1:")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        let s = Service {
            child,
            port,
            _dir: dir,
        };
        // Ready within a deadline, polled (not slept for).
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut c) = s.connect() {
                if let Ok((200, _)) = request(&mut c, "GET", "/ready", b"") {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "service not ready");
            std::thread::yield_now();
        }
        s
    })
}

impl Service {
    fn connect(&self) -> std::io::Result<TcpStream> {
        let c = TcpStream::connect(("127.0.0.1", self.port))?;
        c.set_read_timeout(Some(Duration::from_secs(20)))?;
        Ok(c)
    }
}

/// Reads one response: (status, body).
fn read_response(r: &mut impl Read) -> std::io::Result<(u16, String)> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if r.read(&mut b)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let status: u16 = head[9..12].parse().unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok((status, String::from_utf8(body).unwrap()))
}

fn raw(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    req.extend_from_slice(body);
    req
}

fn request(
    c: &mut TcpStream,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    c.write_all(&raw(method, path, body))?;
    read_response(c)
}

fn entries() -> Vec<serde_json::Value> {
    let f = std::fs::File::open(rinha().join("test-data-6100-100k.json.gz")).unwrap();
    let v: serde_json::Value = serde_json::from_reader(flate2::read::GzDecoder::new(f)).unwrap();
    v["entries"].as_array().unwrap().clone()
}

fn score(c: &mut TcpStream, req: &serde_json::Value) -> (u16, String) {
    request(c, "POST", "/fraud-score", &serde_json::to_vec(req).unwrap()).unwrap()
}

#[test]
fn answers_match_the_contest_on_one_keep_alive_connection() {
    let s = service();
    let mut c = s.connect().unwrap();
    for e in entries().iter().step_by(10) {
        let (status, body) = score(&mut c, &e["request"]);
        assert_eq!(status, 200, "{body}");
        let got: serde_json::Value = serde_json::from_str(&body).unwrap();
        let want = &e["info"]["expected_response"];
        assert_eq!(got["approved"], want["approved"], "{}", e["request"]);
        assert!(
            (got["fraud_score"].as_f64().unwrap() - want["fraud_score"].as_f64().unwrap()).abs()
                < 1e-9
        );
    }
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let s = service();
    let es = entries();
    let mut c = s.connect().unwrap();
    let mut batch = Vec::new();
    for e in &es[..20] {
        batch.extend(raw(
            "POST",
            "/fraud-score",
            &serde_json::to_vec(&e["request"]).unwrap(),
        ));
    }
    batch.extend(raw("GET", "/ready", b""));
    c.write_all(&batch).unwrap();
    for e in &es[..20] {
        let (status, body) = read_response(&mut c).unwrap();
        assert_eq!(status, 200);
        let got: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(got["approved"], e["info"]["expected_response"]["approved"]);
    }
    assert_eq!(read_response(&mut c).unwrap().0, 200);
}

#[test]
fn bad_bodies_get_a_400_and_the_connection_goes_on() {
    let s = service();
    let good = entries()[0]["request"].clone();
    let mut c = s.connect().unwrap();
    let mut cases: Vec<Vec<u8>> = vec![
        b"{bad".to_vec(),
        b"".to_vec(),
        b"[]".to_vec(),
        b"\xff\xfe".to_vec(),
    ];
    for (path, value) in [
        ("/transaction/amount", serde_json::json!("12")),
        ("/transaction/requested_at", serde_json::json!("yesterday")),
        (
            "/transaction/requested_at",
            serde_json::json!("2026-02-30T10:00:00Z"),
        ),
        ("/customer/known_merchants", serde_json::json!("MERC-1")),
        ("/terminal/is_online", serde_json::json!(1)),
        ("/merchant", serde_json::json!(null)),
    ] {
        let mut r = good.clone();
        *r.pointer_mut(path).unwrap() = value;
        cases.push(serde_json::to_vec(&r).unwrap());
    }
    let mut missing = good.clone();
    missing["transaction"]
        .as_object_mut()
        .unwrap()
        .remove("amount");
    cases.push(serde_json::to_vec(&missing).unwrap());
    for body in cases {
        let (status, text) = request(&mut c, "POST", "/fraud-score", &body).unwrap();
        assert_eq!(status, 400, "{}: {text}", String::from_utf8_lossy(&body));
        assert!(text.contains("\"error\""), "{text}");
    }
    // The same connection still scores.
    assert_eq!(score(&mut c, &good).0, 200);
}

#[test]
fn out_of_range_numbers_are_clamped_and_unknown_mcc_scores_as_risk_one_half() {
    let s = service();
    let good = entries()[0]["request"].clone();
    let mut c = s.connect().unwrap();
    for (path, value) in [
        ("/transaction/amount", serde_json::json!(-5.0)),
        ("/transaction/amount", serde_json::json!(1e300)),
        ("/customer/avg_amount", serde_json::json!(0)),
        ("/customer/tx_count_24h", serde_json::json!(1e9)),
        ("/terminal/km_from_home", serde_json::json!(-1)),
    ] {
        let mut r = good.clone();
        *r.pointer_mut(path).unwrap() = value;
        assert_eq!(score(&mut c, &r).0, 200, "{path}");
    }
    // An unlisted MCC scores exactly as the listed MCC of risk 0.5 does.
    let mut unknown = good.clone();
    unknown["merchant"]["mcc"] = serde_json::json!("0000");
    let mut half = good.clone();
    half["merchant"]["mcc"] = serde_json::json!("5999");
    assert_eq!(score(&mut c, &unknown), score(&mut c, &half));
}

#[test]
fn protocol_errors_get_their_status() {
    let s = service();
    let mut c = s.connect().unwrap();
    assert_eq!(request(&mut c, "GET", "/nope", b"").unwrap().0, 404);
    assert_eq!(request(&mut c, "GET", "/fraud-score", b"").unwrap().0, 405);
    assert_eq!(request(&mut c, "DELETE", "/ready", b"").unwrap().0, 405);
    for (req, status) in [
        (raw("POST", "/fraud-score", &vec![b' '; 70 * 1024]), 413),
        (
            format!("GET /ready HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(9000)).into_bytes(),
            431,
        ),
        (
            b"POST /fraud-score HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(),
            501,
        ),
        (b"HELLO\r\n\r\n".to_vec(), 400),
        (
            b"POST /fraud-score HTTP/1.1\r\nContent-Length: x\r\n\r\n".to_vec(),
            400,
        ),
    ] {
        let mut c = s.connect().unwrap();
        c.write_all(&req).unwrap();
        assert_eq!(read_response(&mut c).unwrap().0, status);
        // ... and the server closes that connection (a reset when it did
        // not read all the client sent).
        let mut rest = Vec::new();
        match c.read_to_end(&mut rest) {
            Ok(n) => assert_eq!(n, 0),
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
        }
    }
}

#[test]
fn slow_and_half_open_clients_do_not_hold_up_others() {
    let s = service();
    let good = serde_json::to_vec(&entries()[1]["request"]).unwrap();
    // Half-open: a head promising a body that never comes, and a client
    // that connects and says nothing.
    let mut stuck = s.connect().unwrap();
    stuck
        .write_all(b"POST /fraud-score HTTP/1.1\r\nContent-Length: 500\r\n\r\n{\"tra")
        .unwrap();
    let _silent = s.connect().unwrap();
    // A slow client: one byte per write.
    let mut slow = s.connect().unwrap();
    slow.set_nodelay(true).unwrap();
    let req = raw("POST", "/fraud-score", &good);
    let (half, rest) = req.split_at(req.len() / 2);
    for b in half {
        slow.write_all(std::slice::from_ref(b)).unwrap();
    }
    // Meanwhile, on fresh connections (spread over both API processes),
    // answers keep coming.
    for _ in 0..8 {
        let mut c = s.connect().unwrap();
        assert_eq!(
            request(&mut c, "POST", "/fraud-score", &good).unwrap().0,
            200
        );
    }
    slow.write_all(rest).unwrap();
    assert_eq!(read_response(&mut slow).unwrap().0, 200);
    // The half-open request completes when its body arrives.
    let body = " ".repeat(495);
    stuck.write_all(body.as_bytes()).unwrap();
    assert_eq!(read_response(&mut stuck).unwrap().0, 400);
}

#[test]
fn http_1_0_and_connection_close_are_honoured() {
    let s = service();
    let mut c = s.connect().unwrap();
    c.write_all(b"GET /ready HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut c).unwrap().0, 200);
    let mut rest = Vec::new();
    assert_eq!(c.read_to_end(&mut rest).unwrap(), 0);
    let mut c = s.connect().unwrap();
    c.write_all(b"GET /ready HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut c).unwrap().0, 200);
    assert_eq!(c.read_to_end(&mut rest).unwrap(), 0);
}

#[test]
fn build_refuses_bad_reference_files_and_serve_refuses_a_damaged_index() {
    let dir = std::env::temp_dir().join(format!("sagitta-fraud-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let refs = dir.join("refs.json");
    for bad in [
        &b"{}"[..],
        b"[]",
        b"[{\"vector\": [1, 2], \"label\": \"fraud\"}]",
        b"[{\"vector\": [0,0,0,0,0,0,0,0,0,0,0,0,0,0], \"label\": \"maybe\"}]",
        b"[{\"vector\": [0.123456,0,0,0,0,0,0,0,0,0,0,0,0,0], \"label\": \"fraud\"}]",
    ] {
        std::fs::write(&refs, bad).unwrap();
        let out = Command::new(BIN)
            .arg("build")
            .arg(&refs)
            .arg(dir.join("idx"))
            .arg("--normalization")
            .arg(rinha().join("normalization.json"))
            .arg("--mcc")
            .arg(rinha().join("mcc_risk.json"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{}", String::from_utf8_lossy(bad));
    }
    // A damaged index: `serve` stops with an error instead of serving.
    std::fs::write(&refs, b"[{\"vector\": [0,0,0,0,0,0,0,0,0,0,0,0,0,0.1234], \"label\": \"fraud\"}, {\"vector\": [1,1,1,1,1,1,1,1,1,1,1,1,1,0.0001], \"label\": \"legit\"}]").unwrap();
    let idx = dir.join("idx2");
    let out = Command::new(BIN)
        .arg("build")
        .arg(&refs)
        .arg(&idx)
        .arg("--normalization")
        .arg(rinha().join("normalization.json"))
        .arg("--mcc")
        .arg(rinha().join("mcc_risk.json"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = idx.join("references.sgld");
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 0x55;
    std::fs::write(&file, &bytes).unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--port", "0", "--bind", "127.0.0.1", "--index"])
        .arg(&idx)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("checksum"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
