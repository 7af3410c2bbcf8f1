#!/usr/bin/env bash
# Does one forwarder keep up with its server's own ingest? One run, same load:
#
#   bench/forward-drain.sh [--seconds N] [--clients C] [--spans-per-s R] [--phases "full grpc http collector"]
#   (phases: full grpc http push collector)
#
# Server A (full server: store and one forwarder, on core 0) takes C closed-loop clients pushing
# distinct Go CPU profiles (the `load push` example) plus R OTLP trace requests a second (a
# mixed queue: profiles and traces interleaved, as a real collector's), for N seconds. Its
# forwarder sends everything to server B (a second spanprof, on core 1 with the load) over
# OTLP gRPC (phase grpc), then over OTLP/HTTP (phase http), or over Pyroscope's push.v1
# (phase push, not in the defaults: profiles only, so its queue holds no traces, each export
# converted to pprof per series). Two peers in the same run: A
# with its store and no forwarder (full), and A as a collector (no store, a transform stage
# of four rules, forwarding over gRPC: collector). Printed per phase, from A's /metrics
# sampled every second over the window profiles came in: profiles/s accepted (the server's
# own ingest rate), profiles/s forwarded (received by B), their ratio, the queue's growth
# in records/s, how long the queue took to drain after the load stopped, and profiles
# accepted per CPU second of A (per core), with its ratio to the full server's.
# SPANPROF_BIN=FILE runs A and B from that binary (A/B against another build; the collector
# phase needs a build with processors.transform).
# Defaults (15 s, 16 clients, 30 trace requests/s, four phases) take about 3 minutes after
# the build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

seconds=15 clients=16 spans_per_s=30 phases="full grpc http collector"
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --spans-per-s) spans_per_s="$2"; shift 2 ;;
    --phases) phases="$2"; shift 2 ;;
    *) echo "usage: $0 [--seconds N] [--clients C] [--spans-per-s R] [--phases \"full grpc http collector\"]" >&2; exit 2 ;;
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

ticks="$(getconf CLK_TCK)"
# utime + stime of a process, seconds.
cpu_s() { awk -v t="$ticks" '{ sub(/^.*\) /, ""); print ($12 + $13) / t }' "/proc/$1/stat"; }
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
  exec python3 - "$1" "$spans_per_s" <<'EOF'
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

# The collector's transform stage: four rules, each run on every profile.
cat >"$tmp/transform.yaml" <<'EOF'
processors:
  transform:
    - action: set_resource
      key: k8s.pod.name
      value: collector-0
    - action: rename_label
      from: thread_name
      to: thread
    - action: hash_label
      label: goroutine
    - action: drop_profiles
      selector: '{service_name="nothing-is-called-this"}'
EOF

report=""
full_per_cpu=""
for proto in $phases; do
  grpc_port="$(free_port)"
  start_server "down-$proto" 1 --otlp-grpc-addr "127.0.0.1:$grpc_port"
  down_pid=$server_pid down="$server_addr"
  case "$proto" in
    full) fwd=() ;;
    grpc) fwd=(--forward-otlp-grpc "down=http://127.0.0.1:$grpc_port") ;;
    http) fwd=(--forward-otlp-http "down=http://$down") ;;
    push)
      printf 'exporters:\n  - name: down\n    protocol: push\n    endpoint: http://%s\n' "$down" >"$tmp/push.yaml"
      fwd=(--config "$tmp/push.yaml") ;;
    collector) fwd=(--no-store --config "$tmp/transform.yaml" --forward-otlp-grpc "down=http://127.0.0.1:$grpc_port") ;;
    *) echo "bench: unknown phase $proto" >&2; exit 2 ;;
  esac
  start_server "up-$proto" 0 --otlp-grpc-addr off "${fwd[@]}"
  up_pid=$server_pid up="$server_addr"

  # Every second: time, A's accepted profiles, forwarded profile records and queued records,
  # A's CPU seconds, and the profiles B received (forwarded: a request of the Go CPU profile
  # holds two, one per sample type).
  (
    while true; do
      echo "$(date +%s.%N) $(metric "$up" spanprof_received_profiles_total "") \
$(metric "$up" spanprof_forwarded_records_total 'signal="profiles"') \
$(metric "$up" spanprof_forward_queued_records "") $(cpu_s "$up_pid") \
$(metric "$down" spanprof_received_profiles_total "")"
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
  # How long the queue takes to drain once the load stopped (up to 2 minutes; what is left
  # then is printed).
  t0="$(date +%s.%N)"
  for _ in $(seq 1 1200); do
    [ "$(metric "$up" spanprof_forward_queued_records "")" = 0 ] && break
    sleep 0.1
  done
  t1="$(date +%s.%N)"
  left="$(metric "$up" spanprof_forward_queued_records "")"
  kill "$sampler" 2>/dev/null || true
  accepted="$(metric "$up" spanprof_received_profiles_total "")"
  stored_down="$(metric "$down" spanprof_received_profiles_total "")"
  # The window: from the first sample with profiles accepted to the last that saw more.
  line="$(awk -v drain="$(echo "$t1 - $t0" | bc)" -v left="$left" -v p="$proto" -v full="$full_per_cpu" '
    { t[NR] = $1; a[NR] = $2; f[NR] = $6; q[NR] = $4; c[NR] = $5 }
    END {
      for (i = 1; i <= NR && a[i] == 0; i++) {}
      s = i; e = s
      for (i = s; i <= NR; i++) if (a[i] > a[e]) e = i
      dt = t[e] - t[s]
      if (dt <= 0) { print p " no window"; exit }
      ra = (a[e] - a[s]) / dt; rf = (f[e] - f[s]) / dt; g = (q[e] - q[s]) / dt
      cpu = c[e] - c[s]; per = (cpu > 0 ? (a[e] - a[s]) / cpu : 0)
      vs = (full > 0 ? sprintf("%.2f", per / full) : "-")
      if (p == "full") { rf = 0; drain = 0 }
      printf "%-10s %11.0f %12.0f %8.2f %14.1f %8d %8.1f %13.0f %8s %s\n", p, ra, rf, rf / ra, g, q[e], drain, per, vs, (left == 0 ? "" : "(" left " left)")
    }' "$tmp/samples-$proto")"
  report+="$line"$'\n'
  echo "bench: $line" >&2
  if [ "$proto" = full ]; then full_per_cpu="$(echo "$line" | awk '{ print $8 }')"; fi
  echo "bench: $proto: accepted $accepted profiles, downstream received $stored_down" >&2
  kill "$up_pid" "$down_pid" 2>/dev/null || true
  wait "$up_pid" "$down_pid" 2>/dev/null || true
done

echo
echo "== one forwarder vs its server's ingest: $clients clients for $seconds s + $spans_per_s trace requests/s, A on core 0, B and load on core 1"
printf "%-10s %11s %12s %8s %14s %8s %8s %13s %8s\n" phase "accepted/s" "forwarded/s" "fwd/acc" "queue grows/s" "queued" "drain s" "profiles/cpu-s" "vs full"
printf "%s" "$report"
