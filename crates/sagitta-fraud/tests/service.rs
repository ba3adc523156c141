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

/// One service for the whole file (built once, ~1 s), in a directory of
/// Cargo's for test files (replaced on each run).
fn service() -> &'static Service {
    static S: OnceLock<Service> = OnceLock::new();
    S.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sagitta-fraud-service");
        let _ = std::fs::remove_dir_all(&dir);
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
        start(&dir, &[])
    })
}

/// `serve` on the index in `dir`, with `extra` arguments, once ready.
fn start(dir: &Path, extra: &[&str]) -> Service {
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
        .arg(dir)
        .args(extra)
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
        _dir: dir.to_path_buf(),
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
}

impl Service {
    fn connect(&self) -> std::io::Result<TcpStream> {
        let c = TcpStream::connect(("127.0.0.1", self.port))?;
        c.set_read_timeout(Some(Duration::from_secs(20)))?;
        Ok(c)
    }

    /// Both API processes are still running (bad input killed neither).
    fn assert_workers_alive(&self) {
        let pid = self.child.id();
        let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
        let live = kids
            .split_whitespace()
            .filter(|k| {
                std::fs::read_to_string(format!("/proc/{k}/stat")).is_ok_and(|st| {
                    !st.rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z')
                })
            })
            .count();
        assert_eq!(live, 2, "API processes of {pid}: {kids:?}");
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
    s.assert_workers_alive();
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
    // Past what a 64-bit float holds: no number JSON can give, a 400.
    let body = serde_json::to_string(&good).unwrap();
    let amount = good["transaction"]["amount"].to_string();
    let huge = body.replacen(&format!("\"amount\":{amount}"), "\"amount\":1e400", 1);
    assert_ne!(huge, body);
    assert_eq!(
        request(&mut c, "POST", "/fraud-score", huge.as_bytes())
            .unwrap()
            .0,
        400
    );
    s.assert_workers_alive();
}

#[test]
fn escaped_and_non_ascii_strings_score_as_their_characters() {
    let s = service();
    let mut c = s.connect().unwrap();
    for e in entries().iter().take(40) {
        let body = serde_json::to_string(&e["request"]).unwrap();
        // Every '-' in a string (merchant ids, dates) written as \u002d.
        let escaped = body.replace('-', "\\u002d");
        assert_ne!(escaped, body);
        let (status, got) = request(&mut c, "POST", "/fraud-score", escaped.as_bytes()).unwrap();
        assert_eq!(status, 200, "{escaped}: {got}");
        let got: serde_json::Value = serde_json::from_str(&got).unwrap();
        assert_eq!(got["approved"], e["info"]["expected_response"]["approved"]);
    }
    // A merchant id outside ASCII, escaped as Python's json.dumps does.
    let mut r = entries()[0]["request"].clone();
    r["merchant"]["id"] = serde_json::json!("M\u{e9}RC-\u{4e2d}");
    r["customer"]["known_merchants"] = serde_json::json!(["M\u{e9}RC-\u{4e2d}"]);
    let raw_utf8 = serde_json::to_string(&r).unwrap();
    let escaped = raw_utf8
        .replace('\u{e9}', "\\u00e9")
        .replace('\u{4e2d}', "\\u4e2d");
    assert_ne!(escaped, raw_utf8);
    let a = request(&mut c, "POST", "/fraud-score", raw_utf8.as_bytes()).unwrap();
    let b = request(&mut c, "POST", "/fraud-score", escaped.as_bytes()).unwrap();
    assert_eq!(a.0, 200, "{}", a.1);
    assert_eq!(a, b);
}

#[test]
fn head_answers_have_no_body_and_bare_line_feeds_are_read() {
    let s = service();
    let mut c = s.connect().unwrap();
    c.write_all(b"HEAD /ready HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(c.read(&mut b).unwrap(), 1);
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // The next answer on the connection starts right after that head.
    assert_eq!(
        request(&mut c, "GET", "/ready", b"").unwrap(),
        (200, "{\"ready\":true}".to_string())
    );
    // Lines ended by a bare LF (which RFC 9112 lets a server accept).
    c.write_all(b"GET /ready HTTP/1.1\nHost: x\n\n").unwrap();
    assert_eq!(read_response(&mut c).unwrap().0, 200);
    let good = serde_json::to_vec(&entries()[0]["request"]).unwrap();
    let mut req = format!(
        "POST /fraud-score HTTP/1.1\nContent-Length: {}\n\n",
        good.len()
    )
    .into_bytes();
    req.extend_from_slice(&good);
    c.write_all(&req).unwrap();
    assert_eq!(read_response(&mut c).unwrap().0, 200);
}

#[test]
fn stalled_and_idle_connections_are_closed_after_their_timeouts() {
    let base = service();
    // A second service on the same index with short timeouts.
    let s = start(
        &base._dir,
        &["--request-timeout-ms", "300", "--idle-timeout-ms", "800"],
    );
    let good = serde_json::to_vec(&entries()[2]["request"]).unwrap();
    let mut stuck = s.connect().unwrap();
    stuck
        .write_all(b"POST /fraud-score HTTP/1.1\r\nContent-Length: 500\r\n\r\n{\"tra")
        .unwrap();
    let mut idle = s.connect().unwrap();
    assert_eq!(request(&mut idle, "GET", "/ready", b"").unwrap().0, 200);
    let t0 = Instant::now();
    // The stalled request: a 408, then the connection closes.
    assert_eq!(read_response(&mut stuck).unwrap().0, 408);
    let mut rest = Vec::new();
    assert_eq!(stuck.read_to_end(&mut rest).unwrap(), 0);
    assert!(
        t0.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t0.elapsed()
    );
    // The idle keep-alive connection: closed without a word, later.
    assert_eq!(idle.read_to_end(&mut rest).unwrap(), 0);
    assert!(rest.is_empty());
    assert!(
        t0.elapsed() >= Duration::from_millis(600),
        "{:?}",
        t0.elapsed()
    );
    // New connections are served as before.
    let mut c = s.connect().unwrap();
    assert_eq!(
        request(&mut c, "POST", "/fraud-score", &good).unwrap().0,
        200
    );
    s.assert_workers_alive();
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
    s.assert_workers_alive();
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
    s.assert_workers_alive();
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

#[test]
fn backends_listen_on_unix_sockets_for_a_balancer_of_ones_own() {
    let base = service();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sagitta-fraud-backends");
    let mut child = Command::new(BIN)
        .args(["serve", "--die-with-parent", "--workers", "2", "--index"])
        .arg(&base._dir)
        .arg("--backends")
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("api-1.sock"), "{line}");
    let e = &entries()[3];
    for i in 0..2 {
        let mut c =
            std::os::unix::net::UnixStream::connect(dir.join(format!("api-{i}.sock"))).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c.write_all(&raw("GET", "/ready", b"")).unwrap();
        assert_eq!(read_response(&mut c).unwrap().0, 200);
        let body = serde_json::to_vec(&e["request"]).unwrap();
        c.write_all(&raw("POST", "/fraud-score", &body)).unwrap();
        let (status, got) = read_response(&mut c).unwrap();
        assert_eq!(status, 200);
        let got: serde_json::Value = serde_json::from_str(&got).unwrap();
        assert_eq!(got["approved"], e["info"]["expected_response"]["approved"]);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// CPU seconds (user + system) a process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    // utime and stime: fields 14 and 15 of the line, 12 and 13 after ')'.
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    // SAFETY: plain sysconf query.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

#[test]
fn out_of_descriptors_an_api_process_waits_without_spinning_and_serves_later() {
    use std::os::unix::process::CommandExt;
    let base = service();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sagitta-fraud-emfile");
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--die-with-parent", "--workers", "1", "--index"])
        .arg(&base._dir)
        .arg("--backends")
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    // SAFETY: only setrlimit (async-signal-safe) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let l = libc::rlimit {
                rlim_cur: 24,
                rlim_max: 24,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &l) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pid = child.id();
    let worker: u32 = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let sock = dir.join("api-0.sock");
    let connect = || {
        let c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c
    };
    // More connections than the process may hold descriptors for; each
    // answered one is accepted, the rest wait in the listener's queue.
    let mut held = Vec::new();
    let mut served = 0;
    for _ in 0..40 {
        held.push(connect());
    }
    for c in held.iter_mut().take(8) {
        c.write_all(&raw("GET", "/ready", b"")).unwrap();
        assert_eq!(read_response(c).unwrap().0, 200);
        served += 1;
    }
    // Out of descriptors now: the process must not spin meanwhile.
    let cpu0 = cpu_seconds(worker);
    let t0 = Instant::now();
    let mut last = held.pop().unwrap();
    last.write_all(&raw("GET", "/ready", b"")).unwrap();
    last.set_read_timeout(Some(Duration::from_millis(600)))
        .unwrap();
    let mut b = [0u8; 1];
    assert!(
        last.read(&mut b).is_err(),
        "answered while out of descriptors"
    );
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(worker) - cpu0;
    // Waiting costs two sweeps; spinning on the listener took 0.37 s of
    // 0.63 s when this was written.
    assert!(cpu < wall / 5.0, "{cpu} s of CPU in {wall} s");
    // Descriptors come free: the waiting connection is accepted and served.
    held.truncate(4);
    last.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    assert_eq!(read_response(&mut last).unwrap().0, 200);
    assert_eq!(served, 8);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn the_fixed_answer_floor_answers_every_score_request_without_the_index() {
    let base = service();
    let s = start(&base._dir, &["--fixed-answer"]);
    let mut c = s.connect().unwrap();
    let denied = entries()
        .into_iter()
        .find(|e| e["info"]["expected_response"]["approved"] == false)
        .unwrap();
    // The service denies it; the floor does not look at it.
    let (status, body) = score(&mut base.connect().unwrap(), &denied["request"]);
    assert_eq!((status, body.contains("\"approved\":false")), (200, true));
    for req in [
        serde_json::to_vec(&denied["request"]).unwrap(),
        b"not json".to_vec(),
    ] {
        let (status, body) = request(&mut c, "POST", "/fraud-score", &req).unwrap();
        let got: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status, 200);
        assert_eq!(got["approved"], true);
        assert_eq!(got["fraud_score"].as_f64(), Some(0.0));
    }
    assert_eq!(request(&mut c, "GET", "/ready", b"").unwrap().0, 200);
    assert_eq!(request(&mut c, "GET", "/nope", b"").unwrap().0, 404);
    // Its API processes never map the index.
    let pid = s.child.id();
    let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    let kids: Vec<&str> = kids.split_whitespace().collect();
    assert_eq!(kids.len(), 2, "{kids:?}");
    for k in kids {
        let maps = std::fs::read_to_string(format!("/proc/{k}/maps")).unwrap();
        assert!(!maps.contains("references.sgld"), "{maps}");
    }
}
