//! `SelectMergeStacktraces` and `SelectMergeSpanProfile` with `format: PROFILE_FORMAT_TREE`
//! on the real Go profile: the tree bytes are read back with a decoder written here from
//! upstream's definition (grafana/pyroscope v2.2.1 `pkg/model/tree.go`, `UnmarshalTree`:
//! pre-order nodes `uvarint(len) name uvarint(self) uvarint(children)` under a virtual
//! root) and must hold the same nodes as the flame graph answer. And `profile_id_selector`,
//! which upstream reads as profile UUIDs.

use std::collections::BTreeMap;

use prost::Message;
use serde_json::json;

use crate::common::goprofile::CPU_TYPE;
use crate::querier::{
    check_layout, error, fixture, hex, json_call, proto, service_stacktraces, slow_root,
    FlameGraph, FlameGraphResponse, SelectMergeSpanProfileRequest, SelectMergeStacktracesRequest,
    SELECTOR,
};

const FORMAT_TREE: i32 = 2;

/// Each node's (total, self) by its path of names from the top frame.
type Nodes = BTreeMap<Vec<String>, (i64, i64)>;

fn uvarint(b: &[u8], at: &mut usize) -> u64 {
    let (mut v, mut shift) = (0u64, 0);
    loop {
        let byte = *b.get(*at).expect("a complete varint");
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return v;
        }
        shift += 7;
        assert!(shift < 64, "varint overflow");
    }
}

/// Upstream's `UnmarshalTree`: a stack of parents, each node pushed once per child it
/// announces; nodes of one name under a parent merged; totals summed up from self values.
fn decode_tree(b: &[u8]) -> Nodes {
    let mut nodes = Nodes::new();
    if b.len() < 2 {
        return nodes;
    }
    let mut at = 0;
    // Each entry: the path of a parent still owed a child.
    let mut parents: Vec<Option<Vec<String>>> = vec![None];
    let mut first = true;
    while let Some(parent) = parents.pop() {
        let len = uvarint(b, &mut at) as usize;
        let name = std::str::from_utf8(&b[at..at + len]).unwrap().to_owned();
        at += len;
        let self_value = uvarint(b, &mut at) as i64;
        let children = uvarint(b, &mut at);
        // The virtual root: nameless, no value, the top frames its children.
        let path = if first {
            first = false;
            assert_eq!((name.as_str(), self_value), ("", 0), "the virtual root");
            Vec::new()
        } else {
            let mut p = parent.expect("a parent");
            p.push(name);
            for depth in 1..=p.len() {
                nodes.entry(p[..depth].to_vec()).or_default().0 += self_value;
            }
            nodes.entry(p.clone()).or_default().1 += self_value;
            p
        };
        for _ in 0..children {
            parents.push(Some(path.clone()));
        }
    }
    assert_eq!(at, b.len(), "every byte read");
    nodes
}

/// The flame graph's nodes the same way, parents found by interval containment (as Grafana
/// reads the levels).
fn flame_nodes(fg: &FlameGraph) -> Nodes {
    let levels = check_layout(fg);
    let mut paths: Vec<Vec<(i64, i64, Vec<String>)>> = Vec::new();
    let mut nodes = Nodes::new();
    for (d, level) in levels.iter().enumerate() {
        let mut here = Vec::new();
        for (start, total, self_value, name) in level {
            let path = if d == 0 {
                Vec::new()
            } else {
                let parent = paths[d - 1]
                    .iter()
                    .find(|p| p.0 <= *start && start + total <= p.0 + p.1)
                    .expect("a parent");
                let mut p = parent.2.clone();
                p.push(name.clone());
                let e = nodes.entry(p.clone()).or_default();
                e.0 += total;
                e.1 += self_value;
                p
            };
            here.push((*start, *total, path));
        }
        paths.push(here);
    }
    nodes
}

fn stacktraces(req: &SelectMergeStacktracesRequest) -> FlameGraphResponse {
    proto("SelectMergeStacktraces", req)
}

