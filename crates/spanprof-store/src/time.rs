//! Time arguments of queries: RFC 3339 (`2026-11-29T09:00:00Z`), unix seconds, milliseconds or
//! nanoseconds (told apart by magnitude), `now`, and `now-15m` / `now-1h30m` style offsets.

/// A time or duration argument that does not parse (the text as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// Not a time.
    #[error(
        "{0:?} is not a time: use RFC 3339 (2026-11-29T09:00:00Z), unix seconds or \
         milliseconds, or now-1h"
    )]
    NotATime(String),
    /// Not a duration.
    #[error("{0:?} is not a duration (try 15s, 5m, 1h30m, 7d)")]
    NotADuration(String),
}

/// Parses a time argument to nanoseconds since the Unix epoch; `now_ns` is "now".
pub fn parse_time(s: &str, now_ns: i64) -> Result<i64, TimeError> {
    let t = s.trim();
    if t == "now" {
        return Ok(now_ns);
    }
    if let Some(rest) = t.strip_prefix("now-") {
        return parse_duration(rest).map(|d| now_ns.saturating_sub(d as i64));
    }
    if let Ok(n) = t.parse::<i64>() {
        // Unix time in s, ms, µs or ns, by magnitude (seconds stay below 1e11 until year 5138).
        return Ok(match n.unsigned_abs() {
            0..100_000_000_000 => n.saturating_mul(1_000_000_000),
            100_000_000_000..100_000_000_000_000 => n.saturating_mul(1_000_000),
            100_000_000_000_000..100_000_000_000_000_000 => n.saturating_mul(1_000),
            _ => n,
        });
    }
    // Unix seconds with a fraction (`1700000000.25`, as `date +%s.%N` writes them).
    if let Some((whole, frac)) = t.split_once('.') {
        if let (Ok(secs), true) = (
            whole.parse::<u32>(),
            !frac.is_empty() && frac.len() <= 9 && frac.bytes().all(|b| b.is_ascii_digit()),
        ) {
            let nanos: i64 = format!("{frac:0<9}").parse().unwrap_or(0);
            return Ok(i64::from(secs) * 1_000_000_000 + nanos);
        }
    }
    parse_rfc3339(t).ok_or_else(|| TimeError::NotATime(s.to_owned()))
}

/// Parses `15s`, `500ms`, `1h30m`, `2d` to nanoseconds. A bare `0` is zero, as Go's
/// `time.ParseDuration` has it (`minDuration=0` from a Tempo client); any other number needs a unit.
pub fn parse_duration(s: &str) -> Result<u64, TimeError> {
    let err = || TimeError::NotADuration(s.to_owned());
    let mut total: u64 = 0;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(err());
    }
    if rest == "0" {
        return Ok(0);
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(digits);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let n: f64 = num.parse().map_err(|_| err())?;
        let mult: f64 = match unit {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "d" => 86400e9,
            "w" => 7.0 * 86400e9,
            _ => return Err(err()),
        };
        total = total.saturating_add((n * mult) as u64);
        rest = tail;
    }
    Ok(total)
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`; a space may stand for `T`.
fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut pos = 19;
    let mut frac_ns = 0i64;
    if b.get(pos) == Some(&b'.') {
        let start = pos + 1;
        let end = start + b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
        if end == start {
            return None;
        }
        let digits = &s[start..end.min(start + 9)];
        frac_ns = digits.parse::<i64>().ok()? * 10i64.pow(9 - digits.len() as u32);
        pos = end;
    }
    let offset_s = match s.get(pos..)? {
        "Z" | "z" => 0,
        tz if tz.len() == 6
            && (tz.starts_with('+') || tz.starts_with('-'))
            && tz.as_bytes()[3] == b':' =>
        {
            let h: i64 = tz[1..3].parse().ok()?;
            let m: i64 = tz[4..6].parse().ok()?;
            let o = h * 3600 + m * 60;
            if tz.starts_with('-') {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86400 + hour * 3600 + min * 60 + sec - offset_s;
    Some(secs * 1_000_000_000 + frac_ns)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// `ns` (since the Unix epoch) as RFC 3339 in UTC to the second, as messages show a time:
/// `2026-12-01T09:30:00Z`.
pub fn format_rfc3339(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let (days, sec_of_day) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        sec_of_day / 3600,
        sec_of_day / 60 % 60,
        sec_of_day % 60
    )
}

/// The proleptic Gregorian date of a day since 1970-01-01 (the inverse of
/// [`days_from_civil`], by the same author).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatted_times_parse_back() {
        assert_eq!(format_rfc3339(NOW), "2025-11-29T09:00:00Z");
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(-1), "1969-12-31T23:59:59Z");
        // Whole seconds, over leap days and centuries, both ways.
        for ns in [
            951_782_400,
            951_868_799,
            4_107_542_400,
            -2_208_988_800,
            1_709_251_199,
        ]
        .map(|s: i64| s * 1_000_000_000)
        {
            assert_eq!(parse_time(&format_rfc3339(ns), NOW), Ok(ns), "{ns}");
        }
    }

    const NOW: i64 = 1_764_406_800_000_000_000; // 2025-11-29T09:00:00Z

    #[test]
    fn times_parse() {
        assert_eq!(parse_time("2025-11-29T09:00:00Z", 0), Ok(NOW));
        assert_eq!(parse_time("2025-11-29T10:00:00+01:00", 0), Ok(NOW));
        assert_eq!(
            parse_time("2025-11-29T09:00:00.5Z", 0),
            Ok(NOW + 500_000_000)
        );
        assert_eq!(parse_time("1970-01-01T00:00:00Z", 0), Ok(0));
        assert_eq!(parse_time("1764406800", 0), Ok(NOW));
        assert_eq!(parse_time("1764406800000", 0), Ok(NOW));
        assert_eq!(parse_time("1764406800.25", 0), Ok(NOW + 250_000_000));
        assert_eq!(parse_time("1764406800.000000001", 0), Ok(NOW + 1));
        assert!(parse_time("1764406800.", 0).is_err());
        assert!(parse_time("1764406800.0000000001", 0).is_err());
        assert_eq!(parse_time(&NOW.to_string(), 0), Ok(NOW));
        assert_eq!(parse_time("now", NOW), Ok(NOW));
        assert_eq!(parse_time("now-1h", NOW), Ok(NOW - 3_600_000_000_000));
        assert_eq!(parse_time("now-1h30m", NOW), Ok(NOW - 5_400_000_000_000));
        assert!(parse_time("yesterday", NOW).is_err());
        assert!(parse_time("2025-13-01T00:00:00Z", NOW).is_err());
        assert!(parse_time("now-5parsecs", NOW).is_err());
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("15s"), Ok(15_000_000_000));
        assert_eq!(parse_duration("500ms"), Ok(500_000_000));
        assert_eq!(parse_duration("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_duration("2d"), Ok(172_800_000_000_000));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("5").is_err());
        assert_eq!(parse_duration("0"), Ok(0));
        assert!(parse_duration("00").is_err());
    }
}
