//! What the store keeps in memory: symbols, series, one entry per block, the span and trace
//! indexes, and the spans. Rebuilt from the log on open.

use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hashbrown::HashMap;
use spanprof_format::profile_type::ProfileTypeId;

use super::segments::{
    index_path, write_index, IndexCache, IndexError, SealedSummary, SegmentIndex,
};

use super::{
    get_record_links, record_kind, StoreStats, COMPACT_BEGIN, COMPACT_END, COPY, INGEST, SNAPSHOT,
};
use crate::block::Block;
use crate::codec::{CodecError, Get, Put};
use crate::log::RecordPos;
use crate::spans::decode_spans;
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

/// One generation of a service's symbols: the service's entry in [`State::services`].
///
/// Symbols are interned for good within a generation, so every new build of a program adds
/// all its symbols again. Once a generation's symbols are more than twice those of the
/// binaries its profiles used recently ([`State::check_generations`]), the segment is sealed and a new, empty
/// generation starts ([`State::roll_generations`]). New series and blocks refer to the new
/// one, and the old one is dropped once retention has deleted the last block of its series
/// ([`State::drop_unused_generations`]). Answers never see the difference: they select
/// services by name and merge stacks by frame names.
#[derive(Debug)]
pub(crate) struct Service {
    pub name: String,
    pub symbols: SymbolTable,
    /// About the bytes of `symbols`, as counted against `StoreConfig::max_symbol_bytes`.
    pub bytes: u64,
    /// When the generation's use was last measured (or it started, or the store was opened).
    pub checked: Instant,
    /// Measured to hold more than twice what it used recently: a new generation is due.
    pub due: bool,
}

#[derive(Debug)]
pub(crate) struct State {
    /// Every generation of every service ([`Service`]), by id; ids are never reused.
    pub services: Vec<Service>,
    /// Each service's current generation, by name.
    pub service_ids: HashMap<String, u32>,
    /// Every series by id. A series whose data retention deleted is forgotten
    /// ([`State::forget_unused_series`]): its labels are emptied (a real series always has
    /// `service_name`) and its key is out of `series_ids`; its id is never reused.
    /// Shared keys, so that a series scan copies pointers under the read lock and matches
    /// labels (user regexes: seconds over long values) with no lock held.
    pub series: Vec<Arc<SeriesKey>>,
    /// How many of `series` are forgotten.
    forgotten: usize,
    /// About the bytes every service's symbols take ([`SymbolTable::bytes_since`]), kept up
    /// by ingest against `StoreConfig::max_symbol_bytes`; set on open.
    pub symbol_bytes: u64,
    /// Series ids by key: ids into `series`, hashed through it, so each key is held once.
    series_ids: hashbrown::HashTable<u32>,
    series_hasher: hashbrown::DefaultHashBuilder,
    /// Series up to here are in the log.
    pub series_flushed: usize,
    /// The index of the segment appends go to.
    pub active: Arc<SegmentIndex>,
    /// Sealed segments by id: only their summaries stay in memory.
    pub sealed: BTreeMap<u64, SealedSummary>,
    /// Segments no longer appended to whose index file is being written in the background
    /// ([`State::begin_seal`]); queries read their index from memory meanwhile.
    pub sealing: BTreeMap<u64, Arc<SegmentIndex>>,
    /// Where sealed segments' indexes are written.
    pub index_dir: PathBuf,
    /// Shared with queries that read sealed indexes after letting go of the state lock
    /// ([`State::index_refs`]).
    pub cache: Arc<IndexCache>,
    /// The profiles stored lately, to store a request sent again once.
    pub recent: super::recent::RecentProfiles,
}

/// A segment's index as a long query reaches it: in memory already (the active segment, those
/// being sealed), or sealed, read from its file (through the cache) when the query gets to
/// it, with the store's state unlocked ([`State::index_refs`]).
pub(crate) enum IndexRef {
    Loaded(Arc<SegmentIndex>),
    Sealed(u64),
}

/// Reads the sealed indexes of [`IndexRef`]s without the state lock.
pub(crate) struct IndexLoader {
    dir: PathBuf,
    cache: Arc<IndexCache>,
}

