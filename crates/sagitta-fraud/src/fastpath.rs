//! The request as clients send it, read in one pass without serde: the
//! contest's fields in any order, plain strings (printable ASCII, no
//! escapes), JSON numbers, `true` / `false` / `null`, a top-level `"id"`
//! string. Anything else (an escape, an unknown field, a duplicate, a
//! missing field, a number serde_json rounds its own way (see
//! `Cursor::number`), trailing bytes) is not an error here: [`read`] gives
//! `None` and the body goes to serde, which reads it or says why not. So
//! this path changes no answer and no error, only what a request costs:
//! a few hundred bytes of code and no allocation, where the serde path
//! runs cold through far more code on a core the load test's client
//! shares (bench/results/fraud-tail-2026-11-29.md).

use crate::fields::{Fields, Known};

/// The fields of `body`, or `None` when it is not of the common shape.
pub fn read(body: &[u8]) -> Option<Fields<'_>> {
    let mut c = Cursor { b: body, i: 0 };
    let f = c.request()?;
    c.ws();
    (c.i == body.len()).then_some(f)
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

/// Sets bit `bit` of `seen`; `None` when it was set (a duplicate field).
fn once(seen: &mut u8, bit: u8) -> Option<()> {
    if *seen & (1 << bit) != 0 {
        return None;
    }
    *seen |= 1 << bit;
    Some(())
}

