//! Human-readable sizes on the command line and values in output.

/// Parses a byte size such as `64MiB`, `512k`, `1G` or `1048576`, as the server's
/// configuration does ([`spanprof_server::config::parse_size`]).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let n = spanprof_server::config::parse_size(s)?;
    usize::try_from(n).map_err(|_| format!("{s:?} is too large"))
}

/// Formats `value` of `unit` (a pprof/OTLP unit such as `nanoseconds`, `bytes`, `count`) the
/// way people read it: `1.25s`, `3.2MB`, `1200`.
pub fn format_value(value: i64, unit: &str) -> String {
    let v = value as f64;
    match unit {
        "nanoseconds" | "ns" => {
            let a = v.abs();
            if a >= 1e9 {
                format!("{:.2}s", v / 1e9)
            } else if a >= 1e6 {
                format!("{:.2}ms", v / 1e6)
            } else if a >= 1e3 {
                format!("{:.2}µs", v / 1e3)
            } else {
                format!("{value}ns")
            }
        }
        "bytes" | "By" => {
            let a = v.abs();
            if a >= 1e9 {
                format!("{:.2}GB", v / 1e9)
            } else if a >= 1e6 {
                format!("{:.2}MB", v / 1e6)
            } else if a >= 1e3 {
                format!("{:.2}kB", v / 1e3)
            } else {
                format!("{value}B")
            }
        }
        _ => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("100"), Ok(100));
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("MiB").is_err());
    }

    #[test]
    fn values_format() {
        assert_eq!(format_value(1_250_000_000, "nanoseconds"), "1.25s");
        assert_eq!(format_value(3_200_000, "bytes"), "3.20MB");
        assert_eq!(format_value(12, "count"), "12");
    }
}
