use super::*;

/// The unversioned layout, as the store wrote it before format versions.
fn encode_unversioned(b: &Block) -> Vec<u8> {
    let mut out = Vec::new();
    out.uvarint(b.series.into());
    out.ivarint(b.time_ns);
    out.ivarint(b.duration_ns);
    out.ivarint(b.period);
    out.uvarint(b.nodes.len() as u64);
    for &n in &b.nodes {
        out.uvarint(n.into());
    }
    for &v in &b.values {
        out.ivarint(v);
    }
    for &l in &b.links {
        out.uvarint(l.into());
    }
    out.uvarint(b.link_table.len() as u64);
    for (trace, span) in &b.link_table {
        out.extend_from_slice(trace);
        out.extend_from_slice(span);
    }
    out
}

fn small() -> Block {
    Block {
        series: 7,
        time_ns: 1_700_000_000_000_000_000,
        duration_ns: 10_000_000_000,
        period: 10_000_000,
        nodes: vec![1, 5, 5, 300],
        values: vec![10_000_000, -3, 0, i64::MAX],
        links: vec![0, 1, 2, 1],
        link_table: vec![([1; 16], [2; 8]), ([0; 16], [3; 8])],
    }
}

/// A CPU block like a real one: many samples, values whole periods, links reused, two
/// links per trace, some links without a trace.
fn large(series: u32) -> Block {
    let n = 600u32;
    let k = 200u32;
    let period = 10_000_000;
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut nodes: Vec<u32> = (0..n).map(|_| (next() % 4000) as u32).collect();
    nodes.sort_unstable();
    Block {
        series,
        time_ns: 1_700_000_000_000_000_000,
        duration_ns: 10_000_000_000,
        period,
        nodes,
        values: (0..n).map(|_| period * (1 + (next() % 3) as i64)).collect(),
        links: (0..n).map(|i| (i * 7 + 3) % (k + 1)).collect(),
        link_table: (0..k)
            .map(|i| {
                let trace = if i % 3 == 0 {
                    [0; 16]
                } else {
                    let mut t = [0; 16];
                    t[..8].copy_from_slice(&(u64::from(i / 2) + 1).to_le_bytes());
                    t
                };
                (trace, next().to_le_bytes())
            })
            .collect(),
    }
}

/// Where to cut an encoding of `len` bytes: everywhere in the first 256 bytes and the last
/// 32, every 13th byte between (decoding a long block at every cut is slow in debug).
fn cuts(len: usize) -> impl Iterator<Item = usize> {
    (0..len).filter(move |&c| c < 256 || c + 32 >= len || c % 13 == 0)
}

fn round_trip(b: &Block) -> Vec<u8> {
    let mut bytes = Vec::new();
    b.encode(&mut bytes);
    let mut g = Get::new(&bytes);
    assert_eq!(&Block::decode(&mut g, &[]).unwrap(), b);
    assert!(g.done(), "the decoder reads the whole block");
    bytes
}

#[test]
fn blocks_round_trip_and_reject_damage() {
    let mut values_not_periods = large(3);
    values_not_periods.values[17] += 1;
    let mut extremes = small();
    extremes.nodes = vec![u32::MAX, 0, u32::MAX, 1];
    extremes.values = vec![i64::MIN, i64::MAX, 0, -1];
    extremes.period = -1;
    let mut whole_periods_at_the_limit = small();
    whole_periods_at_the_limit.values = vec![i64::MIN / 2 * 2, 0, 2, i64::MAX - 1];
    whole_periods_at_the_limit.period = 2;
    for b in [
        small(),
        Block::default(),
        large(0),
        large(200_000),
        values_not_periods,
        extremes,
        whole_periods_at_the_limit,
    ] {
        let bytes = round_trip(&b);
        assert_eq!(bytes[..2], [0x81, 0x00]);
        for cut in cuts(bytes.len()) {
            assert!(
                Block::decode(&mut Get::new(&bytes[..cut]), &[]).is_err(),
                "cut at {cut} of {}",
                bytes.len()
            );
        }
    }
}

