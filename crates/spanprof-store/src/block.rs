//! A block: the samples of one profile of one series, as columns — stack node, value, link —
//! plus the block's own link table. Span and trace ids live here, per sample, never in series
//! labels.

use crate::codec::{CodecError, Get, Put};

/// (trace id, span id) of a link; an all-zero trace id means the producer sent only a span id
/// and the trace is bound later from the stored span.
pub type LinkIds = ([u8; 16], [u8; 8]);

/// The samples of one profile of one series.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Block {
    /// Series id.
    pub series: u32,
    /// Start of the profile, in nanoseconds since the Unix epoch.
    pub time_ns: i64,
    /// Length of the profile, in nanoseconds.
    pub duration_ns: i64,
    /// Sampling period, in the profile's period unit (e.g. 10000000 ns for Go CPU).
    pub period: i64,
    /// Stack node per sample.
    pub nodes: Vec<u32>,
    /// Value per sample, in the profile type's unit.
    pub values: Vec<i64>,
    /// Link per sample: 0 = none, i = `link_table[i - 1]`.
    pub links: Vec<u32>,
    /// Distinct links of the block.
    pub link_table: Vec<LinkIds>,
}

impl Block {
    /// Appends the block's encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.uvarint(self.series.into());
        out.ivarint(self.time_ns);
        out.ivarint(self.duration_ns);
        out.ivarint(self.period);
        out.uvarint(self.nodes.len() as u64);
        for &n in &self.nodes {
            out.uvarint(n.into());
        }
        for &v in &self.values {
            out.ivarint(v);
        }
        for &l in &self.links {
            out.uvarint(l.into());
        }
        out.uvarint(self.link_table.len() as u64);
        for (trace, span) in &self.link_table {
            out.extend_from_slice(trace);
            out.extend_from_slice(span);
        }
    }

    /// Reads a block written by [`Block::encode`].
    pub(crate) fn decode(g: &mut Get) -> Result<Block, CodecError> {
        let (series, time_ns, duration_ns, period) =
            (g.u32()?, g.ivarint()?, g.ivarint()?, g.ivarint()?);
        let n = g.count()?;
        let mut b = Block {
            series,
            time_ns,
            duration_ns,
            period,
            ..Default::default()
        };
        b.nodes.reserve_exact(n);
        for _ in 0..n {
            b.nodes.push(g.u32()?);
        }
        b.values.reserve_exact(n);
        for _ in 0..n {
            b.values.push(g.ivarint()?);
        }
        b.links.reserve_exact(n);
        for _ in 0..n {
            b.links.push(g.u32()?);
        }
        let k = g.count()?;
        b.link_table.reserve_exact(k);
        for _ in 0..k {
            b.link_table.push((g.fixed::<16>()?, g.fixed::<8>()?));
        }
        if b.links.iter().any(|&l| l as usize > k) {
            return Err(CodecError(format!(
                "a sample's link is past the block's {k} links"
            )));
        }
        Ok(b)
    }

    /// Sum of the values.
    pub fn total(&self) -> i64 {
        self.values.iter().fold(0i64, |a, v| a.saturating_add(*v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_and_reject_damage() {
        let b = Block {
            series: 7,
            time_ns: 1_700_000_000_000_000_000,
            duration_ns: 10_000_000_000,
            period: 10_000_000,
            nodes: vec![1, 5, 5, 300],
            values: vec![10_000_000, -3, 0, i64::MAX],
            links: vec![0, 1, 2, 1],
            link_table: vec![([1; 16], [2; 8]), ([0; 16], [3; 8])],
        };
        let mut bytes = Vec::new();
        b.encode(&mut bytes);
        assert_eq!(Block::decode(&mut Get::new(&bytes)).unwrap(), b);
        for cut in 0..bytes.len() {
            assert!(
                Block::decode(&mut Get::new(&bytes[..cut])).is_err(),
                "cut at {cut}"
            );
        }
    }
}
