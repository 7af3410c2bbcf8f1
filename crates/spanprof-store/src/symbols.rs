//! Per-service symbol tables: strings, mappings, functions, locations and stacks, each stored
//! once per service however many profiles refer to them, so the thousandth scrape of the same
//! program adds almost no symbol bytes. Stacks are parent-pointer nodes (a node is its parent
//! node plus one location), so a stack is one `u32` and shared prefixes are stored once.
//!
//! Ids only grow. What was added since the last flush is written to the log as a delta; each
//! segment starts with a snapshot, so applying snapshots and deltas in log order rebuilds the
//! same ids (entries already known are skipped, gaps are an error).

use std::hash::BuildHasher;

use hashbrown::HashMap;

use spanprof_format::otlp::{any_value, ProfilesDictionary};

use crate::codec::{CodecError, Get, Put};

/// A mapped binary.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct MappingSym {
    /// Start of the mapping in memory (bytes).
    pub memory_start: u64,
    /// End of the mapping in memory (bytes).
    pub memory_limit: u64,
    /// Offset in the file (bytes).
    pub file_offset: u64,
    /// String id of the file name.
    pub filename: u32,
    /// String id of the build id.
    pub build_id: u32,
}

/// A function; fields are string ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FunctionSym {
    /// Name.
    pub name: u32,
    /// System (mangled) name.
    pub system_name: u32,
    /// Source file.
    pub filename: u32,
    /// First line of the function.
    pub start_line: i64,
}

/// A location: an address in a mapping, with its lines (inlined frames, the last is the caller).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct LocationSym {
    /// Mapping id (0 = none).
    pub mapping: u32,
    /// Instruction address.
    pub address: u64,
    /// (function id, line, column) per inlined frame.
    pub lines: Box<[(u32, i64, i64)]>,
}

/// A [`LocationSym`] borrowed from what is being interned, to look it up without building one.
/// Hashes exactly as `LocationSym` does (the same fields in the same order; a boxed slice
/// hashes as its slice).
struct LocationKey<'a> {
    mapping: u32,
    address: u64,
    lines: &'a [(u32, i64, i64)],
}

impl std::hash::Hash for LocationKey<'_> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.mapping.hash(h);
        self.address.hash(h);
        self.lines.hash(h);
    }
}

impl hashbrown::Equivalent<LocationSym> for LocationKey<'_> {
    fn equivalent(&self, l: &LocationSym) -> bool {
        self.mapping == l.mapping && self.address == l.address && *self.lines == *l.lines
    }
}

/// A stack node: its parent node (0 = the root, the empty stack) and one location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StackNode {
    /// Parent node id.
    pub parent: u32,
    /// Location id of this frame.
    pub location: u32,
}

/// One service's symbols.
#[derive(Debug)]
pub struct SymbolTable {
    strings: Table<Box<str>>,
    mappings: Table<MappingSym>,
    functions: Table<FunctionSym>,
    locations: Table<LocationSym>,
    nodes: Table<StackNode>,
    /// Whole stacks (location ids, leaf first) → their node. A program's stacks recur in
    /// every profile it sends, and one lookup here replaces one per frame in `nodes`. Not
    /// persisted; emptied when it holds [`STACK_CACHE_IDS`] location ids.
    stack_cache: HashMap<Box<[u32]>, u32>,
    stack_cache_ids: usize,
    /// Mappings (binaries: builds) profiles referred to since the last
    /// [`SymbolTable::take_recent_use`] (a bit per id), and in the period before it; and
    /// whether profiles referred to any location in each. Not persisted.
    used: Vec<u64>,
    used_before: Vec<u64>,
    touched: bool,
    touched_before: bool,
    /// For each location without a mapping (interpreted code: Python, Ruby and Node frames,
    /// folded text), by id, the period profiles last referred to it in (`period` then). Not
    /// persisted: a location with no entry counts as referred to in period 0, so a store just
    /// opened takes every location as in use.
    unmapped_seen: Vec<u32>,
    /// [`SymbolTable::take_recent_use`] calls so far: the current period.
    period: u32,
}

