//! Publishing collections to a local object store and fetching them back:
//! the fetched collection answers as the original, later publishes upload
//! only new files, old versions are collected, corrupt or partial uploads
//! are never installed, and a store that refuses writes loses nothing.

#![allow(clippy::unwrap_used)]

mod common;

use common::{add, answers, DIMS};
use sagitta_index::{DType, Metric, Space};
use sagitta_remote::{Published, Remote, RemoteError};
use sagitta_store::{Collection, CollectionConfig, OpenMode, StoreError};
use std::path::Path;

fn create(dir: &Path) -> Collection {
    let space = Space::new(DIMS, Metric::L2, DType::F32).unwrap();
    let mut c = CollectionConfig::new(space);
    c.segment_size = 500 * c.bytes_per_vector();
    c.max_segment_size = c.segment_size;
    Collection::create(dir, c).unwrap()
}

#[test]
fn fetched_collection_answers_as_the_published_one() {
    let t = tempfile::tempdir().unwrap();
    let c = create(&t.path().join("src"));
    add(&c, 0..3000);
    c.remove(&(0..3000).step_by(7).collect::<Vec<_>>()).unwrap();
    c.seal().unwrap();
    let remote = Remote::open(t.path().join("bucket").to_str().unwrap()).unwrap();
    assert!(remote.latest().unwrap().is_none());
    let r = remote
        .publish(&c, serde_json::json!({"log_seq": 42}), 2)
        .unwrap();
    assert_eq!(r.published.version, 1);
    assert!(r.uploaded_files >= 3, "{r:?}");
    assert_eq!(r.reused_files, 0);

    let f = remote.fetch(&t.path().join("node")).unwrap();
    assert_eq!(f.published, r.published);
    assert_eq!(f.published.meta["log_seq"], 42);
    assert_eq!(f.downloaded_files, r.published.files.len());
    let copy = Collection::open(&t.path().join("node"), OpenMode::ReadWrite).unwrap();
    assert_eq!(copy.len(), c.len());
    assert_eq!(answers(&copy), answers(&c));
    // The copy is an ordinary collection: it takes writes.
    add(&copy, 5000..5010);
    assert_eq!(copy.len(), c.len() + 10);
}

#[test]
fn later_publishes_upload_only_new_files_and_keep_the_newest_versions() {
    let t = tempfile::tempdir().unwrap();
    let c = create(&t.path().join("src"));
    let remote = Remote::open(&format!("file://{}", t.path().join("b").display())).unwrap();
    add(&c, 0..1000);
    c.seal().unwrap();
    let first = remote.publish(&c, serde_json::Value::Null, 2).unwrap();
    add(&c, 1000..1200);
    c.remove(&[3, 4, 5]).unwrap();
    c.seal().unwrap();
    let second = remote.publish(&c, serde_json::Value::Null, 2).unwrap();
    assert_eq!(second.published.version, 2);
    assert!(second.reused_files >= 1, "{second:?}");
    assert!(second.uploaded_bytes < second.published.bytes());
    add(&c, 1200..1300);
    c.seal().unwrap();
    let third = remote.publish(&c, serde_json::Value::Null, 2).unwrap();
    assert_eq!(remote.versions().unwrap(), vec![2, 3]);
    assert!(third.removed_objects >= 1, "{third:?}");
    // Objects only version 1 named are gone; the kept versions fetch.
    let only_first: Vec<_> = first
        .published
        .files
        .iter()
        .filter(|f| !second.published.files.contains(f) && !third.published.files.contains(f))
        .collect();
    for f in only_first {
        assert!(!t.path().join("b").join(&f.object).exists(), "{}", f.object);
    }
    remote.fetch(&t.path().join("n")).unwrap();
    let copy = Collection::open(&t.path().join("n"), OpenMode::ReadOnly).unwrap();
    assert_eq!(copy.len(), 1297);
    assert_eq!(answers(&copy), answers(&c));
}

