//! Values as the metadata describes them, and a chunk's constant pools: the classes,
//! methods, symbols, stack traces, threads, … that events refer to by key, gathered from
//! every checkpoint event of the chunk (a pool may be split across several).

use std::borrow::Cow;

use hashbrown::HashMap;

use super::metadata::{Class, Kind, Metadata};
use super::reader::{Cursor, JfrString};
use super::JfrError;

/// Deepest nesting of in-place values (a stack trace's frames are two deep): past it the
/// metadata is cyclic or made to exhaust the stack.
pub const MAX_VALUE_DEPTH: usize = 32;

/// One decoded value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// An integer of any width (booleans are 0 or 1).
    Int(i64),
    /// A `float` or `double`.
    Float(f64),
    /// A string, or a reference into the string pool.
    Str(JfrString<'a>),
    /// A key into the constant pool of the field's type.
    Ref(i64),
    /// An array's values.
    Array(Vec<Value<'a>>),
    /// An in-place object's fields, in the metadata's order.
    Object(Vec<Value<'a>>),
}

impl<'a> Value<'a> {
    /// The integer, or the key of a reference.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(v) | Value::Ref(v) => Some(*v),
            Value::Float(f) => Some(*f as i64),
            _ => None,
        }
    }

    /// The fields of an object.
    pub fn fields(&self) -> &[Value<'a>] {
        match self {
            Value::Object(f) => f,
            _ => &[],
        }
    }
}

/// Reads values of the chunk's types, counting what it decodes against a budget so that
/// zero-byte values (objects without fields) cannot be multiplied without bound.
pub struct ValueReader<'m> {
    metadata: &'m Metadata,
    /// Values still allowed to be decoded in this chunk.
    budget: usize,
}

impl<'m> ValueReader<'m> {
    /// A reader of `metadata`'s types that decodes at most `budget` values.
    pub fn new(metadata: &'m Metadata, budget: usize) -> Self {
        ValueReader { metadata, budget }
    }

