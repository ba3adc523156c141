//! A collection directory's MANIFEST and tombstone file (checksum line and
//! trailer patched so the JSON and entries are parsed), next to real
//! segment, bloom and log files of the frozen release fixture: opened
//! read-only and looked up.
//!
//! Input: `manifest length u16 | MANIFEST | tombstone file`.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use sagitta_index::VectorRef;
use sagitta_store::{Collection, CollectionSearch, OpenMode};
use std::path::Path;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../crates/sagitta-store/tests/data/formats/ids128"
);

fuzz_target!(|data: &[u8]| {
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let len = (u16::from_le_bytes(*len) as usize).min(rest.len());
    let (manifest, tomb) = rest.split_at(len);
    let dir = common::scratch().join("coll");
    // A failure here is the harness's, not the target's: its message says
    // which call and what the OS answered (one such panic in 2.7 M runs on
    // 2026-11-30, writing MANIFEST, did not recur in 400 k replays).
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            panic!("harness: remove {}: {e}", dir.display());
        }
    }
    setup(std::fs::create_dir_all(&dir), "create", &dir);
    for e in setup(
        std::fs::read_dir(Path::new(FIXTURE)),
        "read",
        Path::new(FIXTURE),
    ) {
        let e = setup(e, "list", Path::new(FIXTURE));
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("tomb-") {
            let mut t = tomb.to_vec();
            common::patch_trailer(&mut t);
            let p = dir.join(&*name);
            setup(std::fs::write(&p, t), "write", &p);
        } else if name == "MANIFEST" {
            let p = dir.join("MANIFEST");
            setup(
                std::fs::write(&p, common::patch_manifest(manifest)),
                "write",
                &p,
            );
        } else {
            let p = dir.join(&*name);
            setup(std::fs::copy(e.path(), &p), "copy to", &p);
        }
    }
    let Ok(c) = Collection::open(&dir, OpenMode::ReadOnly) else {
        return;
    };
    let keys: Vec<u64> = c.keys().take(8).collect();
    let _ = c.contains_many(&keys);
    let _ = c.payload_rows(&keys);
    let _ = c.ids_of(&keys);
    let dims = c.config().space.dims.min(4096);
    let q = vec![0.5f32; dims];
    let _ = c.search(&[VectorRef::F32(&q)], 3, &CollectionSearch::default());
    let _ = c.stats();
});

/// The value of a setup step, or a panic naming the step, the path and the
/// OS error.
fn setup<T>(r: std::io::Result<T>, what: &str, path: &Path) -> T {
    r.unwrap_or_else(|e| panic!("harness: {what} {}: {e} ({:?})", path.display(), e.kind()))
}