impl<'a> Cursor<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// Skips white space, then takes `c`.
    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.b.get(self.i) == Some(&c)).then(|| self.i += 1)
    }

    /// Skips white space; takes `c` if it is next.
    fn next_is(&mut self, c: u8) -> bool {
        self.eat(c).is_some()
    }

    /// A string of printable ASCII without escapes.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        loop {
            match *self.b.get(self.i)? {
                b'"' => break,
                b'\\' | 0..=0x1f | 0x7f.. => return None,
                _ => self.i += 1,
            }
        }
        let s = &self.b[start..self.i];
        self.i += 1;
        // Printable ASCII is UTF-8.
        std::str::from_utf8(s).ok()
    }

    /// A JSON number (its grammar checked here), or `None` unless its
    /// digits, before and after the point, make an integer under 2^53 and
    /// its decimal exponent is within ±22: then one multiplication or
    /// division by an exact power of ten gives the correctly rounded
    /// value, the very operation serde_json's parser (without its
    /// `float_roundtrip` feature) does. Past that range serde_json rounds
    /// its own way (1 ulp off the nearest in about one number in six with
    /// 16 or more digits or an exponent past 22), so those bodies go to
    /// serde and the answer stays serde's.
    fn number(&mut self) -> Option<f64> {
        /// Integers below 2^53 are exact f64s.
        const EXACT: u64 = 1 << 53;
        /// 10^0 to 10^22, each an exact f64.
        const POW10: [f64; 23] = [
            1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
            1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
        ];
        // Appends the digits at the cursor to `sig` (saturating at
        // EXACT); how many there were.
        let digits = |c: &mut Self, sig: &mut u64| {
            let s = c.i;
            while let Some(&d @ b'0'..=b'9') = c.b.get(c.i) {
                *sig = (*sig * 10 + u64::from(d - b'0')).min(EXACT);
                c.i += 1;
            }
            c.i - s
        };
        self.ws();
        let negative = self.b.get(self.i) == Some(&b'-');
        if negative {
            self.i += 1;
        }
        let mut sig = 0u64;
        match self.b.get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                digits(self, &mut sig);
            }
            _ => return None,
        }
        let mut exp = 0i64;
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            let n = digits(self, &mut sig);
            if n == 0 {
                return None;
            }
            exp = -(n as i64);
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            let minus = self.b.get(self.i) == Some(&b'-');
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            let mut e = 0u64;
            let n = digits(self, &mut e);
            if n == 0 {
                return None;
            }
            // `e` saturates at 2^53: far past the range either way.
            exp += if minus { -(e as i64) } else { e as i64 };
        }
        if sig >= EXACT || !(-22..=22).contains(&exp) {
            return None;
        }
        let p = POW10[exp.unsigned_abs() as usize];
        let x = if exp >= 0 {
            sig as f64 * p
        } else {
            sig as f64 / p
        };
        Some(if negative { -x } else { x })
    }

    fn boolean(&mut self) -> Option<bool> {
        self.ws();
        let rest = &self.b[self.i..];
        if rest.starts_with(b"true") {
            self.i += 4;
            Some(true)
        } else if rest.starts_with(b"false") {
            self.i += 5;
            Some(false)
        } else {
            None
        }
    }

    /// `{ "key": value, ... }`, each value read by `field(self, key)`.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.next_is(b'}') {
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            field(self, key)?;
            if self.next_is(b'}') {
                return Some(());
            }
            self.eat(b',')?;
        }
    }

    /// `[ "a", "b", ... ]` of plain strings: the text between the brackets.
    fn strings(&mut self) -> Option<&'a [u8]> {
        self.eat(b'[')?;
        let start = self.i;
        if !self.next_is(b']') {
            loop {
                self.string()?;
                if self.next_is(b']') {
                    break;
                }
                self.eat(b',')?;
            }
        }
        Some(&self.b[start..self.i - 1])
    }

    fn request(&mut self) -> Option<Fields<'a>> {
        let mut f = Fields {
            amount: 0.0,
            installments: 0.0,
            requested_at: "",
            avg_amount: 0.0,
            tx_count_24h: 0.0,
            known: Known::Plain(b""),
            merchant_id: "",
            mcc: "",
            merchant_avg: 0.0,
            is_online: false,
            card_present: false,
            km_from_home: 0.0,
            last: None,
        };
        let (mut top, mut tx, mut cu, mut me, mut te, mut la) = (0u8, 0u8, 0u8, 0u8, 0u8, 0u8);
        self.object(|c, key| match key {
            "id" => once(&mut top, 0).and(c.string().map(drop)),
            "transaction" => {
                once(&mut top, 1)?;
                c.object(|c, key| match key {
                    "amount" => once(&mut tx, 0)
                        .and_then(|_| c.number())
                        .map(|x| f.amount = x),
                    "installments" => once(&mut tx, 1)
                        .and_then(|_| c.number())
                        .map(|x| f.installments = x),
                    "requested_at" => once(&mut tx, 2)
                        .and_then(|_| c.string())
                        .map(|s| f.requested_at = s),
                    _ => None,
                })
            }
            "customer" => {
                once(&mut top, 2)?;
                c.object(|c, key| match key {
                    "avg_amount" => once(&mut cu, 0)
                        .and_then(|_| c.number())
                        .map(|x| f.avg_amount = x),
                    "tx_count_24h" => once(&mut cu, 1)
                        .and_then(|_| c.number())
                        .map(|x| f.tx_count_24h = x),
                    "known_merchants" => once(&mut cu, 2)
                        .and_then(|_| c.strings())
                        .map(|s| f.known = Known::Plain(s)),
                    _ => None,
                })
            }
            "merchant" => {
                once(&mut top, 3)?;
                c.object(|c, key| match key {
                    "id" => once(&mut me, 0)
                        .and_then(|_| c.string())
                        .map(|s| f.merchant_id = s),
                    "mcc" => once(&mut me, 1).and_then(|_| c.string()).map(|s| f.mcc = s),
                    "avg_amount" => once(&mut me, 2)
                        .and_then(|_| c.number())
                        .map(|x| f.merchant_avg = x),
                    _ => None,
                })
            }
            "terminal" => {
                once(&mut top, 4)?;
                c.object(|c, key| match key {
                    "is_online" => once(&mut te, 0)
                        .and_then(|_| c.boolean())
                        .map(|b| f.is_online = b),
                    "card_present" => once(&mut te, 1)
                        .and_then(|_| c.boolean())
                        .map(|b| f.card_present = b),
                    "km_from_home" => once(&mut te, 2)
                        .and_then(|_| c.number())
                        .map(|x| f.km_from_home = x),
                    _ => None,
                })
            }
            "last_transaction" => {
                once(&mut top, 5)?;
                c.ws();
                if c.b[c.i..].starts_with(b"null") {
                    c.i += 4;
                    la = 0b11;
                    return Some(());
                }
                let (mut at, mut km) = ("", 0.0);
                c.object(|c, key| match key {
                    "timestamp" => once(&mut la, 0).and_then(|_| c.string()).map(|s| at = s),
                    "km_from_current" => once(&mut la, 1).and_then(|_| c.number()).map(|x| km = x),
                    _ => None,
                })?;
                f.last = Some((at, km));
                Some(())
            }
            _ => None,
        })?;
        // Every field present (the top-level "id" is optional).
        ((top | 1) == 0b11_1111
            && tx == 0b111
            && cu == 0b111
            && me == 0b111
            && te == 0b111
            && la == 0b11)
            .then_some(f)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const BODY: &str = r#"{"id":"tx-1","transaction":{"amount":500.0,"installments":3,"requested_at":"2026-03-24T11:05:35Z"},"customer":{"avg_amount":250.0,"tx_count_24h":4,"known_merchants":["MERC-1","MERC-2"]},"merchant":{"id":"MERC-2","mcc":"5411","avg_amount":1000.0},"terminal":{"is_online":false,"card_present":true,"km_from_home":10.0},"last_transaction":{"timestamp":"2026-03-24T10:05:35Z","km_from_current":5.0}}"#;

    #[test]
    fn reads_the_common_shape() {
        let f = read(BODY.as_bytes()).unwrap();
        assert_eq!(
            (f.amount, f.installments, f.avg_amount),
            (500.0, 3.0, 250.0)
        );
        assert_eq!(
            (f.merchant_id, f.mcc, f.merchant_avg),
            ("MERC-2", "5411", 1000.0)
        );
        assert_eq!(
            (f.is_online, f.card_present, f.km_from_home),
            (false, true, 10.0)
        );
        assert_eq!(f.last, Some(("2026-03-24T10:05:35Z", 5.0)));
        assert!(f.known.contains("MERC-1") && f.known.contains("MERC-2"));
        assert!(!f.known.contains("MERC-") && !f.known.contains("MERC-3"));
        // White space anywhere JSON allows it, and a null last transaction.
        let nulled = BODY.replace(
            r#"{"timestamp":"2026-03-24T10:05:35Z","km_from_current":5.0}"#,
            "null",
        );
        assert_ne!(nulled, BODY);
        let spaced = nulled
            .replace("\":", "\" :\t")
            .replace(',', "\r\n, ")
            .replace('{', "{ ")
            .replace('}', " }");
        let spaced = format!(" {spaced} \n");
        let f = read(spaced.as_bytes()).unwrap();
        assert_eq!(f.last, None);
        assert_eq!(f.requested_at, "2026-03-24T11:05:35Z");
        // No "id" at all, and no known merchants.
        let bare = BODY
            .replace("\"id\":\"tx-1\",", "")
            .replace("\"MERC-1\",\"MERC-2\"", "");
        let f = read(bare.as_bytes()).unwrap();
        assert!(!f.known.contains("MERC-2") && !f.known.contains(""));
    }

    #[test]
    fn numbers_are_read_as_serde_reads_them_or_left_to_serde() {
        // serde_json rounds these its own way (1 ulp from the nearest
        // f64); the fast path read them correctly rounded, a field apart
        // from serde's (found with fuzz/fuzz_targets/fraud_request.rs's
        // check), and the first amount into another vector (component 0
        // 9 where serde's path gives 8).
        for n in [
            "8.49999999999999921497038",
            "7926.07761244e-17",
            "0.12345678901234567",
            "9007199254740993",
            "1e23",
            "45e-23",
            "1e99999999999999999999",
        ] {
            let body = BODY.replacen("500.0", n, 1);
            assert!(read(body.as_bytes()).is_none(), "{n}");
        }
        for n in [
            "42.219271381",
            "0.0001",
            "0",
            "-0",
            "-0.0",
            "1e22",
            "1E+2",
            "9007199254740991",
            "123456789012345e-22",
            "0.000000000000000000000000000001e30",
            "-3.14e-0",
        ] {
            let body = BODY.replacen("500.0", n, 1);
            let f = read(body.as_bytes()).unwrap_or_else(|| panic!("{n}"));
            let want: f64 = serde_json::from_str(n).unwrap();
            assert_eq!(f.amount.to_bits(), want.to_bits(), "{n}");
        }
    }

    #[test]
    fn leaves_every_other_shape_to_serde() {
        for (from, to) in [
            ("MERC-1", "MERC\\u002d1"),                             // an escape
            ("MERC-1", "M\u{e9}RC"),                                // not ASCII
            ("\"id\":\"tx-1\"", "\"id\":1"),                        // id not a string
            ("\"id\":\"tx-1\"", "\"other\":1"),                     // an unknown field
            ("\"mcc\":\"5411\",", ""),                              // a missing field
            ("\"mcc\":\"5411\"", "\"mcc\":\"5411\",\"mcc\":\"1\""), // a duplicate
            ("500.0", "1e400"),                                     // past f64
            ("500.0", "01"),                                        // not JSON numbers
            ("500.0", "5."),
            ("500.0", ".5"),
            ("500.0", "+5"),
            ("500.0", "5e"),
            ("500.0", "NaN"),
            ("500.0", "\"500\""), // the wrong type
            ("false", "0"),
            ("false", "fals"),
            ("[\"MERC-1\",\"MERC-2\"]", "[\"MERC-1\",]"),
            ("[\"MERC-1\",\"MERC-2\"]", "[1]"),
            ("}}", "},}"),
        ] {
            assert!(BODY.contains(from), "{from}");
            let body = BODY.replacen(from, to, 1);
            assert!(read(body.as_bytes()).is_none(), "{body}");
        }
        for body in [
            format!("{BODY}x"),
            format!("{BODY}{{}}"),
            BODY[..BODY.len() - 1].to_string(),
            String::new(),
            "{}".to_string(),
            "[]".to_string(),
        ] {
            assert!(read(body.as_bytes()).is_none(), "{body}");
        }
    }
}
