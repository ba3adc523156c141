//! Request bodies whose query vector is read without serde's per-number
//! cost.
//!
//! A search body is mostly its vector: 384 numbers of 17-20 characters
//! each (what `json.dumps` of a float list writes) are 8 kB, and serde_json
//! reads them at about 25 µs, a tenth of a search. Here the vector array is
//! found by a scan of the body's structure, read by a tight loop that takes
//! each number to the same `f32` serde_json gives (its own rounding: the
//! decimal significand as an `f64`, scaled by a power of ten, then cast),
//! and replaced by `[]` before serde reads the rest, so every other field
//! keeps serde's typing and checks. Anything the scan does not expect (an
//! escaped key, a number it does not take, a duplicate key) sends the whole
//! body to serde as it is, so errors and odd inputs are answered exactly as
//! before.

use serde::de::DeserializeOwned;
use std::ops::Range;
use std::sync::OnceLock;

/// A request whose vectors the fast path reads: one query vector (an
/// array of numbers) and / or a batch (an array of such arrays), both
/// keys of one object of the body.
pub trait WithVector: DeserializeOwned {
    /// The keys from the top-level object down to the object holding the
    /// vectors (empty: the top level).
    const AT: &'static [&'static str] = &[];
    /// The key of one vector.
    const ONE: Option<&'static str> = None;
    /// The key of a batch of vectors.
    const MANY: Option<&'static str> = None;
    /// Puts the vector under [`WithVector::ONE`] in place (the body
    /// parsed had `[]` there).
    fn set_one(&mut self, _v: Vec<f32>) {}
    /// Puts the vectors under [`WithVector::MANY`] in place (the body
    /// parsed had `[]` there).
    fn set_many(&mut self, _v: Vec<Vec<f32>>) {}
}

/// What the scan read under a key.
enum Floats {
    One(Vec<f32>),
    Many(Vec<Vec<f32>>),
}

/// `T` from a JSON body, its vectors read by the fast path where it can.
pub fn from_slice<T: WithVector>(bytes: &[u8]) -> serde_json::Result<T> {
    if let Some(found) = find(bytes, T::AT, T::ONE, T::MANY).filter(|f| !f.is_empty()) {
        let mut rest = Vec::with_capacity(512);
        let mut at = 0;
        for (r, _) in &found {
            rest.extend_from_slice(&bytes[at..r.start]);
            rest.extend_from_slice(b"[]");
            at = r.end;
        }
        rest.extend_from_slice(&bytes[at..]);
        if let Ok(mut t) = serde_json::from_slice::<T>(&rest) {
            for (_, f) in found {
                match f {
                    Floats::One(v) => t.set_one(v),
                    Floats::Many(v) => t.set_many(v),
                }
            }
            return Ok(t);
        }
    }
    serde_json::from_slice(bytes)
}