#[test]
fn tree_bytes_hold_the_flame_graph_nodes() {
    let data = &fixture().data;
    let request = service_stacktraces(data);
    let root = slow_root(data);
    for req in [
        request.clone(),
        // Truncated: both cut the same nodes into "other".
        SelectMergeStacktracesRequest {
            max_nodes: Some(25),
            ..request.clone()
        },
        SelectMergeStacktracesRequest {
            span_selector: vec![hex(&root.span_id)],
            ..request.clone()
        },
        SelectMergeStacktracesRequest {
            trace_id_selector: vec![hex(&root.trace_id)],
            ..request.clone()
        },
    ] {
        let fg = stacktraces(&req).flamegraph.unwrap();
        let tree = stacktraces(&SelectMergeStacktracesRequest {
            format: FORMAT_TREE,
            ..req.clone()
        });
        assert!(tree.flamegraph.is_none(), "the tree alone");
        let nodes = decode_tree(&tree.tree);
        assert!(nodes.len() > 5, "{req:?}");
        assert_eq!(nodes, flame_nodes(&fg), "{req:?}");
        let top: i64 = nodes
            .iter()
            .filter(|(p, _)| p.len() == 1)
            .map(|(_, v)| v.0)
            .sum();
        assert_eq!(top, fg.total);
        if req.max_nodes.is_some() {
            assert!(nodes.keys().any(|p| p.last().unwrap() == "other"));
        }
    }

    // Protojson: the bytes as base64.
    let (start, end) = (request.start, request.end);
    let v = json_call(
        "SelectMergeStacktraces",
        json!({"profileTypeID": CPU_TYPE, "labelSelector": SELECTOR, "start": start,
               "end": end, "format": "PROFILE_FORMAT_TREE"}),
    );
    assert!(v.get("flamegraph").is_none(), "{v}");
    let b64 = v["tree"].as_str().expect("tree as a base64 string");
    let bytes = spanprof_format::json::base64::decode(b64).unwrap();
    let proto_tree = stacktraces(&SelectMergeStacktracesRequest {
        format: FORMAT_TREE,
        ..request.clone()
    })
    .tree;
    assert_eq!(bytes, proto_tree);

    // Nothing selected: no bytes.
    let none = stacktraces(&SelectMergeStacktracesRequest {
        label_selector: "{service_name=\"nothing\"}".into(),
        format: FORMAT_TREE,
        ..request.clone()
    });
    assert!(none.tree.is_empty() && none.flamegraph.is_none());

    // SelectMergeSpanProfile answers the tree too.
    let span_req = SelectMergeSpanProfileRequest {
        profile_type_id: CPU_TYPE.into(),
        label_selector: SELECTOR.into(),
        span_selector: vec![hex(&root.span_id)],
        start,
        end,
        max_nodes: None,
        format: FORMAT_TREE,
    };
    let r: FlameGraphResponse = proto("SelectMergeSpanProfile", &span_req);
    let fg: FlameGraphResponse = proto(
        "SelectMergeSpanProfile",
        &SelectMergeSpanProfileRequest {
            format: 0,
            ..span_req.clone()
        },
    );
    assert_eq!(decode_tree(&r.tree), flame_nodes(&fg.flamegraph.unwrap()));
}

/// Upstream's profile ids are the UUIDs it gives each stored profile: a span id there is a
/// mistake named as such; a UUID is refused, spanprof keeping none.
#[test]
fn profile_id_selector_takes_profile_uuids_which_spanprof_does_not_keep() {
    let data = &fixture().data;
    let root = slow_root(data);
    let mut req = service_stacktraces(data).encode_to_vec();
    // profile_id_selector is field 8 of SelectMergeStacktracesRequest.
    let with = |id: &str| {
        let mut body = req.clone();
        body.push(8 << 3 | 2);
        body.push(id.len() as u8);
        body.extend_from_slice(id.as_bytes());
        error("SelectMergeStacktraces", "application/proto", &body)
    };
    let (status, v) = with(&hex(&root.span_id));
    assert_eq!(
        (status, v["code"].as_str().unwrap()),
        (400, "invalid_argument")
    );
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("goes in span_selector"),
        "{v}"
    );
    for uuid in [
        "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "7c9e6679742540de944be07fc1f90ae7",
        "{7c9e6679-7425-40de-944b-e07fc1f90ae7}",
    ] {
        let (status, v) = with(uuid);
        assert_eq!(
            (status, v["code"].as_str().unwrap()),
            (501, "unimplemented")
        );
        assert!(
            v["message"]
                .as_str()
                .unwrap()
                .contains("keeps no profile UUIDs"),
            "{v}"
        );
    }
    // SelectMergeProfile (field 7) reads it the same way.
    req = crate::querier::SelectMergeProfileRequest {
        profile_type_id: CPU_TYPE.into(),
        label_selector: SELECTOR.into(),
        start: 0,
        end: 0,
        trace_id_selector: vec![],
    }
    .encode_to_vec();
    req.push(7 << 3 | 2);
    req.push(4);
    req.extend_from_slice(b"abcd");
    let (status, v) = error("SelectMergeProfile", "application/proto", &req);
    assert_eq!(
        (status, v["code"].as_str().unwrap()),
        (400, "invalid_argument"),
        "{v}"
    );
}
