#!/usr/bin/env bash
# What the remote query backend (storage.backend: remote) adds to a query, on a trace of
# 1,000 spans:
#
#   bench/remote-query.sh [--runs R]
#
# One spanprof (the peer, on core 0) holds the data and plays both Pyroscope (its querier.v1)
# and Tempo (its Tempo API); it is also the embedded store the same /api/v1 queries are timed
# on. A frontend (storage.backend: remote, on core 1) is pointed at it directly and is timed;
# a second frontend goes through a recording proxy, which notes the calls each query makes
# (method, path, headers, body, when it began and ended). Those calls are then replayed on
# the peer alone, in order, and the best pass timed, calls the frontend made at once counted
# as the slowest of them: the remote's time. The frontend's own cost is its time minus the
# remote's time for the same calls, as a ratio of the remote's time (target < 20 %). Times
# are the best of R, each by curl on one kept-alive connection, all in the same run; the
# time of one hop alone (an answer of a few bytes) is printed beside them.
# The data: two traces of a root with 9 children of 110 children each (1,000 spans), 3
# samples a span (every span in one, one span in 20 in the other) from 40 stacks of depth
# 12, pushed as Pyroscope pprof with span_id/trace_id labels; the spans as OTLP/HTTP JSON.
# Defaults (30 runs) take about a minute after the build. SPANPROF_BIN=FILE times that
# binary (no build).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

runs=30
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    *) echo "usage: $0 [--runs R]" >&2; exit 2 ;;
  esac
done

if [ -z "${SPANPROF_BIN:-}" ]; then
  echo "bench: building spanprof (release)" >&2
  cargo build --release -q -p spanprof
