//! What the store keeps in memory: symbols, series, one entry per block, the span and trace
//! indexes, and the spans. Rebuilt from the log on open.

use hashbrown::HashMap;
use spanprof_format::profile_type::ProfileTypeId;

use super::{record_kind, StoreStats, COMPACT_BEGIN, COMPACT_END, COPY, INGEST, SNAPSHOT};
use crate::block::Block;
use crate::codec::{CodecError, Get, Put};
use crate::log::RecordPos;
use crate::spans::{decode_spans, SpanIndex};
use crate::symbols::SymbolTable;

/// What identifies a series: service, profile type and labels (never span or trace ids).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SeriesKey {
    /// Service id.
    pub service: u32,
    /// Profile type.
    pub profile_type: ProfileTypeId,
    /// Labels, sorted by name; `service_name` included.
    pub labels: Vec<(String, String)>,
}

impl SeriesKey {
    /// The value of label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A service and its symbols.
#[derive(Debug)]
pub(crate) struct Service {
    pub name: String,
    pub symbols: SymbolTable,
}

/// Where a block is and what it holds.
#[derive(Debug, Clone)]
pub(crate) struct BlockMeta {
    pub pos: RecordPos,
    /// Byte range of the block inside the record payload.
    pub start: u32,
    pub len: u32,
    pub series: u32,
    pub time_ns: i64,
    pub duration_ns: i64,
    pub samples: u32,
    pub alive: bool,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub services: Vec<Service>,
    pub service_ids: HashMap<String, u32>,
    pub series: Vec<SeriesKey>,
    pub series_ids: HashMap<SeriesKey, u32>,
    /// Series up to here are in the log.
    pub series_flushed: usize,
    pub blocks: Vec<BlockMeta>,
    /// Span id → blocks holding samples of that span.
    pub by_span: HashMap<[u8; 8], Vec<u32>>,
    /// Trace id → blocks holding samples linked to that trace.
    pub by_trace: HashMap<[u8; 16], Vec<u32>>,
    pub spans: SpanIndex,
}

impl State {
    pub fn service_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.service_ids.get(name) {
            return id;
        }
        let id = self.services.len() as u32;
        self.services.push(Service {
            name: name.to_owned(),
            symbols: SymbolTable::new(),
        });
        self.service_ids.insert(name.to_owned(), id);
        id
    }

    pub fn series_id(&mut self, key: SeriesKey) -> u32 {
        if let Some(&id) = self.series_ids.get(&key) {
            return id;
        }
        let id = self.series.len() as u32;
        self.series.push(key.clone());
        self.series_ids.insert(key, id);
        id
    }