/// Periods a location without a mapping stays in use after a profile last referred to it:
/// a day at the default 30-minute period. Nothing tells such locations' builds apart, so each
/// counts by its own use, and over long enough that code run only now and then is not taken
/// as stale (which would start generation after generation of the same symbols); a deploy's
/// moved lines are stale a day later.
const UNMAPPED_USE_PERIODS: u32 = 48;

/// Location ids the stack cache of one service holds at most (4 bytes each, plus about 24
/// per stack): 16 MiB.
const STACK_CACHE_IDS: usize = 4 << 20;

/// An append-only table deduplicated by value; entry 0 is the default value. The index holds
/// ids, not copies of the values: a value is kept once (a service's symbols live as long as
/// the process, and the copies were half of their memory).
#[derive(Debug)]
struct Table<T> {
    items: Vec<T>,
    hasher: hashbrown::DefaultHashBuilder,
    ids: hashbrown::HashTable<u32>,
    flushed: usize,
}

impl<T: Eq + std::hash::Hash + Default> Table<T> {
    fn new() -> Self {
        let mut t = Table {
            items: Vec::new(),
            hasher: Default::default(),
            ids: hashbrown::HashTable::new(),
            flushed: 1,
        };
        t.push_new(T::default());
        t
    }

    fn intern(&mut self, v: T) -> u32 {
        match self.get(&v) {
            Some(id) => id,
            None => self.push_new(v),
        }
    }

    /// The id of the value `key` stands for (hashed as the value is), if the table has it.
    fn get<Q>(&self, key: &Q) -> Option<u32>
    where
        Q: std::hash::Hash + hashbrown::Equivalent<T> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        self.ids
            .find(hash, |&id| key.equivalent(&self.items[id as usize]))
            .copied()
    }

    /// [`Table::intern`] by a borrowed form of the value (hashed as the value is): an entry
    /// already known costs no allocation; `make` builds the value only for a new one.
    fn intern_by<Q>(&mut self, key: &Q, make: impl FnOnce() -> T) -> u32
    where
        Q: std::hash::Hash + hashbrown::Equivalent<T> + ?Sized,
    {
        match self.get(key) {
            Some(id) => id,
            None => self.push_new(make()),
        }
    }

    /// Appends `v`, which the table does not hold yet.
    fn push_new(&mut self, v: T) -> u32 {
        let id = self.items.len() as u32;
        let (items, hasher) = (&self.items, &self.hasher);
        self.ids.insert_unique(hasher.hash_one(&v), id, |&id| {
            hasher.hash_one(&items[id as usize])
        });
        self.items.push(v);
        id
    }

    /// Drops the entries from `len` on, which must not be in the log yet (a refused profile
    /// added them).
    fn truncate(&mut self, len: usize) {
        debug_assert!(len >= self.flushed, "entries in the log are never dropped");
        for id in (len..self.items.len()).rev() {
            let hash = self.hasher.hash_one(&self.items[id]);
            if let Ok(entry) = self.ids.find_entry(hash, |&x| x as usize == id) {
                entry.remove();
            }
        }
        self.items.truncate(len);
    }

    /// Adds entry `id` read from the log: known ids are skipped, the next id is appended.
    fn apply(&mut self, id: usize, v: T) -> Result<(), CodecError> {
        if id < self.items.len() {
            return Ok(());
        }
        if id > self.items.len() {
            return Err(CodecError(format!(
                "symbol id {id} skips ahead of {}",
                self.items.len()
            )));
        }
        self.intern(v);
        Ok(())
    }
}

impl Default for SymbolTable {
    fn default() -> Self {
        Self::new()
    }
}

const UNSET: u32 = u32::MAX;

