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

use crate::allowance::Budget;
pub use crate::allowance::{decoded_limit, Pool};
use crate::error::FormatError;
pub use crate::error::{DECODED_BASE, DECODED_PER_BYTE};

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
