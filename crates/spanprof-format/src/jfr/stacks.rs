//! Stack traces of a chunk as pprof locations: frames named as Pyroscope names them
//! (`pkg/Class.method`, with the JVM's per-run generated names merged), one location per
//! frame and line, inlined frames each their own, leaf first.

use hashbrown::HashMap;

use super::chunk::Chunk;
use super::metadata::{Class, Kind};
use super::pool::{Pools, Value};
use super::JfrError;

/// A reference a stack trace makes that the chunk's constant pools do not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum StackError {
    /// A reference to a constant no pool holds.
    #[error(
        "refers to constant {key} of type {type_id}, which no constant pool of the chunk holds"
    )]
    UnknownConstant { key: i64, type_id: i64 },
    /// A stack trace no pool holds.
    #[error("its stack trace {0} is in no constant pool of the chunk")]
    UnknownStack(i64),
    /// A frame's method no pool holds.
    #[error("a frame's method {0} is in no constant pool of the chunk")]
    UnknownMethod(i64),
    /// A method's class no pool holds.
    #[error("method {method}'s class {class} is in no constant pool of the chunk")]
    UnknownClass { method: i64, class: i64 },
    /// A method's name does not resolve.
    #[error("method {method}'s name {source}")]
    MethodName {
        method: i64,
        source: Box<StackError>,
    },
    /// A class's name does not resolve.
    #[error("class {class}'s name {source}")]
    ClassName { class: i64, source: Box<StackError> },
}

/// The text of a string field or of a reference to a string-like constant (a symbol).
pub(super) fn resolve_text<'p>(
    pools: &'p Pools<'_>,
    v: &'p Value<'_>,
    kind: Kind,
    strings: Option<i64>,
) -> Result<Option<&'p str>, StackError> {
    match kind {
        Kind::Ref(t) => {
            let key = v.as_i64().unwrap_or(0);
            if key == 0 {
                return Ok(None);
            }
            let c = pools
                .get(t, key)
                .ok_or(StackError::UnknownConstant { key, type_id: t })?;
            Ok(pools.text(c, strings))
        }
        _ => Ok(pools.text(v, strings)),
    }
}

/// Field positions of the types stacks are made of, and the frames resolved so far.
pub(super) struct Stacks {
    method_type: i64,
    method_class: (usize, Kind),
    method_name: (usize, Kind),
    class_name: (usize, Kind),
    strings: Option<i64>,
    /// Method key → location ids by line.
    methods: HashMap<(i64, i64), u64>,
}

impl Stacks {
    pub(super) fn new(chunk: &Chunk<'_>) -> Result<Stacks, JfrError> {
        let m = &chunk.metadata;
        let missing = |what: &str| {
            JfrError::at(
                chunk.at,
                format!("the chunk's metadata lacks {what}, which stack traces are made of"),
            )
        };
        let trace = m
            .by_name("jdk.types.StackTrace")
            .ok_or_else(|| missing("jdk.types.StackTrace"))?;
        let frames = trace
            .field("frames")
            .ok_or_else(|| missing("jdk.types.StackTrace.frames"))?;
        let Kind::Inline(frame_type) = trace.fields[frames].kind else {
            return Err(missing("an in-place jdk.types.StackTrace.frames"));
        };
        let frame = m
            .classes
            .get(&frame_type)
            .ok_or_else(|| missing("jdk.types.StackFrame"))?;
        let frame_method = frame
            .field("method")
            .ok_or_else(|| missing("jdk.types.StackFrame.method"))?;
        let Kind::Ref(method_type) = frame.fields[frame_method].kind else {
            return Err(missing("a pooled jdk.types.StackFrame.method"));
        };
        let method = m
            .classes
            .get(&method_type)
            .ok_or_else(|| missing("jdk.types.Method"))?;
        let field = |c: &Class, name: &str| -> Result<(usize, Kind), JfrError> {
            let i = c
                .field(name)
                .ok_or_else(|| missing(&format!("{}.{name}", c.name)))?;
            Ok((i, c.fields[i].kind))
        };
        let method_class = field(method, "type")?;
        let method_name = field(method, "name")?;
        let Kind::Ref(class_type) = method_class.1 else {
            return Err(missing("a pooled jdk.types.Method.type"));
        };
        let class = m
            .classes
            .get(&class_type)
            .ok_or_else(|| missing("java.lang.Class"))?;
        let class_name = field(class, "name")?;
        Ok(Stacks {
            method_type,
            method_class,
            method_name,
            class_name,
            strings: m.string_type(),
            methods: HashMap::new(),
        })
    }

    /// The location ids of stack trace `key`, leaf first; `location` gives the id of a frame
    /// (its name and line) in the profile being built.
    pub(super) fn resolve(
        &mut self,
        chunk: &Chunk<'_>,
        key: i64,
        mut location: impl FnMut(&str, i64) -> u64,
    ) -> Result<Vec<u64>, StackError> {
        let frames = chunk
            .pools
            .stack(key)
            .ok_or(StackError::UnknownStack(key))?;
        let mut out = Vec::with_capacity(frames.len());
        for &(method, line) in frames {
            if let Some(&id) = self.methods.get(&(method, line)) {
                out.push(id);
                continue;
            }
            let name = self.frame_name(chunk, method)?;
            let id = location(&name, line);
            self.methods.insert((method, line), id);
            out.push(id);
        }
        Ok(out)
    }