/// The byte ranges of the arrays under `one` and `many` in the object at
/// `path`, in body order, with their numbers; `None` where the body is not
/// what the fast path reads.
fn find(
    b: &[u8],
    path: &[&str],
    one: Option<&str>,
    many: Option<&str>,
) -> Option<Vec<(Range<usize>, Floats)>> {
    let mut s = Scan { b, i: 0 };
    let mut found = Vec::new();
    s.ws();
    s.object(path, one, many, &mut found)?;
    s.ws();
    (s.i == b.len()).then_some(found)
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// An object at the cursor: reads the arrays under `one` and `many`
    /// where `path` is empty, or goes down the key `path[0]`; anything else
    /// is stepped over. A key met twice gives up (serde says so).
    fn object(
        &mut self,
        path: &[&str],
        one: Option<&str>,
        many: Option<&str>,
        found: &mut Vec<(Range<usize>, Floats)>,
    ) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        let is = |key: &[u8], k: Option<&str>| k.is_some_and(|k| k.as_bytes() == key);
        let (mut seen_down, mut seen_one, mut seen_many) = (false, false, false);
        loop {
            self.ws();
            let key = self.key()?;
            self.ws();
            self.eat(b':')?;
            self.ws();
            let start = self.i;
            match path.split_first() {
                Some((first, rest)) if key == first.as_bytes() => {
                    if std::mem::replace(&mut seen_down, true) {
                        return None;
                    }
                    self.object(rest, one, many, found)?;
                }
                None if is(key, one) => {
                    if std::mem::replace(&mut seen_one, true) {
                        return None;
                    }
                    let v = self.floats()?;
                    found.push((start..self.i, Floats::One(v)));
                }
                None if is(key, many) => {
                    if std::mem::replace(&mut seen_many, true) {
                        return None;
                    }
                    let v = self.batch()?;
                    found.push((start..self.i, Floats::Many(v)));
                }
                _ => self.skip_value()?,
            }
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array of arrays of numbers.
    fn batch(&mut self) -> Option<Vec<Vec<f32>>> {
        self.array(Vec::new(), Self::floats)
    }

    /// An array at the cursor, each element read by `elem` into `out`.
    fn array<T>(
        &mut self,
        mut out: Vec<T>,
        mut elem: impl FnMut(&mut Self) -> Option<T>,
    ) -> Option<Vec<T>> {
        self.eat(b'[')?;
        self.ws();
        if self.eat(b']').is_some() {
            return Some(out);
        }
        loop {
            self.ws();
            out.push(elem(self)?);
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(out);
                }
                _ => return None,
            }
        }
    }

    /// A key without escapes.
    fn key(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        loop {
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(&self.b[start..self.i - 1]);
                }
                b'\\' => return None,
                _ => self.i += 1,
            }
        }
    }

    /// Steps over a string (escapes included) at the cursor.
    fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                b'\\' => self.i += 2,
                _ => self.i += 1,
            }
        }
    }

    /// Steps over any value; serde checks it later.
    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.skip_string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            _ => {
                let start = self.i;
                while let Some(c) = self.peek() {
                    if matches!(c, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                        break;
                    }
                    self.i += 1;
                }
                (self.i > start).then_some(())
            }
        }
    }

    /// An array of numbers.
    fn floats(&mut self) -> Option<Vec<f32>> {
        self.array(Vec::with_capacity(512), |s| {
            let (v, n) = number(&s.b[s.i..])?;
            s.i += n;
            Some(v)
        })
    }
}

/// `10^0 ..= 10^308` as `f64` literals read them (what serde_json scales by).
fn pow10() -> &'static [f64; 309] {
    static P: OnceLock<[f64; 309]> = OnceLock::new();
    P.get_or_init(|| {
        let mut p = [0.0; 309];
        for (e, x) in p.iter_mut().enumerate() {
            *x = format!("1e{e}").parse().unwrap_or(f64::INFINITY);
        }
        p
    })
}

/// Whether the eight bytes of `w` (little-endian) are all ASCII digits.
fn eight_digits(w: u64) -> bool {
    let a = w.wrapping_add(0x4646_4646_4646_4646);
    let b = w.wrapping_sub(0x3030_3030_3030_3030);
    (a | b) & 0x8080_8080_8080_8080 == 0
}

/// The value of eight ASCII digits (the first byte the most significant).
fn parse_eight(w: u64) -> u64 {
    let w = w - 0x3030_3030_3030_3030;
    let w = (w * 10) + (w >> 8);
    let lo = (w & 0x0000_00FF_0000_00FF).wrapping_mul(0x000F_4240_0000_0064);
    let hi = ((w >> 16) & 0x0000_00FF_0000_00FF).wrapping_mul(0x0000_2710_0000_0001);
    lo.wrapping_add(hi) >> 32
}

