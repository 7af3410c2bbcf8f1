//! A pprof decoder written for this one message: every repeated field is sized exactly before
//! it is filled, and there is no generic merge loop. It accepts what a protobuf decoder must
//! (packed and unpacked repeated scalars, unknown fields, last value wins; see [`crate::wire`])
//! and is checked against prost's derived decoder in the tests below.

use super::{Function, Label, Line, Location, Mapping, Profile, Sample, ValueType};
use crate::allowance::Budget;

pub(crate) use crate::wire::DecodeError;
use crate::wire::{message, repeated, scalar, wrong, Reader, Result, LEN, RECURSION_LIMIT};

/// Levels of nesting left to the decoder of a top-level `Profile` field (for skipping unknown
/// groups), and to that of a message inside one (`Label`, `Line`).
const TOP: u32 = RECURSION_LIMIT;
const FIELD: u32 = RECURSION_LIMIT - 1;
const INNER: u32 = RECURSION_LIMIT - 2;

fn as_i64(v: u64) -> i64 {
    v as i64
}

fn id(v: u64) -> u64 {
    v
}

/// Decodes an uncompressed pprof `Profile`.
#[cfg(test)]
pub(crate) fn decode_profile(buf: &[u8]) -> Result<Profile> {
    let mut p = Profile::default();
    decode_into(&mut p, buf, &Budget::for_message(buf.len()))?;
    Ok(p)
}

/// Decodes an uncompressed pprof `Profile` into `p`, allocating out of `budget`. What `p`
/// held is replaced, but its samples' and locations' vectors and its strings are decoded
/// into again rather than freed and allocated anew (a receiver keeps one profile per thread
/// for this: thousands of allocations a profile, each a cache miss, were 30 % of decoding).
/// The budget is charged as if `p` were new. On an error `p` holds part of the message.
pub(crate) fn decode_into(p: &mut Profile, buf: &[u8], budget: &Budget) -> Result<()> {
    let mut r = Reader::new(buf, budget);
    // First pass over the top-level keys only: how many of each repeated field.
    let counts = r.count_fields::<6>(TOP)?;
    *p = Profile {
        sample_type: std::mem::take(&mut p.sample_type),
        sample: std::mem::take(&mut p.sample),
        mapping: std::mem::take(&mut p.mapping),
        location: std::mem::take(&mut p.location),
        function: std::mem::take(&mut p.function),
        string_table: std::mem::take(&mut p.string_table),
        comment: std::mem::take(&mut p.comment),
        ..Default::default()
    };
    p.sample_type.clear();
    p.mapping.clear();
    p.function.clear();
    p.comment.clear();
    sized(&r, &mut p.sample_type, counts[0])?;
    sized(&r, &mut p.sample, counts[1])?;
    sized(&r, &mut p.mapping, counts[2])?;
    sized(&r, &mut p.location, counts[3])?;
    sized(&r, &mut p.function, counts[4])?;
    sized(&r, &mut p.string_table, counts[5])?;
    // How many of the samples, locations and strings are this message's so far.
    let (mut samples, mut locations, mut strings) = (0, 0, 0);
    let m = "Profile";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => p
                .sample_type
                .push(value_type(message(&mut r, m, field, wire)?)?),
            2 => sample(
                next(&mut p.sample, &mut samples),
                message(&mut r, m, field, wire)?,
            )?,
            3 => p.mapping.push(mapping(message(&mut r, m, field, wire)?)?),
            4 => location(
                next(&mut p.location, &mut locations),
                message(&mut r, m, field, wire)?,
            )?,
            5 => p.function.push(function(message(&mut r, m, field, wire)?)?),
            6 => {
                if wire != LEN {
                    return Err(wrong(m, field, wire));
                }
                let b = r.owned_bytes()?;
                let text = std::str::from_utf8(b)
                    .map_err(|_| DecodeError(format!("string_table[{strings}] is not UTF-8")))?;
                let s = next(&mut p.string_table, &mut strings);
                s.clear();
                s.push_str(text);
            }
            7 => p.drop_frames = scalar(&mut r, m, field, wire)? as i64,
            8 => p.keep_frames = scalar(&mut r, m, field, wire)? as i64,
            9 => p.time_nanos = scalar(&mut r, m, field, wire)? as i64,
            10 => p.duration_nanos = scalar(&mut r, m, field, wire)? as i64,
            11 => {
                // A repeated occurrence of a singular message merges into the first.
                let prev = p.period_type.unwrap_or_default();
                p.period_type = Some(merge_value_type(prev, message(&mut r, m, field, wire)?)?);
            }
            12 => p.period = scalar(&mut r, m, field, wire)? as i64,
            13 => repeated(&mut r, &mut p.comment, m, field, wire, as_i64)?,
            14 => p.default_sample_type = scalar(&mut r, m, field, wire)? as i64,
            15 => p.doc_url = scalar(&mut r, m, field, wire)? as i64,
            _ => r.skip(field, wire, TOP)?,
        }
    }
    debug_assert!(samples <= counts[1] && locations <= counts[3] && strings <= counts[5]);
    p.sample.truncate(samples);
    p.location.truncate(locations);
    p.string_table.truncate(strings);
    Ok(())
}

