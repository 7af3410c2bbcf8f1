//! `from` / `until` as Pyroscope reads them: Unix time whose unit follows from the number of
//! digits (13 ms, 16 µs, 19 ns, otherwise seconds), `YYYYMMDD`, or `now-1h`-style offsets.

/// Seconds per unit of a relative offset (`s`, `m`/`min`, `h`, `d`, `w`, `M`/`mon`, `y`);
/// `None` for any other.
fn unit_seconds(unit: &str) -> Option<i64> {
    if unit.starts_with('s') {
        Some(1)
    } else if unit.starts_with("mon") || unit.starts_with('M') {
        Some(30 * 86_400)
    } else if unit.starts_with('m') {
        Some(60)
    } else if unit.starts_with('h') {
        Some(3_600)
    } else if unit.starts_with('d') {
        Some(86_400)
    } else if unit.starts_with('w') {
        Some(7 * 86_400)
    } else if unit.starts_with('y') {
        Some(365 * 86_400)
    } else {
        None
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// `YYYYMMDD` at midnight UTC, in nanoseconds, when `s` is a real date after 1900.
fn date(s: &str) -> Option<i64> {
    let y: i64 = s[..4].parse().ok()?;
    let m: i64 = s[4..6].parse().ok()?;
    let d: i64 = s[6..].parse().ok()?;
    if y <= 1900 || !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return None;
    }
    Some(days_from_civil(y, m, d) * 86_400 * 1_000_000_000)
}

/// The instant `s` names, in nanoseconds since the Unix epoch; `now_ns` is the reference for
/// relative forms. `None` for what names no instant (`abc`, `1e30`, a number of seconds past
/// what nanoseconds hold, an offset in no known unit): Pyroscope takes those as now, which
/// stored an upload at a time its client never meant.
pub fn parse(s: &str, now_ns: i64) -> Option<i64> {
    let s: String = s
        .trim()
        .chars()
        .filter(|c| !matches!(c, '_' | ',' | ' '))
        .collect();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        if s.len() == 8 {
            if let Some(t) = date(&s) {
                return Some(t);
            }
        }
        let v = s.parse::<i64>().ok()?;
        return match s.len() {
            13 => v.checked_mul(1_000_000),
            16 => v.checked_mul(1_000),
            19 => Some(v),
            _ => v.checked_mul(1_000_000_000),
        };
    }
    // `<reference><+|-><offsets>`; the only reference understood is "now".
    let Some(i) = s.find(['+', '-']) else {
        return (s == "now").then_some(now_ns);
    };
    if !matches!(&s[..i], "" | "now") {
        return None;
    }
    let sign = if s.as_bytes()[i] == b'-' { -1 } else { 1 };
    let mut rest = &s[i + 1..];
    let mut seconds = 0i64;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let letters = rest.bytes().take_while(|b| !b.is_ascii_digit()).count();
        let unit = unit_seconds(&rest[..letters])?;
        rest = &rest[letters..];
        seconds = seconds.checked_add(n.checked_mul(unit)?)?;
    }
    now_ns.checked_add(sign * seconds.checked_mul(1_000_000_000)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000_000_000;

    #[test]
    fn unix_time_by_digit_count() {
        assert_eq!(parse("1700000000", NOW), Some(NOW));
        assert_eq!(parse("1700000000000", NOW), Some(NOW));
        assert_eq!(parse("1700000000000000", NOW), Some(NOW));
        assert_eq!(parse("1700000000000000000", NOW), Some(NOW));
        assert_eq!(parse("1_700_000_000", NOW), Some(NOW));
        assert_eq!(parse("20231114", NOW), Some(1_699_920_000_000_000_000));
        // Not a date: seconds.
        assert_eq!(parse("20231399", NOW), Some(20_231_399_000_000_000));
    }

    #[test]
    fn relative_offsets() {
        let s = 1_000_000_000;
        assert_eq!(parse("now-1h", NOW), Some(NOW - 3_600 * s));
        assert_eq!(parse("now-1h30m", NOW), Some(NOW - 5_400 * s));
        assert_eq!(parse("now+10s", NOW), Some(NOW + 10 * s));
        assert_eq!(parse("now-2d", NOW), Some(NOW - 2 * 86_400 * s));
        assert_eq!(parse("now", NOW), Some(NOW));
        assert_eq!(parse("-10s", NOW), Some(NOW - 10 * s));
    }

    #[test]
    fn what_names_no_instant_is_none() {
        for bad in [
            "garbage",
            "1e30",
            "abc",
            "now-1x",
            "later+1h",
            "99999999999999999999",
            "9999999999999",
        ] {
            assert_eq!(parse(bad, NOW), None, "{bad}");
        }
    }
}
