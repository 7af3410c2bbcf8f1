//! The bytes of a JFR chunk: its 68-byte header, and the integer and string encodings its
//! events are written in (LEB128-style varints when the chunk says so, else big-endian).

use super::JfrError;

/// Bytes of a chunk header.
pub const HEADER_BYTES: usize = 68;

/// `FLR\0`, the first bytes of every chunk.
pub const MAGIC: &[u8; 4] = b"FLR\0";

/// A chunk's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Format version (major, minor): 2.0 (JDK 11–13, async-profiler) or 2.1 (JDK 14+).
    pub version: (u16, u16),
    /// Bytes of the whole chunk, header included.
    pub size: usize,
    /// Offset of the last checkpoint (constant pool) event from the chunk's start, in bytes.
    pub constant_pool_offset: usize,
    /// Offset of the metadata event from the chunk's start, in bytes.
    pub metadata_offset: usize,
    /// When the chunk starts, in nanoseconds since the Unix epoch.
    pub start_ns: i64,
    /// How long the chunk covers, in nanoseconds.
    pub duration_ns: i64,
    /// The tick counter's value at the chunk's start (event times are in ticks).
    pub start_ticks: i64,
    /// Ticks per second of the event time stamps and durations.
    pub ticks_per_second: i64,
    /// Whether integers are varints (feature bit 0; always set by the JDK and async-profiler).
    pub compressed_ints: bool,
}

impl ChunkHeader {
    /// Reads the header of the chunk at the start of `bytes` (`at`: the chunk's offset in the
    /// file, for messages); the chunk must lie within `bytes`.
    pub fn read(bytes: &[u8], at: usize) -> Result<ChunkHeader, JfrError> {
        if bytes.len() < HEADER_BYTES {
            return Err(JfrError::at(
                at,
                format!(
                    "truncated chunk header: {} bytes of {HEADER_BYTES}",
                    bytes.len()
                ),
            ));
        }
        if &bytes[..4] != MAGIC {
            return Err(JfrError::at(
                at,
                "not a JFR chunk: it does not start with FLR\\0".to_owned(),
            ));
        }
        let u16_at = |i: usize| u16::from_be_bytes([bytes[i], bytes[i + 1]]);
        let i64_at = |i: usize| i64::from_be_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let version = (u16_at(4), u16_at(6));
        if version.0 != 2 {
            return Err(JfrError::at(
                at,
                format!(
                    "JFR version {}.{} is not supported (2.x is: JDK 11 and later, async-profiler)",
                    version.0, version.1
                ),
            ));
        }
        let offset = |i: usize, what: &str| -> Result<usize, JfrError> {
            let v = i64_at(i);
            usize::try_from(v)
                .ok()
                .filter(|&v| v >= HEADER_BYTES)
                .ok_or_else(|| JfrError::at(at, format!("chunk header: {what} {v} is invalid")))
        };
        let size = offset(8, "chunk size")?;
        if size > bytes.len() {
            return Err(JfrError::at(
                at,
                format!(
                    "the chunk's size is {size} bytes, past the end of the file ({} bytes left): truncated",
                    bytes.len()
                ),
            ));
        }
        let constant_pool_offset = offset(16, "constant pool offset")?;
        let metadata_offset = offset(24, "metadata offset")?;
        for (what, o) in [
            ("constant pool offset", constant_pool_offset),
            ("metadata offset", metadata_offset),
        ] {
            if o >= size {
                return Err(JfrError::at(
                    at,
                    format!("chunk header: the {what} {o} is past the chunk's {size} bytes"),
                ));
            }
        }
        let features = u32::from_be_bytes(bytes[64..68].try_into().expect("4 bytes"));
        Ok(ChunkHeader {
            version,
            size,
            constant_pool_offset,
            metadata_offset,
            start_ns: i64_at(32),
            duration_ns: i64_at(40),
            start_ticks: i64_at(48),
            ticks_per_second: i64_at(56),
            compressed_ints: features & 1 != 0,
        })
    }
}

/// A read position in one chunk's bytes.
#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Offset of `bytes` in the file, for messages.
    base: usize,
    compressed: bool,
}

