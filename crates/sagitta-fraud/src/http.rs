//! The little HTTP/1.1 the service speaks: request heads parsed from a
//! connection's buffer (keep-alive, pipelining, `Content-Length` bodies),
//! and every response prebuilt or built once.

/// Largest request head (request line and headers).
pub const MAX_HEAD: usize = 8 * 1024;
/// Largest request body.
pub const MAX_BODY: usize = 64 * 1024;

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Ready,
    Score,
    /// A known path with the wrong method.
    Method,
    NotFound,
}

/// One request found at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub route: Route,
    /// Where the body starts and how long it is.
    pub body: (usize, usize),
    /// Bytes of the whole request (head and body).
    pub len: usize,
    /// The client asked to close after this response.
    pub close: bool,
    /// `HEAD`: the response's head only, no body.
    pub head_only: bool,
}

/// A request that cannot be served; the connection is closed after the
/// answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// 400: not HTTP/1.x.
    Malformed,
    /// 413: a body over `MAX_BODY`.
    TooLarge,
    /// 431: a head over `MAX_HEAD`.
    HeadTooLarge,
    /// 501: a chunked (or otherwise encoded) body.
    Encoding,
}

/// The result of looking at a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes are needed.
    Partial,
    Request(Head),
    Refused(Refusal),
}

/// Where the head ends (after its empty line) and where its lines end.
/// Lines end in CRLF or, as RFC 9112 lets a server accept, a bare LF.
fn find_head_end(buf: &[u8]) -> Option<(usize, usize)> {
    let mut at = 0;
    while let Some(p) = buf[at..].iter().position(|&c| c == b'\n') {
        let nl = at + p;
        match buf.get(nl + 1..) {
            Some([b'\n', ..]) => return Some((nl + 2, nl)),
            Some([b'\r', b'\n', ..]) => return Some((nl + 3, nl)),
            _ => at = nl + 1,
        }
    }
    None
}

fn trim(b: &[u8]) -> &[u8] {
    let s = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let e = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(s, |p| p + 1);
    &b[s..e.max(s)]
}

/// Parses the request at the start of `buf`.
pub fn parse(buf: &[u8]) -> Parsed {
    let window = &buf[..buf.len().min(MAX_HEAD)];
    let Some((head_len, lines_end)) = find_head_end(window) else {
        return if buf.len() >= MAX_HEAD {
            Parsed::Refused(Refusal::HeadTooLarge)
        } else {
            Parsed::Partial
        };
    };
    let head = &buf[..lines_end];
    let mut lines = head
        .split(|&c| c == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let Some(first) = lines.next() else {
        return Parsed::Refused(Refusal::Malformed);
    };
    let mut parts = first.split(|&c| c == b' ').filter(|p| !p.is_empty());
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Parsed::Refused(Refusal::Malformed);
    };
    let http10 = match version {
        b"HTTP/1.1" => false,
        b"HTTP/1.0" => true,
        _ => return Parsed::Refused(Refusal::Malformed),
    };
    let mut content_length: Option<usize> = None;
    let mut close = http10;
    for line in lines {
        let Some(colon) = line.iter().position(|&c| c == b':') else {
            return Parsed::Refused(Refusal::Malformed);
        };
        let (name, value) = (&line[..colon], trim(&line[colon + 1..]));
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = std::str::from_utf8(value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|c| c.is_ascii_digit()));
            let Some(n) = n.and_then(|v| v.parse::<usize>().ok()) else {
                return Parsed::Refused(Refusal::Malformed);
            };
            if content_length.is_some_and(|c| c != n) {
                return Parsed::Refused(Refusal::Malformed);
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Parsed::Refused(Refusal::Encoding);
        } else if name.eq_ignore_ascii_case(b"connection") {
            if value.eq_ignore_ascii_case(b"close") {
                close = true;
            } else if value.eq_ignore_ascii_case(b"keep-alive") {
                close = false;
            }
        }
    }
    let body_len = content_length.unwrap_or(0);
    if body_len > MAX_BODY {
        return Parsed::Refused(Refusal::TooLarge);
    }
    if buf.len() < head_len + body_len {
        return Parsed::Partial;
    }
    let path = target.split(|&c| c == b'?').next().unwrap_or(target);
    let route = match (path, method) {
        (b"/fraud-score", b"POST") => Route::Score,
        (b"/ready", b"GET" | b"HEAD") => Route::Ready,
        (b"/fraud-score" | b"/ready", _) => Route::Method,
        _ => Route::NotFound,
    };
    Parsed::Request(Head {
        route,
        body: (head_len, body_len),
        len: head_len + body_len,
        close,
        head_only: method == b"HEAD",
    })
}

fn response(status: &str, body: &str, close: bool) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}\r\n{body}",
        body.len(),
        if close { "Connection: close\r\n" } else { "" }
    )
    .into_bytes()
}

/// The six answers (0 to 5 fraudulent neighbours of 5).
pub fn score_responses() -> [Vec<u8>; 6] {
    std::array::from_fn(|frauds| {
        let score = frauds as f64 / 5.0;
        response(
            "200 OK",
            &format!(
                "{{\"approved\":{},\"fraud_score\":{score:.1}}}",
                score < 0.6
            ),
            false,
        )
    })
}