/// Source dictionary index → symbol id, filled on first use within one ingest call.
pub(crate) struct Remap {
    strings: Vec<u32>,
    functions: Vec<u32>,
    mappings: Vec<u32>,
    locations: Vec<u32>,
    stacks: Vec<u32>,
    /// Scratch: one stack's location ids.
    frames: Vec<u32>,
    /// Scratch: one location's lines.
    lines: Vec<(u32, i64, i64)>,
}

impl Remap {
    pub(crate) fn new(d: &ProfilesDictionary) -> Self {
        Remap {
            strings: vec![UNSET; d.string_table.len()],
            functions: vec![UNSET; d.function_table.len()],
            mappings: vec![UNSET; d.mapping_table.len()],
            locations: vec![UNSET; d.location_table.len()],
            stacks: vec![UNSET; d.stack_table.len()],
            frames: Vec::new(),
            lines: Vec::new(),
        }
    }
}

/// An OTLP dictionary reference the symbol table cannot follow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{table} index {index} out of range ({len} entries)")]
pub struct SymbolError {
    /// The table it points into (`location_table`).
    pub table: &'static str,
    /// The index given.
    pub index: i32,
    /// Entries in that table.
    pub len: usize,
}

fn slot(index: i32, len: usize, table: &'static str) -> Result<usize, SymbolError> {
    usize::try_from(index)
        .ok()
        .filter(|&i| i < len)
        .ok_or(SymbolError { table, index, len })
}

impl SymbolTable {
    /// An empty table (only the zero entries).
    pub fn new() -> Self {
        SymbolTable {
            strings: Table::new(),
            mappings: Table::new(),
            functions: Table::new(),
            locations: Table::new(),
            nodes: Table::new(),
            stack_cache: HashMap::new(),
            stack_cache_ids: 0,
            used: Vec::new(),
            used_before: Vec::new(),
            touched: false,
            touched_before: false,
            unmapped_seen: Vec::new(),
            period: 0,
        }
    }

    /// The string with id `id` ("" when unknown).
    pub fn string(&self, id: u32) -> &str {
        self.strings.items.get(id as usize).map_or("", |s| s)
    }

    /// The function with id `id`.
    pub fn function(&self, id: u32) -> Option<&FunctionSym> {
        self.functions.items.get(id as usize)
    }

    /// The mapping with id `id`.
    pub fn mapping(&self, id: u32) -> Option<&MappingSym> {
        self.mappings.items.get(id as usize)
    }

    /// The location with id `id`.
    pub fn location(&self, id: u32) -> Option<&LocationSym> {
        self.locations.items.get(id as usize)
    }

    /// The stack node with id `id` (node 0 is the root).
    pub fn node(&self, id: u32) -> Option<StackNode> {
        self.nodes.items.get(id as usize).copied()
    }

    /// Whether the table holds only the zero entries.
    pub fn is_empty(&self) -> bool {
        self.sizes() == [1; 5]
    }

    /// Number of stack nodes, root included.
    pub fn node_count(&self) -> usize {
        self.nodes.items.len()
    }

    /// Entries per table (strings, mappings, functions, locations, nodes), zero entries included.
    pub fn sizes(&self) -> [usize; 5] {
        [
            self.strings.items.len(),
            self.mappings.items.len(),
            self.functions.items.len(),
            self.locations.items.len(),
            self.nodes.items.len(),
        ]
    }

    /// Drops the entries added since the tables had `sizes` ([`SymbolTable::sizes`]), none
    /// of them written yet: what a profile that is then refused interned.
    pub fn truncate(&mut self, sizes: [usize; 5]) {
        self.strings.truncate(sizes[0]);
        self.mappings.truncate(sizes[1]);
        self.functions.truncate(sizes[2]);
        self.locations.truncate(sizes[3]);
        self.nodes.truncate(sizes[4]);
        for used in [&mut self.used, &mut self.used_before] {
            // Bits past the table (ids a later entry may take) cleared.
            used.truncate(sizes[1].div_ceil(64));
            if let Some(last) = used.last_mut().filter(|_| !sizes[1].is_multiple_of(64)) {
                *last &= (1u64 << (sizes[1] % 64)) - 1;
            }
        }
        self.unmapped_seen.truncate(sizes[3]);
        // It may name the nodes just dropped.
        self.stack_cache.clear();
        self.stack_cache_ids = 0;
    }

