//! Ids at the server's edges: 128-bit ids over HTTP JSON (a server bound
//! to a real socket) and in the Flight batch layout (`convert`), and the
//! id type of a collection created without one: fixed by its first write
//! by ids, recorded in its manifest, and kept as it was by collections
//! written before (the store's frozen `collection-v1`).

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, FixedSizeBinaryArray, FixedSizeListArray, Float32Array, Int64Array,
    RecordBatch, UInt64Array,
};
use arrow_schema::{DataType, Field};
use sagitta_server::api::{CreateCollection, Id};
use sagitta_server::registry::Registry;
use sagitta_server::{convert, ops, ServerConfig};
use sagitta_store::IdType;
use serde_json::{json, Value as Json};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;

const D: usize = 2;

/// `sagitta serve` in this process on loopback ports; stopped on drop.
struct Serve {
    http: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Serve {
    fn start(data: &Path) -> Serve {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let data = data.to_path_buf();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let mut cfg = ServerConfig::new();
                cfg.data = data;
                cfg.http = "127.0.0.1:0".parse().unwrap();
                cfg.flight = "127.0.0.1:0".parse().unwrap();
                let bound = sagitta_server::bind(cfg).await.unwrap();
                addr_tx.send(bound.http).unwrap();
                bound
                    .run(async move {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        Serve {
            http: addr_rx.recv().unwrap(),
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// One HTTP/1.1 request; the status and the JSON body.
    fn call(&self, method: &str, path: &str, body: &str) -> (u16, Json) {
        let mut s = TcpStream::connect(self.http).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let status: u16 = out[9..12].parse().unwrap();
        let (head, rest) = out.split_once("\r\n\r\n").unwrap();
        // Chunked or not: the JSON is the one line that parses.
        let text = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            rest.lines()
                .find(|l| l.starts_with('{'))
                .unwrap_or("null")
                .to_string()
        } else {
            rest.to_string()
        };
        (status, serde_json::from_str(&text).unwrap())
    }

    fn post(&self, path: &str, body: Json) -> (u16, Json) {
        self.call("POST", path, &body.to_string())
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

fn hex(v: u128) -> String {
    format!("{v:032x}")
}

#[test]
fn uint128_ids_round_trip_over_http_the_largest_included() {
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(dir.path());
    let (st, r) = s.post(
        "/collections",
        json!({"name": "w", "dims": D, "metric": "l2", "id_type": "uint128"}),
    );
    assert_eq!(st, 201, "{r}");
    let ids: [u128; 7] = [
        0,
        u128::from(u64::MAX),
        1 << 64,
        1 << 127,
        (0xdead_beef << 80) | 7,
        u128::MAX - 1,
        u128::MAX,
    ];
    // Each in another accepted form: JSON integer, decimal string, 32 hex
    // digits, 0x, UUID.
    let given = json!([
        0,
        u64::MAX,
        (1u128 << 64).to_string(),
        hex(1 << 127),
        format!("0x{:x}", (0xdead_beefu128 << 80) | 7),
        "ffffffff-ffff-ffff-ffff-fffffffffffe",
        hex(u128::MAX),
    ]);
    let vectors: Vec<[f32; D]> = (0..ids.len()).map(|i| [i as f32, 0.0]).collect();
    let (st, r) = s.post(
        "/collections/w/upsert",
        json!({"ids": given, "vectors": vectors}),
    );
    assert_eq!((st, &r["upserted"]), (200, &json!(7)), "{r}");
    let want: Vec<String> = ids.iter().map(|&v| hex(v)).collect();
    let (st, r) = s.post("/collections/w/get", json!({ "ids": want }));
    assert_eq!(st, 200, "{r}");
    let got: Vec<&str> = r["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, want);
    for (i, v) in vectors.iter().enumerate() {
        let (st, r) = s.post(
            "/collections/w/search",
            json!({"vector": v, "k": 1, "exact": true}),
        );
        assert_eq!((st, r["hits"][0]["id"].as_str()), (200, Some(&*want[i])));
    }
    let (st, r) = s.post(
        "/collections/w/delete",
        json!({"ids": [u128::MAX.to_string()]}),
    );
    assert_eq!((st, &r["deleted"]), (200, &json!(1)), "{r}");
    let (_, r) = s.post("/collections/w/get", json!({"ids": [hex(u128::MAX)]}));
    assert_eq!(r["missing"], json!([hex(u128::MAX)]));

    // Typed refusals, the server serving on: a JSON number that cannot be
    // read exactly, an id past 2^128 - 1, a 128-bit id to 64-bit keys.
    let (st, r) = s.call(
        "POST",
        "/collections/w/upsert",
        r#"{"ids": [340282366920938463463374607431768211455], "vectors": [[0, 0]]}"#,
    );
    assert_eq!(st, 400, "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("as a string"), "{msg}");
    let (st, r) = s.post(
        "/collections/w/upsert",
        json!({"ids": ["340282366920938463463374607431768211456"], "vectors": [[0, 0]]}),
    );
    assert_eq!((st, &r["error"]["code"]), (400, &json!("invalid_argument")));
    let (st, _) = s.post(
        "/collections",
        json!({"name": "n", "dims": D, "id_type": "uint64"}),
    );
    assert_eq!(st, 201);
    let (st, r) = s.post(
        "/collections/n/upsert",
        json!({"ids": [hex((1 << 64) | 0xabc)], "vectors": [[0, 0]]}),
    );
    assert_eq!(st, 400, "{r}");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not a valid uint64 id"));
    let (st, r) = s.call("GET", "/collections/w", "");
    assert_eq!((st, &r["vectors"]), (200, &json!(6)), "{r}");
}

#[test]
fn json_ids_read_exactly_or_refused_with_the_reason() {
    let id = |s: &str| serde_json::from_str::<Id>(s).map_err(|e| e.to_string());
    assert_eq!(id("18446744073709551615"), Ok(Id::UInt(u64::MAX)));
    assert_eq!(id("-9223372036854775808"), Ok(Id::Int(i64::MIN)));
    assert_eq!(id("\"ab\""), Ok(Id::Str("ab".into())));
    assert!(id("18446744073709551616")
        .unwrap_err()
        .contains("as a string"));
    assert!(id("-9223372036854775809")
        .unwrap_err()
        .contains("as a string"));
    assert!(id("1.5").unwrap_err().contains("not an integer"));
    assert!(id("null").is_err() && id("[1]").is_err());
    // In a list, as bodies carry them.
    let v: Vec<Id> = serde_json::from_str("[1, -2, \"x\"]").unwrap();
    assert_eq!(v, [Id::UInt(1), Id::Int(-2), Id::Str("x".into())]);
}

fn vectors(n: usize) -> ArrayRef {
    let values = Float32Array::from((0..n * D).map(|i| i as f32).collect::<Vec<_>>());
    Arc::new(
        FixedSizeListArray::try_new(
            Arc::new(Field::new("item", DataType::Float32, true)),
            D as i32,
            Arc::new(values),
            None,
        )
        .unwrap(),
    )
}

/// A DoPut batch as Flight decodes it, written as DoPut writes it.
fn put(e: &sagitta_server::registry::Entry, ids: ArrayRef) {
    let n = ids.len();
    let b = RecordBatch::try_from_iter([("id", ids), ("vector", vectors(n))]).unwrap();
    let ing = convert::ingest_batch(&b).unwrap();
    convert::check_space(&e.coll.config().space, &ing.vectors).unwrap();
    let refs: Vec<_> = (0..n).map(|i| ing.vectors.row(i)).collect();
    assert_eq!(
        ops::upsert(e, &ing.ids, &refs, ing.payload.as_ref()).unwrap(),
        n
    );
}

/// Every row's id as DoGet streams it, and the column's type.
fn scan_ids(e: &sagitta_server::registry::Entry) -> (DataType, ArrayRef) {
    let schema = convert::row_schema(&e.coll);
    let mut scan = e.coll.scan(None, 4096).unwrap();
    let b = scan.next().unwrap().unwrap();
    let rb = convert::scan_batch(&e.coll, &schema, scan.schema(), b, |_| true)
        .unwrap()
        .unwrap();
    (schema.field(0).data_type().clone(), rb.column(0).clone())
}

fn create(
    reg: &Registry,
    name: &str,
    id_type: Option<&str>,
) -> Arc<sagitta_server::registry::Entry> {
    let req = CreateCollection {
        name: name.into(),
        dims: D,
        metric: Some("l2".into()),
        id_type: id_type.map(Into::into),
        ..CreateCollection::default()
    };
    reg.create(name, ops::config_from(&req).unwrap()).unwrap()
}

#[test]
fn uint128_ids_in_flight_batches_are_fixed_size_binary_16_big_endian() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::open(dir.path()).unwrap();
    let e = create(&reg, "w", Some("uint128"));
    let ids = [u128::MAX, 0, 1 << 64, 5];
    let rows: Vec<[u8; 16]> = ids.iter().map(|v| v.to_be_bytes()).collect();
    put(
        &e,
        Arc::new(FixedSizeBinaryArray::try_from_iter(rows.iter()).unwrap()),
    );
    let (ty, col) = scan_ids(&e);
    assert_eq!(ty, DataType::FixedSizeBinary(16));
    let mut got: Vec<u128> = col
        .as_fixed_size_binary()
        .iter()
        .map(|b| u128::from_be_bytes(b.unwrap().try_into().unwrap()))
        .collect();
    got.sort_unstable();
    assert_eq!(got, [0, 5, 1 << 64, u128::MAX]);
    // Search results: the same type, the nearest first.
    let hits = convert::hits_batch(
        &e.coll,
        &[ops::keys_of(&e.coll, &[Id::Str(hex(u128::MAX))]).unwrap()[0]],
        vec![0.0],
        Vec::new(),
        false,
    )
    .unwrap();
    assert_eq!(
        hits.column(0).as_fixed_size_binary().value(0),
        u128::MAX.to_be_bytes()
    );
    // A 128-bit id to a 64-bit collection: a user error, nothing written.
    let n = create(&reg, "n", Some("uint64"));
    let b = RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(
                FixedSizeBinaryArray::try_from_iter([((1u128 << 64) | 9).to_be_bytes()].iter())
                    .unwrap(),
            ) as ArrayRef,
        ),
        ("vector", vectors(1)),
    ])
    .unwrap();
    let ing = convert::ingest_batch(&b).unwrap();
    let refs = [ing.vectors.row(0)];
    let err = ops::upsert(&n, &ing.ids, &refs, None).unwrap_err();
    assert_eq!(err.class(), sagitta_server::error::Class::Invalid, "{err}");
    assert!(err.to_string().contains("not a valid uint64 id"), "{err}");
    assert_eq!(n.coll.len(), 0);
}

#[test]
fn int64_ids_come_back_int64_when_no_id_type_was_given() {
    let dir = tempfile::tempdir().unwrap();
    {
        let reg = Registry::open(dir.path()).unwrap();
        let open = create(&reg, "open", None);
        assert!(open.coll.id_type_open());
        assert_eq!(
            convert::row_schema(&open.coll).field(0).data_type(),
            &DataType::UInt64
        );
        put(&open, Arc::new(Int64Array::from(vec![-7, 0, i64::MAX])));
        assert!(!open.coll.id_type_open());
        assert_eq!(open.coll.id_type(), IdType::Int64);
        let (ty, col) = scan_ids(&open);
        assert_eq!(ty, DataType::Int64);
        let mut got = col.as_primitive::<Int64Type>().values().to_vec();
        got.sort_unstable();
        assert_eq!(got, [-7, 0, i64::MAX]);
        // A later write of uint64 ids is read in int64 (and refused past
        // its range).
        put(&open, Arc::new(UInt64Array::from(vec![3])));
        let b = RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(UInt64Array::from(vec![u64::MAX])) as ArrayRef,
            ),
            ("vector", vectors(1)),
        ])
        .unwrap();
        let ing = convert::ingest_batch(&b).unwrap();
        assert!(ops::upsert(&open, &ing.ids, &[ing.vectors.row(0)], None).is_err());

        // Given: kept, whatever the first write's ids.
        let declared = create(&reg, "declared", Some("uint64"));
        put(&declared, Arc::new(Int64Array::from(vec![1, 2])));
        assert_eq!(scan_ids(&declared).0, DataType::UInt64);
        // A first write of JSON integers fixes uint64 (int64 with a
        // negative one).
        let json_first = create(&reg, "json_first", None);
        let ids = ops::id_column(&json_first.coll, &[Id::UInt(4)]).unwrap();
        ops::upsert(
            &json_first,
            &ids,
            &[sagitta_index::VectorRef::F32(&[0.0; D])],
            None,
        )
        .unwrap();
        put(&json_first, Arc::new(Int64Array::from(vec![5])));
        assert_eq!(scan_ids(&json_first).0, DataType::UInt64);
        let neg = create(&reg, "neg", None);
        let ids = ops::id_column(&neg.coll, &[Id::Int(-4), Id::UInt(4)]).unwrap();
        let v = [0.0f32; D];
        let refs = [
            sagitta_index::VectorRef::F32(&v),
            sagitta_index::VectorRef::F32(&v),
        ];
        ops::upsert(&neg, &ids, &refs, None).unwrap();
        assert_eq!(neg.coll.id_type(), IdType::Int64);
        // An empty write decides nothing.
        let empty = create(&reg, "empty", None);
        ops::upsert(&empty, &sagitta_store::IdColumn::Int(Vec::new()), &[], None).unwrap();
        assert!(empty.coll.id_type_open());
    }
    // Recorded in the manifest: the same after a reopen.
    let reg = Registry::open(dir.path()).unwrap();
    for (name, want, open) in [
        ("open", IdType::Int64, false),
        ("declared", IdType::UInt64, false),
        ("json_first", IdType::UInt64, false),
        ("neg", IdType::Int64, false),
        ("empty", IdType::UInt64, true),
    ] {
        let e = reg.get(name).unwrap();
        assert_eq!(
            (e.coll.id_type(), e.coll.id_type_open()),
            (want, open),
            "{name}"
        );
    }
    let (ty, col) = scan_ids(&reg.get("open").unwrap());
    assert_eq!(ty, DataType::Int64);
    assert_eq!(col.len(), 4);
    let meta = sagitta_store::Collection::metadata(&dir.path().join("open")).unwrap();
    assert_eq!(meta.config.id_type, IdType::Int64);
    assert!(!meta.config.id_type_open);
}

/// Copies a directory's files (no subdirectories).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in std::fs::read_dir(from).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
    }
}

