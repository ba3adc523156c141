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
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    for e in std::fs::read_dir(Path::new(FIXTURE)).expect("fixture") {
        let e = e.expect("entry");
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("tomb-") {
            let mut t = tomb.to_vec();
            common::patch_trailer(&mut t);
            std::fs::write(dir.join(&*name), t).expect("tomb");
        } else if name == "MANIFEST" {
            std::fs::write(dir.join("MANIFEST"), common::patch_manifest(manifest)).expect("m");
        } else {
            std::fs::copy(e.path(), dir.join(&*name)).expect("copy");
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