/// Room for `n` values in `v` (which may hold values to reuse), taken from the budget as
/// if all were new.
fn sized<T>(r: &Reader, v: &mut Vec<T>, n: usize) -> Result<()> {
    r.take_n::<T>(n)?;
    v.reserve(n.saturating_sub(v.len()));
    Ok(())
}

/// The next element of `v` for this message (the `used`-th): one left from before, or a new
/// one.
fn next<'v, T: Default>(v: &'v mut Vec<T>, used: &mut usize) -> &'v mut T {
    if *used == v.len() {
        v.push(T::default());
    }
    *used += 1;
    &mut v[*used - 1]
}

fn value_type(r: Reader) -> Result<ValueType> {
    merge_value_type(ValueType::default(), r)
}

fn merge_value_type(mut t: ValueType, mut r: Reader) -> Result<ValueType> {
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => t.r#type = scalar(&mut r, "ValueType", field, wire)? as i64,
            2 => t.unit = scalar(&mut r, "ValueType", field, wire)? as i64,
            _ => r.skip(field, wire, FIELD)?,
        }
    }
    Ok(t)
}

/// Decodes a sample into `s`, reusing its vectors.
fn sample(s: &mut Sample, mut r: Reader) -> Result<()> {
    s.location_id.clear();
    s.value.clear();
    s.label.clear();
    let m = "Sample";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => repeated(&mut r, &mut s.location_id, m, field, wire, id)?,
            2 => repeated(&mut r, &mut s.value, m, field, wire, as_i64)?,
            3 => {
                r.room(&mut s.label)?;
                s.label.push(label(message(&mut r, m, field, wire)?)?);
            }
            _ => r.skip(field, wire, FIELD)?,
        }
    }
    Ok(())
}

fn label(mut r: Reader) -> Result<Label> {
    let mut l = Label::default();
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => l.key = scalar(&mut r, "Label", field, wire)? as i64,
            2 => l.str = scalar(&mut r, "Label", field, wire)? as i64,
            3 => l.num = scalar(&mut r, "Label", field, wire)? as i64,
            4 => l.num_unit = scalar(&mut r, "Label", field, wire)? as i64,
            _ => r.skip(field, wire, INNER)?,
        }
    }
    Ok(l)
}

fn mapping(mut r: Reader) -> Result<Mapping> {
    let mut x = Mapping::default();
    let m = "Mapping";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => x.id = scalar(&mut r, m, field, wire)?,
            2 => x.memory_start = scalar(&mut r, m, field, wire)?,
            3 => x.memory_limit = scalar(&mut r, m, field, wire)?,
            4 => x.file_offset = scalar(&mut r, m, field, wire)?,
            5 => x.filename = scalar(&mut r, m, field, wire)? as i64,
            6 => x.build_id = scalar(&mut r, m, field, wire)? as i64,
            7 => x.has_functions = scalar(&mut r, m, field, wire)? != 0,
            8 => x.has_filenames = scalar(&mut r, m, field, wire)? != 0,
            9 => x.has_line_numbers = scalar(&mut r, m, field, wire)? != 0,
            10 => x.has_inline_frames = scalar(&mut r, m, field, wire)? != 0,
            _ => r.skip(field, wire, FIELD)?,
        }
    }
    Ok(x)
}

