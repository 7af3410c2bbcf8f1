//! How much memory a decoder may allocate for the message it builds.
//!
//! A size limit on the bytes of a message does not bound its decoded size: an element of a
//! repeated message field costs two bytes on the wire (its key and a zero length) and a whole
//! struct in memory. 60 MiB of empty spans (61 KB gzipped) decoded to 8.7 GB; of empty
//! samples, to 2.5 GB. Each decoder therefore takes what it allocates (element structs,
//! strings, packed values) from a `Budget` of [`DECODED_PER_BYTE`] times the bytes it reads,
//! plus [`DECODED_BASE`], and stops with [`FormatError::DecodedTooLarge`] when it runs out,
//! before allocating more. Real messages stay well inside: measured in the tests below, a Go
//! CPU profile takes 5.8 times its size as pprof (its packed location ids are one byte each
//! on the wire and eight in memory) and 5.4 as OTLP, an HTTP server's spans 3.4.

use std::cell::Cell;

use crate::error::FormatError;

/// Bytes a message may take once decoded, per byte of its encoding (plus [`DECODED_BASE`]).
pub const DECODED_PER_BYTE: usize = 16;
/// Bytes any message may take once decoded, whatever its size.
pub const DECODED_BASE: usize = 1 << 20;

/// Memory shared by every message being decoded at once (a server's in-flight budget), which
/// a `Budget` draws from as its decoder allocates: the budget of one message bounds what
/// one bomb takes, a pool bounds what all of them take together.
pub trait Pool {
    /// Takes `bytes` more for the message; false when the pool has no room for them.
    fn take(&self, bytes: usize) -> bool;
}

/// Bytes a [`Budget`] draws from its [`Pool`] at a time, so that the pool is not asked for
/// every string.
const POOL_DRAW: usize = 256 << 10;

/// What a decoder may still allocate for one message.
pub(crate) struct Budget<'p> {
    left: Cell<usize>,
    limit: usize,
    encoded: usize,
    exceeded: Cell<bool>,
    pool: Option<&'p dyn Pool>,
    /// Drawn from the pool and not taken yet.
    credit: Cell<usize>,
    /// Drawn from the pool in all.
    drawn: Cell<usize>,
    /// The pool refused to give more: the decoder's error is [`FormatError::NoRoom`].
    pool_refused: Cell<bool>,
}

impl std::fmt::Debug for Budget<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("left", &self.left.get())
            .field("limit", &self.limit)
            .field("drawn", &self.drawn.get())
            .finish_non_exhaustive()
    }
}

impl<'p> Budget<'p> {
    /// The budget of a message of `encoded` bytes.
    pub(crate) fn for_message(encoded: usize) -> Self {
        Budget::drawing(encoded, None)
    }

    /// The budget of a message of `encoded` bytes, whose allocations are also drawn from
    /// `pool` when there is one.
    pub(crate) fn drawing(encoded: usize, pool: Option<&'p dyn Pool>) -> Self {
        let limit = decoded_limit(encoded);
        Budget {
            left: Cell::new(limit),
            limit,
            encoded,
            exceeded: Cell::new(false),
            pool,
            credit: Cell::new(0),
            drawn: Cell::new(0),
            pool_refused: Cell::new(false),
        }
    }

    /// Takes `bytes`; false (and from then on [`Budget::exceeded`]) when fewer are left, in
    /// the message's budget or in the pool.
    #[inline(always)]
    pub(crate) fn take(&self, bytes: usize) -> bool {
        match self.left.get().checked_sub(bytes) {
            Some(left) => {
                self.left.set(left);
                match self.pool {
                    None => true,
                    Some(pool) => self.draw(pool, bytes),
                }
            }
            None => {
                self.exceeded.set(true);
                false
            }
        }
    }

    /// Takes `bytes` from what was drawn from `pool`, drawing more when it is short.
    #[inline]
    fn draw(&self, pool: &dyn Pool, bytes: usize) -> bool {
        if let Some(credit) = self.credit.get().checked_sub(bytes) {
            self.credit.set(credit);
            return true;
        }
        let need = bytes - self.credit.get();
        // In steps of POOL_DRAW, but never past the message's own limit (`left` is what it may
        // still take after these bytes).
        let more = POOL_DRAW
            .min(need.saturating_add(self.left.get()))
            .max(need);
        if pool.take(more) {
            self.drawn.set(self.drawn.get() + more);
            self.credit.set(more - need);
            true
        } else {
            self.exceeded.set(true);
            self.pool_refused.set(true);
            false
        }
    }

