#!/usr/bin/env bash
# Does one forwarder keep up with its server's own ingest? One run, same load:
#
#   bench/forward-drain.sh [--seconds N] [--clients C] [--spans-per-s R] [--protocols "grpc http"]
#
# Server A (full server: store and one forwarder, on core 0) takes C closed-loop clients pushing
# distinct Go CPU profiles (the `load push` example) plus R OTLP trace requests a second (a
# mixed queue: profiles and traces interleaved, as a real collector's), for N seconds. Its
# forwarder sends everything to server B (a second spanprof, on core 1 with the load) over
# OTLP gRPC, then over OTLP/HTTP in a second phase. Printed per protocol, from A's /metrics
# sampled every second over the window profiles came in: profiles/s accepted (the server's
# own ingest rate), profiles/s forwarded (acknowledged by B), their ratio, the queue's growth
# in records/s, and how long the queue took to drain after the load stopped.
# Defaults (15 s, 16 clients, 30 trace requests/s, both protocols) take about 2 minutes after
# the build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

seconds=15 clients=16 spans_per_s=30 protocols="grpc http"
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --spans-per-s) spans_per_s="$2"; shift 2 ;;
    --protocols) protocols="$2"; shift 2 ;;
    *) echo "usage: $0 [--seconds N] [--clients C] [--spans-per-s R] [--protocols \"grpc http\"]" >&2; exit 2 ;;
  esac
done

echo "bench: building spanprof and the load example (release)" >&2
cargo build --release -q -p spanprof -p spanprof-server --bin spanprof --example load
bin="${SPANPROF_BIN:-$root/target/release/spanprof}"
load="$root/target/release/examples/load"

tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_server NAME CORE FLAGS...: sets $server_pid and $server_addr.
start_server() {
  local name="$1" core="$2"; shift 2
  local port; port="$(free_port)"
  taskset -c "$core" "$bin" serve --data "$tmp/$name-data" --http-addr "127.0.0.1:$port" \
    --otlp-http-addr off "$@" 2>"$tmp/$name.log" &
  server_pid=$!
  pids+=("$server_pid")
  for _ in $(seq 1 200); do
    if grep -q "spanprof serving on http" "$tmp/$name.log"; then
      server_addr="127.0.0.1:$port"
      return 0
    fi
    kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/$name.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "bench: $name did not start" >&2; cat "$tmp/$name.log" >&2; exit 1
}

# metric ADDR NAME FILTER: the sum of a metric's series whose labels contain FILTER.
metric() {
  curl -s "http://$1/metrics" | awk -v m="$2" -v f="$3" '
    index($0, m) == 1 && (f == "" || index($0, f)) { n += $NF } END { printf "%d\n", n + 0 }'
}

# Posts R small OTLP/JSON trace requests a second (5 spans each) until killed.
spans_sender() {
  python3 - "$1" "$spans_per_s" <<'EOF'
import json, os, sys, time, urllib.request
url, rate = sys.argv[1], float(sys.argv[2])
n, start = 0, time.time()
while True:
    now = time.time_ns()
    tid = os.urandom(16).hex()
    spans = [{"traceId": tid, "spanId": os.urandom(8).hex(), "name": f"op{i}", "kind": 2,
              "startTimeUnixNano": str(now - 5_000_000), "endTimeUnixNano": str(now)}
             for i in range(5)]
    body = json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "bench"}}]},
        "scopeSpans": [{"spans": spans}]}]}).encode()
    req = urllib.request.Request(url + "/v1/traces", body, {"content-type": "application/json", "host": "127.0.0.1"})
    try:
        urllib.request.urlopen(req, timeout=5).read()
    except Exception:
        pass
    n += 1
    delay = start + n / rate - time.time()
    if delay > 0:
        time.sleep(delay)
EOF
}

report=""
for proto in $protocols; do
  grpc_port="$(free_port)"
  start_server "down-$proto" 1 --otlp-grpc-addr "127.0.0.1:$grpc_port"
  down_pid=$server_pid down="$server_addr"
  case "$proto" in
    grpc) fwd=(--forward-otlp-grpc "down=http://127.0.0.1:$grpc_port") ;;
    http) fwd=(--forward-otlp-http "down=http://$down") ;;
    *) echo "bench: unknown protocol $proto" >&2; exit 2 ;;
  esac
  start_server "up-$proto" 0 --otlp-grpc-addr off "${fwd[@]}"
  up_pid=$server_pid up="$server_addr"

  # A's counters every second: time, accepted profiles, forwarded profile records, queued records.
  (
    while true; do
      echo "$(date +%s.%N) $(metric "$up" spanprof_received_profiles_total "") \
$(metric "$up" spanprof_forwarded_records_total 'signal="profiles"') \
$(metric "$up" spanprof_forward_queued_records "")"
      sleep 1
    done
  ) >"$tmp/samples-$proto" &
  sampler=$!
  pids+=("$sampler")
  spans_sender "http://$up" &
  spans_pid=$!
  pids+=("$spans_pid")
  taskset -c 1 "$load" push --url "http://$up" --seconds "$seconds" --clients "$clients" \
    --profiles 4096 --health-seconds 1 --paced-seconds 0 >"$tmp/push-$proto.table" 2>"$tmp/push-$proto.log"
  kill "$spans_pid" 2>/dev/null || true
  # How long the queue takes to drain once the load stopped (up to 10 minutes).
  t0="$(date +%s.%N)"
  for _ in $(seq 1 6000); do
    [ "$(metric "$up" spanprof_forward_queued_records "")" = 0 ] && break
    sleep 0.1
  done
  t1="$(date +%s.%N)"
  left="$(metric "$up" spanprof_forward_queued_records "")"
  kill "$sampler" 2>/dev/null || true
  accepted="$(metric "$up" spanprof_received_profiles_total "")"
  stored_down="$(metric "$down" spanprof_received_profiles_total "")"
  # The window: from the first sample with profiles accepted to the last that saw more.
  line="$(awk -v drain="$(echo "$t1 - $t0" | bc)" -v left="$left" -v p="$proto" '
    { t[NR] = $1; a[NR] = $2; f[NR] = $3; q[NR] = $4 }
    END {
      for (i = 1; i <= NR && a[i] == 0; i++) {}
      s = i; e = s
      for (i = s; i <= NR; i++) if (a[i] > a[e]) e = i
      dt = t[e] - t[s]
      if (dt <= 0) { print p " no window"; exit }
      ra = (a[e] - a[s]) / dt; rf = (f[e] - f[s]) / dt; g = (q[e] - q[s]) / dt
      printf "%-6s %12.0f %12.0f %8.2f %14.1f %10d %12.1f %s\n", p, ra, rf, rf / ra, g, q[e], drain, (left == 0 ? "" : "(" left " left)")
    }' "$tmp/samples-$proto")"
  report+="$line"$'\n'
  echo "bench: $proto: accepted $accepted profiles, downstream received $stored_down" >&2
  kill "$up_pid" "$down_pid" 2>/dev/null || true
  wait "$up_pid" "$down_pid" 2>/dev/null || true
done

echo
echo "== one forwarder vs its server's ingest: $clients clients for $seconds s + $spans_per_s trace requests/s, A on core 0, B and load on core 1"
printf "%-6s %12s %12s %8s %14s %10s %12s\n" proto "accepted/s" "forwarded/s" "fwd/acc" "queue grows/s" "queued" "drain s"
printf "%s" "$report"
