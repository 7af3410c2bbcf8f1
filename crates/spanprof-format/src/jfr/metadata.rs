//! The metadata event of a chunk: the types its events and constants are written with, read
//! from the file (names, fields, field types) rather than assumed, so that async-profiler's
//! and every JDK's layouts read alike.

use hashbrown::HashMap;

use super::reader::{Cursor, JfrString};
use super::JfrError;

/// Deepest element nesting of the metadata tree (root, metadata, class, field, annotation
/// are five): more is a corrupt or hostile file.
const MAX_ELEMENT_DEPTH: usize = 16;

/// How a field's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `boolean` or `byte`: one byte.
    Byte,
    /// `short` or `char`.
    Short,
    /// `int`.
    Int,
    /// `long`.
    Long,
    /// `float`: 4 bytes.
    Float,
    /// `double`: 8 bytes.
    Double,
    /// `java.lang.String`, in one of its encodings.
    String,
    /// A key into the constant pool of the type.
    Ref(i64),
    /// The type's fields, written in place.
    Inline(i64),
}

/// One field of a type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The field's name (`stackTrace`, `startTime`, …).
    pub name: String,
    /// How its value is written.
    pub kind: Kind,
    /// Whether it is an array (count, then the values).
    pub array: bool,
}

/// A type of the chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Class {
    /// The type's id in this chunk.
    pub id: i64,
    /// Its name (`jdk.ExecutionSample`, `jdk.types.StackTrace`, `long`, …).
    pub name: String,
    /// Its super type (`jdk.jfr.Event` for events), if any.
    pub super_type: Option<String>,
    /// Its fields in the order they are written.
    pub fields: Vec<Field>,
}

impl Class {
    /// The position of the field named `name`.
    pub fn field(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }
}

/// The types of one chunk, by id.
#[derive(Debug, Default, Clone)]
pub struct Metadata {
    /// Every type, by id.
    pub classes: HashMap<i64, Class>,
    by_name: HashMap<String, i64>,
}

impl Metadata {
    /// The type named `name`.
    pub fn by_name(&self, name: &str) -> Option<&Class> {
        self.by_name.get(name).and_then(|id| self.classes.get(id))
    }

    /// The type id of `java.lang.String`, which string fields refer to by pool key.
    pub fn string_type(&self) -> Option<i64> {
        self.by_name("java.lang.String").map(|c| c.id)
    }

