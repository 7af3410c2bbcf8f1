//! Config values in readable units, as tikv's `ReadableSize` and `ReadableDuration`: read
//! from and written to YAML and flags as `64MiB` and `30s`, held as bytes and a `Duration`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{format_size, parse_size};

/// A size in bytes, written `512MiB`, `20GiB` (binary units; `MB`, `M`, `KB`, `k` mean the
/// binary ones too) or as a bare number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ReadableSize(pub u64);

/// A duration, written `15s`, `5m`, `1h30m`, `7d`, `20ms` (units ns, us, µs, ms, s, m, h, d,
/// w, combinable; fractions such as `1.5s` are read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ReadableDuration(pub Duration);

impl ReadableSize {
    /// The size in bytes.
    pub fn as_bytes(self) -> u64 {
        self.0
    }
}

impl ReadableDuration {
    /// The duration.
    pub fn get(self) -> Duration {
        self.0
    }
}

impl From<u64> for ReadableSize {
    fn from(bytes: u64) -> Self {
        ReadableSize(bytes)
    }
}

impl From<Duration> for ReadableDuration {
    fn from(d: Duration) -> Self {
        ReadableDuration(d)
    }
}

impl fmt::Display for ReadableSize {
    /// `20GiB`, `512MiB` when whole, else `12345B`: what [`FromStr`] reads back exactly.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_size(self.0))
    }
}

impl fmt::Display for ReadableDuration {
    /// The largest whole unit (`7d`, `12h`, `30m`, `15s`, `20ms`, `5us`, `3ns`), so that
    /// [`FromStr`] reads back exactly the same duration.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d.subsec_nanos() == 0 {
            return f.write_str(&super::format_duration(d));
        }
        let ns = d.as_nanos();
        for (unit, size) in [("ms", 1_000_000u128), ("us", 1_000)] {
            if ns.is_multiple_of(size) {
                return write!(f, "{}{unit}", ns / size);
            }
        }
        write!(f, "{ns}ns")
    }
}

impl FromStr for ReadableSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_size(s).map(ReadableSize)
    }
}

impl FromStr for ReadableDuration {
    type Err = spanprof_store::time::TimeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        spanprof_store::time::parse_duration(s).map(|ns| ReadableDuration(Duration::from_nanos(ns)))
    }
}

impl Serialize for ReadableSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl Serialize for ReadableDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Parsed inside the deserializer's visit (not after it returned), so that an error names
/// its key and line (`storage.max_size: … at line 3`), not only its section.
impl<'de> Deserialize<'de> for ReadableSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ReadableSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as 512MiB or 20GiB, or a number of bytes")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Self::Value, E> {
                Ok(ReadableSize(n))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Self::Value, E> {
                u64::try_from(n)
                    .map(ReadableSize)
                    .map_err(|_| E::custom(format!("{n} is not a size: sizes are not negative")))
            }
            fn visit_u128<E: serde::de::Error>(self, n: u128) -> Result<Self::Value, E> {
                u64::try_from(n)
                    .map(ReadableSize)
                    .map_err(|_| E::custom(format!("{n} bytes is too large")))
            }
            fn visit_i128<E: serde::de::Error>(self, n: i128) -> Result<Self::Value, E> {
                Err(E::custom(format!(
                    "{n} is not a size: sizes are not negative"
                )))
            }
            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Self::Value, E> {
                Err(E::custom(format!(
                    "{n} is not a size: a size is a whole number of bytes, or of a unit (512MiB)"
                )))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
                s.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// Parsed inside the visit, as [`ReadableSize`].
impl<'de> Deserialize<'de> for ReadableDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ReadableDuration;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as 15s, 5m, 1h30m or 7d")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
                s.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every form the parsers took before these types, with its value.
    #[test]
    fn every_accepted_size_form_reads_and_writes_back() {
        for (text, bytes) in [
            ("1048576", 1u64 << 20),
            ("100B", 100),
            ("100b", 100),
            ("512k", 512 << 10),
            ("512KB", 512 << 10),
            ("512KiB", 512 << 10),
            ("64M", 64 << 20),
            ("64MB", 64 << 20),
            ("64MiB", 64 << 20),
            ("64mib", 64 << 20),
            (" 64 MiB ", 64 << 20),
            ("1G", 1 << 30),
            ("1GB", 1 << 30),
            ("20GiB", 20 << 30),
            ("2T", 2 << 40),
            ("2TiB", 2 << 40),
            ("0", 0),
        ] {
            let s: ReadableSize = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(s.0, bytes, "{text}");
            assert_eq!(s.to_string().parse::<ReadableSize>(), Ok(s), "{text}");
            let yaml: ReadableSize = serde_norway::from_str(text).unwrap();
            assert_eq!(yaml, s, "{text}");
            let back: ReadableSize =
                serde_norway::from_str(&serde_norway::to_string(&s).unwrap()).unwrap();
            assert_eq!(back, s, "{text}");
        }
        assert_eq!(ReadableSize(64 << 20).to_string(), "64MiB");
        assert_eq!(ReadableSize(12345).to_string(), "12345B");
        assert_eq!(
            serde_norway::to_string(&ReadableSize(20 << 30))
                .unwrap()
                .trim(),
            "20GiB"
        );
        for bad in ["1.5GiB", "12 parsecs", "MiB", "-1", "99999999999TiB"] {
            assert!(bad.parse::<ReadableSize>().is_err(), "{bad}");
        }
        for (yaml, says) in [
            ("-1", "sizes are not negative"),
            ("1.5", "a whole number of bytes"),
            ("99999999999999999999999", "bytes is too large"),
        ] {
            let e = serde_norway::from_str::<ReadableSize>(yaml)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{yaml}: {e}");
        }
    }

    #[test]
    fn every_accepted_duration_form_reads_and_writes_back() {
        let s = Duration::from_secs;
        for (text, d) in [
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("15s", s(15)),
            ("5m", s(300)),
            ("1h30m", s(5400)),
            ("7d", s(7 * 86400)),
            ("2w", s(14 * 86400)),
            ("20ms", Duration::from_millis(20)),
            ("1.5s", Duration::from_millis(1500)),
            ("250us", Duration::from_micros(250)),
            ("250µs", Duration::from_micros(250)),
            ("7ns", Duration::from_nanos(7)),
            (" 30s ", s(30)),
        ] {
            let r: ReadableDuration = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(r.0, d, "{text}");
            assert_eq!(r.to_string().parse::<ReadableDuration>(), Ok(r), "{text}");
            let back: ReadableDuration =
                serde_norway::from_str(&serde_norway::to_string(&r).unwrap()).unwrap();
            assert_eq!(back, r, "{text}");
        }
        assert_eq!(ReadableDuration(s(30)).to_string(), "30s");
        assert_eq!(ReadableDuration(s(7 * 86400)).to_string(), "7d");
        assert_eq!(
            ReadableDuration(Duration::from_millis(1500)).to_string(),
            "1500ms"
        );
        assert_eq!(
            ReadableDuration(Duration::from_nanos(1_000_000_001)).to_string(),
            "1000000001ns"
        );
        for bad in ["", "7 parsecs", "s", "15x"] {
            let e = bad.parse::<ReadableDuration>().unwrap_err();
            assert!(e.to_string().contains("not a duration"), "{bad}: {e}");
        }
    }
}