    /// About the bytes the entries added since the tables had `sizes` take in a snapshot
    /// (`[1; 5]`: every entry but the zero ones). An estimate: varints counted at typical
    /// lengths.
    pub fn bytes_since(&self, sizes: [usize; 5]) -> u64 {
        let from = |t: usize, len: usize| sizes[t].min(len);
        let strings: usize = self.strings.items[from(0, self.strings.items.len())..]
            .iter()
            .map(|s| s.len() + 3)
            .sum();
        let mappings = (self.mappings.items.len() - from(1, self.mappings.items.len())) * 30;
        let functions = (self.functions.items.len() - from(2, self.functions.items.len())) * 12;
        let locations: usize = self.locations.items[from(3, self.locations.items.len())..]
            .iter()
            .map(|l| 14 + 8 * l.lines.len())
            .sum();
        let nodes = (self.nodes.items.len() - from(4, self.nodes.items.len())) * 8;
        (strings + mappings + functions + locations + nodes) as u64
    }

    /// About the bytes of the symbols in use: every symbol's bytes, in the share of locations
    /// in use. A location with a mapping is in use when profiles referred to its mapping
    /// (binary) since the call before the last one (or since the table was made); one without
    /// (nothing tells their builds apart) when profiles referred to it in the last
    /// `UNMAPPED_USE_PERIODS` periods. `None` when profiles referred to nothing since the
    /// call before the last one. Starts the next period.
    ///
    /// By mapping rather than by location where there is one: a program's code paths taken
    /// only now and then are in use as long as its binary is, and a new build's binary leaves
    /// the old one's unused.
    pub fn take_recent_use(&mut self) -> Option<u64> {
        let touched = self.touched || self.touched_before;
        let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
        let mapping_used = |m: u32| {
            let (word, bit) = (m as usize / 64, 1u64 << (m % 64));
            (at(&self.used, word) | at(&self.used_before, word)) & bit != 0
        };
        let unmapped_used = |id: usize| {
            let seen = self.unmapped_seen.get(id).copied().unwrap_or(0);
            self.period - seen < UNMAPPED_USE_PERIODS
        };
        let locations = &self.locations.items[1..];
        let in_use = locations
            .iter()
            .enumerate()
            .filter(|(i, l)| match l.mapping {
                0 => unmapped_used(i + 1),
                m => mapping_used(m),
            })
            .count() as u64;
        let total = self.bytes_since([1; 5]);
        let bytes = (total * in_use)
            .checked_div(locations.len() as u64)
            .unwrap_or(total);
        self.used_before = std::mem::take(&mut self.used);
        self.touched_before = std::mem::take(&mut self.touched);
        self.period += 1;
        touched.then_some(bytes)
    }

    /// Notes that a profile referred to location `location` of mapping `mapping` (0: none).
    fn mark_used(&mut self, mapping: u32, location: u32) {
        self.touched = true;
        if mapping == 0 {
            let i = location as usize;
            if i >= self.unmapped_seen.len() {
                self.unmapped_seen.resize(i + 1, 0);
            }
            self.unmapped_seen[i] = self.period;
            return;
        }
        let (word, bit) = (mapping as usize / 64, 1u64 << (mapping % 64));
        if word >= self.used.len() {
            self.used.resize(word + 1, 0);
        }
        self.used[word] |= bit;
    }

    /// Interns a string.
    pub fn intern_string(&mut self, s: &str) -> u32 {
        self.strings.intern_by(s, || s.into())
    }