    /// Reads the metadata event at the cursor (its size and type id first).
    // Long: checks the event's header, then reads its string table and element tree in one pass over the cursor.
    #[allow(clippy::too_many_lines)]
    pub fn read(c: &mut Cursor<'_>) -> Result<Metadata, JfrError> {
        let start = c.pos();
        let size = c.long()?;
        let kind = c.long()?;
        if kind != 0 {
            return Err(c.error(format!(
                "the chunk header's metadata offset points at an event of type {kind}, not the metadata event (0)"
            )));
        }
        let end = usize::try_from(size)
            .ok()
            .and_then(|s| start.checked_add(s))
            .filter(|&e| e <= c.len())
            .ok_or_else(|| {
                c.error(format!(
                    "the metadata event's size {size} runs past the chunk"
                ))
            })?;
        let _start_ticks = c.long()?;
        let _duration = c.long()?;
        let _metadata_id = c.long()?;
        let n = c.count("metadata string", 1)?;
        let mut strings = Vec::with_capacity(n);
        for _ in 0..n {
            strings.push(match c.string()? {
                JfrString::Text(s) => s.into_owned(),
                JfrString::Null => String::new(),
                JfrString::Pool(_) => {
                    return Err(c.error("a metadata string refers to the constant pool".into()))
                }
            });
        }
        let root = Element::read(c, &strings, 0)?;
        if c.pos() > end {
            return Err(c.error("the metadata runs past its event's size".into()));
        }
        let mut m = Metadata::default();
        for section in root.children.iter().filter(|e| e.name == "metadata") {
            for class in section.children.iter().filter(|e| e.name == "class") {
                let id = class.number("id", c)?;
                let name = class.attr("name").unwrap_or_default().to_owned();
                let super_type = class.attr("superType").map(str::to_owned);
                let mut fields = Vec::new();
                for f in class.children.iter().filter(|e| e.name == "field") {
                    let type_id = f.number("class", c)?;
                    let pooled = f.attr("constantPool") == Some("true");
                    fields.push((
                        f.attr("name").unwrap_or_default().to_owned(),
                        type_id,
                        pooled,
                        f.attr("dimension").is_some_and(|d| d != "0"),
                    ));
                }
                m.by_name.insert(name.clone(), id);
                m.classes.insert(
                    id,
                    Class {
                        id,
                        name,
                        super_type,
                        // Kinds are set below, once every type's name is known.
                        fields: fields
                            .into_iter()
                            .map(|(name, type_id, pooled, array)| Field {
                                name,
                                kind: if pooled {
                                    Kind::Ref(type_id)
                                } else {
                                    Kind::Inline(type_id)
                                },
                                array,
                            })
                            .collect(),
                    },
                );
            }
        }
        let names: HashMap<i64, String> = m
            .classes
            .iter()
            .map(|(id, c)| (*id, c.name.clone()))
            .collect();
        for class in m.classes.values_mut() {
            for f in &mut class.fields {
                if let Kind::Inline(t) = f.kind {
                    let name = names.get(&t).ok_or_else(|| {
                        JfrError::at(
                            start,
                            format!(
                                "metadata: field {}.{} has type {t}, which the metadata does not describe",
                                class.name, f.name
                            ),
                        )
                    })?;
                    f.kind = match name.as_str() {
                        "boolean" | "byte" => Kind::Byte,
                        "short" | "char" => Kind::Short,
                        "int" => Kind::Int,
                        "long" => Kind::Long,
                        "float" => Kind::Float,
                        "double" => Kind::Double,
                        "java.lang.String" => Kind::String,
                        _ => Kind::Inline(t),
                    };
                }
            }
        }
        c.seek(end)?;
        Ok(m)
    }
}

/// An element of the metadata tree.
struct Element {
    name: String,
    attributes: Vec<(String, String)>,
    children: Vec<Element>,
}

impl Element {
    fn read(c: &mut Cursor<'_>, strings: &[String], depth: usize) -> Result<Element, JfrError> {
        if depth > MAX_ELEMENT_DEPTH {
            return Err(c.error(format!(
                "metadata elements nest deeper than {MAX_ELEMENT_DEPTH} levels: corrupt or cyclic metadata"
            )));
        }
        let s = |c: &mut Cursor<'_>| -> Result<String, JfrError> {
            let i = c.int()?;
            usize::try_from(i)
                .ok()
                .and_then(|i| strings.get(i))
                .cloned()
                .ok_or_else(|| {
                    c.error(format!(
                        "metadata string index {i} is outside its {} strings",
                        strings.len()
                    ))
                })
        };
        let name = s(c)?;
        let n = c.count("metadata attribute", 2)?;
        let mut attributes = Vec::with_capacity(n);
        for _ in 0..n {
            attributes.push((s(c)?, s(c)?));
        }
        let n = c.count("metadata element", 3)?;
        let mut children = Vec::with_capacity(n);
        for _ in 0..n {
            children.push(Element::read(c, strings, depth + 1)?);
        }
        Ok(Element {
            name,
            attributes,
            children,
        })
    }

    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn number(&self, key: &str, c: &Cursor<'_>) -> Result<i64, JfrError> {
        let v = self.attr(key).unwrap_or("");
        v.parse().map_err(|_| {
            c.error(format!(
                "metadata: a {} element's {key} {v:?} is not a number",
                self.name
            ))
        })
    }
}