fi
bin="${SPANPROF_BIN:-$root/target/release/spanprof}"
tmp="$(mktemp -d)"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_up() {
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0
    sleep 0.1
  done
  echo "bench: nothing listening on $1" >&2; cat "$tmp"/*.log >&2; exit 1
}
serve() { # core port name extra...
  local core="$1" port="$2" name="$3"; shift 3
  taskset -c "$core" "$bin" serve --data "$tmp/$name" --http-addr "127.0.0.1:$port" \
    --otlp-http-addr off --otlp-grpc-addr off "$@" 2>"$tmp/$name.log" &
  pids+=($!)
  wait_up "$port"
}

peer="$(free_port)" proxy="$(free_port)" front="$(free_port)" front_rec="$(free_port)"
serve 0 "$peer" peer
remote_config() { # file url
  printf 'storage:\n  backend: remote\n  remote:\n    pyroscope:\n      url: %s\n    tempo:\n      url: %s\n' "$2" "$2" >"$1"
}
remote_config "$tmp/front.yaml" "http://127.0.0.1:$peer"
remote_config "$tmp/front_rec.yaml" "http://127.0.0.1:$proxy"

echo "bench: one trace of 1,000 spans, 3 samples each ..." >&2
python3 - "$peer" >"$tmp/ids" <<'EOF'
import json, sys, time, urllib.request
port = int(sys.argv[1])
now = time.time_ns()
# Two traces of the same shape: every span sampled, and one span in 20 (most spans of a real
# trace are too short for a 100 Hz profiler to see).
traces = {"5eed" * 8: 1, "5ba5" * 8: 20}
spans, parent = [], {}
ids = ["%016x" % (i + 1) for i in range(1000)]
for i in range(1, 10):
    parent[i] = 0
for i in range(10, 1000):
    parent[i] = 1 + (i - 10) // 110
def span_id(trace, i):
    return trace[:4] + ids[i][4:]
for trace in traces:
    for i in range(1000):
        s = {"traceId": trace, "spanId": span_id(trace, i),
             "name": "root" if i == 0 else ("stage" if i < 10 else "step"),
             "kind": 2, "startTimeUnixNano": str(now - 10**9 + i * 1000),
             "endTimeUnixNano": str(now - 10**9 + i * 1000 + (900_000_000 if i == 0 else 1_000_000 + i * 1000))}
        if i in parent:
            s["parentSpanId"] = span_id(trace, parent[i])
        spans.append(s)
body = json.dumps({"resourceSpans": [{
    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "bench"}}]},
    "scopeSpans": [{"spans": spans}]}]}).encode()
urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", data=body,
                       headers={"content-type": "application/json"})).read()

# pprof, encoded by hand (protobuf wire format): no protobuf library needed.
def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)
def field(num, payload):  # length-delimited
    return varint(num << 3 | 2) + varint(len(payload)) + payload
def num(num_, n):
    return varint(num_ << 3) + varint(n)
strings = [""]
def s(x):
    if x not in strings:
        strings.append(x)
    return strings.index(x)
functions = [f"bench.f{i}" for i in range(60)]
prof = bytearray()
prof += field(1, num(1, s("cpu")) + num(2, s("nanoseconds")))
for i in range(60):
    prof += field(5, num(1, i + 1) + num(2, s(functions[i])) + num(3, s(functions[i])) + num(4, s("bench.go")))
    prof += field(4, num(1, i + 1) + field(4, num(1, i + 1) + num(2, 10 + i)))
for trace, every in traces.items():
  for i in range(0, 1000, every):
    sid = span_id(trace, i)
    for k in range(3):
        stack = (i * 3 + k) % 40
        locs = [1 + (stack + d * 7) % 60 for d in range(12)]
        sample = field(1, b"".join(varint(l) for l in locs)) + field(2, varint(10_000_000 * (1 + k)))
        sample += field(3, num(1, s("span_id")) + num(2, s(sid)))
        sample += field(3, num(1, s("trace_id")) + num(2, s(trace)))
        prof += field(2, sample)
for x in list(strings):
    prof += field(6, x.encode())
prof += num(9, now - 10**9) + num(10, 10**9)
prof += field(11, num(1, s("cpu")) + num(2, s("nanoseconds"))) + num(12, 10_000_000)
# (strings added after the table was written would be lost: none are.)
frm, until = (now - 10**9) // 10**9, now // 10**9 + 1
url = f"http://127.0.0.1:{port}/ingest?name=bench.cpu&from={frm}&until={until}&format=pprof&sampleRate=100&spyName=gospy"
urllib.request.urlopen(urllib.request.Request(url, data=bytes(prof), method="POST")).read()
print(*traces, span_id("5eed" * 8, 0), span_id("5eed" * 8, 1))
EOF
read -r trace sparse root_span stage_span <"$tmp/ids"

# The recording proxy: forwards to the peer, appends each call to the file the bench names.
python3 - "$proxy" "$peer" "$tmp/calls" >"$tmp/proxy.log" 2>&1 <<'EOF' &
import base64, http.client, http.server, json, sys, threading, time
LOCK = threading.Lock()
port, peer, calls = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
SKIP = {"host", "content-length", "connection", "accept-encoding"}
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def relay(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in SKIP}
        began = time.monotonic()
        c = http.client.HTTPConnection("127.0.0.1", peer)
        c.request(self.command, self.path, body=body or None, headers=headers)
        r = c.getresponse()
        data = r.read()
        # When it began and ended: calls of the frontend that overlap were made at once.
        with LOCK, open(calls, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path, "headers": headers,
                                "body": base64.b64encode(body).decode(),
                                "began": began, "ended": time.monotonic()}) + "\n")
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(k, v)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    do_GET = do_POST = relay
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
EOF
pids+=($!)
wait_up "$proxy"
serve 1 "$front" front --config "$tmp/front.yaml"
serve 1 "$front_rec" front_rec --config "$tmp/front_rec.yaml"

# Every timing below is curl's (one process, one kept-alive connection, TCP_NODELAY as the
# frontend's hyper client), so the peer's replay and the frontend are timed by the same
# client; each figure is a transfer's time_total less its connect time.
# (Until 2026-12-07 the timing client was Python's http.client, whose ~0.1-0.2 ms of its own
# per request was counted once in the frontend's time and once per call in the remote's: the
# replay of 2-6 calls looked slower than it is, and the frontend's added cost smaller.)
curl_times() { # config file -> one line "code seconds" per transfer
  curl -s -K "$1"
}
best() { # port path [JSON body] -> best seconds of $runs GETs (POSTs of the body) on one kept-alive connection
  local cfg="$tmp/best.cfg"
  : >"$cfg"
  for i in $(seq "$runs"); do
    [ "$i" -gt 1 ] && echo next >>"$cfg"
    printf 'url = "http://127.0.0.1:%s%s"\noutput = "/dev/null"\nwrite-out = "%%{http_code} %%{time_connect} %%{time_total}\\n"\n' "$1" "$2" >>"$cfg"
    if [ -n "${3:-}" ]; then
      printf 'header = "content-type: application/json"\ndata-binary = "%s"\n' "$3" >>"$cfg"
    fi
  done
  curl_times "$cfg" | python3 -c '
import sys
best = None
for line in sys.stdin:
    code, connect, total = line.split()
    assert code == "200", (sys.argv[1], code)
    t = float(total) - float(connect)
    best = t if best is None else min(best, t)
print(best)' "$2"
}
replay() { # calls file -> calls and the best seconds of $runs passes over them in order, on the peer
  # Whole passes in the frontend's order, not each call repeated: a call repeated back to
  # back meets the state its own previous run left (the peer's caches) and is timed too fast.
  python3 - "$peer" "$runs" "$1" "$tmp" <<'EOF2' >"$tmp/replay.cfg"
import base64, json, sys
peer, runs, calls, tmp = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
calls = sorted((json.loads(l) for l in open(calls)), key=lambda c: c["began"])
# Calls that overlapped in the frontend were made at once: one group, timed as its slowest.
groups, end = [], None
for c in calls:
    if end is None or c["began"] >= end:
        groups.append(0)
        end = c["ended"]
    else:
                end = max(end, c["ended"])
    c["group"] = len(groups) - 1
open(f"{tmp}/groups", "w").write(" ".join(str(c["group"]) for c in calls))
quote = lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
first = True
for _ in range(runs):
    for i, call in enumerate(calls):
        if not first:
            print("next")
        first = False
        print("url =", quote(f"http://127.0.0.1:{peer}{call['path']}"))
        print("request =", quote(call["method"]))
        for k, v in call["headers"].items():
            print("header =", quote(f"{k}: {v}"))
        body = base64.b64decode(call["body"])
        if body:
            path = f"{tmp}/body{i}"
            open(path, "wb").write(body)
            print("data-binary =", quote("@" + path))
        print('output = "/dev/null"')
        print('write-out = "%{http_code} %{time_connect} %{time_total}\\n"')
EOF2
  n="$(wc -l <"$1")"
  curl_times "$tmp/replay.cfg" | python3 -c '
import sys
n = int(sys.argv[1])
times = []
for line in sys.stdin:
    code, connect, total = line.split()
    assert code == "200", code
    times.append(float(total) - float(connect))
groups = [int(g) for g in open(sys.argv[2]).read().split()]
def critical(pass_times):
    slowest = {}
    for g, t in zip(groups, pass_times):
        slowest[g] = max(slowest.get(g, 0.0), t)
    return sum(slowest.values())
passes = [times[i:i + n] for i in range(0, len(times), n)]
print(n, len(set(groups)), min(sum(p) for p in passes), min(critical(p) for p in passes))' "$n" "$tmp/groups"
}

printf '%-26s %11s %11s %9s %11s %11s %11s %8s\n' "query" "embedded ms" "frontend ms" "calls" "one by one" "remote ms" "added ms" "added %"
for q in "span|/api/v1/flamegraph?span_id=$stage_span" \
         "span + children (1,000)|/api/v1/flamegraph?span_id=$root_span&include_child_spans=true&trace_id=$trace" \
         "trace|/api/v1/flamegraph?trace_id=$trace" \
         "trace view (1,000 spans)|/api/v1/traces/$trace" \
         "trace view (50 sampled)|/api/v1/traces/$sparse"; do
  name="${q%%|*}" path="${q#*|}"
  # The second asking is recorded: the first fills what the frontend keeps a few seconds
  # (ProfileTypes), which the timed runs, asked back to back, find kept too.
  curl -sf -o /dev/null "http://127.0.0.1:$front_rec$path" || true
  : >"$tmp/calls"
  curl -sf -o "$tmp/rec.json" "http://127.0.0.1:$front_rec$path" ||
    { echo "bench: $path through the recording proxy failed" >&2; cat "$tmp/front_rec.log" "$tmp/proxy.log" >&2; exit 1; }
  cp "$tmp/calls" "$tmp/calls.once"
  emb="$(best "$peer" "$path")"
  fr="$(best "$front" "$path")"
  read -r n rounds serial remote <<<"$(replay "$tmp/calls.once")"
  python3 - "$name" "$emb" "$fr" "$n" "$rounds" "$serial" "$remote" <<'EOF'
import sys
name, emb, fr, n, rounds, serial, remote = sys.argv[1], *map(float, sys.argv[2:])
added = fr - remote
calls = "%d in %d" % (n, rounds)
print("%-26s %11.2f %11.2f %9s %11.2f %11.2f %11.2f %7.0f%%" % (name, emb * 1e3, fr * 1e3, calls, serial * 1e3, remote * 1e3, added * 1e3, 100 * added / remote))
EOF
done
# One loopback hop alone: an answer of a few bytes (the peer's /health), and what the
# frontend adds to a call it only passes on (Pyroscope's ProfileTypes of an empty range,
# through the frontend's querier.v1 pass-through, against the same call on the peer): a
# frontend adds at least that to whatever the remote does.
hop="$(best "$peer" /health)"
pt=/querier.v1.QuerierService/ProfileTypes
direct="$(best "$peer" "$pt" '{}')"
passed="$(best "$front" "$pt" '{}')"
python3 -c 'import sys
runs, hop, direct, passed = sys.argv[1], *map(float, sys.argv[2:])
print("one HTTP hop (GET /health, best of %s): %.3f ms; ProfileTypes on the peer %.3f ms, through the frontend %.3f ms: the frontend adds %.3f ms to a call" % (runs, hop * 1e3, direct * 1e3, passed * 1e3, (passed - direct) * 1e3))' "$runs" "$hop" "$direct" "$passed"
echo "(calls: N in R rounds, calls the frontend made at once being one round; one by one: the" \
     "calls replayed on the peer one after another, best pass; remote ms: the same passes, each" \
     "round counted as its slowest call, what a client making the same calls at once would wait)"