    /// `pkg/Class.method`, as Pyroscope names a frame.
    fn frame_name(&self, chunk: &Chunk<'_>, method: i64) -> Result<String, StackError> {
        let pools = &chunk.pools;
        let m = pools
            .get(self.method_type, method)
            .ok_or(StackError::UnknownMethod(method))?;
        let mf = m.fields();
        let (ci, ck) = self.method_class;
        let (ni, nk) = self.method_name;
        let name = match mf.get(ni) {
            Some(v) => {
                resolve_text(pools, v, nk, self.strings).map_err(|e| StackError::MethodName {
                    method,
                    source: Box::new(e),
                })?
            }
            None => None,
        }
        .unwrap_or("");
        let class_key = mf.get(ci).and_then(Value::as_i64).unwrap_or(0);
        let class = match ck {
            Kind::Ref(t) if class_key != 0 => {
                let c = pools.get(t, class_key).ok_or(StackError::UnknownClass {
                    method,
                    class: class_key,
                })?;
                let (i, k) = self.class_name;
                match c.fields().get(i) {
                    Some(v) => resolve_text(pools, v, k, self.strings).map_err(|e| {
                        StackError::ClassName {
                            class: class_key,
                            source: Box::new(e),
                        }
                    })?,
                    None => None,
                }
                .unwrap_or("")
            }
            _ => "",
        };
        Ok(format!(
            "{}.{}",
            merge_generated(class),
            merge_generated(name)
        ))
    }
}

/// Names the JVM generates per run (lambda classes, reflection accessors, CGLIB proxies) with
/// their varying part replaced by `_`, as Pyroscope does, so runs and hosts merge.
pub(super) fn merge_generated(name: &str) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    const ACCESSOR: &str = "jdk/internal/reflect/GeneratedMethodAccessor";
    if let Some(rest) = name.strip_prefix(ACCESSOR) {
        if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
            return Cow::Owned(format!("{ACCESSOR}_"));
        }
    }
    // `Foo$$Lambda$669.0x0000000800fd7318`, `Fib$$Lambda.0x00007ffa600c4da0`, `X$$Lambda$12`.
    const LAMBDA: &str = "$$Lambda";
    let mut search = name.len();
    while let Some(i) = name[..search].rfind(LAMBDA) {
        let (head, tail) = name.split_at(i + LAMBDA.len());
        if i > 0 && lambda_suffix(tail) {
            return Cow::Owned(format!("{head}_"));
        }
        search = i;
    }
    const CGLIB: &str = "$$EnhancerBySpringCGLIB$$";
    if let Some(i) = name.rfind(CGLIB) {
        if i > 0 {
            return Cow::Owned(format!("{}_", &name[..i + CGLIB.len()]));
        }
    }
    Cow::Borrowed(name)
}

/// `$?\d*[./](0x)?[0-9a-f]+` (Pyroscope's pattern) or `\d+`, the whole of `s`; also the
/// JDK 17 recorder's own form, `$87+0x00007f4358008a08/2147046752`, which Pyroscope's
/// pattern misses (every run of a JVM made its lambdas new functions).
fn lambda_suffix(s: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if digits(s) {
        return true;
    }
    let s = s.strip_prefix('$').unwrap_or(s);
    let s = s.trim_start_matches(|c: char| c.is_ascii_digit());
    let Some(s) = s.strip_prefix(['.', '/', '+']) else {
        return false;
    };
    let s = s.strip_prefix("0x").unwrap_or(s);
    let (hex, rest) = s.split_once('/').map_or((s, None), |(h, r)| (h, Some(r)));
    !hex.is_empty()
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && rest.is_none_or(digits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_merge_as_in_pyroscope() {
        for (from, to) in [
            (
                "org/example/rideshare/OrderService$$Lambda$669.0x0000000800fd7318",
                "org/example/rideshare/OrderService$$Lambda_",
            ),
            ("Fib$$Lambda.0x00007ffa600c4da0", "Fib$$Lambda_"),
            ("App$$Lambda$12", "App$$Lambda$12"),
            ("App$$Lambda12", "App$$Lambda_"),
            (
                "Burn$$Lambda$87+0x00007f4358008a08/2147046752",
                "Burn$$Lambda_",
            ),
            (
                "jdk.internal.platform.CgroupUtil$$Lambda$74+0x00007f435802da70/306123060",
                "jdk.internal.platform.CgroupUtil$$Lambda_",
            ),
            (
                "jdk/internal/reflect/GeneratedMethodAccessor31",
                "jdk/internal/reflect/GeneratedMethodAccessor_",
            ),
            (
                "com/x/Svc$$EnhancerBySpringCGLIB$$abc123",
                "com/x/Svc$$EnhancerBySpringCGLIB$$_",
            ),
            ("java/lang/Thread", "java/lang/Thread"),
            ("$$Lambda$1", "$$Lambda$1"),
            ("App$$Lambda$x", "App$$Lambda$x"),
        ] {
            assert_eq!(merge_generated(from), to, "{from}");
        }
    }
}
