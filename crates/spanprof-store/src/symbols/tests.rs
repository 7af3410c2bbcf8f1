use spanprof_format::otlp::{Function, Line, Location, Mapping, Stack};

use super::*;

#[test]
fn a_borrowed_location_key_finds_exactly_its_location() {
    let mut t = SymbolTable::new();
    let lines = [(1, 10, 0), (2, 20, 3)];
    let sym = |mapping, address, lines: &[(u32, i64, i64)]| LocationSym {
        mapping,
        address,
        lines: lines.into(),
    };
    let id = t.locations.intern(sym(1, 0x40, &lines));
    let other = t.locations.intern(sym(1, 0x40, &lines[..1]));
    let key = |mapping, address, lines| LocationKey {
        mapping,
        address,
        lines,
    };
    assert_eq!(t.locations.get(&key(1, 0x40, &lines)), Some(id));
    assert_eq!(t.locations.get(&key(1, 0x40, &lines[..1])), Some(other));
    assert_eq!(t.locations.get(&key(2, 0x40, &lines)), None);
    assert_eq!(t.locations.get(&key(1, 0x41, &lines)), None);
    assert_eq!(
        t.locations.get(&key(1, 0x40, &[(1, 10, 0), (2, 20, 4)])),
        None
    );
    assert_eq!(t.locations.get(&key(1, 0x40, &[])), None);
    // Interning by the key builds nothing for a known location, and a new one once.
    let known = t
        .locations
        .intern_by(&key(1, 0x40, &lines), || unreachable!("known"));
    assert_eq!(known, id);
    let new = t
        .locations
        .intern_by(&key(3, 0x40, &lines), || sym(3, 0x40, &lines));
    assert_eq!(t.locations.intern(sym(3, 0x40, &lines)), new);
    assert_eq!(t.intern_string("x"), t.intern_string("x"));
}

/// A dictionary whose locations are at addresses `addresses` (in that table order) and
/// whose stacks are `stacks` (indices into that table, leaf first).
fn dict(addresses: &[u64], stacks: &[&[i32]]) -> ProfilesDictionary {
    let mut d = ProfilesDictionary {
        location_table: vec![Location::default()],
        stack_table: vec![Stack::default()],
        string_table: vec![String::new()],
        function_table: vec![Function::default()],
        ..Default::default()
    };
    for &address in addresses {
        d.location_table.push(Location {
            address,
            lines: vec![Line::default()],
            ..Default::default()
        });
    }
    for s in stacks {
        d.stack_table.push(Stack {
            location_indices: s.to_vec(),
        });
    }
    d
}

fn path(t: &SymbolTable, mut node: u32) -> Vec<u64> {
    let mut out = Vec::new();
    while node != 0 {
        let n = t.node(node).unwrap();
        out.push(t.location(n.location).unwrap().address);
        node = n.parent;
    }
    out
}

#[test]
fn stacks_map_to_the_same_nodes_whatever_the_numbering() {
    let mut t = SymbolTable::new();
    // Leaf first: 0x30 called by 0x20 called by 0x10.
    let d1 = dict(&[0x10, 0x20, 0x30], &[&[3, 2, 1], &[2, 1]]);
    let mut r1 = Remap::new(&d1);
    let full = t.stack_of(&d1, &mut r1, 1).unwrap();
    let prefix = t.stack_of(&d1, &mut r1, 2).unwrap();
    assert_eq!(path(&t, full), [0x30, 0x20, 0x10]);
    assert_eq!(t.node(full).unwrap().parent, prefix);

    // Another profile numbers the same locations and stacks differently.
    let d2 = dict(&[0x30, 0x10, 0x20], &[&[3, 2], &[1, 3, 2], &[2]]);
    let mut r2 = Remap::new(&d2);
    let nodes = t.node_count();
    assert_eq!(t.stack_of(&d2, &mut r2, 2).unwrap(), full);
    assert_eq!(t.stack_of(&d2, &mut r2, 1).unwrap(), prefix);
    assert_eq!(t.node_count(), nodes, "known stacks add no nodes");
    let root = t.stack_of(&d2, &mut r2, 3).unwrap();
    assert_eq!(path(&t, root), [0x10]);
    assert_eq!(t.node(prefix).unwrap().parent, root);

    // A new stack sharing a prefix adds only its own frame.
    let d3 = dict(&[0x10, 0x20, 0x40], &[&[3, 2, 1]]);
    let mut r3 = Remap::new(&d3);
    let other = t.stack_of(&d3, &mut r3, 1).unwrap();
    assert_eq!(path(&t, other), [0x40, 0x20, 0x10]);
    assert_eq!(t.node(other).unwrap().parent, prefix);
    assert_eq!(t.node_count(), nodes + 1);
}

/// Use is measured over the last two periods, by mapping: the share of locations whose
/// binary profiles used, or that have none; nothing used at all is `None`. A mapping a
/// refused profile interned and then dropped is not counted for the one that takes its id.
#[test]
fn recent_use_covers_two_periods_by_mapping() {
    let mut t = SymbolTable::new();
    // Locations 1 and 2 in binary A, 3 in binary B, 4 with no mapping.
    let mut d = dict(&[0x10, 0x20, 0x30, 0x40], &[&[1], &[2], &[3], &[4]]);
    for start in [0xa000, 0xb000] {
        d.mapping_table.push(Mapping {
            memory_start: start,
            ..Default::default()
        });
    }
    d.mapping_table.insert(0, Mapping::default());
    for (l, m) in [(1, 1), (2, 1), (3, 2)] {
        d.location_table[l].mapping_index = m;
    }
    let use_stack = |t: &mut SymbolTable, stack: i32| {
        t.stack_of(&d, &mut Remap::new(&d), stack).unwrap();
    };
    for stack in 1..=4 {
        use_stack(&mut t, stack);
    }
    let all = t.bytes_since([1; 5]);
    assert_eq!(t.take_recent_use(), Some(all), "every binary used");
    use_stack(&mut t, 1);
    // This period: binary A; the one before: both.
    assert_eq!(t.take_recent_use(), Some(all));
    // The last two periods: A, and the location with no mapping.
    assert_eq!(t.take_recent_use(), Some(all * 3 / 4));
    assert_eq!(t.take_recent_use(), None, "nothing used");
    // Binary C, interned by a profile then refused; binary D takes its id, unused.
    let sizes = t.sizes();
    let mut c = dict(&[0x50], &[&[1]]);
    c.mapping_table = vec![
        Mapping::default(),
        Mapping {
            memory_start: 0xc000,
            ..Default::default()
        },
    ];
    c.location_table[1].mapping_index = 1;
    t.stack_of(&c, &mut Remap::new(&c), 1).unwrap();
    t.truncate(sizes);
    let d_id = t.mappings.intern(MappingSym {
        memory_start: 0xd000,
        ..Default::default()
    });
    t.locations.intern(LocationSym {
        mapping: d_id,
        address: 0x60,
        lines: Box::new([]),
    });
    use_stack(&mut t, 1);
    let five = t.bytes_since([1; 5]);
    assert_eq!(t.take_recent_use(), Some(five * 3 / 5));
}
