//! Detection of payloads encoded with the OTLP Profiles v1.8/v1.9 `Sample` numbering.
//!
//! Proto v1.10 renumbered `Sample` without changing wire types where it matters: field 2 is
//! a packed list in both (values before, attribute indices now), so a v1.10 decoder reads a
//! v1.9 payload without error and swaps the fields. Only the raw bytes can tell them apart.

/// The message [`detect_v1_9_numbering`] returns, before the sample counts.
const NUMBERING: &str = "the payload uses the OTLP Profiles v1.9 Sample field numbering, \
and spanprof reads v1.10+ numbering (v1.9: 1 stack_index, 2 values, 3 attribute_indices, \
4 link_index, 5 timestamps_unix_nano; v1.10+: 1 stack_index, 2 attribute_indices, \
3 link_index, 4 values, 5 timestamps_unix_nano)";

/// Detects payloads written with the OTLP Profiles v1.9 Sample numbering
/// (v1.9 Sample: 1 stack_index, 2 values (packed int64), 3 attribute_indices (packed int32),
/// 4 link_index (int32), 5 timestamps (fixed64); v1.10+: 1 stack_index, 2 attribute_indices,
/// 3 link_index, 4 values, 5 timestamps_unix_nano).
///
/// `bytes` is a binary `ProfilesData` or `ExportProfilesServiceRequest` (not gzip). Returns
/// `Some(message)` when the samples look v1.9: more of them look v1.9 than v1.10, and at
/// least one can only be v1.9 (a packed field 3, or field 2 with neither field 4 nor 5,
/// which in v1.10 would be a sample without values or timestamps). Bytes that are not
/// well-formed protobuf give `None`, as do payloads without samples.
pub fn detect_v1_9_numbering(bytes: &[u8]) -> Option<String> {
    let mut tally = Tally::default();
    for (field, value) in Fields::new(bytes) {
        let (1, Value::Len(resource)) = (field, value?) else {
            continue;
        };
        for (field, value) in Fields::new(resource) {
            let (2, Value::Len(scope)) = (field, value?) else {
                continue;
            };
            for (field, value) in Fields::new(scope) {
                let (2, Value::Len(profile)) = (field, value?) else {
                    continue;
                };
                for (field, value) in Fields::new(profile) {
                    let (2, Value::Len(sample)) = (field, value?) else {
                        continue;
                    };
                    tally.add(&SampleFields::read(sample)?);
                }
            }
        }
    }
    tally.verdict()
}

/// How one sample's fields read.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Valid only under the v1.9 numbering.
    V1_9Certain,
    /// More plausible under the v1.9 numbering (v1.10 would need an unpacked repeated field).
    V1_9Likely,
    /// Plausible or certain under the v1.10 numbering.
    V1_10,
    /// Reads the same either way.
    Either,
}

/// The verdicts of a payload's samples, as a decoder meets them: [`SampleFields::note`] each
/// field of a sample, [`Tally::add`] the sample, and [`Tally::verdict`] at the end (what
/// [`detect_v1_9_numbering`] answers for the same bytes, without a second pass over them).
#[derive(Debug, Default)]
pub(crate) struct Tally {
    v1_9: usize,
    v1_9_certain: usize,
    v1_10: usize,
    total: usize,
}

impl Tally {
    pub(crate) fn add(&mut self, sample: &SampleFields) {
        self.total += 1;
        match sample.classify() {
            Verdict::V1_9Certain => {
                self.v1_9 += 1;
                self.v1_9_certain += 1;
            }
            Verdict::V1_9Likely => self.v1_9 += 1,
            Verdict::V1_10 => self.v1_10 += 1,
            Verdict::Either => {}
        }
    }

    /// The refusal of a payload whose samples look v1.9: more of them look v1.9 than v1.10,
    /// and at least one can only be v1.9.
    pub(crate) fn verdict(&self) -> Option<String> {
        (self.v1_9_certain > 0 && self.v1_9 > self.v1_10).then(|| {
            format!(
                "{NUMBERING}; {} of {} samples look v1.9",
                self.v1_9, self.total
            )
        })
    }
}

/// Which of `Sample`'s fields 2–5 are present, and with which wire types.
#[derive(Debug, Default)]
pub(crate) struct SampleFields {
    f2: bool,
    f3_len: bool,
    f3_varint: bool,
    f4_len: bool,
    f4_varint: bool,
    f5: bool,
}