    /// The stack node of OTLP stack `stack_index` of `d`, interning what it needs.
    pub(crate) fn stack_of(
        &mut self,
        d: &ProfilesDictionary,
        remap: &mut Remap,
        stack_index: i32,
    ) -> Result<u32, SymbolError> {
        if stack_index == 0 {
            return Ok(0);
        }
        let i = slot(stack_index, d.stack_table.len(), "stack_table")?;
        if remap.stacks[i] != UNSET {
            return Ok(remap.stacks[i]);
        }
        let mut frames = std::mem::take(&mut remap.frames);
        frames.clear();
        for &l in &d.stack_table[i].location_indices {
            frames.push(self.location_of(d, remap, l)?);
        }
        let node = match self.stack_cache.get(frames.as_slice()) {
            Some(&node) => node,
            None => {
                // OTLP stacks are leaf first; nodes are built from the root.
                let mut node = 0;
                for &location in frames.iter().rev() {
                    node = self.nodes.intern(StackNode {
                        parent: node,
                        location,
                    });
                }
                if self.stack_cache_ids + frames.len() > STACK_CACHE_IDS {
                    self.stack_cache.clear();
                    self.stack_cache_ids = 0;
                }
                self.stack_cache_ids += frames.len();
                self.stack_cache.insert(frames.as_slice().into(), node);
                node
            }
        };
        remap.frames = frames;
        remap.stacks[i] = node;
        Ok(node)
    }

    fn string_of(
        &mut self,
        d: &ProfilesDictionary,
        remap: &mut Remap,
        index: i32,
    ) -> Result<u32, SymbolError> {
        let i = slot(index, d.string_table.len(), "string_table")?;
        if remap.strings[i] == UNSET {
            remap.strings[i] = self.intern_string(&d.string_table[i]);
        }
        Ok(remap.strings[i])
    }

    fn function_of(
        &mut self,
        d: &ProfilesDictionary,
        remap: &mut Remap,
        index: i32,
    ) -> Result<u32, SymbolError> {
        let i = slot(index, d.function_table.len(), "function_table")?;
        if remap.functions[i] == UNSET {
            let f = d.function_table[i];
            let sym = FunctionSym {
                name: self.string_of(d, remap, f.name_strindex)?,
                system_name: self.string_of(d, remap, f.system_name_strindex)?,
                filename: self.string_of(d, remap, f.filename_strindex)?,
                start_line: f.start_line,
            };
            remap.functions[i] = self.functions.intern(sym);
        }
        Ok(remap.functions[i])
    }

    fn mapping_of(
        &mut self,
        d: &ProfilesDictionary,
        remap: &mut Remap,
        index: i32,
    ) -> Result<u32, SymbolError> {
        if index == 0 {
            return Ok(0);
        }
        let i = slot(index, d.mapping_table.len(), "mapping_table")?;
        if remap.mappings[i] == UNSET {
            let m = &d.mapping_table[i];
            let mut build_id = 0;
            for &a in &m.attribute_indices {
                let kv = &d.attribute_table[slot(a, d.attribute_table.len(), "attribute_table")?];
                let key = d
                    .string_table
                    .get(kv.key_strindex as usize)
                    .map_or("", String::as_str);
                if let (true, Some(any_value::Value::StringValue(s))) = (
                    key.starts_with("process.executable.build_id."),
                    kv.value.as_ref().and_then(|v| v.value.as_ref()),
                ) {
                    build_id = self.intern_string(s);
                }
            }
            let sym = MappingSym {
                memory_start: m.memory_start,
                memory_limit: m.memory_limit,
                file_offset: m.file_offset,
                filename: self.string_of(d, remap, m.filename_strindex)?,
                build_id,
            };
            remap.mappings[i] = self.mappings.intern(sym);
        }
        Ok(remap.mappings[i])
    }