/// Decodes a location into `l`, reusing its lines' vector.
fn location(l: &mut Location, mut r: Reader) -> Result<()> {
    let mut line_v = std::mem::take(&mut l.line);
    line_v.clear();
    *l = Location {
        line: line_v,
        ..Default::default()
    };
    let m = "Location";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => l.id = scalar(&mut r, m, field, wire)?,
            2 => l.mapping_id = scalar(&mut r, m, field, wire)?,
            3 => l.address = scalar(&mut r, m, field, wire)?,
            4 => {
                r.room(&mut l.line)?;
                l.line.push(line(message(&mut r, m, field, wire)?)?);
            }
            5 => l.is_folded = scalar(&mut r, m, field, wire)? != 0,
            _ => r.skip(field, wire, FIELD)?,
        }
    }
    Ok(())
}

fn line(mut r: Reader) -> Result<Line> {
    let mut l = Line::default();
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => l.function_id = scalar(&mut r, "Line", field, wire)?,
            2 => l.line = scalar(&mut r, "Line", field, wire)? as i64,
            3 => l.column = scalar(&mut r, "Line", field, wire)? as i64,
            _ => r.skip(field, wire, INNER)?,
        }
    }
    Ok(l)
}

fn function(mut r: Reader) -> Result<Function> {
    let mut f = Function::default();
    let m = "Function";
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => f.id = scalar(&mut r, m, field, wire)?,
            2 => f.name = scalar(&mut r, m, field, wire)? as i64,
            3 => f.system_name = scalar(&mut r, m, field, wire)? as i64,
            4 => f.filename = scalar(&mut r, m, field, wire)? as i64,
            5 => f.start_line = scalar(&mut r, m, field, wire)? as i64,
            _ => r.skip(field, wire, FIELD)?,
        }
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use prost::Message;

    fn arb_profile() -> impl Strategy<Value = Profile> {
        let vt = (any::<i64>(), any::<i64>()).prop_map(|(t, u)| ValueType { r#type: t, unit: u });
        let label = (any::<i64>(), any::<i64>(), any::<i64>(), any::<i64>()).prop_map(
            |(key, str, num, num_unit)| Label {
                key,
                str,
                num,
                num_unit,
            },
        );
        let sample = (
            prop::collection::vec(any::<u64>(), 0..8),
            prop::collection::vec(any::<i64>(), 0..4),
            prop::collection::vec(label, 0..3),
        )
            .prop_map(|(location_id, value, label)| Sample {
                location_id,
                value,
                label,
            });
        let line =
            (any::<u64>(), any::<i64>(), any::<i64>()).prop_map(|(function_id, line, column)| {
                Line {
                    function_id,
                    line,
                    column,
                }
            });
        let location = (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            prop::collection::vec(line, 0..3),
            any::<bool>(),
        )
            .prop_map(|(id, mapping_id, address, line, is_folded)| Location {
                id,
                mapping_id,
                address,
                line,
                is_folded,
            });
        let mapping =
            (any::<[u64; 4]>(), any::<[i64; 2]>(), any::<[bool; 4]>()).prop_map(|(u, i, b)| {
                Mapping {
                    id: u[0],
                    memory_start: u[1],
                    memory_limit: u[2],
                    file_offset: u[3],
                    filename: i[0],
                    build_id: i[1],
                    has_functions: b[0],
                    has_filenames: b[1],
                    has_line_numbers: b[2],
                    has_inline_frames: b[3],
                }
            });
        let function = (any::<u64>(), any::<[i64; 4]>()).prop_map(|(id, i)| Function {
            id,
            name: i[0],
            system_name: i[1],
            filename: i[2],
            start_line: i[3],
        });
        (
            prop::collection::vec(vt.clone(), 0..4),
            prop::collection::vec(sample, 0..6),
            prop::collection::vec(mapping, 0..3),
            prop::collection::vec(location, 0..4),
            prop::collection::vec(function, 0..4),
            prop::collection::vec(".{0,8}", 0..6),
            (
                any::<[i64; 8]>(),
                prop::option::of(vt),
                prop::collection::vec(any::<i64>(), 0..3),
            ),
        )
            .prop_map(
                |(
                    sample_type,
                    sample,
                    mapping,
                    location,
                    function,
                    string_table,
                    (n, period_type, comment),
                )| Profile {
                    sample_type,
                    sample,
                    mapping,
                    location,
                    function,
                    string_table,
                    drop_frames: n[0],
                    keep_frames: n[1],
                    time_nanos: n[2],
                    duration_nanos: n[3],
                    period_type,
                    period: n[4],
                    comment,
                    default_sample_type: n[5],
                    doc_url: n[6],
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn agrees_with_prost_on_valid_profiles(p in arb_profile()) {
            let bytes = p.encode_to_vec();
            prop_assert_eq!(decode_profile(&bytes).unwrap(), p);
        }

        #[test]
        fn agrees_with_prost_on_damaged_bytes(p in arb_profile(), pos in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<prop::sample::Index>()) {
            let mut bytes = p.encode_to_vec();
            if !bytes.is_empty() {
                let i = pos.index(bytes.len());
                bytes[i] = byte;
                bytes.truncate(cut.index(bytes.len()) + 1);
            }
            // Whenever prost accepts the bytes, this decoder must read the same profile.
            if let Ok(expected) = Profile::decode(bytes.as_slice()) {
                prop_assert_eq!(decode_profile(&bytes).unwrap(), expected);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_profile(&bytes);
        }

        /// Decoding into a profile that held another (or part of one, after an error) gives
        /// what decoding into a new one gives: nothing of the old profile is left.
        #[test]
        fn decoding_into_a_used_profile_is_decoding_anew(
            before in arb_profile(),
            cut in any::<prop::sample::Index>(),
            p in arb_profile(),
        ) {
            let old = before.encode_to_vec();
            let mut into = Profile::default();
            // A whole profile, or the part an error leaves.
            let _ = decode_into(&mut into, &old[..cut.index(old.len() + 1)], &Budget::for_message(old.len()));
            let bytes = p.encode_to_vec();
            decode_into(&mut into, &bytes, &Budget::for_message(bytes.len())).unwrap();
            prop_assert_eq!(into, p);
        }
    }

    #[test]
    fn unpacked_repeated_fields_are_accepted() {
        // Sample { location_id: 5 (unpacked), location_id: 7 (unpacked), value: -1 (unpacked) }
        let mut sample = Vec::new();
        for (field, v) in [(1u64, 5u64), (1, 7), (2, u64::MAX)] {
            prost::encoding::encode_key(
                field as u32,
                prost::encoding::WireType::Varint,
                &mut sample,
            );
            prost::encoding::encode_varint(v, &mut sample);
        }
        let mut profile = Vec::new();
        prost::encoding::encode_key(2, prost::encoding::WireType::LengthDelimited, &mut profile);
        prost::encoding::encode_varint(sample.len() as u64, &mut profile);
        profile.extend_from_slice(&sample);
        let p = decode_profile(&profile).unwrap();
        assert_eq!(p.sample[0].location_id, vec![5, 7]);
        assert_eq!(p.sample[0].value, vec![-1]);
        assert_eq!(Profile::decode(profile.as_slice()).unwrap(), p);
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(
            decode_profile(&[0x12, 0x05, 0x08]).unwrap_err().0,
            "length 5 runs past the end of the message"
        );
        assert_eq!(
            decode_profile(&[0x10, 0x01]).unwrap_err().0,
            "Profile field 2 has wire type 0, which does not fit its type"
        );
        assert_eq!(
            decode_profile(&[0x32, 0x01, 0xff]).unwrap_err().0,
            "string_table[0] is not UTF-8"
        );
    }
}
