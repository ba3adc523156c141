//! RFC 3339 timestamps: payload timestamps are µs since the Unix epoch,
//! UTC; JSON reads and writes them as RFC 3339 strings (civil dates by
//! Howard Hinnant's algorithms, no calendar library).

/// Formats µs since the epoch as RFC 3339 in UTC
/// (`2024-05-01T12:00:00.000001Z`; the fraction only when non-zero).
pub fn format_rfc3339(us: i64) -> String {
    let days = us.div_euclid(86_400_000_000);
    let rem = us.rem_euclid(86_400_000_000);
    // Civil from days (Howard Hinnant's algorithm), the inverse of the
    // computation in `parse_rfc3339`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (secs, frac) = (rem / 1_000_000, rem % 1_000_000);
    let (h, mi, sec) = (secs / 3600, secs / 60 % 60, secs % 60);
    if frac == 0 {
        format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{sec:02}Z")
    } else {
        format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{sec:02}.{frac:06}Z")
    }
}

/// Parses `YYYY-MM-DD[(T| )HH:MM[:SS[.frac]]][Z|±HH:MM]` to µs since the
/// epoch (UTC).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |a: usize, n: usize| -> Option<i64> {
        let t = b.get(a..a + n)?;
        t.iter().all(u8::is_ascii_digit).then(|| {
            t.iter()
                .fold(0i64, |acc, &d| acc * 10 + i64::from(d - b'0'))
        })
    };
    let (y, mo, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    if b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') || !(1..=12).contains(&mo) {
        return None;
    }
    if !(1..=31).contains(&d) {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let mut us = days * 86_400_000_000;
    let mut at = 10;
    if at < b.len() {
        if !matches!(b[at], b'T' | b't' | b' ') {
            return None;
        }
        let (h, mi) = (num(at + 1, 2)?, num(at + 4, 2)?);
        if b.get(at + 3) != Some(&b':') || h > 23 || mi > 59 {
            return None;
        }
        us += (h * 3600 + mi * 60) * 1_000_000;
        at += 6;
        if b.get(at) == Some(&b':') {
            let sec = num(at + 1, 2)?;
            if sec > 60 {
                return None;
            }
            us += sec * 1_000_000;
            at += 3;
            if b.get(at) == Some(&b'.') {
                at += 1;
                let mut scale = 100_000;
                let start = at;
                while at < b.len() && b[at].is_ascii_digit() {
                    us += i64::from(b[at] - b'0') * scale;
                    scale /= 10;
                    at += 1;
                }
                if at == start {
                    return None;
                }
            }
        }
        match b.get(at) {
            None => {}
            Some(b'Z' | b'z') if at + 1 == b.len() => {}
            Some(&sign @ (b'+' | b'-')) if at + 6 == b.len() && b[at + 3] == b':' => {
                let off = (num(at + 1, 2)? * 60 + num(at + 4, 2)?) * 60_000_000;
                us += if sign == b'+' { -off } else { off };
            }
            _ => return None,
        }
    }
    Some(us)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_timestamps() {
        assert_eq!(parse_rfc3339("1970-01-01"), Some(0));
        assert_eq!(parse_rfc3339("1970-01-02T00:00:00Z"), Some(86_400_000_000));
        assert_eq!(
            parse_rfc3339("2024-05-01T12:30:15.25Z"),
            Some(1_714_566_615_250_000)
        );
        // An offset is subtracted to get UTC.
        assert_eq!(
            parse_rfc3339("2024-05-01T14:30:15.25+02:00"),
            parse_rfc3339("2024-05-01T12:30:15.25Z")
        );
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), Some(-1_000_000));
        for bad in [
            "",
            "2024",
            "2024-13-01",
            "2024-01-01T25:00",
            "2024-01-01X",
            "yesterday",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            format_rfc3339(1_714_566_615_250_000),
            "2024-05-01T12:30:15.250000Z"
        );
        assert_eq!(format_rfc3339(-1_000_000), "1969-12-31T23:59:59Z");
        for us in [
            -62_135_596_800_000_000, // 0001-01-01
            951_782_400_000_001,     // 2000-02-29, leap day
            4_102_444_799_999_999,   // 2099-12-31T23:59:59.999999
        ] {
            assert_eq!(parse_rfc3339(&format_rfc3339(us)), Some(us), "{us}");
        }
    }
}