/// How a JFR string is written (its first byte).
mod string_encoding {
    pub const NULL: u8 = 0;
    pub const EMPTY: u8 = 1;
    pub const POOL: u8 = 2;
    pub const UTF8: u8 = 3;
    pub const CHARS: u8 = 4;
    pub const LATIN1: u8 = 5;
}

/// A string as read: text, or a reference into the chunk's `java.lang.String` pool.
#[derive(Debug, Clone, PartialEq)]
pub enum JfrString<'a> {
    /// No string (Java `null`).
    Null,
    /// Text in the file (UTF-8 borrowed) or decoded from chars or Latin-1.
    Text(std::borrow::Cow<'a, str>),
    /// The key of a `java.lang.String` constant.
    Pool(i64),
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`, which start at `base` in the file.
    pub fn new(bytes: &'a [u8], base: usize, compressed: bool) -> Self {
        Cursor {
            bytes,
            pos: 0,
            base,
            compressed,
        }
    }

    /// The position in `bytes`.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes of the whole data.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether there are no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Moves to `pos` within `bytes`.
    pub fn seek(&mut self, pos: usize) -> Result<(), JfrError> {
        if pos > self.bytes.len() {
            return Err(self.error(format!(
                "offset {pos} is past the end of the chunk ({} bytes)",
                self.bytes.len()
            )));
        }
        self.pos = pos;
        Ok(())
    }

    /// An error at the current position.
    pub fn error(&self, message: String) -> JfrError {
        JfrError::at(self.base + self.pos, message)
    }

    fn truncated(&self, what: &str) -> JfrError {
        self.error(format!(
            "truncated: the {what} runs past the end of its data"
        ))
    }

    /// One byte.
    #[inline]
    pub fn u8(&mut self) -> Result<u8, JfrError> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| self.truncated("byte"))?;
        self.pos += 1;
        Ok(b)
    }

    /// `n` raw bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], JfrError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| self.truncated("byte string"))?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// A varint: 7 bits a byte, low bits first; the ninth byte carries 8 bits.
    #[inline(always)]
    pub fn varint(&mut self) -> Result<u64, JfrError> {
        // Most values (lines, keys, small counts) fit one byte.
        if let Some(&b) = self.bytes.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        self.varint_long()
    }

    #[inline(never)]
    fn varint_long(&mut self) -> Result<u64, JfrError> {
        let mut v = 0u64;
        for i in 0..9 {
            let b = *self
                .bytes
                .get(self.pos)
                .ok_or_else(|| self.truncated("integer"))?;
            self.pos += 1;
            if i == 8 {
                return Ok(v | (u64::from(b) << 56));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        unreachable!("the loop returns at its ninth byte")
    }

    fn fixed(&mut self, n: usize) -> Result<u64, JfrError> {
        let s = self.take(n)?;
        Ok(s.iter().fold(0u64, |v, &b| (v << 8) | u64::from(b)))
    }

    /// A `long` (also `int`, `short`, `char` when varints are on).
    #[inline]
    pub fn long(&mut self) -> Result<i64, JfrError> {
        if self.compressed {
            self.varint().map(|v| v as i64)
        } else {
            self.fixed(8).map(|v| v as i64)
        }
    }

    /// An `int`.
    #[inline]
    pub fn int(&mut self) -> Result<i32, JfrError> {
        if self.compressed {
            self.varint().map(|v| v as i32)
        } else {
            self.fixed(4).map(|v| v as u32 as i32)
        }
    }

    /// A `short` or `char`.
    #[inline]
    pub fn short(&mut self) -> Result<i16, JfrError> {
        if self.compressed {
            self.varint().map(|v| v as i16)
        } else {
            self.fixed(2).map(|v| v as u16 as i16)
        }
    }

    /// A count of things that follow, each at least `min_bytes` long: refused when that many
    /// could not fit in what is left, so that a forged count allocates nothing.
    pub fn count(&mut self, what: &str, min_bytes: usize) -> Result<usize, JfrError> {
        let n = self.int()?;
        let n = usize::try_from(n)
            .map_err(|_| self.error(format!("the {what} count {n} is negative")))?;
        if n.saturating_mul(min_bytes.max(1)) > self.remaining() {
            return Err(self.error(format!(
                "the {what} count {n} is more than the {} bytes left could hold: truncated or corrupt",
                self.remaining()
            )));
        }
        Ok(n)
    }

    /// A `float` (always 4 big-endian bytes).
    pub fn f32(&mut self) -> Result<f32, JfrError> {
        self.fixed(4).map(|v| f32::from_bits(v as u32))
    }

    /// A `double` (always 8 big-endian bytes).
    pub fn f64(&mut self) -> Result<f64, JfrError> {
        self.fixed(8).map(f64::from_bits)
    }

    /// A string in any of JFR's encodings.
    pub fn string(&mut self) -> Result<JfrString<'a>, JfrError> {
        use std::borrow::Cow;
        use string_encoding::*;
        let at = self.pos;
        match self.u8()? {
            NULL => Ok(JfrString::Null),
            EMPTY => Ok(JfrString::Text(Cow::Borrowed(""))),
            POOL => Ok(JfrString::Pool(self.long()?)),
            UTF8 => {
                let n = self.count("string byte", 1)?;
                let b = self.take(n)?;
                Ok(JfrString::Text(match std::str::from_utf8(b) {
                    Ok(s) => Cow::Borrowed(s),
                    // The JVM writes modified UTF-8 (NUL and surrogates differ): keep the text.
                    Err(_) => Cow::Owned(String::from_utf8_lossy(b).into_owned()),
                }))
            }
            CHARS => {
                let n = self.count("string char", 1)?;
                let mut units = Vec::with_capacity(n);
                for _ in 0..n {
                    units.push(self.short()? as u16);
                }
                Ok(JfrString::Text(Cow::Owned(String::from_utf16_lossy(
                    &units,
                ))))
            }
            LATIN1 => {
                let n = self.count("string byte", 1)?;
                let b = self.take(n)?;
                Ok(JfrString::Text(Cow::Owned(
                    b.iter().map(|&c| char::from(c)).collect(),
                )))
            }
            other => {
                self.pos = at;
                Err(self.error(format!("unknown string encoding {other}")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_as_the_jvm_writes_them() {
        let mut c = Cursor::new(&[0x05, 0x80, 0x01, 0xff, 0xff, 0xff, 0xff, 0x0f], 0, true);
        assert_eq!(c.long().unwrap(), 5);
        assert_eq!(c.long().unwrap(), 128);
        assert_eq!(c.int().unwrap(), -1);
        // Nine bytes: the last carries a whole byte.
        let nine = [0xff; 9];
        assert_eq!(Cursor::new(&nine, 0, true).long().unwrap(), -1);
        // Padded varints (the JDK pads event sizes) read as their value.
        assert_eq!(
            Cursor::new(&[0x85, 0x80, 0x80, 0x00], 0, true)
                .long()
                .unwrap(),
            5
        );
        let e = Cursor::new(&[0x80], 0, true).long().unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
    }

    #[test]
    fn fixed_width_integers_when_not_compressed() {
        let mut c = Cursor::new(
            &[0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe],
            0,
            false,
        );
        assert_eq!(c.int().unwrap(), 7);
        assert_eq!(c.long().unwrap(), -2);
    }

    #[test]
    fn strings_in_every_encoding() {
        let bytes = [
            0, 1, 2, 9, 3, 2, b'h', b'i', 4, 2, 0x68, 0x69, 5, 1, 0xe9, 7,
        ];
        let mut c = Cursor::new(&bytes, 0, true);
        assert_eq!(c.string().unwrap(), JfrString::Null);
        assert_eq!(c.string().unwrap(), JfrString::Text("".into()));
        assert_eq!(c.string().unwrap(), JfrString::Pool(9));
        assert_eq!(c.string().unwrap(), JfrString::Text("hi".into()));
        assert_eq!(c.string().unwrap(), JfrString::Text("hi".into()));
        assert_eq!(c.string().unwrap(), JfrString::Text("é".into()));
        let e = c.string().unwrap_err();
        assert!(e.to_string().contains("unknown string encoding 7"), "{e}");
    }

    #[test]
    fn forged_counts_allocate_nothing() {
        let mut c = Cursor::new(&[0xff, 0xff, 0xff, 0x07, 1, 2], 0, true);
        let e = c.count("frame", 1).unwrap_err();
        assert!(e.to_string().contains("more than the 2 bytes left"), "{e}");
    }
}