impl SampleFields {
    /// `None` when the sample is not well-formed protobuf.
    fn read(sample: &[u8]) -> Option<SampleFields> {
        let mut s = SampleFields::default();
        for (field, value) in Fields::new(sample) {
            let wire = match value? {
                Value::Varint => 0,
                Value::Fixed => 1,
                Value::Len(_) => 2,
            };
            s.note(field, wire);
        }
        Some(s)
    }

    /// A field of the sample, with its wire type (0 varint, 2 length-delimited, else other).
    #[inline]
    pub(crate) fn note(&mut self, field: u64, wire: u8) {
        match (field, wire) {
            (2, _) => self.f2 = true,
            (3, 2) => self.f3_len = true,
            (3, 0) => self.f3_varint = true,
            (4, 2) => self.f4_len = true,
            (4, 0) => self.f4_varint = true,
            (5, _) => self.f5 = true,
            _ => {}
        }
    }

    fn classify(&self) -> Verdict {
        match (self.f3_len, self.f4_len) {
            // Packed attribute indices in field 3; v1.10's link_index is a scalar.
            (true, false) => return Verdict::V1_9Certain,
            // Packed values in field 4; v1.9's link_index is a scalar.
            (false, true) => return Verdict::V1_10,
            (true, true) => return Verdict::Either,
            (false, false) => {}
        }
        if self.f2 && !self.f4_varint && !self.f5 {
            // v1.9: values and no timestamps. v1.10: neither values nor timestamps, a MUST broken.
            Verdict::V1_9Certain
        } else if self.f2 && self.f4_varint {
            // v1.9 link_index, or a v1.10 value written unpacked, which prost and Go never do.
            Verdict::V1_9Likely
        } else if self.f3_varint {
            Verdict::V1_10
        } else {
            Verdict::Either
        }
    }
}

/// A field's payload, as far as detection needs it.
#[derive(Clone, Copy, Debug)]
enum Value<'a> {
    Varint,
    Fixed,
    Len(&'a [u8]),
}