#[test]
fn corrupt_objects_are_refused_and_nothing_is_installed() {
    let t = tempfile::tempdir().unwrap();
    let c = create(&t.path().join("src"));
    add(&c, 0..800);
    c.seal().unwrap();
    let bucket = t.path().join("b");
    let remote = Remote::open(bucket.to_str().unwrap()).unwrap();
    let p = remote
        .publish(&c, serde_json::Value::Null, 2)
        .unwrap()
        .published;
    let seg = p.files.iter().find(|f| f.name.starts_with("seg-")).unwrap();
    let path = bucket.join(&seg.object);
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let node = t.path().join("node");
    match remote.fetch(&node) {
        Err(RemoteError::Corrupt { object, .. }) => assert_eq!(object, seg.object),
        other => panic!("expected a checksum error, got {other:?}"),
    }
    assert!(!Collection::exists(&node));
    assert!(!node.join(&seg.name).exists());
    // A cut-short version file is refused too.
    let latest = std::fs::read(bucket.join("LATEST")).unwrap();
    std::fs::write(bucket.join("LATEST"), &latest[..latest.len() / 2]).unwrap();
    assert!(matches!(
        remote.fetch(&node),
        Err(RemoteError::Corrupt { .. })
    ));
}

#[test]
fn a_partial_upload_is_never_visible() {
    let t = tempfile::tempdir().unwrap();
    let c = create(&t.path().join("src"));
    add(&c, 0..600);
    c.seal().unwrap();
    let bucket = t.path().join("b");
    let remote = Remote::open(bucket.to_str().unwrap()).unwrap();
    let v1 = remote
        .publish(&c, serde_json::Value::Null, 2)
        .unwrap()
        .published;
    // A publish that died after its data and version file, before LATEST:
    // readers still get version 1; the next publish numbers past it and
    // collects the orphan.
    std::fs::write(bucket.join("data/00000000-1-seg-999999.sgt"), b"x").unwrap();
    std::fs::write(
        bucket.join("versions/00000000000000000002.json"),
        v1.encode(),
    )
    .unwrap();
    assert_eq!(remote.latest().unwrap().unwrap().version, 1);
    remote.fetch(&t.path().join("n1")).unwrap();
    add(&c, 600..700);
    c.seal().unwrap();
    let v3 = remote.publish(&c, serde_json::Value::Null, 1).unwrap();
    assert_eq!(v3.published.version, 3);
    assert!(!bucket.join("data/00000000-1-seg-999999.sgt").exists());
    assert_eq!(remote.versions().unwrap(), vec![3]);
}

#[test]
fn bad_locations_and_targets_give_typed_errors() {
    let t = tempfile::tempdir().unwrap();
    assert!(matches!(
        Remote::open("ftp://somewhere/x"),
        Err(RemoteError::Location(..))
    ));
    assert!(matches!(
        Remote::open("file://relative"),
        Err(RemoteError::Location(..))
    ));
    let remote = Remote::open(t.path().join("empty").to_str().unwrap()).unwrap();
    assert!(matches!(
        remote.fetch(&t.path().join("n")),
        Err(RemoteError::NothingPublished(_))
    ));
    let c = create(&t.path().join("src"));
    add(&c, 0..100);
    c.seal().unwrap();
    remote.publish(&c, serde_json::Value::Null, 2).unwrap();
    // Never over an existing collection.
    assert!(matches!(
        remote.fetch(&t.path().join("src")),
        Err(RemoteError::Store(StoreError::AlreadyExists { .. }))
    ));
}

#[test]
fn a_store_that_refuses_writes_loses_nothing() {
    let t = tempfile::tempdir().unwrap();
    let c = create(&t.path().join("src"));
    add(&c, 0..500);
    c.seal().unwrap();
    let bucket = t.path().join("b");
    let remote = Remote::open(bucket.to_str().unwrap()).unwrap();
    remote.publish(&c, serde_json::Value::Null, 2).unwrap();
    // The store can no longer take data objects (a file where its `data`
    // directory was: every put fails, as on a full or read-only volume).
    std::fs::rename(bucket.join("data"), t.path().join("saved")).unwrap();
    std::fs::write(bucket.join("data"), b"not a directory").unwrap();
    add(&c, 500..900);
    c.seal().unwrap();
    let err = remote.publish(&c, serde_json::Value::Null, 2).unwrap_err();
    assert!(
        matches!(err, RemoteError::ObjectStore(_) | RemoteError::Io { .. }),
        "{err:?}"
    );
    // The collection serves and writes on; LATEST is still version 1.
    assert_eq!(c.len(), 900);
    add(&c, 900..950);
    assert_eq!(remote.latest().unwrap().unwrap().version, 1);
    // Once the store takes writes again, the next publish has everything.
    std::fs::remove_file(bucket.join("data")).unwrap();
    std::fs::rename(t.path().join("saved"), bucket.join("data")).unwrap();
    c.seal().unwrap();
    let p = remote.publish(&c, serde_json::Value::Null, 2).unwrap();
    assert_eq!(p.published.version, 2);
    remote.fetch(&t.path().join("n")).unwrap();
    let copy = Collection::open(&t.path().join("n"), OpenMode::ReadOnly).unwrap();
    assert_eq!(copy.len(), 950);
}