impl IndexLoader {
    /// The index `r` names; `None` for a sealed segment deleted since it was listed
    /// (retention or compaction got there first).
    pub fn load(&self, r: &IndexRef) -> Result<Option<Arc<SegmentIndex>>, IndexError> {
        match r {
            IndexRef::Loaded(index) => Ok(Some(Arc::clone(index))),
            IndexRef::Sealed(id) => self.cache.get_if_present(&self.dir, *id),
        }
    }
}

impl State {
    pub fn new(index_dir: PathBuf, cache_segments: usize) -> Self {
        State {
            services: Vec::new(),
            service_ids: HashMap::new(),
            series: Vec::new(),
            forgotten: 0,
            symbol_bytes: 0,
            series_ids: hashbrown::HashTable::new(),
            series_hasher: Default::default(),
            series_flushed: 0,
            active: Arc::new(SegmentIndex::new(0)),
            sealed: BTreeMap::new(),
            sealing: BTreeMap::new(),
            index_dir,
            cache: Arc::new(IndexCache::new(cache_segments)),
            recent: Default::default(),
        }
    }

    /// The current generation of service `name`, made if the service is new.
    pub fn service_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.service_ids.get(name) {
            return id;
        }
        self.new_generation(name)
    }

    /// Starts a new, empty generation of service `name` (or its first), which becomes the
    /// current one.
    fn new_generation(&mut self, name: &str) -> u32 {
        let id = self.services.len() as u32;
        self.services.push(Service {
            name: name.to_owned(),
            symbols: SymbolTable::new(),
            bytes: 0,
            checked: Instant::now(),
            due: false,
        });
        self.service_ids.insert(name.to_owned(), id);
        id
    }

    /// Whether `id` is its service's current generation.
    pub fn is_current(&self, id: u32) -> bool {
        self.service_ids.get(&self.services[id as usize].name) == Some(&id)
    }

    /// Measures, once every `period` per current generation, the symbols of the binaries its
    /// profiles used in the last one or two periods, and of frames without a binary used in
    /// the last 48 ([`SymbolTable::take_recent_use`]): with
    /// some used, its symbols `min_bytes` or more (0 = never) and more than twice those, a new
    /// generation is due (the caller seals the segment, which starts it). A new generation uses all it holds in its first period, so it lasts two at least.
    /// Returns whether one is due.
    pub fn check_generations(&mut self, now: Instant, period: Duration, min_bytes: u64) -> bool {
        let mut any = false;
        for &id in self.service_ids.values() {
            let s = &mut self.services[id as usize];
            if min_bytes != 0 && !s.due && now.saturating_duration_since(s.checked) >= period {
                s.checked = now;
                // Unused (a service that stopped sending, or sends less often than this):
                // nothing tells which of its symbols are stale.
                s.due = s.symbols.take_recent_use().is_some_and(|recent| {
                    s.bytes >= min_bytes && s.bytes > recent.saturating_mul(2)
                });
            }
            any |= s.due;
        }
        any
    }

    /// At a seal: each service due a new generation gets one, empty, which becomes current.
    /// Returns them, with the bytes of their old generation. The caller holds the writer
    /// lock, and writes the next snapshot after this (so the log has the new generations
    /// before any record refers to them).
    pub fn roll_generations(&mut self) -> Vec<(String, u64)> {
        let due: Vec<(String, u64)> = self
            .service_ids
            .values()
            .map(|&id| &self.services[id as usize])
            .filter(|s| s.due)
            .map(|s| (s.name.clone(), s.bytes))
            .collect();
        for (name, _) in &due {
            self.new_generation(name);
        }
        due
    }

    /// Takes back what [`State::roll_generations`] did when there were `len` services before
    /// it, because the snapshot that was to follow could not be written: the new generations
    /// are the services from `len` on, and empty.
    pub fn undo_roll(&mut self, len: usize) {
        while self.services.len() > len {
            let s = self.services.pop().expect("more services than len");
            debug_assert!(s.symbols.is_empty());
            let before = (0..self.services.len())
                .rev()
                .find(|&i| self.services[i].name == s.name);
            match before {
                Some(i) => self.service_ids.insert(s.name, i as u32),
                None => self.service_ids.remove(&s.name),
            };
        }
    }

    /// Empties the symbol tables of generations that are not current and that no series
    /// with data refers to any more (call after [`State::forget_unused_series`]); their ids
    /// stay, with nothing in them. Returns how many were emptied, and recounts
    /// [`State::symbol_bytes`].
    pub fn drop_unused_generations(&mut self) -> usize {
        let mut used = vec![false; self.services.len()];
        for k in self.series.iter().filter(|k| !is_forgotten(k)) {
            if let Some(u) = used.get_mut(k.service as usize) {
                *u = true;
            }
        }
        let mut n = 0;
        for id in 0..self.services.len() as u32 {
            if used[id as usize]
                || self.is_current(id)
                || self.services[id as usize].symbols.is_empty()
            {
                continue;
            }
            self.services[id as usize].symbols = SymbolTable::new();
            n += 1;
        }
        self.count_symbol_bytes();
        n
    }

    /// Takes back service `id`, just made by [`State::service_id`] (the last one) and given
    /// nothing since.
    pub fn forget_new_service(&mut self, id: u32) {
        debug_assert_eq!(id as usize + 1, self.services.len(), "the newest service");
        debug_assert_eq!(
            self.services[id as usize].symbols.sizes(),
            SymbolTable::new().sizes()
        );
        if let Some(s) = self.services.pop() {
            self.service_ids.remove(&s.name);
        }
    }

    pub fn series_id(&mut self, key: SeriesKey) -> u32 {
        self.series_id_within(key, 0)
            .expect("no limit on the number of series")
    }

    /// The id of series `key`, made if it is new, unless the store already holds `max`
    /// series (0 = no limit): then nothing is made, and the key is handed back.
    pub fn series_id_within(&mut self, key: SeriesKey, max: usize) -> Result<u32, Box<SeriesKey>> {
        // A series of a new symbol generation with the labels of one of an older generation
        // is the same series to its users: it is not refused (the older one is forgotten
        // once retention has deleted its data).
        let full = max != 0 && self.live_series() >= max && !self.has_older_twin(&key);
        let (series, hasher) = (&self.series, &self.series_hasher);
        let hash = hasher.hash_one(&key);
        match self
            .series_ids
            .find_entry(hash, |&id| *series[id as usize] == key)
        {
            Ok(found) => Ok(*found.get()),
            Err(_) if full => Err(Box::new(key)),
            Err(absent) => {
                let id = series.len() as u32;
                absent
                    .into_table()
                    .insert_unique(hash, id, |&id| hasher.hash_one(&series[id as usize]));
                self.series.push(Arc::new(key));
                Ok(id)
            }
        }
    }

    /// Whether series `key` is known under an older generation of its service.
    fn has_older_twin(&self, key: &SeriesKey) -> bool {
        let name = &self.services[key.service as usize].name;
        (0..key.service)
            .filter(|&id| self.services[id as usize].name == *name)
            .any(|service| {
                let twin = SeriesKey {
                    service,
                    ..key.clone()
                };
                let hash = self.series_hasher.hash_one(&twin);
                self.series_ids
                    .find(hash, |&id| *self.series[id as usize] == twin)
                    .is_some()
            })
    }

    /// Takes back the series from id `len` on, just made and not yet in the log (those of a
    /// refused profile).
    pub fn truncate_series(&mut self, len: usize) {
        debug_assert!(self.series_flushed <= len, "series already in the log");
        let len = len.max(self.series_flushed);
        for id in (len..self.series.len()).rev() {
            let hash = self.series_hasher.hash_one(&self.series[id]);
            if let Ok(entry) = self.series_ids.find_entry(hash, |&at| at as usize == id) {
                entry.remove();
            }
        }
        self.series.truncate(len);
    }

    /// Sets [`State::symbol_bytes`] and each generation's bytes from the tables (after
    /// replay, after generations are dropped).
    pub fn count_symbol_bytes(&mut self) {
        for s in &mut self.services {
            s.bytes = s.symbols.bytes_since([1; 5]);
        }
        self.symbol_bytes = self.services.iter().map(|s| s.bytes).sum();
    }

    /// Series that are not forgotten.
    pub fn live_series(&self) -> usize {
        self.series.len() - self.forgotten
    }

    /// Forgets every series no stored block belongs to any more (retention deleted their
    /// segments, or a refused profile made them and stored nothing): their labels go, and a
    /// profile with the same labels later makes a new series. Series are kept in memory for
    /// good otherwise, and counted against `storage.max_series`: labels whose values change
    /// (pods, process instance ids) would fill it even with retention on. Returns how many
    /// were forgotten. The caller holds the writer lock (no ingest makes series meanwhile).
    pub fn forget_unused_series(&mut self) -> usize {
        let mut used = vec![false; self.series.len()];
        for id in self.stored_series() {
            if let Some(u) = used.get_mut(id as usize) {
                *u = true;
            }
        }
        let mut n = 0;
        for (id, used) in used.into_iter().enumerate() {
            if used || is_forgotten(&self.series[id]) {
                continue;
            }
            let hash = self.series_hasher.hash_one(&self.series[id]);
            if let Ok(entry) = self.series_ids.find_entry(hash, |&at| at as usize == id) {
                entry.remove();
            }
            Arc::make_mut(&mut self.series[id]).labels = Vec::new();
            n += 1;
        }
        self.forgotten += n;
        n
    }

    /// A snapshot record: every service's symbols and every series (forgotten ones with only
    /// their id, so that ids stay in place).
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

    /// Applies one record read from the log at `pos`: symbols and series to the store, blocks
    /// and spans to `into` (the index of the record's segment).
    pub fn replay(
        &mut self,
        into: &mut SegmentIndex,
        pos: RecordPos,
        payload: &[u8],
    ) -> Result<(), CodecError> {
        let mut g = Get::new(payload);
        match record_kind(&mut g)? {
            SNAPSHOT => {
                self.apply_services(&mut g)?;
                self.apply_series(&mut g)?;
            }
            COMPACT_BEGIN => {
                let n = g.count()?;
                into.replaces = (0..n).map(|_| g.uvarint()).collect::<Result<_, _>>()?;
            }
            COMPACT_END => into.compaction_complete = true,
            INGEST | COPY => {
                let links = get_record_links(&mut g)?;
                self.apply_services(&mut g)?;
                self.apply_series(&mut g)?;
                let n = g.count()?;
                let mut previous: Option<Block> = None;
                for _ in 0..n {
                    let bytes = g.bytes()?;
                    let start = (payload.len() - g.remaining() - bytes.len()) as u32;
                    let block = Block::decode(&mut Get::new(bytes), &links)?;
                    if block.series as usize >= self.series.len() {
                        return Err(CodecError(format!(
                            "block of unknown series {}",
                            block.series
                        )));
                    }
                    into.index_block(pos, start, bytes.len() as u32, &block, previous.as_ref());
                    previous = Some(block);
                }
                for span in decode_spans(g.bytes()?).map_err(|e| CodecError(e.to_string()))? {
                    into.spans_mut().insert(span);
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
                // A new service, or a new generation of one (the current one from now on).
                std::cmp::Ordering::Equal => {
                    self.new_generation(name);
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
                // Forgotten before the snapshot was written: it keeps its id, nothing else.
                std::cmp::Ordering::Equal
                    if labels.is_empty()
                        || (labels.len() == 1 && labels[0].0 == FORGOTTEN_LABEL) =>
                {
                    self.series.push(Arc::new(SeriesKey {
                        service,
                        profile_type,
                        labels: Vec::new(),
                    }));
                    self.forgotten += 1;
                }
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

    /// Seals the active segment: writes its index next to it, keeps only its summary, and
    /// starts an empty index for `next` (the new active segment).
    pub fn seal_active(&mut self, next: u64) -> std::io::Result<()> {
        let summary = write_index(&self.index_dir, &self.active)?;
        self.sealed.insert(self.active.segment, summary);
        self.active = Arc::new(SegmentIndex::new(next));
        Ok(())
    }

    /// Starts sealing the active segment: it stays queryable from memory (in `sealing`) while
    /// its index file is written elsewhere, and appends go to `next`. Returns its index, for
    /// [`write_index`] and then [`State::finish_seal`].
    /// `spare` is an emptied index whose memory the next one reuses.
    pub fn begin_seal(&mut self, next: u64, spare: Option<SegmentIndex>) -> Arc<SegmentIndex> {
        let fresh = Arc::new(SegmentIndex::sized_like(next, &self.active, spare));
        let index = std::mem::replace(&mut self.active, fresh);
        self.sealing.insert(index.segment, Arc::clone(&index));
        index
    }

    /// Completes [`State::begin_seal`] once the index file is written: only the summary stays
    /// in memory. Returns the in-memory index, for the caller to free once the state lock is
    /// released (freeing a large index takes a while); `None` when the segment was deleted
    /// meanwhile (retention or compaction), and the caller removes the index file it wrote.
    ///
    /// The index is not kept in the cache: live, it holds its spans decoded, several times
    /// the size of one read back from its file (which decodes spans only when asked), and
    /// the cache would keep up to its capacity of them (measured: peak RSS of the load bench
    /// 775 MB with, 300 MB without).
    pub fn finish_seal(
        &mut self,
        segment: u64,
        summary: SealedSummary,
    ) -> Option<Arc<SegmentIndex>> {
        let index = self.sealing.remove(&segment)?;
        self.sealed.insert(segment, summary);
        Some(index)
    }

    /// Drops a deleted segment: its summary, cached index and index file.
    pub fn forget_segment(&mut self, segment: u64) {
        self.sealed.remove(&segment);
        self.sealing.remove(&segment);
        self.cache.forget(segment);
        let _ = std::fs::remove_file(index_path(&self.index_dir, segment));
    }

    /// The indexes of the active segment and of the sealed segments that overlap
    /// `[from_ns, to_ns)` (0 = open end) and pass `keep`, loading sealed ones as needed.
    pub fn indexes(
        &self,
        from_ns: i64,
        to_ns: i64,
        keep: impl Fn(&SealedSummary) -> bool,
    ) -> Result<Vec<Arc<SegmentIndex>>, IndexError> {
        let (refs, _) = self.index_refs(from_ns, to_ns, keep);
        refs.into_iter()
            .map(|r| match r {
                IndexRef::Loaded(index) => Ok(index),
                IndexRef::Sealed(id) => self.cache.get(&self.index_dir, id),
            })
            .collect()
    }

    /// [`State::indexes`], with sealed indexes not read yet: for a query that reads every
    /// segment (a span search), so that it reads them one at a time with the state unlocked
    /// (the lock held while index files were read and their spans decoded, seconds on a large
    /// store, stalled every ingest behind it) and keeps one decoded at a time beside the
    /// cache's (all of them at once took gigabytes).
    pub fn index_refs(
        &self,
        from_ns: i64,
        to_ns: i64,
        keep: impl Fn(&SealedSummary) -> bool,
    ) -> (Vec<IndexRef>, IndexLoader) {
        let mut out: Vec<IndexRef> = self
            .sealed
            .iter()
            .filter(|(_, summary)| {
                segment_overlaps(summary.time_range, from_ns, to_ns) && keep(summary)
            })
            .map(|(&id, _)| IndexRef::Sealed(id))
            .collect();
        // Newer than every sealed segment, older than the active one (at most a couple).
        out.extend(self.sealing.values().cloned().map(IndexRef::Loaded));
        out.push(IndexRef::Loaded(Arc::clone(&self.active)));
        let loader = IndexLoader {
            dir: self.index_dir.clone(),
            cache: Arc::clone(&self.cache),
        };
        (out, loader)
    }

    /// Bytes of the sealed segments' index files.
    pub fn index_bytes(&self) -> u64 {
        self.sealed.values().map(|s| s.index_bytes).sum()
    }

    /// When the first and the last profile stored were taken (their start times, ns), if any
    /// is stored.
    pub fn profile_time_range(&self) -> Option<(i64, i64)> {
        let sealed = self
            .sealed
            .values()
            .flat_map(|s| s.series.iter().map(|&(_, first, last)| (first, last)));
        let in_memory = std::iter::once(&self.active)
            .chain(self.sealing.values())
            .flat_map(|i| i.blocks.iter().map(|b| (b.time_ns, b.time_ns)));
        sealed
            .chain(in_memory)
            .reduce(|(a, b), (c, d)| (a.min(c), b.max(d)))
    }

    /// The newest data time (ns) per sealed segment, for retention.
    pub fn newest_per_segment(&self) -> HashMap<u64, i64> {
        self.sealed
            .iter()
            .map(|(&id, s)| (id, s.time_range.1))
            .chain(self.sealing.iter().map(|(&id, i)| (id, i.time_range().1)))
            .collect()
    }

    pub fn stats(&self) -> StoreStats {
        // The active segment and those being sealed are counted from their indexes.
        let in_memory = || std::iter::once(&self.active).chain(self.sealing.values());
        StoreStats {
            services: self.service_ids.len(),
            series: self.live_series(),
            blocks: in_memory().map(|a| a.blocks.len()).sum::<usize>()
                + self
                    .sealed
                    .values()
                    .map(|s| s.blocks as usize)
                    .sum::<usize>(),
            samples: in_memory()
                .flat_map(|a| a.blocks.iter())
                .map(|b| u64::from(b.samples))
                .sum::<u64>()
                + self.sealed.values().map(|s| s.samples).sum::<u64>(),
            spans: in_memory().map(|a| a.spans().len()).sum::<usize>()
                + self
                    .sealed
                    .values()
                    .map(|s| s.spans as usize)
                    .sum::<usize>(),
            stack_nodes: self.services.iter().map(|s| s.symbols.node_count()).sum(),
            symbols: self.services.iter().fold([0; 5], |mut all, s| {
                for (a, n) in all.iter_mut().zip(s.symbols.sizes()) {
                    *a += n;
                }
                all
            }),
            symbol_bytes: self.symbol_bytes,
            symbol_generations: (0..self.services.len() as u32)
                .filter(|&id| self.is_current(id) || !self.services[id as usize].symbols.is_empty())
                .count(),
            ..Default::default()
        }
    }
}

/// Whether a segment's data time range `(a, b)` (ns; empty when `a > b`) overlaps
/// `[from_ns, to_ns)` (`to_ns` 0: no end).
pub(crate) fn segment_overlaps((a, b): (i64, i64), from_ns: i64, to_ns: i64) -> bool {
    a <= b && (to_ns == 0 || a < to_ns) && b >= from_ns
}

/// Writes series `from..` as (start, count, entries).
pub(crate) fn encode_series(out: &mut Vec<u8>, series: &[Arc<SeriesKey>], from: usize) {
    out.uvarint(from as u64);
    out.uvarint((series.len() - from) as u64);
    for (id, s) in series.iter().enumerate().skip(from) {
        out.uvarint(s.service.into());
        out.str(&s.profile_type.to_string());
        if is_forgotten(s) {
            // Only a label naming the id (a stored series also has `service_name`, so none
            // looks like this): a distinct key, so that a binary from before series
            // were forgotten reads it as a series of its own (with no data) and ids stay put.
            out.uvarint(1);
            out.str(FORGOTTEN_LABEL);
            out.str(&id.to_string());
            continue;
        }
        out.uvarint(s.labels.len() as u64);
        for (k, v) in &s.labels {
            out.str(k);
            out.str(v);
        }
    }
}

/// The one label a forgotten series is written with.
const FORGOTTEN_LABEL: &str = "__forgotten_series__";

/// Whether series `key` was forgotten (a stored series always has labels: `service_name`).
pub(crate) fn is_forgotten(key: &SeriesKey) -> bool {
    key.labels.is_empty()
}