    fn location_of(
        &mut self,
        d: &ProfilesDictionary,
        remap: &mut Remap,
        index: i32,
    ) -> Result<u32, SymbolError> {
        let i = slot(index, d.location_table.len(), "location_table")?;
        if remap.locations[i] == UNSET {
            let l = &d.location_table[i];
            let mut lines = std::mem::take(&mut remap.lines);
            lines.clear();
            for line in &l.lines {
                lines.push((
                    self.function_of(d, remap, line.function_index)?,
                    line.line,
                    line.column,
                ));
            }
            let key = LocationKey {
                mapping: self.mapping_of(d, remap, l.mapping_index)?,
                address: l.address,
                lines: &lines,
            };
            // Looked up by the borrowed key: a location already known (most are, after a
            // service's first profile) costs no allocation.
            remap.locations[i] = self.locations.intern_by(&key, || LocationSym {
                mapping: key.mapping,
                address: key.address,
                lines: key.lines.into(),
            });
            let mapping = key.mapping;
            remap.lines = lines;
            self.mark_used(mapping, remap.locations[i]);
        }
        Ok(remap.locations[i])
    }

    /// Whether entries were added since the last [`SymbolTable::encode_delta`].
    pub fn has_delta(&self) -> bool {
        self.strings.flushed < self.strings.items.len()
            || self.mappings.flushed < self.mappings.items.len()
            || self.functions.flushed < self.functions.items.len()
            || self.locations.flushed < self.locations.items.len()
            || self.nodes.flushed < self.nodes.items.len()
    }

    /// Writes the entries added since the last [`SymbolTable::mark_flushed`]; returns the
    /// table sizes to pass to it once the write is durable.
    pub fn encode_delta(&self, out: &mut Vec<u8>) -> [usize; 5] {
        let from = [
            self.strings.flushed,
            self.mappings.flushed,
            self.functions.flushed,
            self.locations.flushed,
            self.nodes.flushed,
        ];
        encode_tables(self, out, from);
        self.sizes()
    }

    /// Records that entries up to `sizes` are durable, so later deltas leave them out. Until
    /// then a failed write is simply sent again with the next delta.
    pub fn mark_flushed(&mut self, sizes: [usize; 5]) {
        self.strings.flushed = self.strings.flushed.max(sizes[0]);
        self.mappings.flushed = self.mappings.flushed.max(sizes[1]);
        self.functions.flushed = self.functions.flushed.max(sizes[2]);
        self.locations.flushed = self.locations.flushed.max(sizes[3]);
        self.nodes.flushed = self.nodes.flushed.max(sizes[4]);
    }

    /// Writes every entry (a segment's snapshot).
    pub fn encode_snapshot(&self, out: &mut Vec<u8>) {
        encode_tables(self, out, [1; 5]);
    }

    /// Reads past a snapshot or delta without keeping it.
    pub(crate) fn skip(g: &mut Get) -> Result<(), CodecError> {
        let (_, n) = (g.index()?, g.count()?);
        for _ in 0..n {
            g.str()?;
        }
        for fields in [5, 4] {
            let (_, n) = (g.index()?, g.count()?);
            for _ in 0..n * fields {
                g.uvarint()?;
            }
        }
        let (_, n) = (g.index()?, g.count()?);
        for _ in 0..n {
            g.uvarint()?;
            g.uvarint()?;
            let k = g.count()?;
            for _ in 0..k * 3 {
                g.uvarint()?;
            }
        }
        let (_, n) = (g.index()?, g.count()?);
        for _ in 0..n * 2 {
            g.uvarint()?;
        }
        Ok(())
    }