#[test]
fn collections_written_before_stay_uint64() {
    // The store's frozen collection of manifest format 1 from before id
    // types: no `id_type` in its manifest, 60 rows.
    let frozen =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../sagitta-store/tests/data/collection-v1");
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&frozen, &dir.path().join("old"));
    let text = std::fs::read_to_string(dir.path().join("old/MANIFEST")).unwrap();
    assert!(!text.contains("id_type"));
    {
        let reg = Registry::open(dir.path()).unwrap();
        let e = reg.get("old").unwrap();
        assert_eq!(e.coll.id_type(), IdType::UInt64);
        let rows = e.coll.len();
        assert!(rows > 0);
        // Int64 ids to a collection with rows: read as uint64, as before.
        let dims = e.coll.config().space.dims;
        let b = RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(Int64Array::from(vec![1_000_001])) as ArrayRef,
            ),
            (
                "vector",
                Arc::new(
                    FixedSizeListArray::try_new(
                        Arc::new(Field::new("item", DataType::Float32, true)),
                        dims as i32,
                        Arc::new(Float32Array::from(vec![0.5; dims])),
                        None,
                    )
                    .unwrap(),
                ) as ArrayRef,
            ),
        ])
        .unwrap();
        let ing = convert::ingest_batch(&b).unwrap();
        ops::upsert(&e, &ing.ids, &[ing.vectors.row(0)], None).unwrap();
        assert_eq!(e.coll.id_type(), IdType::UInt64);
        let (ty, col) = scan_ids(&e);
        assert_eq!(ty, DataType::UInt64);
        assert!(col
            .as_primitive::<UInt64Type>()
            .values()
            .contains(&1_000_001));
        assert_eq!(e.coll.len(), rows + 1);
    }
    let text = std::fs::read_to_string(dir.path().join("old/MANIFEST")).unwrap();
    assert!(text.contains("\"id_type\": \"uint64\""), "{text}");
}