    /// Takes the memory of `n` values of `T`.
    #[inline(always)]
    pub(crate) fn take_n<T>(&self, n: usize) -> bool {
        self.take(n.saturating_mul(std::mem::size_of::<T>()))
    }

    /// Whether a [`Budget::take`] failed: the decoder's error is then this budget's.
    pub(crate) fn exceeded(&self) -> bool {
        self.exceeded.get()
    }

    /// What the decoder took so far.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.limit - self.left.get()
    }

    /// Takes what this budget counted (an estimate of what a derived decoder will allocate)
    /// from `pool`, when there is one: [`FormatError::NoRoom`] when it has no room.
    fn take_estimate_from(
        &self,
        pool: Option<&dyn Pool>,
        what: &'static str,
    ) -> Result<(), FormatError> {
        match pool {
            Some(pool) if !pool.take(self.limit - self.left.get()) => {
                Err(FormatError::NoRoom { what, drawn: 0 })
            }
            _ => Ok(()),
        }
    }

    /// The error of a decoder that ran out, naming `what` it was decoding.
    pub(crate) fn error(&self, what: &'static str) -> FormatError {
        if self.pool_refused.get() {
            return FormatError::NoRoom {
                what,
                drawn: self.drawn.get(),
            };
        }
        FormatError::DecodedTooLarge {
            what,
            limit: self.limit,
            encoded: self.encoded,
        }
    }
}

/// Bytes a message of `encoded` bytes may take once decoded.
pub fn decoded_limit(encoded: usize) -> usize {
    encoded
        .saturating_mul(DECODED_PER_BYTE)
        .saturating_add(DECODED_BASE)
}

