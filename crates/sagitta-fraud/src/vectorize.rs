//! A transaction as the contest sends it, and its 14-dimensional vector by
//! the contest's rules (`../shared/rinha/README.md`): each component
//! clamped to [0, 1] and rounded to 4 decimals; components 5 and 6 are -1
//! when there is no previous transaction.

use crate::fields::{Fields, Known};
use anyhow::Context;
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

/// Dimensions of a transaction vector.
pub const DIM: usize = 14;

/// The normalisation constants (`normalization.json`).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub struct Norms {
    pub max_amount: f64,
    pub max_installments: f64,
    pub amount_vs_avg_ratio: f64,
    pub max_minutes: f64,
    pub max_km: f64,
    pub max_tx_count_24h: f64,
    pub max_merchant_avg_amount: f64,
}

/// The constants a scorer needs: normalisation and MCC risk.
#[derive(Debug, Clone)]
pub struct Rules {
    pub norms: Norms,
    pub mcc_risk: HashMap<String, f64>,
}

/// Reads the contest's constants.
pub fn read_rules(norms: &Path, mcc: &Path) -> anyhow::Result<Rules> {
    let norms: Norms = serde_json::from_slice(
        &std::fs::read(norms).with_context(|| format!("read {}", norms.display()))?,
    )
    .with_context(|| format!("parse {}", norms.display()))?;
    let mcc_risk: HashMap<String, f64> = serde_json::from_slice(
        &std::fs::read(mcc).with_context(|| format!("read {}", mcc.display()))?,
    )
    .with_context(|| format!("parse {}", mcc.display()))?;
    Ok(Rules { norms, mcc_risk })
}

/// Risk of an MCC the table does not list.
pub const UNKNOWN_MCC_RISK: f64 = 0.5;

#[derive(Debug, Deserialize)]
pub struct Request<'a> {
    #[serde(borrow)]
    pub transaction: Transaction<'a>,
    #[serde(borrow)]
    pub customer: Customer<'a>,
    #[serde(borrow)]
    pub merchant: Merchant<'a>,
    pub terminal: Terminal,
    #[serde(borrow)]
    pub last_transaction: Option<LastTransaction<'a>>,
}

#[derive(Debug, Deserialize)]
pub struct Transaction<'a> {
    pub amount: f64,
    pub installments: f64,
    #[serde(borrow)]
    pub requested_at: Cow<'a, str>,
}

#[derive(Debug, Deserialize)]
pub struct Customer<'a> {
    pub avg_amount: f64,
    pub tx_count_24h: f64,
    #[serde(borrow)]
    pub known_merchants: Vec<Cow<'a, str>>,
}

#[derive(Debug, Deserialize)]
pub struct Merchant<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(borrow)]
    pub mcc: Cow<'a, str>,
    pub avg_amount: f64,
}

#[derive(Debug, Deserialize)]
pub struct Terminal {
    pub is_online: bool,
    pub card_present: bool,
    pub km_from_home: f64,
}

#[derive(Debug, Deserialize)]
pub struct LastTransaction<'a> {
    #[serde(borrow)]
    pub timestamp: Cow<'a, str>,
    pub km_from_current: f64,
}

impl<'a> From<&'a Request<'a>> for Fields<'a> {
    fn from(r: &'a Request<'a>) -> Fields<'a> {
        Fields {
            amount: r.transaction.amount,
            installments: r.transaction.installments,
            requested_at: &r.transaction.requested_at,
            avg_amount: r.customer.avg_amount,
            tx_count_24h: r.customer.tx_count_24h,
            known: Known::Decoded(&r.customer.known_merchants),
            merchant_id: &r.merchant.id,
            mcc: &r.merchant.mcc,
            merchant_avg: r.merchant.avg_amount,
            is_online: r.terminal.is_online,
            card_present: r.terminal.card_present,
            km_from_home: r.terminal.km_from_home,
            last: r
                .last_transaction
                .as_ref()
                .map(|l| (l.timestamp.as_ref(), l.km_from_current)),
        }
    }
}

