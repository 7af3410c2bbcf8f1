#!/usr/bin/env python3
"""Prints a JSON summary of a binary OTLP Profiles file, decoded with opentelemetry-proto.

This is the independent decoder that spanprof's integration tests use to cross-check the Rust
encoder: it shares no code with spanprof. The input is a serialized ExportProfilesServiceRequest
or ProfilesData (the two have the same field numbers), optionally gzip-compressed.

Output (one JSON document on stdout):

    {"resources": [{"resource_index", "attributes", "scopes": [{"scope_index", "name"}]}],
     "links": [{"index", "trace_id", "span_id"}],      # the link table as hex, entry 0 included
     "profiles": [{"resource_index", "scope_index", "profile_index",
                   "sample_type": "type/unit", "period_type": "type/unit", "period",
                   "num_samples", "total",
                   "samples": [{"frames": [root, ..., leaf],   # function names
                                "values": [...], "timestamps": n, "value": sum,
                                "link": {"trace_id", "span_id"} | null,
                                "attributes": {key: value}, "attribute_units": {key: unit}}]}]}

A sample's "value" is the sum of its values, or its number of timestamps when it has none.
Any index out of range is an error (exit 1), never silently wrapped.

    python otlp_dump.py FILE        # summary of FILE
    python otlp_dump.py --self-check  # exits 0 if the installed proto has v1.10 numbering
"""

import gzip
import json
import sys

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2
from opentelemetry.proto.profiles.v1development import profiles_pb2

# OTLP Profiles proto v1.10+ numbering of Sample; v1.8/v1.9 swapped values and attributes.
V1_10_SAMPLE_FIELDS = {
    "stack_index": 1,
    "attribute_indices": 2,
    "link_index": 3,
    "values": 4,
    "timestamps_unix_nano": 5,
}


class DecodeError(Exception):
    pass


def self_check():
    got = {f.name: f.number for f in profiles_pb2.Sample.DESCRIPTOR.fields}
    if got != V1_10_SAMPLE_FIELDS:
        raise DecodeError(
            f"installed opentelemetry-proto has Sample fields {got}, want v1.10 numbering "
            f"{V1_10_SAMPLE_FIELDS}; install python/requirements.txt (run .ci/setup)"
        )
    # The request must parse as ProfilesData: same field numbers for both top-level fields.
    req = {f.name: f.number for f in profiles_service_pb2.ExportProfilesServiceRequest.DESCRIPTOR.fields}
    data = {f.name: f.number for f in profiles_pb2.ProfilesData.DESCRIPTOR.fields}
    if req != data:
        raise DecodeError(f"ExportProfilesServiceRequest {req} differs from ProfilesData {data}")


def at(table, index, what):
    """table[index], refusing negative or out-of-range indices."""
    if index < 0 or index >= len(table):
        raise DecodeError(f"{what} index {index} out of range (table has {len(table)} entries)")
    return table[index]


def any_value(value, strings):
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "string_value_strindex":
        return at(strings, value.string_value_strindex, "string")
    if kind == "bytes_value":
        return value.bytes_value.hex()
    if kind == "array_value":
        return [any_value(v, strings) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {key_of(kv, strings): any_value(kv.value, strings) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def key_of(kv, strings):
    # v1.10 reference-based attributes: key_strindex instead of key (never both).
    if kv.key_strindex:
        return at(strings, kv.key_strindex, "string")
    return kv.key


def value_type(vt, strings):
    return f"{at(strings, vt.type_strindex, 'string')}/{at(strings, vt.unit_strindex, 'string')}"


def frames_root_first(stack, dic, strings):
    leaf_first = []
    # Stack.location_indices are leaf first; inside a Location, the last line is the caller.
    for loc_index in stack.location_indices:
        loc = at(dic.location_table, loc_index, "location")
        if not loc.lines:
            leaf_first.append(f"0x{loc.address:x}")
        for line in loc.lines:
            fn = at(dic.function_table, line.function_index, "function")
            leaf_first.append(at(strings, fn.name_strindex, "string"))
    return list(reversed(leaf_first))


def summarize(data):
    dic = data.dictionary
    strings = list(dic.string_table)
    links = [
        {"index": i, "trace_id": link.trace_id.hex(), "span_id": link.span_id.hex()}
        for i, link in enumerate(dic.link_table)
    ]
    resources = []
    profiles = []
    for ri, rp in enumerate(data.resource_profiles):
        resources.append(
            {
                "resource_index": ri,
                "attributes": {key_of(kv, strings): any_value(kv.value, strings) for kv in rp.resource.attributes},
                "scopes": [{"scope_index": si, "name": sp.scope.name} for si, sp in enumerate(rp.scope_profiles)],
            }
        )
        for si, sp in enumerate(rp.scope_profiles):
            for pi, profile in enumerate(sp.profiles):
                profiles.append(summarize_profile(ri, si, pi, profile, dic, strings))
    return {"resources": resources, "links": links, "profiles": profiles}


def summarize_profile(ri, si, pi, profile, dic, strings):
    samples = []
    total = 0
    for sample in profile.samples:
        stack = at(dic.stack_table, sample.stack_index, "stack")
        link = None
        if sample.link_index:
            entry = at(dic.link_table, sample.link_index, "link")
            link = {"trace_id": entry.trace_id.hex(), "span_id": entry.span_id.hex()}
        attributes = {}
        units = {}
        for ai in sample.attribute_indices:
            kvu = at(dic.attribute_table, ai, "attribute")
            key = at(strings, kvu.key_strindex, "string")
            if key in attributes:
                raise DecodeError(f"sample repeats attribute key {key!r}")
            attributes[key] = any_value(kvu.value, strings)
            if kvu.unit_strindex:
                units[key] = at(strings, kvu.unit_strindex, "string")
        values = list(sample.values)
        value = sum(values) if values else len(sample.timestamps_unix_nano)
        total += value
        samples.append(
            {
                "frames": frames_root_first(stack, dic, strings),
                "values": values,
                "timestamps": len(sample.timestamps_unix_nano),
                "value": value,
                "link": link,
                "attributes": attributes,
                "attribute_units": units,
            }
        )
    return {
        "resource_index": ri,
        "scope_index": si,
        "profile_index": pi,
        "sample_type": value_type(profile.sample_type, strings),
        "period_type": value_type(profile.period_type, strings),
        "period": profile.period,
        "num_samples": len(samples),
        "total": total,
        "samples": samples,
    }


def main(argv):
    if len(argv) != 2:
        print("usage: otlp_dump.py FILE | --self-check", file=sys.stderr)
        return 2
    try:
        self_check()
        if argv[1] == "--self-check":
            return 0
        with open(argv[1], "rb") as f:
            raw = f.read()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = profiles_pb2.ProfilesData()
        data.ParseFromString(raw)
        json.dump(summarize(data), sys.stdout, separators=(",", ":"))
        sys.stdout.write("\n")
        return 0
    except DecodeError as e:
        print(f"otlp_dump: {argv[1]}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