/// What a field of a message costs a derived (prost) decoder, for [`check_decoded_size`].
#[derive(Debug, Clone, Copy)]
pub enum Cost {
    /// A repeated message field: each element a struct of this many bytes, of this shape.
    Messages(usize, &'static Shape),
    /// A singular message field: held inline, but what it holds allocates.
    Message(&'static Shape),
    /// A string or bytes field: its length.
    Bytes,
    /// A repeated string or bytes field: each element a `Vec` or `String` and its length.
    Strings,
    /// A repeated varint field (packed or not) of values of this many bytes.
    Varints(usize),
}

/// The fields of a message that allocate when a derived decoder decodes it; the others
/// (scalars, unknown fields) are held inline or dropped.
#[derive(Debug)]
pub struct Shape(pub &'static [(u64, Cost)]);

/// The shape of an OTLP `AnyValue`, for the shapes of messages that hold attributes.
pub static ANY_VALUE: Shape = Shape(&[
    (1, Cost::Bytes),
    (5, Cost::Message(&ARRAY_VALUE)),
    (6, Cost::Message(&KEY_VALUE_LIST)),
    (7, Cost::Bytes),
]);
static ARRAY_VALUE: Shape = Shape(&[(
    1,
    Cost::Messages(std::mem::size_of::<crate::otlp::AnyValue>(), &ANY_VALUE),
)]);
static KEY_VALUE_LIST: Shape = Shape(&[(
    1,
    Cost::Messages(std::mem::size_of::<crate::otlp::KeyValue>(), &KEY_VALUE),
)]);
/// The shape of an OTLP `KeyValue`.
pub static KEY_VALUE: Shape = Shape(&[(1, Cost::Bytes), (2, Cost::Message(&ANY_VALUE))]);

/// Refuses a protobuf message of shape `shape` (a `what`) that a derived decoder would
/// decode into more than its `Budget`, without decoding it: for the messages decoded by
/// prost (traces, Pyroscope's push requests), which allocates as it goes and cannot be
/// stopped. Damaged bytes pass: the decoder that follows names what is wrong with them.
pub fn check_decoded_size(
    buf: &[u8],
    shape: &'static Shape,
    what: &'static str,
) -> Result<(), FormatError> {
    check_decoded_size_from(buf, shape, what, None)
}

/// [`check_decoded_size`], and the estimate of what the derived decoder will allocate taken
/// from `pool` ([`FormatError::NoRoom`] when it has no room for it).
pub fn check_decoded_size_drawing(
    buf: &[u8],
    shape: &'static Shape,
    what: &'static str,
    pool: &dyn Pool,
) -> Result<(), FormatError> {
    check_decoded_size_from(buf, shape, what, Some(pool))
}

fn check_decoded_size_from(
    buf: &[u8],
    shape: &'static Shape,
    what: &'static str,
    pool: Option<&dyn Pool>,
) -> Result<(), FormatError> {
    // The message's own budget first: a bomb is told it is one, whatever the pool holds.
    let budget = Budget::for_message(buf.len());
    let walked = walk(
        crate::wire::Reader::new(buf, &budget),
        shape,
        crate::wire::RECURSION_LIMIT,
    );
    match walked {
        Err(_) if budget.exceeded() => Err(budget.error(what)),
        _ => budget.take_estimate_from(pool, what),
    }
}

/// Refuses a JSON document that a parser building a tree of it (`serde_json::Value`) would
/// hold in more than its `Budget`, without parsing it: `per_value` bytes for each value, and
/// its bytes for the strings. Values are counted from the `[`, `,` and `:` outside strings
/// (one value follows each), so damaged documents pass, for the parser to name the problem.
pub fn check_json_values(
    json: &[u8],
    per_value: usize,
    what: &'static str,
) -> Result<(), FormatError> {
    check_json_values_from(json, per_value, what, None)
}

/// [`check_json_values`], and the estimate taken from `pool` ([`FormatError::NoRoom`] when
/// it has no room for it).
pub fn check_json_values_drawing(
    json: &[u8],
    per_value: usize,
    what: &'static str,
    pool: &dyn Pool,
) -> Result<(), FormatError> {
    check_json_values_from(json, per_value, what, Some(pool))
}

fn check_json_values_from(
    json: &[u8],
    per_value: usize,
    what: &'static str,
    pool: Option<&dyn Pool>,
) -> Result<(), FormatError> {
    let budget = Budget::for_message(json.len());
    let (mut values, mut in_string, mut escaped) = (1usize, false, false);
    for &b in json {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b',' | b':' => values += 1,
            _ => {}
        }
    }
    if !(budget.take(json.len()) && budget.take(values.saturating_mul(per_value))) {
        return Err(budget.error(what));
    }
    budget.take_estimate_from(pool, what)
}

/// What [`check_decoded_size`] estimates a derived decoder allocates for `buf`.
#[cfg(test)]
pub(crate) fn estimate(buf: &[u8], shape: &'static Shape) -> usize {
    let budget = Budget::for_message(buf.len());
    let _ = walk(
        crate::wire::Reader::new(buf, &budget),
        shape,
        crate::wire::RECURSION_LIMIT,
    );
    budget.used()
}

fn walk(mut r: crate::wire::Reader, shape: &'static Shape, left: u32) -> crate::wire::Result<()> {
    use crate::wire::{message, LEN};
    let left = left.checked_sub(1).ok_or_else(crate::wire::too_deep)?;
    while !r.done() {
        let (field, wire) = r.key()?;
        let cost = shape.0.iter().find(|(f, _)| *f == field).map(|(_, c)| *c);
        match (cost, wire) {
            (Some(Cost::Messages(size, inner)), LEN) => {
                r.take_n::<u8>(size)?;
                walk(message(&mut r, "", field, wire)?, inner, left)?;
            }
            (Some(Cost::Message(inner)), LEN) => {
                walk(message(&mut r, "", field, wire)?, inner, left)?;
            }
            (Some(Cost::Bytes), LEN) => {
                r.owned_bytes()?;
            }
            (Some(Cost::Strings), LEN) => {
                r.take_n::<Vec<u8>>(1)?;
                r.owned_bytes()?;
            }
            (Some(Cost::Varints(size)), LEN) => {
                let packed = r.bytes()?;
                // Each varint ends in exactly one byte below 0x80.
                let n = packed.iter().filter(|&&b| b < 0x80).count();
                r.take_n::<u8>(n.saturating_mul(size))?;
            }
            (Some(Cost::Varints(size)), _) => {
                r.take_n::<u8>(size)?;
                r.skip(field, wire, left)?;
            }
            _ => r.skip(field, wire, left)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
