//! The fraud service's HTTP/1.1 request heads (`crates/sagitta-fraud/src/
//! http.rs`, compiled in here from its file): the bytes a connection has
//! received, parsed. A request found lies within the buffer (head and
//! body), parses the same with nothing after it (pipelining), and is
//! `Partial` one byte short (never answered before its last byte).
#![no_main]

#[allow(dead_code)]
#[path = "../../crates/sagitta-fraud/src/http.rs"]
mod http;

use http::{parse, Parsed, MAX_BODY, MAX_HEAD};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let got = parse(data);
    let Parsed::Request(h) = got else {
        return;
    };
    let (start, len) = h.body;
    assert!(h.len <= data.len(), "{h:?} past {} bytes", data.len());
    assert_eq!(start + len, h.len, "{h:?}");
    assert!(start <= MAX_HEAD + 2 && len <= MAX_BODY, "{h:?}");
    assert_eq!(parse(&data[..h.len]), got, "the request alone");
    assert_eq!(
        parse(&data[..h.len - 1]),
        Parsed::Partial,
        "one byte short of {h:?}"
    );
});