#[test]
fn damaged_blocks_give_errors_not_panics() {
    for b in [small(), large(5)] {
        let mut bytes = Vec::new();
        b.encode(&mut bytes);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..bytes.len() * 2 {
            let mut damaged = bytes.clone();
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            damaged[i / 2] ^= 1 << (x >> 61);
            damaged[(x >> 33) as usize % bytes.len()] ^= (x >> 16) as u8;
            // Either an error or some block: never a panic.
            let _ = Block::decode(&mut Get::new(&damaged), &[]);
        }
    }
}

#[test]
fn a_damaged_length_cannot_make_the_reader_allocate() {
    // Version 1, then a header claiming 2^62 samples and deflated columns of 2^62 bytes.
    let mut bytes = vec![0x81, 0x00];
    bytes.uvarint(1);
    bytes.ivarint(0);
    bytes.ivarint(0);
    bytes.ivarint(1);
    bytes.uvarint(1 << 62);
    bytes.uvarint(0);
    bytes.uvarint(0);
    bytes.push(DEFLATED);
    bytes.uvarint(1 << 62);
    bytes.bytes(&deflate(&[0; 64]));
    assert!(Block::decode(&mut Get::new(&bytes), &[]).is_err());
}

/// Encodes `blocks` as a record does: their link table, then each block (version 2).
fn encode_record(blocks: &[Block]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let (table, index) = shared_link_table(blocks);
    let mut links = Vec::new();
    encode_link_table(&table, &mut links);
    let encoded = blocks
        .iter()
        .zip(&index)
        .map(|(b, index)| {
            let mut bytes = Vec::new();
            b.encode_linked(index, &mut bytes);
            bytes
        })
        .collect();
    (links, encoded)
}

#[test]
fn linked_blocks_round_trip_and_reject_damage() {
    let mut other = large(9);
    other.link_table.reverse();
    other.link_table.truncate(150);
    other.links.iter_mut().for_each(|l| *l = (*l).min(150));
    let blocks = [
        large(0),
        large(1),
        small(),
        Block::default(),
        other,
        large(200_000),
    ];
    let (links, encoded) = encode_record(&blocks);
    let mut g = Get::new(&links);
    let table = decode_link_table(&mut g).unwrap();
    assert!(g.done(), "the decoder reads the whole table");
    for cut in cuts(links.len()) {
        assert!(decode_link_table(&mut Get::new(&links[..cut])).is_err());
    }
    for (b, bytes) in blocks.iter().zip(&encoded) {
        assert_eq!(bytes[..2], [0x82, 0x00]);
        let mut g = Get::new(bytes);
        assert_eq!(&Block::decode(&mut g, &table).unwrap(), b);
        assert!(g.done(), "the decoder reads the whole block");
        for cut in cuts(bytes.len()) {
            assert!(Block::decode(&mut Get::new(&bytes[..cut]), &table).is_err());
        }
        // Read with a table that lacks its links: an error, not a panic.
        if !b.link_table.is_empty() {
            assert!(Block::decode(&mut Get::new(bytes), &table[..1]).is_err());
            assert!(Block::decode(&mut Get::new(bytes), &[]).is_err());
        }
    }
}

#[test]
fn damaged_link_tables_and_linked_blocks_give_errors_not_panics() {
    let blocks = [small(), large(5)];
    let (links, encoded) = encode_record(&blocks);
    let table = decode_link_table(&mut Get::new(&links)).unwrap();
    for bytes in std::iter::once(&links).chain(&encoded) {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..bytes.len() * 2 {
            let mut damaged = bytes.clone();
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            damaged[i / 2] ^= 1 << (x >> 61);
            damaged[(x >> 33) as usize % bytes.len()] ^= (x >> 16) as u8;
            // Either an error or something read: never a panic.
            let _ = decode_link_table(&mut Get::new(&damaged));
            let _ = Block::decode(&mut Get::new(&damaged), &table);
        }
    }
}

