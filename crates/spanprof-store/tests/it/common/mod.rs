//! Hand-built OTLP `ProfilesData` for the store's tests: a Go checkout service whose CPU
//! samples are linked to spans of two traces.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::HashMap;

use spanprof_format::otlp::{
    Function, Line, Link, Location, Profile, ProfilesData, ProfilesDictionary, ResourceProfiles,
    Sample, ScopeProfiles, Stack, ValueType,
};

pub const T1: [u8; 16] = [0x11; 16];
pub const T2: [u8; 16] = [0x22; 16];
pub const S1: [u8; 8] = [0xa1; 8];
pub const S2: [u8; 8] = [0xa2; 8];
pub const S3: [u8; 8] = [0xa3; 8];
pub const S4: [u8; 8] = [0xa4; 8];

/// 10 ms, one Go CPU sample, in nanoseconds.
pub const TICK_NS: i64 = 10_000_000;

/// Builds a dictionary whose tables start with their zero entries.
pub struct DictionaryBuilder {
    pub dict: ProfilesDictionary,
    strings: HashMap<String, i32>,
    functions: HashMap<String, i32>,
}

impl Default for DictionaryBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl DictionaryBuilder {
    pub fn new() -> Self {
        let dict = ProfilesDictionary {
            string_table: vec![String::new()],
            function_table: vec![Function::default()],
            location_table: vec![Location::default()],
            stack_table: vec![Stack::default()],
            link_table: vec![Link::default()],
            mapping_table: vec![Default::default()],
            attribute_table: vec![Default::default()],
        };
        Self {
            dict,
            strings: HashMap::from([(String::new(), 0)]),
            functions: HashMap::new(),
        }
    }

    pub fn string(&mut self, s: &str) -> i32 {
        if let Some(i) = self.strings.get(s) {
            return *i;
        }
        let i = self.dict.string_table.len() as i32;
        self.dict.string_table.push(s.to_owned());
        self.strings.insert(s.to_owned(), i);
        i
    }

    pub fn function(&mut self, name: &str) -> i32 {
        if let Some(i) = self.functions.get(name) {
            return *i;
        }
        let name_strindex = self.string(name);
        let i = self.dict.function_table.len() as i32;
        self.dict.function_table.push(Function {
            name_strindex,
            ..Default::default()
        });
        self.functions.insert(name.to_owned(), i);
        i
    }

    /// A location whose lines are given in proto order: inlined leaf first, caller last.
    pub fn location(&mut self, lines: &[&str]) -> i32 {
        let lines = lines
            .iter()
            .map(|name| Line {
                function_index: self.function(name),
                line: 1,
                column: 0,
            })
            .collect();
        self.push_location(Location {
            address: 0,
            lines,
            ..Default::default()
        })
    }

    /// A location known only by its address (no symbols).
    pub fn address(&mut self, address: u64) -> i32 {
        self.push_location(Location {
            address,
            ..Default::default()
        })
    }

    pub fn push_location(&mut self, location: Location) -> i32 {
        self.dict.location_table.push(location);
        self.dict.location_table.len() as i32 - 1
    }

    /// A stack of location indices, leaf first.
    pub fn stack(&mut self, leaf_first: &[i32]) -> i32 {
        self.dict.stack_table.push(Stack {
            location_indices: leaf_first.to_vec(),
        });
        self.dict.stack_table.len() as i32 - 1
    }

    pub fn link(&mut self, trace_id: &[u8], span_id: &[u8]) -> i32 {
        self.dict.link_table.push(Link {
            trace_id: trace_id.to_vec(),
            span_id: span_id.to_vec(),
        });
        self.dict.link_table.len() as i32 - 1
    }

    pub fn profile(
        &mut self,
        sample: (&str, &str),
        period: (&str, &str),
        samples: Vec<Sample>,
    ) -> Profile {
        let mut value_type = |(t, u): (&str, &str)| ValueType {
            type_strindex: self.string(t),
            unit_strindex: self.string(u),
        };
        Profile {
            sample_type: Some(value_type(sample)),
            period_type: Some(value_type(period)),
            period: TICK_NS,
            samples,
            ..Default::default()
        }
    }