#[test]
fn frozen_version_files_read_back() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let bytes = std::fs::read(dir.join("version-format-1.json")).unwrap();
    let p = Published::decode("version-format-1.json", &bytes).unwrap();
    assert_eq!(p.format, 1);
    assert_eq!(p.version, 7);
    assert_eq!(p.manifest.name, "MANIFEST");
    assert!(p.files.iter().any(|f| f.name.starts_with("seg-")));
    assert!(p.files.iter().all(|f| f.sha256.is_none()));
    assert_eq!(p.meta["log_seq"], 1234);
    // Re-encoding gives the same bytes (the format is stable).
    assert_eq!(p.encode(), bytes);

    let bytes = std::fs::read(dir.join("version-format-2.json")).unwrap();
    let p = Published::decode("version-format-2.json", &bytes).unwrap();
    assert_eq!(
        (p.format, p.version, p.meta["seq"].as_u64()),
        (2, 9, Some(77))
    );
    for f in std::iter::once(&p.manifest).chain(&p.files) {
        let sha = f.sha256.as_deref().unwrap();
        assert!(
            f.object.starts_with(&format!("data/{sha}-")),
            "{}",
            f.object
        );
    }
    assert_eq!(p.encode(), bytes);
    // Format 2 without a file's SHA-256 is refused.
    let text = String::from_utf8(bytes).unwrap();
    let body = &text[..text.rfind("crc32c:").unwrap()];
    let mut v: serde_json::Value = serde_json::from_str(body).unwrap();
    v["files"][0].as_object_mut().unwrap().remove("sha256");
    let mut stripped = serde_json::to_vec_pretty(&v).unwrap();
    stripped.push(b'\n');
    let crc = crc32c::crc32c(&stripped);
    stripped.extend_from_slice(format!("crc32c:{crc:08x}\n").as_bytes());
    assert!(matches!(
        Published::decode("x", &stripped),
        Err(RemoteError::Corrupt { .. })
    ));
}

/// Regression: files that end with their own CRC32C (bloom filters,
/// tombstones) all have one whole-file CRC32C, so naming objects by it made
/// a second writer's bloom filter of the same size resolve to the first
/// writer's object: a replica fetched after a failover got a filter
/// without the newer keys, missed them on lookup and kept duplicates on
/// upsert. Objects are named by SHA-256 now; fetched files are the
/// publisher's, byte for byte.
#[test]
fn writers_with_same_size_files_never_share_objects() {
    let t = tempfile::tempdir().unwrap();
    let bucket = t.path().join("b");
    let remote = Remote::open(bucket.to_str().unwrap()).unwrap();
    let a = create(&t.path().join("a"));
    add(&a, 0..400);
    a.seal().unwrap();
    let pa = remote.publish(&a, serde_json::Value::Null, 2).unwrap();
    // A second writer of the same location (a promoted replica): other
    // keys, same sizes of bloom and tombstone files.
    let b = create(&t.path().join("b2"));
    add(&b, 5000..5400);
    b.seal().unwrap();
    let pb = remote.publish(&b, serde_json::Value::Null, 2).unwrap();
    let bloom = |p: &Published| {
        p.published_file("bloom-")
            .map(|f| (f.len, f.crc32c.clone(), f.object.clone()))
            .unwrap()
    };
    let (la, ca, oa) = bloom(&pa.published);
    let (lb, cb, ob) = bloom(&pb.published);
    assert_eq!(
        (la, &ca),
        (lb, &cb),
        "the premise: same size, same whole-file CRC"
    );
    assert_ne!(oa, ob);
    let n = t.path().join("n");
    remote.fetch(&n).unwrap();
    for f in &pb.published.files {
        let got = std::fs::read(n.join(&f.name)).unwrap();
        let want = std::fs::read(t.path().join("b2").join(&f.name)).unwrap();
        assert!(got == want, "{} differs from the publisher's", f.name);
    }
    let copy = Collection::open(&n, OpenMode::ReadWrite).unwrap();
    add(&copy, 5000..5400);
    assert_eq!(copy.len(), 400, "an upsert of present keys replaces them");
}