#[test]
fn a_damaged_link_count_cannot_make_the_reader_allocate() {
    // Version 2, one sample, 2^62 links, plain columns of a few bytes.
    let mut bytes = vec![0x82, 0x00];
    bytes.uvarint(1);
    bytes.ivarint(0);
    bytes.ivarint(0);
    bytes.ivarint(1);
    bytes.uvarint(1);
    bytes.uvarint(1 << 62);
    bytes.push(0);
    bytes.extend_from_slice(&[2; 16]);
    let table = [([1; 16], [2; 8])];
    assert!(Block::decode(&mut Get::new(&bytes), &table).is_err());
    // A table claiming 2^62 links.
    let mut bytes = Vec::new();
    bytes.uvarint(1 << 62);
    bytes.uvarint(0);
    bytes.extend_from_slice(&[0; 64]);
    assert!(decode_link_table(&mut Get::new(&bytes)).is_err());
}

#[test]
fn blocks_of_the_same_links_store_their_ids_once() {
    // A profile's two sample types: the same samples and links, other values.
    let count = large(1);
    let mut cpu = large(2);
    cpu.values.iter_mut().for_each(|v| *v /= 10_000_000);
    let (links, encoded) = encode_record(&[count.clone(), cpu]);
    let mut alone = Vec::new();
    count.encode(&mut alone);
    let ids = 8 * count.link_table.len();
    let linked: usize = links.len() + encoded.iter().map(Vec::len).sum::<usize>();
    // The second block costs its columns (and table indices, about one byte per link before
    // deflate), not its ids again.
    assert!(
        linked + ids < 2 * alone.len(),
        "{linked} B linked, {} B as two self-contained blocks, {ids} B of span ids",
        2 * alone.len()
    );
}

#[test]
fn unversioned_blocks_are_still_read() {
    for series in [0, 1, 7, 127, 128, 129, 0x81, 300, u32::MAX] {
        for mut b in [small(), large(0), Block::default()] {
            b.series = series;
            let old = encode_unversioned(&b);
            assert_eq!(Block::decode(&mut Get::new(&old), &[]).unwrap(), b);
            for cut in cuts(old.len()) {
                assert!(Block::decode(&mut Get::new(&old[..cut]), &[]).is_err());
            }
        }
    }
}

#[test]
fn an_unknown_format_version_is_named() {
    let mut bytes = Vec::new();
    small().encode(&mut bytes);
    bytes[0] = 0x80 | 9;
    let e = Block::decode(&mut Get::new(&bytes), &[]).unwrap_err();
    assert!(e.0.contains("version 9"), "{e}");
}

#[test]
fn ids_are_stored_once_and_columns_take_little() {
    let b = large(1);
    let bytes = round_trip(&b);
    let traces: std::collections::HashSet<_> = b
        .link_table
        .iter()
        .filter(|(t, _)| *t != [0; 16])
        .map(|(t, _)| *t)
        .collect();
    // Ids stored once each, and the columns below two bytes per sample.
    let ids = 16 * traces.len() + 8 * b.link_table.len();
    assert!(
        bytes.len() < ids + 2 * b.nodes.len(),
        "{} bytes for {ids} bytes of ids and {} samples",
        bytes.len(),
        b.nodes.len()
    );
}

#[test]
fn remembered_streams_are_the_streams_of_their_own_bytes() {
    // What a fresh compressor makes of each input, on a thread that deflated nothing yet.
    let inputs: Vec<Vec<u8>> = (0..12u8)
        .map(|k| {
            (0..400u32)
                .map(|i| (i % (7 + u32::from(k))) as u8 ^ k)
                .collect()
        })
        .collect();
    let fresh: Vec<Vec<u8>> = inputs
        .iter()
        .map(|raw| std::thread::scope(|s| s.spawn(|| deflate(raw)).join().unwrap()))
        .collect();
    // Then all on one thread, in an order that both hits and overflows what it remembers.
    for k in [0, 1, 0, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 10, 11, 10, 3, 11] {
        assert_eq!(deflate(&inputs[k]), fresh[k], "input {k}");
        assert_eq!(inflate(&fresh[k], inputs[k].len()).unwrap(), inputs[k]);
    }
}
