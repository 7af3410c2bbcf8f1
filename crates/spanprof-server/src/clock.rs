//! The wall clock, as the server reads it and as profiles carry it.

/// Now, in nanoseconds since the Unix epoch (0 before it, `i64::MAX` past 2262).
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Whether a profile's time is missing: zero, or in 1970 (a µs value read as ns).
pub fn is_unset_time(time_nanos: i64) -> bool {
    const YEAR_1971_NS: i64 = 365 * 86_400 * 1_000_000_000;
    time_nanos < YEAR_1971_NS
}
