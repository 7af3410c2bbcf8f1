#!/usr/bin/env bash
# End-to-end speed of Tempo trace search (`GET /api/search`, what Grafana's Tempo data source
# and TraceQL editor ask) on a store of many small traces:
#
#   bench/tempo-search.sh [--traces N] [--runs R]
#
# A server (on core 0) takes N traces of 3 spans (a root "GET /cart" and two children) over
# OTLP/HTTP JSON; then each query below is timed R times on a warm server, best and median
# (curl's total time). The queries: a condition on the trace's root that no trace passes (every
# trace is a candidate that fails), one that every trace passes with a span condition, and a
# span condition alone (the peer: one pass over the range's spans, what every search costs).
# SPANPROF_BIN=FILE times that server binary instead of this tree's (A/B on the same store).
# Defaults (100,000 traces, 5 runs) take about 20 s after the build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

traces=100000 runs=5
while [ $# -gt 0 ]; do
  case "$1" in
    --traces) traces="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    *) echo "usage: $0 [--traces N] [--runs R]" >&2; exit 2 ;;
  esac
done

echo "bench: building spanprof (release)" >&2
cargo build --release -q -p spanprof
bin="${SPANPROF_BIN:-$root/target/release/spanprof}"
tmp="$(mktemp -d)"
server=""
trap 'kill "$server" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"

taskset -c 0 "$bin" serve --data "$tmp/data" --http-addr "127.0.0.1:$port" \
  --otlp-http-addr off --otlp-grpc-addr off 2>"$tmp/server.log" &
server=$!
for _ in $(seq 1 200); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat "$tmp/server.log" >&2; exit 1; }
  sleep 0.1
done

echo "bench: sending $traces traces of 3 spans ..." >&2
python3 - "$port" "$traces" <<'EOF'
import json, sys, time, urllib.request
port, n = int(sys.argv[1]), int(sys.argv[2])
t0 = int(time.time() * 1e9) - 3600 * 10**9
def span(trace, span_id, parent, name, start, dur):
    s = {"traceId": trace, "spanId": span_id, "name": name, "kind": 2,
         "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + dur)}
    if parent:
        s["parentSpanId"] = parent
    return s
for first in range(0, n, 2000):
    spans = []
    for i in range(first, min(n, first + 2000)):
        trace, root, t = "%032x" % (i + 1), "%016x" % (3 * i + 1), t0 + i * 1_000_000
        spans += [span(trace, root, None, "GET /cart", t, 50_000_000),
                  span(trace, "%016x" % (3 * i + 2), root, "db query", t + 1000, 20_000_000),
                  span(trace, "%016x" % (3 * i + 3), root, "render", t + 30_000_000, 10_000_000)]
    body = json.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "shop"}}]},
        "scopeSpans": [{"spans": spans}]}]}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", data=body,
                                     headers={"content-type": "application/json"})
    urllib.request.urlopen(request).read()
EOF

start=$(( $(date +%s) - 7200 )) end=$(( $(date +%s) + 60 ))
printf '%-44s %10s %10s %8s %10s\n' "query (limit 20)" "best ms" "median ms" "traces" "inspected"
for q in '{rootName="nope"}' '{rootName="GET /cart" && name="render"}' '{name="render"}'; do
  enc="$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$q")"
  url="http://127.0.0.1:$port/api/search?q=$enc&start=$start&end=$end&limit=20"
  times=()
  for _ in $(seq 1 "$runs"); do
    times+=("$(curl -sf -o "$tmp/answer.json" -w '%{time_total}' "$url")")
  done
  python3 - "$q" "$tmp/answer.json" "${times[@]}" <<'EOF'
import json, statistics, sys
q, answer, times = sys.argv[1], json.load(open(sys.argv[2])), sorted(float(t) * 1000 for t in sys.argv[3:])
print(f"{q:<44} {times[0]:10.1f} {statistics.median(times):10.1f} {len(answer['traces']):8} "
      f"{answer['metrics']['inspectedTraces']:10}")
EOF
done
