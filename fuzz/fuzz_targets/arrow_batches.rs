//! Arrow IPC streams as clients send them: checked and read as a DoPut
//! would (each batch converted to ids, vectors and payload), and as a
//! payload upload.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use sagitta_server::convert::ingest_batch;
use sagitta_store::Payload;

fuzz_target!(|data: &[u8]| {
    common::allow_caught_panics();
    // As the server does with every DoPut message: bounds first (Arrow's
    // reader panics on buffers past their body), then Arrow.
    if sagitta_store::ipc::check_stream(data, true).is_err() {
        let _ = Payload::from_ipc(data);
        return;
    }
    // The server catches a panic inside Arrow's decoder around each DoPut
    // message (a node longer than its buffers), as here; the batches it
    // decodes are converted outside (a panic there is a crash).
    let batches = std::panic::catch_unwind(|| {
        let mut out = Vec::new();
        let cursor = std::io::Cursor::new(data);
        if let Ok(reader) = arrow_ipc::reader::StreamReader::try_new(cursor, None) {
            for batch in reader.take(8) {
                let Ok(batch) = batch else {
                    break;
                };
                out.push(batch);
            }
        }
        out
    })
    .unwrap_or_default();
    for batch in &batches {
        let _ = ingest_batch(batch);
    }
    let _ = Payload::from_ipc(data);
});
