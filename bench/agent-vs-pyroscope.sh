#!/usr/bin/env bash
# Attribution of CPU to spans: spanprof-agent against pyroscope-rs' thread tags, same program,
# same workload, in one run. testprograms/rustapp (tokio, 4 workers, 24 concurrent requests whose
# spans burn CPU in their own function across .await points) runs twice against one
# `spanprof serve`: once with spanprof-agent, once with pyroscope-rs (pprof-rs backend) tagging
# the OS thread with span_id/trace_id at request start and untagging at its end, as its README
# shows. For every span, spanprof is asked which functions its samples are in.
#
#   bench/agent-vs-pyroscope.sh
#
# `cargo test -p spanprof --test it agent::` reports the same comparison on a shorter workload (250 Hz,
# 4 chunks per request); this one is longer, at 100 Hz. Both use one build of rustapp.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="$root/bench/out/agent-vs-pyroscope"
mkdir -p "$out"

echo "bench: building spanprof and testprograms/rustapp (with pyroscope-rs, as the test does)"
cargo build -q -p spanprof
(cd testprograms/rustapp && CARGO_TARGET_DIR="$root/target/testprograms" \
  RUSTFLAGS="-C force-frame-pointers=yes" cargo build -q --features pyroscope)

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http="127.0.0.1:$(port)"
otlp="127.0.0.1:$(port)"
rm -rf "$out/data"
"$root/target/debug/spanprof" serve --data "$out/data" --http-addr "$http" \
  --otlp-http-addr "$otlp" --otlp-grpc-addr off >"$out/serve.log" 2>&1 &
serve=$!
trap 'kill "$serve" 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q 'spanprof serving' "$out/serve.log" && break; sleep 0.1; done

workload=(RUSTAPP_REQUESTS=24 RUSTAPP_CONCURRENCY=12 RUSTAPP_CHUNKS=30 RUSTAPP_CHUNK_US=6000
  RUSTAPP_HZ=100 RUSTAPP_WORKERS=4 SPANPROF_URL="http://$otlp")
echo "bench: rustapp with spanprof-agent"
env "${workload[@]}" RUSTAPP_PROFILER=agent "$root/target/testprograms/debug/rustapp" >"$out/agent.jsonl"
echo "bench: rustapp with pyroscope-rs thread tags"
env "${workload[@]}" RUSTAPP_PROFILER=pyroscope RUSTAPP_PYROSCOPE_URL="http://$http" \
  "$root/target/testprograms/debug/rustapp" >"$out/pyroscope.jsonl"

python3 - "$http" "$out/agent.jsonl" "$out/pyroscope.jsonl" <<'EOF'
import json, sys, time, urllib.request

addr = sys.argv[1]
burns = ["burn_alpha", "burn_beta", "burn_gamma", "burn_gamma_child"]

def top(span):
    url = f"http://{addr}/api/v1/top?span_id={span}&order=total&limit=10000"
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            body = json.load(r)
    except Exception:
        return None
    fns = {}
    for f in body["functions"]:
        for b in burns:
            if f["name"].endswith("::" + b):
                fns[b] = fns.get(b, 0) + f["total"]
    return body["total"], fns

def spans(path):
    lines = [json.loads(l) for l in open(path)]
    out = []
    for l in lines[:-1]:
        own = "burn_" + l["kind"].lower()
        out.append((l["span_id"], own))
        if l["child_span_id"]:
            out.append((l["child_span_id"], "burn_gamma_child"))
    return out

print("| profiler | spans with samples | samples in the span's own function | worst span | samples in another span's function |")
print("|---|---|---|---|---|")
for name, path in [("spanprof-agent (slot per poll)", sys.argv[2]),
                   ("pyroscope-rs (thread tags)", sys.argv[3])]:
    deadline = time.time() + 60
    while True:
        got = {s: top(s) for s, _ in spans(path)}
        if all(g and g[0] > 0 for g in got.values()) or time.time() > deadline:
            break
        time.sleep(1)
    own_total = total = foreign = 0
    worst = 1.0
    with_samples = 0
    for span, own in spans(path):
        g = got.get(span)
        if not g or g[0] == 0:
            continue
        with_samples += 1
        t, fns = g
        total += t
        own_total += fns.get(own, 0)
        foreign += sum(v for b, v in fns.items() if b != own and not (own == "burn_gamma" and b == "burn_gamma_child"))
        worst = min(worst, fns.get(own, 0) / t)
    n = len(spans(path))
    if total:
        print(f"| {name} | {with_samples} of {n} | {own_total / total * 100:.1f} % | {worst * 100:.1f} % | {foreign / total * 100:.1f} % |")
    else:
        print(f"| {name} | 0 of {n} | - | - | - |")
EOF
