//! Varint primitives for the store's record payloads. Readers are bounds-checked: damaged
//! bytes give a [`CodecError`], never a panic.

/// A record payload could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("damaged record: {0}")]
pub struct CodecError(pub String);

/// Appends encoded values to a byte vector.
pub(crate) trait Put {
    fn uvarint(&mut self, v: u64);
    fn ivarint(&mut self, v: i64) {
        self.uvarint(((v << 1) ^ (v >> 63)) as u64);
    }
    fn bytes(&mut self, b: &[u8]);
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
}

impl Put for Vec<u8> {
    #[inline]
    fn uvarint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.push(v as u8);
    }

    fn bytes(&mut self, b: &[u8]) {
        self.uvarint(b.len() as u64);
        self.extend_from_slice(b);
    }
}

/// Reads values written by [`Put`].
pub(crate) struct Get<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Get<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Get { buf, pos: 0 }
    }

    pub(crate) fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// The next `n` bytes, without reading them (`None` when fewer are left).
    pub(crate) fn peek(&self, n: usize) -> Option<&'a [u8]> {
        self.buf.get(self.pos..self.pos.checked_add(n)?)
    }

    /// Skips `n` bytes (at most what is left).
    pub(crate) fn skip(&mut self, n: usize) {
        self.pos = self.pos.saturating_add(n).min(self.buf.len());
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    #[inline]
    pub(crate) fn uvarint(&mut self) -> Result<u64, CodecError> {
        if let Some(&b) = self.buf.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        let mut v = 0u64;
        for shift in 0..10 {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| CodecError("truncated varint".into()))?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << (7 * shift);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(CodecError("varint longer than 10 bytes".into()))
    }

    pub(crate) fn ivarint(&mut self) -> Result<i64, CodecError> {
        let v = self.uvarint()?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    /// A count of items that each take at least one byte: bounded by what is left, so a
    /// damaged count cannot make a reader allocate more than the record holds.
    pub(crate) fn count(&mut self) -> Result<usize, CodecError> {
        let n = self.uvarint()?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.buf.len() - self.pos)
            .ok_or_else(|| CodecError(format!("count {n} exceeds the record")))
    }

    /// An id or index (not a count of following items): any value that fits 32 bits.
    pub(crate) fn index(&mut self) -> Result<usize, CodecError> {
        self.u32().map(|v| v as usize)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, CodecError> {
        let v = self.uvarint()?;
        u32::try_from(v).map_err(|_| CodecError(format!("{v} does not fit 32 bits")))
    }

    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], CodecError> {
        let n = self.count()?;
        let b = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    /// The next `n` bytes, as they are.
    pub(crate) fn slice(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        let b = self
            .buf
            .get(self.pos..self.pos.saturating_add(n))
            .ok_or_else(|| CodecError(format!("{n} bytes past the end")))?;
        self.pos += n;
        Ok(b)
    }

    pub(crate) fn fixed<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let b = self
            .buf
            .get(self.pos..self.pos + N)
            .ok_or_else(|| CodecError("truncated id".into()))?;
        self.pos += N;
        Ok(b.try_into().expect("slice of N bytes"))
    }

    pub(crate) fn str(&mut self) -> Result<&'a str, CodecError> {
        std::str::from_utf8(self.bytes()?).map_err(|_| CodecError("string is not UTF-8".into()))
    }

    pub(crate) fn u8(&mut self) -> Result<u8, CodecError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| CodecError("truncated record".into()))?;
        self.pos += 1;
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        let mut b = Vec::new();
        for v in [0u64, 1, 127, 128, 300, u64::MAX] {
            b.uvarint(v);
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            b.ivarint(v);
        }
        b.str("héllo");
        let mut g = Get::new(&b);
        for v in [0u64, 1, 127, 128, 300, u64::MAX] {
            assert_eq!(g.uvarint().unwrap(), v);
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(g.ivarint().unwrap(), v);
        }
        assert_eq!(g.str().unwrap(), "héllo");
        assert!(g.done());
        assert!(g.u8().is_err());
        assert!(Get::new(&[0xff; 3]).uvarint().is_err());
        assert!(Get::new(&[0x05, 1]).bytes().is_err());
    }
}