/// One JSON number at the start of `s` as serde_json reads it into an
/// `f32`, and its length; `None` for anything it does not take (not a
/// JSON number, more than 19 significant digits, an exponent past the
/// table, a value out of range).
fn number(s: &[u8]) -> Option<(f32, usize)> {
    let mut i = 0;
    let positive = s.first() != Some(&b'-');
    if !positive {
        i += 1;
    }
    let mut sig: u64 = 0;
    match *s.get(i)? {
        b'0' => {
            i += 1;
            if s.get(i).is_some_and(u8::is_ascii_digit) {
                return None; // a leading zero
            }
        }
        b'1'..=b'9' => {
            // Up to 19 digits always fit a u64.
            let start = i;
            while let Some(&c @ b'0'..=b'9') = s.get(i) {
                if i - start == 19 {
                    return None;
                }
                sig = sig * 10 + u64::from(c - b'0');
                i += 1;
            }
        }
        _ => return None,
    }
    let mut exp: i32 = 0;
    let mut float = false;
    if s.get(i) == Some(&b'.') {
        float = true;
        i += 1;
        let start = i;
        // Eight digits at a time where eight follow (the usual case: 17
        // significant digits), then one at a time.
        while let Some(w) = s.get(i..i + 8) {
            let w = u64::from_le_bytes(w.try_into().ok()?);
            if !eight_digits(w) {
                break;
            }
            sig = sig.checked_mul(100_000_000)?.checked_add(parse_eight(w))?;
            i += 8;
        }
        while let Some(&c @ b'0'..=b'9') = s.get(i) {
            let d = u64::from(c - b'0');
            sig = sig.checked_mul(10)?.checked_add(d)?;
            i += 1;
        }
        if i == start {
            return None;
        }
        exp = -((i - start) as i32);
    }
    if let Some(b'e' | b'E') = s.get(i) {
        float = true;
        i += 1;
        let neg = match s.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let start = i;
        let mut e: i32 = 0;
        while let Some(&c @ b'0'..=b'9') = s.get(i) {
            if i - start == 4 {
                return None;
            }
            e = e * 10 + i32::from(c - b'0');
            i += 1;
        }
        if i == start {
            return None;
        }
        exp += if neg { -e } else { e };
    }
    if !float {
        // serde_json: a u64, an i64, or -0 / below i64::MIN as an f64.
        let v = if positive {
            sig as f32
        } else {
            let neg = (sig as i64).wrapping_neg();
            if neg >= 0 {
                -(sig as f64) as f32
            } else {
                neg as f32
            }
        };
        return Some((v, i));
    }
    let p = *pow10().get(exp.unsigned_abs() as usize)?;
    let mut f = sig as f64;
    if exp >= 0 {
        f *= p;
        if f.is_infinite() {
            return None;
        }
    } else {
        f /= p;
    }
    let f = if positive { f } else { -f };
    Some((f as f32, i))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Req {
        #[serde(default)]
        vector: Option<Vec<f32>>,
        #[serde(default)]
        vectors: Vec<Vec<f32>>,
        #[serde(default)]
        k: usize,
        #[serde(default)]
        filter: Option<serde_json::Value>,
        #[serde(default)]
        name: Option<String>,
    }

    impl WithVector for Req {
        const ONE: Option<&'static str> = Some("vector");
        const MANY: Option<&'static str> = Some("vectors");
        fn set_one(&mut self, v: Vec<f32>) {
            self.vector = Some(v);
        }
        fn set_many(&mut self, v: Vec<Vec<f32>>) {
            self.vectors = v;
        }
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        #[serde(default)]
        search: Option<Req>,
        #[serde(default)]
        name: Option<String>,
    }

    impl WithVector for Outer {
        const AT: &'static [&'static str] = &["search"];
        const ONE: Option<&'static str> = Some("vector");
        const MANY: Option<&'static str> = Some("vectors");
        fn set_one(&mut self, v: Vec<f32>) {
            if let Some(s) = &mut self.search {
                s.set_one(v);
            }
        }
        fn set_many(&mut self, v: Vec<Vec<f32>>) {
            if let Some(s) = &mut self.search {
                s.set_many(v);
            }
        }
    }

    /// Every number serde_json reads into an f32 reads the same here, bit
    /// for bit, and every text it refuses is refused.
    #[test]
    fn numbers_read_as_serde_json_reads_them() {
        let mut cases: Vec<String> = [
            "0",
            "-0",
            "1",
            "-1",
            "0.0",
            "-0.0",
            "1e5",
            "1E5",
            "1e+5",
            "1e-5",
            "-1.5e-7",
            "3.4e38",
            "3.5e38",
            "-3.5e38",
            "1e-46",
            "1e-45",
            "1.0e-300",
            "123456789012345678",
            "1234567890123456789",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "0.1",
            "0.30000000000000004",
            "1.17549435e-38",
            "1.401298464324817e-45",
            "0.0018329578451812267",
            "-0.06933578",
            "1.2345678901234567e-08",
            "5e-324",
            "1e308",
            "0.000000000000000000001",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let f = f32::from_bits((x >> 32) as u32);
            if f.is_finite() {
                cases.push(format!("{}", f as f64));
                cases.push(format!("{:e}", f as f64));
                cases.push(format!("{f}"));
            }
            let g = (x as i64 as f64) / 1e18;
            cases.push(format!("{g}"));
        }
        let mut taken = 0;
        for c in &cases {
            let serde: Option<f32> = serde_json::from_str(c).ok();
            let ours = number(c.as_bytes())
                .filter(|&(_, n)| n == c.len())
                .map(|(v, _)| v);
            if let Some(v) = ours {
                assert_eq!(serde.map(f32::to_bits), Some(v.to_bits()), "{c}");
                taken += 1;
            }
        }
        assert!(taken > cases.len() / 2, "{taken} of {}", cases.len());
        // What embedding clients send (f32 components of unit vectors as
        // their shortest f64 or f32 text) always takes the fast path.
        for i in 0..100_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let f = ((x >> 40) as f32 / (1u32 << 24) as f32 - 0.5) * (i % 7 + 1) as f32 / 4.0;
            for c in [format!("{}", f as f64), format!("{f}")] {
                let (v, n) = number(c.as_bytes()).unwrap();
                assert_eq!(n, c.len());
                assert_eq!(
                    v.to_bits(),
                    serde_json::from_str::<f32>(&c).unwrap().to_bits()
                );
            }
        }
        for bad in [
            "01", "-", "1.", ".5", "1e", "1e+", "+1", "NaN", "inf", "-a", "1.e5",
        ] {
            let ours = number(bad.as_bytes()).filter(|&(_, n)| n == bad.len());
            assert!(ours.is_none(), "{bad}");
            assert!(serde_json::from_str::<f32>(bad).is_err(), "{bad}");
        }
    }

    /// Bodies read the same as serde_json reads them, and bodies it
    /// refuses are refused with serde_json's own message.
    #[test]
    fn bodies_read_as_serde_json_reads_them() {
        let ok = [
            r#"{"vector": [0.5, -1e-3, 2], "k": 3}"#,
            r#" { "k":3 ,"vector":[ 1 , 2 ] , "filter": {"a": [1, {"b": "x]}\"}"}]} } "#,
            r#"{"name": "a\"vector\"", "vector": []}"#,
            r#"{"k": 1}"#,
            r#"{}"#,
            r#"{"vector": [1e400]}"#,
            r#"{"vector": [1, 2,]}"#,
            r#"{"vector": [1, 2], "vector": [3]}"#,
            r#"{"vector": [1, 2], "k": -1}"#,
            r#"{"vector": [1, 2], "extra": 1}"#,
            r#"{"vector": [01]}"#,
            r#"{"vector": [1, 2]} x"#,
            r#"{"vector": [1, 2]"#,
            r#"{"vec\u0074or": [1, 2]}"#,
            r#"{"vector": [1.00000000000000000001, 2]}"#,
            r#"{"vector": null}"#,
            r#"{"vector": "x", "k": 2}"#,
            r#"[1, 2]"#,
            r#"{"vectors": [[1, 2], [0.25, -3e-2]], "k": 2}"#,
            r#"{"vector": [5], "vectors": [[1, 2], []], "k": 2}"#,
            r#"{"vectors": [], "vector": [1]}"#,
            r#"{"vectors": [[1], [2]], "vectors": [[3]]}"#,
            r#"{"vectors": [[1], 2]}"#,
            r#"{"vectors": [[1], [2],]}"#,
            r#"{"vectors": [1, 2]}"#,
        ];
        for body in ok {
            let serde = serde_json::from_str::<Req>(body).map_err(|e| e.to_string());
            let ours = from_slice::<Req>(body.as_bytes()).map_err(|e| e.to_string());
            assert_eq!(ours, serde, "{body}");
        }
        let nested = [
            r#"{"search": {"vector": [0.25, 3], "k": 2}}"#,
            r#"{"name": "c", "search": {"k": 2, "vector": [1]}}"#,
            r#"{"search": {"k": 2}}"#,
            r#"{"search": {"vector": [1], "vector": [2]}}"#,
            r#"{"name": "c"}"#,
            r#"{"search": {"vectors": [[1], [2, 3]], "vector": [4]}, "name": "c"}"#,
            r#"{"search": {"k": 1}, "search": {"k": 2}}"#,
        ];
        for body in nested {
            let serde = serde_json::from_str::<Outer>(body).map_err(|e| e.to_string());
            let ours = from_slice::<Outer>(body.as_bytes()).map_err(|e| e.to_string());
            assert_eq!(ours, serde, "{body}");
        }
    }
}
