//! A write-ahead log: read (stopping at the first torn record), every
//! record decoded, payload rows included.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use sagitta_store::{payload, wal};

fuzz_target!(|data: &[u8]| {
    let p = common::file("fuzz.log", data);
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