    /// One resource with one scope per entry of `scopes`.
    pub fn finish(self, scopes: Vec<Vec<Profile>>) -> ProfilesData {
        ProfilesData {
            resource_profiles: vec![ResourceProfiles {
                scope_profiles: scopes
                    .into_iter()
                    .map(|profiles| ScopeProfiles {
                        profiles,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            dictionary: Some(self.dict),
        }
    }
}

pub fn sample(stack_index: i32, link_index: i32, values: &[i64]) -> Sample {
    Sample {
        stack_index,
        link_index,
        values: values.to_vec(),
        ..Default::default()
    }
}

/// The checkout service.
///
/// Scope 1: `cpu:nanoseconds` (first, the default) then `samples:count`.
/// Scope 2: `alloc_space:bytes` (first) then `cpu:nanoseconds`.
/// Links: 1 = (T1, S1), 2 = (T1, S2), 3 = (T2, S3), 4 = (no trace, S4).
/// CPU per span: S1 50 ms, S2 25 ms (20 + 5 from scope 2), S3 40 ms; unlinked 50 ms
/// (GC) + 10 ms (link index out of range); one more sample has an out-of-range stack.
pub fn checkout() -> ProfilesData {
    let mut b = DictionaryBuilder::new();
    let main = b.location(&["main.main"]);
    let serve = b.location(&["net/http.(*conn).serve"]);
    let handler = b.location(&["net/http.HandlerFunc.ServeHTTP"]);
    // cart.(*Cart).total was inlined into cart.Checkout.
    let checkout = b.location(&[
        "github.com/acme/shop/cart.(*Cart).total",
        "github.com/acme/shop/cart.Checkout",
    ]);
    let marshal = b.location(&["encoding/json.Marshal"]);
    let sha = b.location(&["crypto/sha256.block"]);
    let malloc = b.location(&["runtime.mallocgc"]);
    let gc = b.location(&["runtime.gcBgMarkWorker"]);
    let unsymbolized = b.address(0x4a3f10);

    let k_checkout = b.stack(&[checkout, handler, serve, main]);
    let k_sha = b.stack(&[sha, marshal, handler, serve, main]);
    let k_malloc = b.stack(&[malloc, marshal, handler, serve, main]);
    let k_gc = b.stack(&[unsymbolized, gc]);

    let l1 = b.link(&T1, &S1);
    let l2 = b.link(&T1, &S2);
    let l3 = b.link(&T2, &S3);
    let l4 = b.link(&[], &S4);

    let cpu = ("cpu", "nanoseconds");
    let scope1_cpu = b.profile(
        cpu,
        cpu,
        vec![
            sample(k_checkout, l1, &[3 * TICK_NS]),
            sample(k_sha, l1, &[2 * TICK_NS]),
            sample(k_malloc, l2, &[TICK_NS, TICK_NS]),
            sample(k_sha, l3, &[4 * TICK_NS]),
            sample(k_gc, 0, &[5 * TICK_NS]),
            sample(k_checkout, 99, &[TICK_NS]),
            sample(77, l1, &[TICK_NS]),
        ],
    );
    let mut counted = sample(k_checkout, l1, &[]);
    counted.timestamps_unix_nano = vec![1_000, 2_000, 3_000];
    let scope1_count = b.profile(
        ("samples", "count"),
        cpu,
        vec![
            counted,
            sample(k_sha, l1, &[2]),
            sample(k_malloc, l4, &[4]),
            sample(k_gc, 0, &[5]),
        ],
    );
    let scope2_alloc = b.profile(
        ("alloc_space", "bytes"),
        ("space", "bytes"),
        vec![sample(k_malloc, l2, &[4096])],
    );
    let scope2_cpu = b.profile(cpu, cpu, vec![sample(k_checkout, l2, &[TICK_NS / 2])]);
    b.finish(vec![
        vec![scope1_cpu, scope1_count],
        vec![scope2_alloc, scope2_cpu],
    ])
}
