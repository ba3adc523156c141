//! A write-ahead log: read (stopping at the first torn record), every
//! record decoded, payload rows included. Record checksums are patched
//! first, so mutations reach the record and payload-row decoders.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use sagitta_store::{payload, wal};

fuzz_target!(|data: &[u8]| {
    let mut b = data.to_vec();
    common::patch_wal(&mut b);
    let p = common::file("fuzz.log", &b);
    let Ok(r) = wal::read(&p) else {
        return;
    };
    for rec in r.records() {
        if rec.op == wal::Op::PutPayload {
            // The row follows the vector; try every split a reader might.
            for at in [0, 4, 8, 16, 32]
                .into_iter()
                .filter(|&a| a <= rec.vector.len())
            {
                let _ = payload::decode_row(&rec.vector[at..]);
            }
        }
    }
});
