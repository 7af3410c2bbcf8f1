#!/usr/bin/env bash
# Does an expensive query slow ingest down? Ingest latency alone, then while the worst label
# regex queries run, against one `spanprof serve` in the same run:
#
#   bench/query-ingest.sh [--series N] [--value-bytes B] [--seconds S] [--clients C] [--queries Q]
#
# The server is filled with N series whose label `k` holds a B-byte value (the red-team's
# shape: a label regex then scans N x B bytes per query). Then C closed-loop push clients (the
# load generator of bench/serve-load.sh) send profiles for S seconds, twice: with no query,
# and with Q clients running `Series` queries with the regex `{k=~"(.*a){50}"}` back to back.
# Prints each phase's ingest profiles/s, p50 and p99, the ratios of the second to the first,
# and how many queries ran and how long they took. Defaults (10,000 x 2,000 bytes, 15 s, 4
# clients, 2 queries) take about 2 minutes after the build. The server runs on both cores
# with the query and ingest threads it chooses; the load generator shares them (a 2-core
# machine has no core to spare), so CPU contention is part of what is measured.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

series=10000 value_bytes=2000 seconds=15 clients=4 queries=2
while [ $# -gt 0 ]; do
  case "$1" in
    --series) series="$2"; shift 2 ;;
    --value-bytes) value_bytes="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --queries) queries="$2"; shift 2 ;;
    *) echo "usage: $0 [--series N] [--value-bytes B] [--seconds S] [--clients C] [--queries Q]" >&2; exit 2 ;;
  esac
done

echo "bench: building spanprof and the load example (release)" >&2
cargo build --release -q -p spanprof -p spanprof-server --bin spanprof --example load
bin="$root/target/release/spanprof"
load="$root/target/release/examples/load"

tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
base="http://127.0.0.1:$port"

"$bin" serve --data "$tmp/data" --http-addr "127.0.0.1:$port" --otlp-http-addr off \
  --otlp-grpc-addr off 2>"$tmp/server.log" &
server=$!
pids+=("$server")
for _ in $(seq 1 200); do
  grep -q "spanprof serving on http://" "$tmp/server.log" && break
  kill -0 "$server" 2>/dev/null || { cat "$tmp/server.log" >&2; exit 1; }
  sleep 0.1
done

# The series, and the query loop, in Python (standard library only).
cat >"$tmp/series.py" <<'PY'
import http.client, json, sys, threading, time, urllib.parse

port, mode = int(sys.argv[1]), sys.argv[2]

def conn():
    return http.client.HTTPConnection("127.0.0.1", port, timeout=120)

if mode == "fill":
    n, size = int(sys.argv[3]), int(sys.argv[4])
    c = conn()
    for i in range(n):
        value = (f"{i:08d}-" + "b" * size)[:size]
        name = urllib.parse.quote(f"bench-series{{k={value}}}", safe="")
        c.request("POST", f"/ingest?name={name}&format=folded&spyName=bench",
                  body=b"main;work;leaf 10\n", headers={"Host": f"127.0.0.1:{port}"})
        r = c.getresponse()
        r.read()
        if r.status != 200:
            sys.exit(f"fill: POST /ingest answered {r.status}")
    print(f"filled {n} series of {size}-byte values", file=sys.stderr)
else:
    # Q clients run the worst regex query back to back until the stop file appears.
    q, stop = int(sys.argv[3]), sys.argv[4]
    now_ms = int(time.time() * 1000)
    body = json.dumps({"matchers": ['{k=~"(.*a){50}"}'], "start": now_ms - 3_600_000,
                       "end": now_ms + 3_600_000}).encode()
    times, statuses, lock = [], {}, threading.Lock()
    def run():
        import os
        c = conn()
        open(stop + ".started", "a").close()
        while not os.path.exists(stop):
            t = time.monotonic()
            c.request("POST", "/querier.v1.QuerierService/Series", body=body,
                      headers={"Host": f"127.0.0.1:{port}", "Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            with lock:
                times.append(time.monotonic() - t)
                statuses[r.status] = statuses.get(r.status, 0) + 1
    threads = [threading.Thread(target=run) for _ in range(q)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    times.sort()
    print(f"queries={len(times)} statuses={statuses} "
          f"median_s={times[len(times) // 2] if times else 0:.2f} max_s={times[-1] if times else 0:.2f}")
PY

python3 "$tmp/series.py" "$port" fill "$series" "$value_bytes"

# field KEY NAME: a figure of phase NAME's summary.
field() { sed -n "s/^$1=//p" "$tmp/$2.summary"; }
# push NAME: one closed-loop push phase; prints profiles/s p50 p99.
push() {
  "$load" push --url "$base" --seconds "$seconds" --clients "$clients" --paced-seconds 0 \
    --health-seconds 1 --server-pid "$server" --summary "$tmp/$1.summary" >/dev/null 2>"$tmp/$1.load"
  echo "$(field profiles_per_s "$1") $(field p50_ms "$1") $(field p99_ms "$1")"
}

read -r alone_rate alone_p50 alone_p99 < <(push alone)
rm -f "$tmp/stop"
python3 "$tmp/series.py" "$port" query "$queries" "$tmp/stop" >"$tmp/queries.txt" &
query_pid=$!
pids+=("$query_pid")
# The queries are under way before the second phase starts.
for _ in $(seq 1 100); do
  [ -e "$tmp/stop.started" ] && break
  kill -0 "$query_pid" 2>/dev/null || { echo "bench: the query loop stopped" >&2; exit 1; }
  sleep 0.1
done
read -r busy_rate busy_p50 busy_p99 < <(push busy)
touch "$tmp/stop"
wait "$query_pid"

echo "== ingest alone, then during $queries worst regex queries ($series series x $value_bytes-byte values)"
printf "%-22s %12s %10s %10s\n" phase "profiles/s" "p50 ms" "p99 ms"
printf "%-22s %12.0f %10.2f %10.2f\n" "alone" "$alone_rate" "$alone_p50" "$alone_p99"
printf "%-22s %12.0f %10.2f %10.2f\n" "during the queries" "$busy_rate" "$busy_p50" "$busy_p99"
printf "ratios (during / alone): profiles/s %.3f, p50 %.2fx, p99 %.2fx\n" \
  "$(echo "$busy_rate / $alone_rate" | bc -l)" "$(echo "$busy_p50 / $alone_p50" | bc -l)" \
  "$(echo "$busy_p99 / $alone_p99" | bc -l)"
echo "queries: $(cat "$tmp/queries.txt")"
