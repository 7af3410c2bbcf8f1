//! Protobuf wire reading for the decoders written for one message each (pprof `Profile`,
//! OTLP `ProfilesData`): a bounds-checked reader and the field helpers both use. It accepts
//! what prost's derived decoders accept (packed and unpacked repeated scalars, unknown fields
//! and groups, last value wins) and refuses what they refuse (bad keys, overlong varints,
//! nesting past prost's recursion limit of 100), so prost stays the oracle in the tests.
//! What the decoders allocate is taken from the message's [`Budget`] first.

use crate::allowance::Budget;

/// Why bytes are not the expected message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

pub(crate) type Result<T> = std::result::Result<T, DecodeError>;

pub(crate) const VARINT: u8 = 0;
pub(crate) const I64: u8 = 1;
pub(crate) const LEN: u8 = 2;
const START_GROUP: u8 = 3;
const END_GROUP: u8 = 4;
pub(crate) const I32: u8 = 5;

/// Nested messages (and groups) a decoder follows at most, as prost's `DecodeContext`.
pub(crate) const RECURSION_LIMIT: u32 = 100;

pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    budget: &'a Budget<'a>,
}

impl<'a> Reader<'a> {
    /// A reader of `buf`, whose decoder allocates out of `budget`.
    pub(crate) fn new(buf: &'a [u8], budget: &'a Budget<'a>) -> Self {
        Reader {
            buf,
            pos: 0,
            budget,
        }
    }

    /// Takes the memory of `n` values of `T` from the budget.
    #[inline(always)]
    pub(crate) fn take_n<T>(&self, n: usize) -> Result<()> {
        if self.budget.take_n::<T>(n) {
            Ok(())
        } else {
            Err(DecodeError(
                "decoding takes more memory than the message's size allows".into(),
            ))
        }
    }

    /// Makes room for `n` more values in `v`, from the budget.
    #[inline(always)]
    pub(crate) fn reserve<T>(&self, v: &mut Vec<T>, n: usize) -> Result<()> {
        self.take_n::<T>(n)?;
        v.reserve(n);
        Ok(())
    }

    /// Makes room for one more value in `v`: when it is full, takes what growing it
    /// allocates from the budget (it doubles, as `Vec` would).
    #[inline(always)]
    pub(crate) fn room<T>(&self, v: &mut Vec<T>) -> Result<()> {
        if v.len() == v.capacity() {
            self.reserve(v, v.capacity().max(4))?;
        }
        Ok(())
    }