    /// A snapshot record: every service's symbols and every series.
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let mut out = vec![SNAPSHOT];
        out.uvarint(self.services.len() as u64);
        for (id, s) in self.services.iter().enumerate() {
            out.uvarint(id as u64);
            out.str(&s.name);
            s.symbols.encode_snapshot(&mut out);
        }
        encode_series(&mut out, &self.series, 0);
        out
    }

    /// Applies one record read from the log at `pos`.
    pub fn replay(&mut self, pos: RecordPos, payload: &[u8]) -> Result<(), CodecError> {
        let mut g = Get::new(payload);
        match record_kind(&mut g)? {
            SNAPSHOT => {
                self.apply_services(&mut g)?;
                self.apply_series(&mut g)?;
            }
            COMPACT_BEGIN | COMPACT_END => return Ok(()),
            INGEST | COPY => {
                self.apply_services(&mut g)?;
                self.apply_series(&mut g)?;
                let n = g.count()?;
                for _ in 0..n {
                    let bytes = g.bytes()?;
                    let start = (payload.len() - g.remaining() - bytes.len()) as u32;
                    let block = Block::decode(&mut Get::new(bytes))?;
                    if block.series as usize >= self.series.len() {
                        return Err(CodecError(format!(
                            "block of unknown series {}",
                            block.series
                        )));
                    }
                    self.index_block(pos, start, bytes.len() as u32, &block);
                }
                for span in decode_spans(g.bytes()?).map_err(|e| CodecError(e.to_string()))? {
                    self.spans.insert(span);
                }
            }
            _ => unreachable!("record_kind checks the kind"),
        }
        if !g.done() {
            return Err(CodecError("trailing bytes after the record".into()));
        }
        Ok(())
    }

    fn apply_services(&mut self, g: &mut Get) -> Result<(), CodecError> {
        let n = g.count()?;
        for _ in 0..n {
            let id = g.u32()? as usize;
            let name = g.str()?;
            match id.cmp(&self.services.len()) {
                std::cmp::Ordering::Less if self.services[id].name != name => {
                    return Err(CodecError(format!(
                        "service {id} is {:?} but the record says {name:?}",
                        self.services[id].name
                    )));
                }
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => {
                    self.service_id(name);
                }
                std::cmp::Ordering::Greater => {
                    return Err(CodecError(format!("service id {id} skips ahead")))
                }
            }
            self.services[id].symbols.apply(g)?;
        }
        Ok(())
    }

    fn apply_series(&mut self, g: &mut Get) -> Result<(), CodecError> {
        let (start, n) = (g.index()?, g.count()?);
        for id in start..start + n {
            let service = g.u32()?;
            let profile_type = ProfileTypeId::parse(g.str()?)
                .ok_or_else(|| CodecError("bad profile type id".into()))?;
            let k = g.count()?;
            let mut labels = Vec::with_capacity(k);
            for _ in 0..k {
                labels.push((g.str()?.to_owned(), g.str()?.to_owned()));
            }
            if service as usize >= self.services.len() {
                return Err(CodecError(format!("series of unknown service {service}")));
            }
            match id.cmp(&self.series.len()) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => {
                    self.series_id(SeriesKey {
                        service,
                        profile_type,
                        labels,
                    });
                }
                std::cmp::Ordering::Greater => {
                    return Err(CodecError(format!("series id {id} skips ahead")))
                }
            }
        }
        self.series_flushed = self.series.len();
        Ok(())
    }

    /// Adds a block to the indexes.
    pub fn index_block(&mut self, pos: RecordPos, start: u32, len: u32, block: &Block) {
        let id = self.blocks.len() as u32;
        self.blocks.push(BlockMeta {
            pos,
            start,
            len,
            series: block.series,
            time_ns: block.time_ns,
            duration_ns: block.duration_ns,
            samples: block.nodes.len() as u32,
            alive: true,
        });
        for (trace, span) in &block.link_table {
            push_once(self.by_span.entry(*span).or_default(), id);
            if *trace != [0; 16] {
                push_once(self.by_trace.entry(*trace).or_default(), id);
            }
        }
    }

    /// The newest data time (ns) per segment, for retention.
    pub fn newest_per_segment(&self) -> HashMap<u64, i64> {
        let mut out: HashMap<u64, i64> = HashMap::new();
        for b in self.blocks.iter().filter(|b| b.alive) {
            let end = b.time_ns.saturating_add(b.duration_ns);
            let e = out.entry(b.pos.segment).or_insert(end);
            *e = (*e).max(end);
        }
        out
    }

    /// Drops everything that lived in a deleted segment; with `drop_spans`, also the spans
    /// that ended before that segment's newest data (retention).
    pub fn forget_segment(&mut self, segment: u64, drop_spans: bool) {
        let mut newest_dropped = i64::MIN;
        for b in self.blocks.iter_mut().filter(|b| b.pos.segment == segment) {
            b.alive = false;
            newest_dropped = newest_dropped.max(b.time_ns.saturating_add(b.duration_ns));
        }
        let alive = &self.blocks;
        self.by_span.retain(|_, ids| {
            ids.retain(|&i| alive[i as usize].alive);
            !ids.is_empty()
        });
        self.by_trace.retain(|_, ids| {
            ids.retain(|&i| alive[i as usize].alive);
            !ids.is_empty()
        });
        if drop_spans && newest_dropped > 0 {
            self.spans.remove_older_than(newest_dropped as u64);
        }
    }

    pub fn stats(&self) -> StoreStats {
        let alive = self.blocks.iter().filter(|b| b.alive);
        StoreStats {
            services: self.services.len(),
            series: self.series.len(),
            blocks: alive.clone().count(),
            samples: alive.map(|b| u64::from(b.samples)).sum(),
            spans: self.spans.len(),
            stack_nodes: self.services.iter().map(|s| s.symbols.node_count()).sum(),
            ..Default::default()
        }
    }
}

fn push_once(ids: &mut Vec<u32>, id: u32) {
    if ids.last() != Some(&id) {
        ids.push(id);
    }
}

/// Writes series `from..` as (start, count, entries).
pub(crate) fn encode_series(out: &mut Vec<u8>, series: &[SeriesKey], from: usize) {
    out.uvarint(from as u64);
    out.uvarint((series.len() - from) as u64);
    for s in &series[from..] {
        out.uvarint(s.service.into());
        out.str(&s.profile_type.to_string());
        out.uvarint(s.labels.len() as u64);
        for (k, v) in &s.labels {
            out.str(k);
            out.str(v);
        }
    }
}