    /// The type with id `id`.
    pub fn class(&self, id: i64, c: &Cursor<'_>) -> Result<&'m Class, JfrError> {
        self.metadata.classes.get(&id).ok_or_else(|| {
            c.error(format!(
                "type {id} is not described by the chunk's metadata"
            ))
        })
    }

    /// The fields of one value of `class`, appended to `out`.
    pub fn fields<'a>(
        &mut self,
        c: &mut Cursor<'a>,
        class: &Class,
        out: &mut Vec<Value<'a>>,
        depth: usize,
    ) -> Result<(), JfrError> {
        if depth > MAX_VALUE_DEPTH {
            return Err(c.error(format!(
                "type {} nests values deeper than {MAX_VALUE_DEPTH} levels: cyclic or corrupt metadata",
                class.name
            )));
        }
        for f in &class.fields {
            let v = if f.array {
                let n = c.count("array element", 0)?;
                self.spend(n, c)?;
                let mut items = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    items.push(self.one(c, f.kind, depth)?);
                }
                Value::Array(items)
            } else {
                self.one(c, f.kind, depth)?
            };
            out.push(v);
        }
        Ok(())
    }

    /// Reads past one value of `kind` (an array of them when `array`) without keeping it.
    pub fn skip(
        &mut self,
        c: &mut Cursor<'_>,
        kind: Kind,
        array: bool,
        depth: usize,
    ) -> Result<(), JfrError> {
        if array {
            let n = c.count("array element", 0)?;
            self.spend(n, c)?;
            for _ in 0..n {
                self.skip(c, kind, false, depth)?;
            }
            return Ok(());
        }
        match kind {
            Kind::Byte => {
                c.u8()?;
            }
            Kind::Short | Kind::Int | Kind::Long | Kind::Ref(_) => {
                c.long()?;
            }
            Kind::Float => {
                c.f32()?;
            }
            Kind::Double => {
                c.f64()?;
            }
            Kind::String => {
                c.string()?;
            }
            Kind::Inline(t) => {
                let class = self.class(t, c)?;
                if depth > MAX_VALUE_DEPTH {
                    return Err(c.error(format!(
                        "type {} nests values deeper than {MAX_VALUE_DEPTH} levels: cyclic or corrupt metadata",
                        class.name
                    )));
                }
                self.spend(class.fields.len(), c)?;
                for f in &class.fields {
                    self.skip(c, f.kind, f.array, depth + 1)?;
                }
            }
        }
        Ok(())
    }

    /// Reads one stack trace constant of `layout` into `arena`, keeping only each frame's
    /// method and line: the bulk of a recording's constants, decoded without a value tree.
    fn stack_trace(
        &mut self,
        c: &mut Cursor<'_>,
        layout: &StackLayout,
        arena: &mut Vec<(i64, i64)>,
    ) -> Result<(u32, u32), JfrError> {
        let trace = self.class(layout.trace_type, c)?;
        let frame = self.class(layout.frame_type, c)?;
        let start = arena.len();
        for (i, f) in trace.fields.iter().enumerate() {
            if i != layout.frames {
                self.skip(c, f.kind, f.array, 1)?;
                continue;
            }
            let n = c.count("stack frame", 1)?;
            self.spend(n, c)?;
            arena.reserve(n);
            for _ in 0..n {
                let (mut method, mut line) = (0, 0);
                for (j, ff) in frame.fields.iter().enumerate() {
                    if j == layout.method && !ff.array {
                        method = c.long()?;
                    } else if Some(j) == layout.line && ff.kind == Kind::Int && !ff.array {
                        line = i64::from(c.int()?);
                    } else {
                        self.skip(c, ff.kind, ff.array, 2)?;
                    }
                }
                arena.push((method, line));
            }
        }
        let len = arena.len() - start;
        let too_many = || c.error("more stack frames than a chunk can hold".into());
        Ok((
            u32::try_from(start).map_err(|_| too_many())?,
            u32::try_from(len).map_err(|_| too_many())?,
        ))
    }

    fn spend(&mut self, n: usize, c: &Cursor<'_>) -> Result<(), JfrError> {
        self.budget = self.budget.checked_sub(n).ok_or_else(|| {
            c.error("the chunk holds more values than its size allows: corrupt, or made to exhaust memory".into())
        })?;
        Ok(())
    }

    #[inline]
    fn one<'a>(
        &mut self,
        c: &mut Cursor<'a>,
        kind: Kind,
        depth: usize,
    ) -> Result<Value<'a>, JfrError> {
        Ok(match kind {
            Kind::Byte => Value::Int(i64::from(c.u8()? as i8)),
            Kind::Short => Value::Int(i64::from(c.short()?)),
            Kind::Int => Value::Int(i64::from(c.int()?)),
            Kind::Long => Value::Int(c.long()?),
            Kind::Float => Value::Float(f64::from(c.f32()?)),
            Kind::Double => Value::Float(c.f64()?),
            Kind::String => Value::Str(c.string()?),
            Kind::Ref(_) => Value::Ref(c.long()?),
            Kind::Inline(t) => {
                let class = self.class(t, c)?;
                self.spend(class.fields.len(), c)?;
                let mut fields = Vec::with_capacity(class.fields.len());
                self.fields(c, class, &mut fields, depth + 1)?;
                Value::Object(fields)
            }
        })
    }
}

/// Where a stack trace's frames, and a frame's method and line, are in their types.
#[derive(Debug, Clone, Copy)]
pub struct StackLayout {
    /// `jdk.types.StackTrace`'s id.
    pub trace_type: i64,
    /// Its in-place `frames` array field.
    pub frames: usize,
    /// `jdk.types.StackFrame`'s id.
    pub frame_type: i64,
    /// The frame's pooled `method` field.
    pub method: usize,
    /// The frame's `lineNumber` field, if any.
    pub line: Option<usize>,
}

impl StackLayout {
    /// The layout the chunk's metadata describes, if it has stack traces as the JDK and
    /// async-profiler write them.
    pub fn of(m: &Metadata) -> Option<StackLayout> {
        let trace = m.by_name("jdk.types.StackTrace")?;
        let frames = trace.field("frames")?;
        let (Kind::Inline(frame_type), true) =
            (trace.fields[frames].kind, trace.fields[frames].array)
        else {
            return None;
        };
        let frame = m.classes.get(&frame_type)?;
        let method = frame.field("method")?;
        let Kind::Ref(_) = frame.fields[method].kind else {
            return None;
        };
        Some(StackLayout {
            trace_type: trace.id,
            frames,
            frame_type,
            method,
            line: frame.field("lineNumber"),
        })
    }
}