    /// A length-delimited payload the decoder copies (a string or bytes field).
    #[inline(always)]
    pub(crate) fn owned_bytes(&mut self) -> Result<&'a [u8]> {
        let b = self.bytes()?;
        self.take_n::<u8>(b.len())?;
        Ok(b)
    }

    pub(crate) fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    #[inline(always)]
    pub(crate) fn varint(&mut self) -> Result<u64> {
        // Most varints in a profile (ids, indices, small counts) fit in one byte.
        if let Some(&b) = self.buf.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        self.varint_long()
    }

    #[inline(never)]
    fn varint_long(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(DecodeError("truncated varint".into()));
            };
            self.pos += 1;
            v |= u64::from(b & 0x7f) << (7 * shift);
            if b < 0x80 {
                // The tenth byte holds bit 63 only.
                if shift == 9 && b > 1 {
                    break;
                }
                return Ok(v);
            }
        }
        Err(DecodeError("varint overflows 64 bits".into()))
    }

    /// A field key: (field number, wire type).
    #[inline(always)]
    pub(crate) fn key(&mut self) -> Result<(u64, u8)> {
        let k = self.varint()?;
        if k > u64::from(u32::MAX) {
            return Err(DecodeError(format!("field key {k} is out of range")));
        }
        let (field, wire) = (k >> 3, (k & 7) as u8);
        if field == 0 {
            return Err(DecodeError("field number 0".into()));
        }
        if wire > I32 {
            return Err(DecodeError(format!("unknown wire type {wire}")));
        }
        Ok((field, wire))
    }

    /// A length-delimited payload.
    #[inline(always)]
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8]> {
        let len = self.varint()?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| self.pos.checked_add(l))
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| DecodeError(format!("length {len} runs past the end of the message")))?;
        let b = &self.buf[self.pos..end];
        self.pos = end;
        Ok(b)
    }

    /// Eight little-endian bytes.
    pub(crate) fn fixed64(&mut self) -> Result<u64> {
        let b = self
            .buf
            .get(self.pos..self.pos + 8)
            .ok_or_else(|| DecodeError("truncated fixed-width field".into()))?;
        self.pos += 8;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// Moves past field `field` of wire type `wire` in a message whose decoder has `depth`
    /// levels of nesting left (groups count as one).
    pub(crate) fn skip(&mut self, field: u64, wire: u8, depth: u32) -> Result<()> {
        if depth == 0 {
            return Err(too_deep());
        }
        let n = match wire {
            VARINT => return self.varint().map(drop),
            LEN => return self.bytes().map(drop),
            START_GROUP => loop {
                let (inner, inner_wire) = self.key()?;
                if inner_wire == END_GROUP {
                    if inner != field {
                        return Err(DecodeError(format!(
                            "group {field} ends with the end of group {inner}"
                        )));
                    }
                    return Ok(());
                }
                self.skip(inner, inner_wire, depth - 1)?;
            },
            END_GROUP => {
                return Err(DecodeError(format!(
                    "end of group {field} without its start"
                )))
            }
            I64 => 8,
            _ => 4,
        };
        if self.buf.len() - self.pos < n {
            return Err(DecodeError("truncated fixed-width field".into()));
        }
        self.pos += n;
        Ok(())
    }

    /// Counts the occurrences of fields `1..=N` of the message left in this reader (without
    /// decoding them), to size repeated fields before filling them.
    pub(crate) fn count_fields<const N: usize>(&self, depth: u32) -> Result<[usize; N]> {
        let mut counts = [0; N];
        let mut r = Reader::new(&self.buf[self.pos..], self.budget);
        while !r.done() {
            let (field, wire) = r.key()?;
            if let Some(c) = counts.get_mut((field as usize).wrapping_sub(1)) {
                *c += 1;
            }
            if wire == LEN {
                r.bytes()?;
            } else {
                r.skip(field, wire, depth)?;
            }
        }
        Ok(counts)
    }
}

pub(crate) fn too_deep() -> DecodeError {
    DecodeError(format!("messages nested more than {RECURSION_LIMIT} deep"))
}

pub(crate) fn wrong(message: &str, field: u64, wire: u8) -> DecodeError {
    DecodeError(format!(
        "{message} field {field} has wire type {wire}, which does not fit its type"
    ))
}

/// A scalar field: varint only.
#[inline(always)]
pub(crate) fn scalar(r: &mut Reader, message: &str, field: u64, wire: u8) -> Result<u64> {
    if wire != VARINT {
        return Err(wrong(message, field, wire));
    }
    r.varint()
}

/// A repeated varint field, packed (LEN) or one element per key; sized exactly when packed.
#[inline(always)]
pub(crate) fn repeated<T>(
    r: &mut Reader,
    out: &mut Vec<T>,
    message: &str,
    field: u64,
    wire: u8,
    f: impl Fn(u64) -> T,
) -> Result<()> {
    match wire {
        VARINT => {
            r.room(out)?;
            out.push(f(r.varint()?));
        }
        LEN => {
            let packed = r.bytes()?;
            // Every varint ends in exactly one byte below 0x80.
            r.reserve(out, packed.iter().filter(|&&b| b < 0x80).count())?;
            let mut p = Reader::new(packed, r.budget);
            while !p.done() {
                out.push(f(p.varint()?));
            }
        }
        _ => return Err(wrong(message, field, wire)),
    }
    Ok(())
}

/// The payload of a message field.
#[inline(always)]
pub(crate) fn message<'a>(
    r: &mut Reader<'a>,
    name: &str,
    field: u64,
    wire: u8,
) -> Result<Reader<'a>> {
    if wire != LEN {
        return Err(wrong(name, field, wire));
    }
    let budget = r.budget;
    Ok(Reader::new(r.bytes()?, budget))
}
