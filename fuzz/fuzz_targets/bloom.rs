//! A bloom filter file: parsed (trailer checksum patched so the filter
//! table is reached), mapped, and probed.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use sagitta_store::bloom::Bloom;

fuzz_target!(|data: &[u8]| {
    let mut b = data.to_vec();
    common::patch_trailer(&mut b);
    let p = common::file("fuzz.bloom", &b);
    if let Ok(f) = Bloom::from_bytes(&b, &p) {
        for k in [0u64, 1, 42, u64::MAX] {
            let _ = f.may_contain(k);
            f.prefetch(k);
        }
        let _ = f.fill();
    }
    if let Ok(mut f) = Bloom::open(&p) {
        f.wait_checked();
        for k in [0u64, 1, 42, u64::MAX] {
            let _ = f.may_contain(k);
        }
        f.insert(7);
    }
});