/// The constant pools of one chunk: per type id, each constant's value by key; stack traces
/// apart, as their frames' (method key, line).
#[derive(Debug, Default)]
pub struct Pools<'a> {
    by_type: HashMap<i64, HashMap<i64, Value<'a>>>,
    stack_layout: Option<StackLayout>,
    /// Every stack trace's frames, leaf first: (method key, line).
    frames: Vec<(i64, i64)>,
    /// Stack trace key → (start, length) in `frames`.
    stacks: HashMap<i64, (u32, u32)>,
}

impl<'a> Pools<'a> {
    /// Empty pools of a chunk with `metadata`.
    pub fn new(metadata: &Metadata, chunk_bytes: usize) -> Self {
        Pools {
            stack_layout: StackLayout::of(metadata),
            // Frames take 4–8 bytes each in the file, and stack traces are most of it:
            // sized once instead of grown (and copied) a dozen times.
            frames: Vec::with_capacity(chunk_bytes / 8),
            ..Default::default()
        }
    }

    /// The frames of stack trace `key`, leaf first: (method key, line).
    pub fn stack(&self, key: i64) -> Option<&[(i64, i64)]> {
        let &(start, len) = self.stacks.get(&key)?;
        self.frames
            .get(start as usize..start as usize + len as usize)
    }

    /// Reads one checkpoint event's pools (the cursor after its type id) into `self`.
    pub fn read_checkpoint(
        &mut self,
        c: &mut Cursor<'a>,
        values: &mut ValueReader<'_>,
    ) -> Result<(), JfrError> {
        let _start_ticks = c.long()?;
        let _duration = c.long()?;
        let _delta_to_previous = c.long()?;
        let _checkpoint_type = c.u8()?;
        let pools = c.count("constant pool", 2)?;
        for _ in 0..pools {
            let type_id = c.long()?;
            let class = values.class(type_id, c)?;
            let n = c.count("constant", 1)?;
            if let Some(layout) = self.stack_layout.filter(|l| l.trace_type == type_id) {
                self.stacks.reserve(n);
                for _ in 0..n {
                    let key = c.long()?;
                    values.spend(1, c)?;
                    let at = values.stack_trace(c, &layout, &mut self.frames)?;
                    self.stacks.insert(key, at);
                }
                continue;
            }
            let pool = self.by_type.entry(type_id).or_default();
            pool.reserve(n);
            for _ in 0..n {
                let key = c.long()?;
                values.spend(1, c)?;
                // The string pool's constants are strings, which have no fields.
                if class.name == "java.lang.String" {
                    pool.insert(key, Value::Str(c.string()?));
                    continue;
                }
                let mut fields = Vec::with_capacity(class.fields.len());
                values.fields(c, class, &mut fields, 0)?;
                // A simple type (a symbol: one string) is its one field's value.
                let v = if fields.len() == 1 && matches!(fields[0], Value::Str(_)) {
                    fields.pop().expect("one field")
                } else {
                    Value::Object(fields)
                };
                pool.insert(key, v);
            }
        }
        Ok(())
    }

    /// The constant of type `type_id` with `key`.
    pub fn get(&self, type_id: i64, key: i64) -> Option<&Value<'a>> {
        self.by_type.get(&type_id)?.get(&key)
    }

    /// Constants of type `type_id`.
    pub fn len_of(&self, type_id: i64) -> usize {
        self.by_type.get(&type_id).map_or(0, HashMap::len)
    }

    /// The text of a string value, following a reference into the string pool
    /// (`string_type`: the id of `java.lang.String`); `None` for null or a dangling reference.
    pub fn text<'s>(&'s self, v: &'s Value<'a>, string_type: Option<i64>) -> Option<&'s str> {
        match v {
            Value::Str(JfrString::Text(Cow::Borrowed(s))) => Some(s),
            Value::Str(JfrString::Text(Cow::Owned(s))) => Some(s.as_str()),
            Value::Str(JfrString::Pool(k)) => match self.get(string_type?, *k)? {
                Value::Str(JfrString::Text(s)) => Some(s.as_ref()),
                _ => None,
            },
            _ => None,
        }
    }
}