/// Why a request cannot be scored.
#[derive(Debug, PartialEq)]
pub enum BadRequest {
    /// Not JSON, or a field missing or of the wrong type.
    Json(String),
    /// A timestamp that is not `YYYY-MM-DDTHH:MM:SS[.fff](Z|±HH:MM)`.
    Time(String),
    /// A number that is not finite.
    NotFinite(&'static str),
}

impl std::fmt::Display for BadRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadRequest::Json(e) => write!(f, "invalid transaction: {e}"),
            BadRequest::Time(t) => write!(f, "invalid timestamp {t:?}"),
            BadRequest::NotFinite(field) => write!(f, "{field} is not a finite number"),
        }
    }
}

/// Seconds since the Unix epoch of an RFC 3339 timestamp.
pub fn parse_time(s: &str) -> Result<i64, BadRequest> {
    let bad = || BadRequest::Time(s.chars().take(64).collect());
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, BadRequest> {
        let t = &b[r];
        if t.iter().all(u8::is_ascii_digit) {
            Ok(t.iter().fold(0i64, |a, &c| a * 10 + i64::from(c - b'0')))
        } else {
            Err(bad())
        }
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || sec > 60
    {
        return Err(bad());
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return Err(bad());
        }
    }
    let offset = match &b[i..] {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let digits = [*h1, *h2, *m1, *m2];
            if !digits.iter().all(u8::is_ascii_digit) {
                return Err(bad());
            }
            let v = |a: u8, c: u8| i64::from(a - b'0') * 10 + i64::from(c - b'0');
            let (oh, om) = (v(*h1, *h2), v(*m1, *m2));
            if oh > 23 || om > 59 {
                return Err(bad());
            }
            let o = oh * 3600 + om * 60;
            if *sign == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return Err(bad()),
    };
    Ok(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Clamped to [0, 1] and rounded to 4 decimals, as an exact grid code
/// (value × 10⁴).
fn code(x: f64) -> i16 {
    (x.clamp(0.0, 1.0) * 10_000.0).round() as i16
}

fn finite(x: f64, field: &'static str) -> Result<f64, BadRequest> {
    if x.is_finite() {
        Ok(x)
    } else {
        Err(BadRequest::NotFinite(field))
    }
}

/// The vector of a request body as grid codes (value × 10⁴, exact): read
/// by `crate::fastpath` when it is of the common shape, else by serde.
pub fn vectorize(body: &[u8], rules: &Rules) -> Result<[i16; DIM], BadRequest> {
    if let Some(f) = crate::fastpath::read(body) {
        return codes(&f, rules);
    }
    vectorize_serde(body, rules)
}

/// [`vectorize`] with serde alone (every body, every error message).
pub fn vectorize_serde(body: &[u8], rules: &Rules) -> Result<[i16; DIM], BadRequest> {
    let r: Request<'_> =
        serde_json::from_slice(body).map_err(|e| BadRequest::Json(e.to_string()))?;
    codes(&Fields::from(&r), rules)
}

/// The vector of a request's fields as grid codes.
pub fn codes(r: &Fields<'_>, rules: &Rules) -> Result<[i16; DIM], BadRequest> {
    let n = &rules.norms;
    let amount = finite(r.amount, "transaction.amount")?;
    let installments = finite(r.installments, "transaction.installments")?;
    let avg = finite(r.avg_amount, "customer.avg_amount")?;
    let tx24 = finite(r.tx_count_24h, "customer.tx_count_24h")?;
    let km_home = finite(r.km_from_home, "terminal.km_from_home")?;
    let m_avg = finite(r.merchant_avg, "merchant.avg_amount")?;
    let now = parse_time(r.requested_at)?;
    let mut v = [0i16; DIM];
    v[0] = code(amount / n.max_amount);
    v[1] = code(installments / n.max_installments);
    // A customer average of 0 or less makes the ratio unbounded: the
    // largest ratio (1) for a positive amount, else 0.
    v[2] = if avg > 0.0 {
        code(amount / avg / n.amount_vs_avg_ratio)
    } else if amount > 0.0 {
        10_000
    } else {
        0
    };
    let secs_of_day = now.rem_euclid(86_400);
    v[3] = code((secs_of_day / 3600) as f64 / 23.0);
    // 1970-01-01 was a Thursday (Monday = 0 makes it 3).
    v[4] = code(((now.div_euclid(86_400) + 3).rem_euclid(7)) as f64 / 6.0);
    match r.last {
        Some((timestamp, km)) => {
            let then = parse_time(timestamp)?;
            let km = finite(km, "last_transaction.km_from_current")?;
            v[5] = code((now - then) as f64 / 60.0 / n.max_minutes);
            v[6] = code(km / n.max_km);
        }
        None => {
            v[5] = -10_000;
            v[6] = -10_000;
        }
    }
    v[7] = code(km_home / n.max_km);
    v[8] = code(tx24 / n.max_tx_count_24h);
    v[9] = if r.is_online { 10_000 } else { 0 };
    v[10] = if r.card_present { 10_000 } else { 0 };
    v[11] = if r.known.contains(r.merchant_id) {
        0
    } else {
        10_000
    };
    v[12] = code(
        rules
            .mcc_risk
            .get(r.mcc)
            .copied()
            .unwrap_or(UNKNOWN_MCC_RISK),
    );
    v[13] = code(m_avg / n.max_merchant_avg_amount);
    Ok(v)
}

/// Grid codes as the f32 values the index takes (exact on its grid).
pub fn as_f32(codes: &[i16; DIM]) -> [f32; DIM] {
    let mut out = [0f32; DIM];
    for (o, &c) in out.iter_mut().zip(codes) {
        *o = (f64::from(c) / 10_000.0) as f32;
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn rules() -> Rules {
        Rules {
            norms: Norms {
                max_amount: 10_000.0,
                max_installments: 12.0,
                amount_vs_avg_ratio: 10.0,
                max_minutes: 1440.0,
                max_km: 1000.0,
                max_tx_count_24h: 20.0,
                max_merchant_avg_amount: 10_000.0,
            },
            mcc_risk: HashMap::from([("5411".to_string(), 0.15)]),
        }
    }

    const BODY: &str = r#"{"id":"tx-1","transaction":{"amount":500.0,"installments":3,"requested_at":"2026-03-24T11:05:35Z"},"customer":{"avg_amount":250.0,"tx_count_24h":4,"known_merchants":["MERC-1","MERC-2"]},"merchant":{"id":"MERC-2","mcc":"5411","avg_amount":1000.0},"terminal":{"is_online":false,"card_present":true,"km_from_home":10.0},"last_transaction":{"timestamp":"2026-03-24T10:05:35Z","km_from_current":5.0}}"#;

    #[test]
    fn the_contest_rules() {
        let v = vectorize(BODY.as_bytes(), &rules()).unwrap();
        // 2026-03-24 was a Tuesday (1); 60 minutes since the last one.
        assert_eq!(
            v,
            [500, 2500, 2000, 4783, 1667, 417, 50, 100, 2000, 0, 10_000, 0, 1500, 1000]
        );
    }

    #[test]
    fn the_fast_path_and_serde_give_the_same_vectors() {
        let nulled = BODY.replace(
            r#"{"timestamp":"2026-03-24T10:05:35Z","km_from_current":5.0}"#,
            "null",
        );
        for body in [
            BODY.to_string(),
            nulled,
            BODY.replace("\"MERC-2\"]", "\"MERC-9\"]"),
            BODY.replace("500.0", "0.123456789012345"),
            BODY.replace("500.0", "-2.5e-3"),
            BODY.replace("250.0", "0"),
            BODY.replace("\"5411\"", "\"9999\""),
            BODY.replace("+", "")
                .replace("11:05:35Z", "11:05:35.5+03:00"),
        ] {
            assert!(crate::fastpath::read(body.as_bytes()).is_some(), "{body}");
            assert_eq!(
                vectorize(body.as_bytes(), &rules()),
                vectorize_serde(body.as_bytes(), &rules()),
                "{body}"
            );
        }
        // A bad timestamp is refused the same way on both paths.
        let bad = BODY.replace("2026-03-24T11", "2026-02-30T11");
        assert!(crate::fastpath::read(bad.as_bytes()).is_some());
        assert_eq!(
            vectorize(bad.as_bytes(), &rules()),
            vectorize_serde(bad.as_bytes(), &rules())
        );
        assert!(vectorize(bad.as_bytes(), &rules()).is_err());
    }

    /// Every request of the contest's test file (compact, as serde_json
    /// writes it back): read by the fast path, into the vector serde's
    /// path gives and the file expects.
    #[test]
    fn the_fast_path_reads_every_contest_request() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/rinha");
        let rules =
            read_rules(&dir.join("normalization.json"), &dir.join("mcc_risk.json")).unwrap();
        let f = std::fs::File::open(dir.join("test-data-6100-100k.json.gz")).unwrap();
        let v: serde_json::Value =
            serde_json::from_reader(flate2::read::GzDecoder::new(f)).unwrap();
        let entries = v["entries"].as_array().unwrap();
        assert_eq!(entries.len(), 6100);
        for e in entries {
            let body = serde_json::to_vec(&e["request"]).unwrap();
            assert!(crate::fastpath::read(&body).is_some(), "{}", e["request"]);
            let fast = vectorize(&body, &rules).unwrap();
            assert_eq!(fast, vectorize_serde(&body, &rules).unwrap());
            let want: Vec<f32> = e["info"]["vector"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            assert_eq!(as_f32(&fast).to_vec(), want, "{}", e["request"]);
        }
    }

    #[test]
    fn escaped_strings_read_as_their_characters() {
        let plain = vectorize(BODY.as_bytes(), &rules()).unwrap();
        // Every string with an escape: same characters, same vector.
        let escaped = BODY
            .replace("MERC-", "MERC\\u002d")
            .replace("2026-", "2026\\u002d")
            .replace("5411", "\\u0035411");
        assert_ne!(escaped, BODY);
        assert_eq!(vectorize(escaped.as_bytes(), &rules()).unwrap(), plain);
        // Non-ASCII ids, escaped (as Python's json.dumps writes them) in
        // one place and raw in the other, still match.
        let unicode = BODY
            .replace("\"MERC-2\"]", "\"M\\u00e9RC\"]")
            .replace("\"id\":\"MERC-2\"", "\"id\":\"M\u{e9}RC\"");
        assert_eq!(vectorize(unicode.as_bytes(), &rules()).unwrap(), plain);
    }

    #[test]
    fn out_of_range_numbers_are_clamped() {
        let with = |from: &str, to: &str| {
            assert!(BODY.contains(from), "{from}");
            vectorize(BODY.replace(from, to).as_bytes(), &rules()).unwrap()
        };
        assert_eq!(with("\"amount\":500.0", "\"amount\":-5")[0], 0);
        assert_eq!(with("\"amount\":500.0", "\"amount\":1e300")[0], 10_000);
        // A customer average of 0: the largest ratio for a positive amount.
        assert_eq!(with("\"avg_amount\":250.0", "\"avg_amount\":0")[2], 10_000);
        assert_eq!(
            with("\"tx_count_24h\":4", "\"tx_count_24h\":1e9")[8],
            10_000
        );
        assert_eq!(with("\"km_from_home\":10.0", "\"km_from_home\":-1")[7], 0);
        // The previous transaction after this one: no negative minutes.
        assert_eq!(with("T10:05:35Z", "T12:05:35Z")[5], 0);
        assert_eq!(with("\"mcc\":\"5411\"", "\"mcc\":\"0000\"")[12], 5000);
        // Beyond what an f64 holds: not a number JSON can give us.
        let e = vectorize(BODY.replace("500.0", "1e400").as_bytes(), &rules()).unwrap_err();
        assert!(matches!(e, BadRequest::Json(_)), "{e}");
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(parse_time("2026-03-24T11:05:35Z").unwrap(), 1_774_350_335);
        assert_eq!(
            parse_time("2026-03-24T12:05:35+01:00").unwrap(),
            1_774_350_335
        );
        assert_eq!(
            parse_time("2026-03-24T11:05:35.250Z").unwrap(),
            1_774_350_335
        );
        for bad in [
            "",
            "2026-03-24",
            "2026-02-30T00:00:00Z",
            "2026-03-24T25:00:00Z",
            "2026-03-24T11:05:35",
            "2026-03-24T11:05:35+1:00",
            "２０２６-03-24T11:05:35Z",
            "2026-03-24T11:05:35.Z",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }
}
