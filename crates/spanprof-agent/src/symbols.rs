//! Address → function names, in the background thread (never the signal handler), cached per
//! address and bounded.

use std::collections::HashMap;
use std::rc::Rc;

/// Addresses cached before the cache is emptied (bounds memory in long-running services).
pub const MAX_CACHED_ADDRESSES: usize = 100_000;

/// One function of a frame (an address yields several when calls were inlined).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameFunction {
    /// Demangled name without the hash suffix, or `0x…` when the address has no symbol.
    pub name: String,
    /// Source file, or empty.
    pub file: String,
    /// Source line, or 0.
    pub line: u32,
}

/// A per-address cache over `backtrace::resolve`.
#[derive(Default)]
pub struct Symbolizer {
    cache: HashMap<u64, Rc<[FrameFunction]>>,
}

impl Symbolizer {
    /// The functions at `address`, innermost (inlined) first. `is_return_address` is true for
    /// every frame but the leaf: the call instruction is the byte before it.
    pub fn resolve(&mut self, address: u64, is_return_address: bool) -> Rc<[FrameFunction]> {
        // `backtrace::resolve` looks up the byte before the address it is given (it expects return
        // addresses); a leaf's program counter is moved one byte on to be looked up as itself.
        let lookup = if is_return_address {
            address
        } else {
            address.saturating_add(1)
        };
        if let Some(found) = self.cache.get(&lookup) {
            return found.clone();
        }
        if self.cache.len() >= MAX_CACHED_ADDRESSES {
            self.cache.clear();
        }
        let mut functions = Vec::new();
        backtrace::resolve(lookup as *mut std::ffi::c_void, |symbol| {
            let Some(name) = symbol.name() else { return };
            functions.push(FrameFunction {
                name: format!("{name:#}"),
                file: symbol
                    .filename()
                    .map(|f| f.display().to_string())
                    .unwrap_or_default(),
                line: symbol.lineno().unwrap_or(0),
            });
        });
        if functions.is_empty() {
            functions.push(FrameFunction {
                name: format!("{address:#x}"),
                file: String::new(),
                line: 0,
            });
        }
        let functions: Rc<[FrameFunction]> = functions.into();
        self.cache.insert(lookup, functions.clone());
        functions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_known_function() -> u64 {
        a_known_function as *const () as u64
    }

    #[test]
    fn resolves_a_function_of_this_binary() {
        let mut s = Symbolizer::default();
        let f = s.resolve(a_known_function(), false);
        assert!(
            f.iter().any(|f| f.name.ends_with("a_known_function")),
            "{f:?}"
        );
        assert!(Rc::ptr_eq(&f, &s.resolve(a_known_function(), false)));
    }
}
