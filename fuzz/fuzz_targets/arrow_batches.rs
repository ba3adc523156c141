//! Arrow IPC streams as clients send them: checked and read as a DoPut
//! would (each batch converted to ids, vectors and payload), and as a
//! payload upload.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sagitta_server::convert::ingest_batch;
use sagitta_store::Payload;

fuzz_target!(|data: &[u8]| {
    // As the server does with every DoPut message: bounds first (Arrow's
    // reader panics on buffers past their body), then Arrow.
    if sagitta_store::ipc::check_stream(data, true).is_err() {
        let _ = Payload::from_ipc(data);
        return;
    }
    if let Ok(reader) = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(data), None) {
        for batch in reader.take(8) {
            let Ok(batch) = batch else {
                break;
            };
            let _ = ingest_batch(&batch);
        }
    }
    let _ = Payload::from_ipc(data);
});