/// `GET /ready`.
pub fn ready() -> Vec<u8> {
    response("200 OK", "{\"ready\":true}", false)
}

/// Bytes of a response's head (through its empty line).
pub fn head_len(response: &[u8]) -> usize {
    find_head_end(response).map_or(response.len(), |(n, _)| n)
}

/// The answer to a request not whole within the request timeout (the
/// connection closes after it).
pub fn request_timeout() -> Vec<u8> {
    response(
        "408 Request Timeout",
        "{\"error\":\"request not received in time\"}",
        true,
    )
}

/// A 400 for a request whose body cannot be scored, naming why.
pub fn bad_request(why: &str) -> Vec<u8> {
    let body = serde_json::json!({ "error": why }).to_string();
    response("400 Bad Request", &body, false)
}

/// The answer to a request that is not one of ours.
pub fn not_found() -> Vec<u8> {
    response(
        "404 Not Found",
        "{\"error\":\"no such route: POST /fraud-score, GET /ready\"}",
        false,
    )
}

/// The answer to a known path with the wrong method.
pub fn method_not_allowed() -> Vec<u8> {
    response(
        "405 Method Not Allowed",
        "{\"error\":\"method not allowed\"}",
        false,
    )
}

/// The answer to a refused request (the connection closes after it).
pub fn refusal(r: Refusal) -> Vec<u8> {
    match r {
        Refusal::Malformed => response(
            "400 Bad Request",
            "{\"error\":\"malformed HTTP request\"}",
            true,
        ),
        Refusal::TooLarge => response(
            "413 Payload Too Large",
            "{\"error\":\"body over 64 KiB\"}",
            true,
        ),
        Refusal::HeadTooLarge => response(
            "431 Request Header Fields Too Large",
            "{\"error\":\"request head over 8 KiB\"}",
            true,
        ),
        Refusal::Encoding => response(
            "501 Not Implemented",
            "{\"error\":\"only Content-Length bodies are accepted\"}",
            true,
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn heads() {
        let req = b"POST /fraud-score HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}GET /ready HTTP/1.1\r\n\r\n";
        let Parsed::Request(h) = parse(req) else {
            panic!()
        };
        assert_eq!((h.route, h.body, h.close), (Route::Score, (58, 2), false));
        let Parsed::Request(h2) = parse(&req[h.len..]) else {
            panic!()
        };
        assert_eq!(h2.route, Route::Ready);
        assert_eq!(parse(&req[..40]), Parsed::Partial);
        assert_eq!(
            parse(b"POST /fraud-score HTTP/1.1\r\nContent-Length: 3\r\n\r\n{}"),
            Parsed::Partial
        );
        assert_eq!(
            parse(b"GARBAGE\r\n\r\n"),
            Parsed::Refused(Refusal::Malformed)
        );
        assert_eq!(
            parse(b"GET / HTTP/2\r\n\r\n"),
            Parsed::Refused(Refusal::Malformed)
        );
        assert_eq!(
            parse(b"POST /fraud-score HTTP/1.1\r\nContent-Length: -1\r\n\r\n"),
            Parsed::Refused(Refusal::Malformed)
        );
        assert_eq!(
            parse(b"POST /fraud-score HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n"),
            Parsed::Refused(Refusal::TooLarge)
        );
        assert_eq!(
            parse(b"POST /fraud-score HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Parsed::Refused(Refusal::Encoding)
        );
        assert_eq!(
            parse(&[b'a'; MAX_HEAD + 1]),
            Parsed::Refused(Refusal::HeadTooLarge)
        );
        let Parsed::Request(h) = parse(b"GET /ready HTTP/1.0\r\n\r\n") else {
            panic!()
        };
        assert!(h.close);
        let Parsed::Request(h) = parse(b"GET /fraud-score HTTP/1.1\r\nConnection: close\r\n\r\n")
        else {
            panic!()
        };
        assert_eq!((h.route, h.close), (Route::Method, true));
        // Bare LF line ends, and HEAD.
        let Parsed::Request(h) = parse(b"HEAD /ready HTTP/1.1\nHost: x\n\nGET") else {
            panic!()
        };
        assert_eq!((h.route, h.len, h.head_only), (Route::Ready, 30, true));
        let Parsed::Request(h) = parse(b"POST /fraud-score HTTP/1.1\nContent-Length: 2\r\n\r\n{}")
        else {
            panic!()
        };
        assert_eq!(
            (h.route, h.body, h.head_only),
            (Route::Score, (48, 2), false)
        );
        assert_eq!(parse(b"GET /ready HTTP/1.1\n\r"), Parsed::Partial);
        let r = ready();
        assert!(r[..head_len(&r)].ends_with(b"\r\n\r\n"));
        assert_eq!(head_len(&r) + "{\"ready\":true}".len(), r.len());
    }

    #[test]
    fn answers() {
        let r = score_responses();
        assert!(String::from_utf8(r[2].clone())
            .unwrap()
            .ends_with("{\"approved\":true,\"fraud_score\":0.4}"));
        assert!(String::from_utf8(r[3].clone())
            .unwrap()
            .ends_with("{\"approved\":false,\"fraud_score\":0.6}"));
    }
}