/// The fields of one protobuf message, in wire order: `(number, Some(value))` per field, then
/// a last `(0, None)` if the bytes are malformed.
struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> Fields<'a> {
    fn new(buf: &'a [u8]) -> Fields<'a> {
        Fields {
            buf,
            pos: 0,
            done: false,
        }
    }

    fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in 0..10 {
            let byte = *self.buf.get(self.pos)?;
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << (7 * shift);
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    fn skip(&mut self, n: u64) -> Option<&'a [u8]> {
        let n = usize::try_from(n).ok()?;
        let end = self.pos.checked_add(n)?;
        let bytes = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(bytes)
    }

    fn field(&mut self) -> Option<(u64, Value<'a>)> {
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 {
            return None;
        }
        let value = match key & 7 {
            0 => self.varint().map(|_| Value::Varint)?,
            1 => self.skip(8).map(|_| Value::Fixed)?,
            2 => {
                let len = self.varint()?;
                Value::Len(self.skip(len)?)
            }
            5 => self.skip(4).map(|_| Value::Fixed)?,
            // Groups (3, 4) are not used by these messages; 6 and 7 do not exist.
            _ => return None,
        };
        Some((number, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    /// A field number and its value, or `None` for malformed bytes (the last item).
    type Item = (u64, Option<Value<'a>>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.buf.len() {
            return None;
        }
        match self.field() {
            Some((number, value)) => Some((number, Some(value))),
            None => {
                self.done = true;
                Some((0, None))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use prost::encoding::{encode_key, encode_varint, fixed64, int32, int64, WireType};
    use prost::Message;

    use super::*;
    use crate::check::fixture::{profile, valid};
    use crate::otlp::{ExportProfilesServiceRequest, Sample};

    /// `payload` as field `tag` of wire type LEN.
    fn nested(tag: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_key(tag, WireType::LengthDelimited, &mut out);
        encode_varint(payload.len() as u64, &mut out);
        out.extend_from_slice(payload);
        out
    }

    /// A ProfilesData holding the given encoded samples in one profile.
    fn payload(samples: &[Vec<u8>]) -> Vec<u8> {
        let profile: Vec<u8> = samples.iter().flat_map(|s| nested(2, s)).collect();
        nested(1, &nested(2, &nested(2, &profile)))
    }

    /// A v1.9 Sample: stack 1, values, attribute indices, link, timestamps.
    fn v1_9_sample(values: &[i64], attributes: &[i32], link: i32, timestamps: &[u64]) -> Vec<u8> {
        let mut out = Vec::new();
        int32::encode(1, &1, &mut out);
        int64::encode_packed(2, values, &mut out);
        int32::encode_packed(3, attributes, &mut out);
        if link != 0 {
            int32::encode(4, &link, &mut out);
        }
        fixed64::encode_packed(5, timestamps, &mut out);
        out
    }

    #[test]
    fn flags_v1_9_sample_with_packed_attributes() {
        let bytes = payload(&[v1_9_sample(&[10], &[1, 2], 3, &[])]);
        let message = detect_v1_9_numbering(&bytes).expect("flagged");
        assert!(message.starts_with(
            "the payload uses the OTLP Profiles v1.9 Sample field numbering, \
             and spanprof reads v1.10+ numbering"
        ));
        assert!(message.contains(
            "v1.9: 1 stack_index, 2 values, 3 attribute_indices, 4 link_index, 5 timestamps_unix_nano"
        ));
        assert!(message.contains(
            "v1.10+: 1 stack_index, 2 attribute_indices, 3 link_index, 4 values, 5 timestamps_unix_nano"
        ));
        assert!(message.ends_with("1 of 1 samples look v1.9"));
    }

    #[test]
    fn flags_v1_9_values_only_samples_from_raw_bytes() {
        // Sample {1: stack_index 1, 2: packed values [7]}, as a v1.9 pprof converter writes it.
        let sample = [0x08, 0x01, 0x12, 0x01, 0x07];
        let bytes = payload(&[sample.to_vec(), sample.to_vec()]);
        let message = detect_v1_9_numbering(&bytes).expect("flagged");
        assert!(message.ends_with("2 of 2 samples look v1.9"));
    }

    #[test]
    fn flags_v1_9_sample_with_link_and_no_attributes() {
        let likely = v1_9_sample(&[10], &[], 3, &[]);
        let certain = v1_9_sample(&[10], &[4], 0, &[]);
        assert!(detect_v1_9_numbering(&payload(&[likely.clone(), certain])).is_some());
        // Likely alone is not enough.
        assert_eq!(detect_v1_9_numbering(&payload(&[likely])), None);
    }

    #[test]
    fn v1_10_payload_from_crate_types_is_not_flagged() {
        let mut data = valid();
        profile(&mut data).samples.push(Sample {
            stack_index: 1,
            attribute_indices: vec![1],
            link_index: 0,
            values: vec![],
            timestamps_unix_nano: vec![1500],
        });
        profile(&mut data).samples.push(Sample {
            stack_index: 1,
            values: vec![2, 3],
            timestamps_unix_nano: vec![1100, 1200],
            ..Sample::default()
        });
        assert_eq!(detect_v1_9_numbering(&data.encode_to_vec()), None);
        let request = ExportProfilesServiceRequest {
            resource_profiles: data.resource_profiles.clone(),
            dictionary: data.dictionary.clone(),
        };
        assert_eq!(detect_v1_9_numbering(&request.encode_to_vec()), None);
    }

    #[test]
    fn v1_10_majority_wins() {
        let mut data = valid();
        let v1_10 = profile(&mut data).samples[0].encode_to_vec();
        let v1_9 = v1_9_sample(&[10], &[1], 0, &[]);
        let bytes = payload(&[v1_10.clone(), v1_10, v1_9]);
        assert_eq!(detect_v1_9_numbering(&bytes), None);
    }

    #[test]
    fn ambiguous_and_empty_inputs_are_not_flagged() {
        // Timestamps only read the same in both numberings.
        let mut sample = Vec::new();
        fixed64::encode_packed(5, &[1, 2], &mut sample);
        assert_eq!(detect_v1_9_numbering(&payload(&[sample])), None);
        assert_eq!(detect_v1_9_numbering(&[]), None);
        assert_eq!(detect_v1_9_numbering(&payload(&[])), None);
    }

    #[test]
    fn malformed_bytes_are_not_flagged() {
        let good = payload(&[v1_9_sample(&[10], &[1], 0, &[])]);
        for cut in 1..good.len() {
            let _ = detect_v1_9_numbering(&good[..cut]);
        }
        // A truncated sample makes the whole answer unknown.
        let mut bad = v1_9_sample(&[10], &[1], 0, &[]);
        bad.push(0x22); // field 4, LEN, length missing
        assert_eq!(detect_v1_9_numbering(&payload(&[bad])), None);
        // Wire types 3, 4 (groups), 6 and 7.
        for key in [0x0b, 0x0c, 0x0e, 0x0f] {
            assert_eq!(detect_v1_9_numbering(&[key, 0, 0]), None);
        }
        // An over-long varint.
        assert_eq!(detect_v1_9_numbering(&[0xff; 12]), None);
    }
}