    /// Applies a snapshot or delta read from the log.
    pub(crate) fn apply(&mut self, g: &mut Get) -> Result<(), CodecError> {
        let (start, n) = (g.index()?, g.count()?);
        for id in start..start + n {
            let s = g.str()?;
            self.strings.apply(id, s.into())?;
        }
        let (start, n) = (g.index()?, g.count()?);
        for id in start..start + n {
            let m = MappingSym {
                memory_start: g.uvarint()?,
                memory_limit: g.uvarint()?,
                file_offset: g.uvarint()?,
                filename: g.u32()?,
                build_id: g.u32()?,
            };
            self.mappings.apply(id, m)?;
        }
        let (start, n) = (g.index()?, g.count()?);
        for id in start..start + n {
            let f = FunctionSym {
                name: g.u32()?,
                system_name: g.u32()?,
                filename: g.u32()?,
                start_line: g.ivarint()?,
            };
            self.functions.apply(id, f)?;
        }
        let (start, n) = (g.index()?, g.count()?);
        for id in start..start + n {
            let (mapping, address, k) = (g.u32()?, g.uvarint()?, g.count()?);
            let mut lines = Vec::with_capacity(k);
            for _ in 0..k {
                lines.push((g.u32()?, g.ivarint()?, g.ivarint()?));
            }
            self.locations.apply(
                id,
                LocationSym {
                    mapping,
                    address,
                    lines: lines.into(),
                },
            )?;
        }
        let (start, n) = (g.index()?, g.count()?);
        for id in start..start + n {
            self.nodes.apply(
                id,
                StackNode {
                    parent: g.u32()?,
                    location: g.u32()?,
                },
            )?;
        }
        // Everything read from the log is on disk already.
        self.mark_flushed(self.sizes());
        Ok(())
    }

    /// Function names of a location, outermost (caller) first, as a flame graph stacks them;
    /// a location without lines is named by its address.
    pub fn frame_names(&self, location: u32, out: &mut Vec<String>) {
        let Some(l) = self.location(location) else {
            return;
        };
        if l.lines.is_empty() {
            out.push(format!("0x{:x}", l.address));
            return;
        }
        for &(f, _, _) in l.lines.iter().rev() {
            let name = self
                .function(f)
                .map_or(0, |f| if f.name != 0 { f.name } else { f.system_name });
            out.push(self.string(name).to_owned());
        }
    }
}

fn encode_tables(t: &SymbolTable, out: &mut Vec<u8>, from: [usize; 5]) {
    let range = |from: usize, len: usize| (from.min(len), len - from.min(len));
    let (s, n) = range(from[0], t.strings.items.len());
    out.uvarint(s as u64);
    out.uvarint(n as u64);
    for x in &t.strings.items[s..] {
        out.str(x);
    }
    let (s, n) = range(from[1], t.mappings.items.len());
    out.uvarint(s as u64);
    out.uvarint(n as u64);
    for m in &t.mappings.items[s..] {
        out.uvarint(m.memory_start);
        out.uvarint(m.memory_limit);
        out.uvarint(m.file_offset);
        out.uvarint(m.filename.into());
        out.uvarint(m.build_id.into());
    }
    let (s, n) = range(from[2], t.functions.items.len());
    out.uvarint(s as u64);
    out.uvarint(n as u64);
    for f in &t.functions.items[s..] {
        out.uvarint(f.name.into());
        out.uvarint(f.system_name.into());
        out.uvarint(f.filename.into());
        out.ivarint(f.start_line);
    }
    let (s, n) = range(from[3], t.locations.items.len());
    out.uvarint(s as u64);
    out.uvarint(n as u64);
    for l in &t.locations.items[s..] {
        out.uvarint(l.mapping.into());
        out.uvarint(l.address);
        out.uvarint(l.lines.len() as u64);
        for &(f, line, col) in l.lines.iter() {
            out.uvarint(f.into());
            out.ivarint(line);
            out.ivarint(col);
        }
    }
    let (s, n) = range(from[4], t.nodes.items.len());
    out.uvarint(s as u64);
    out.uvarint(n as u64);
    for x in &t.nodes.items[s..] {
        out.uvarint(x.parent.into());
        out.uvarint(x.location.into());
    }
}

#[cfg(test)]
mod tests;
