//! Publishing to and fetching from a real S3-compatible server over HTTP:
//! moto's S3 server (PyPI `moto[server]`), started by this test from
//! `$SAGITTA_PYTHON` (scripts/test points it at `.venv/bin/python`), on a
//! free loopback port, through the production path: an `s3://bucket/prefix`
//! location configured from `AWS_*` variables. Built only with the `s3`
//! feature (`cargo test -p sagitta-remote --features s3 --test s3`).

#![cfg(feature = "s3")]
#![allow(clippy::unwrap_used)]

mod common;

use common::{add, answers, DIMS};
use sagitta_index::{DType, Metric, Space};
use sagitta_remote::{Remote, RemoteError};
use sagitta_store::{Collection, CollectionConfig, OpenMode};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Moto(Child);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP request with an empty body; returns the status line.
fn http(port: u16, method: &str, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out.lines().next().unwrap_or_default().to_string())
}

fn start_moto() -> (Moto, u16) {
    let python = std::env::var("SAGITTA_PYTHON").unwrap_or_else(|_| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../.venv/bin/python")
            .to_string_lossy()
            .into_owned()
    });
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(&python)
        .args([
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("start moto's S3 server with {python}: {e} (scripts/python-env installs it)")
        });
    let moto = Moto(child);
    let end = Instant::now() + Duration::from_secs(60);
    while http(port, "GET", "/").is_err() {
        assert!(
            Instant::now() < end,
            "moto's S3 server did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (moto, port)
}

#[test]
fn publish_and_fetch_through_an_s3_server() {
    let (moto, port) = start_moto();
    // The production configuration path: AWS_* variables.
    std::env::set_var("AWS_ENDPOINT", format!("http://127.0.0.1:{port}"));
    std::env::set_var("AWS_ALLOW_HTTP", "true");
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
    std::env::set_var("AWS_REGION", "us-east-1");
    assert!(http(port, "PUT", "/sagitta-test").unwrap().contains("200"));

    let t = tempfile::tempdir().unwrap();
    let space = Space::new(DIMS, Metric::L2, DType::F32).unwrap();
    let c = Collection::create(&t.path().join("src"), CollectionConfig::new(space)).unwrap();
    // Over 8 MiB of vectors: the segment goes up as a multipart upload.
    add(&c, 0..160_000);
    c.seal().unwrap();
    let remote = Remote::open("s3://sagitta-test/shards/shard-0").unwrap();
    assert!(remote.latest().unwrap().is_none());
    let first = remote
        .publish(&c, serde_json::json!({"seq": 1}), 2)
        .unwrap();
    assert_eq!(first.published.version, 1);
    assert!(first.uploaded_bytes > 8 << 20, "{}", first.uploaded_bytes);

    let got = remote.fetch(&t.path().join("n1")).unwrap();
    assert_eq!(got.published.meta["seq"], 1);
    let copy = Collection::open(&t.path().join("n1"), OpenMode::ReadOnly).unwrap();
    assert_eq!(copy.len(), 160_000);
    assert_eq!(answers(&copy), answers(&c));

    // A second version uploads only what is new; a new node gets it.
    add(&c, 160_000..161_000);
    c.seal().unwrap();
    let second = remote
        .publish(&c, serde_json::json!({"seq": 2}), 2)
        .unwrap();
    assert_eq!(second.published.version, 2);
    assert!(second.reused_files >= 1);
    assert!(second.uploaded_bytes < first.uploaded_bytes);
    remote.fetch(&t.path().join("n2")).unwrap();
    let copy = Collection::open(&t.path().join("n2"), OpenMode::ReadOnly).unwrap();
    assert_eq!(copy.len(), 161_000);
    assert_eq!(answers(&copy), answers(&c));
    assert_eq!(remote.versions().unwrap(), vec![1, 2]);

    // A bucket that does not exist: a typed error, nothing installed.
    let missing = Remote::open("s3://no-such-bucket/x").unwrap();
    let err = missing.publish(&c, serde_json::Value::Null, 2).unwrap_err();
    // (A segment goes up as a multipart upload: its error comes through
    // the upload stream, as an I/O error of the upload.)
    assert!(
        matches!(
            err,
            RemoteError::ObjectStore(_) | RemoteError::Io { op: "upload", .. }
        ),
        "{err:?}"
    );
    assert!(
        format!("{err}").contains("no-such-bucket") || format!("{err:?}").contains("NoSuchBucket")
    );
    assert!(matches!(
        missing.fetch(&t.path().join("n3")),
        Err(RemoteError::ObjectStore(_) | RemoteError::NothingPublished(_))
    ));
    assert!(!Collection::exists(&t.path().join("n3")));
    drop(moto);
}
