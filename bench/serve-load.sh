#!/usr/bin/env bash
# End-to-end load bench of `spanprof serve` on one core, with its load generator on another:
#
#   bench/serve-load.sh [--seconds N] [--clients C] [--profiles P] [--paced-seconds P2] [--targets K] [--scrape-seconds T] [--perf FILE] [--tls]
#
# (a) Push: C closed-loop clients (half pyroscope-go multipart to /ingest, half OTLP protobuf to
#     /v1development/profiles) send P distinct profiles made from testdata/go/cpu-10s.pb.gz
#     (598 samples, fresh span/trace ids each) for N seconds. Peers in the same run: the same
#     clients on GET /health, and in-process decode + link of the same profiles. Then the
#     same clients paced (on a schedule, latency counted from when a request was due) at
#     50 % and 80 % of the rate just measured, for P2 seconds each: latency below saturation.
#     Then a peer for those: the in-process decode + link on core 0 alone, CPU per profile back
#     to back and with the core idle 1 ms after each (`load idle-cost`). On a virtual machine
#     the same work costs more after idle gaps, as a paced server's CPU per profile does.
#     --tls: then the same push phase again against a server with TLS on (a certificate of a
#     private CA made with openssl here; the clients keep their connections, as over TCP), and
#     its figures beside the plain ones: the TLS / plain ratio of the same run.
# (b) Scrape: a second server scrapes K fake Go targets (cpu 15 s windows, heap, goroutine)
#     for T seconds; its CPU time per target per second, as % of a core.
# Server CPU per profile is printed for each phase, with core 0's idle share and the share the
# hypervisor stole (steal time in /proc/stat): on a shared virtual machine the server can lose a
# third of its core to neighbours, which lowers profiles/s without showing in its CPU figures.
# --perf FILE records the server (perf record $PERF_FLAGS, default -g) during (a);
# KEEP_LOG=FILE keeps the push server's log; SPANPROF_BIN=FILE runs that server binary instead
# of this tree's (A/B against another build, with the same load generator). Where the server's CPU per profile goes, stage
# by stage on one thread: target/release/examples/load stages [--only STAGE] [--repeat R].
# Defaults (20 s, 32 clients, 16384 profiles, 2 x 10 s paced, 20 targets, 60 s) finish in about 3 minutes
# after the build. Server on core 0 (taskset -c 0), load generator on core 1.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

seconds=20 clients=32 profiles=16384 perf="" targets=20 scrape_seconds=60 paced_seconds=10 tls=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --profiles) profiles="$2"; shift 2 ;;
    --targets) targets="$2"; shift 2 ;;
    --paced-seconds) paced_seconds="$2"; shift 2 ;;
    --scrape-seconds) scrape_seconds="$2"; shift 2 ;;
    --perf) perf="$2"; shift 2 ;;
    --tls) tls=1; shift ;;
    *) echo "usage: $0 [--seconds N] [--clients C] [--profiles P] [--paced-seconds P2] [--targets K] [--scrape-seconds T] [--perf FILE] [--tls]" >&2; exit 2 ;;
  esac
done

echo "bench: building spanprof and the load example (release)"
# --example alone would skip the binary; name both.
cargo build --release -q -p spanprof -p spanprof-server --bin spanprof --example load
bin="${SPANPROF_BIN:-$root/target/release/spanprof}"
load="$root/target/release/examples/load"

tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP_LOG:-}" ] && cp "$tmp/push.log" "$KEEP_LOG"; rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ticks="$(getconf CLK_TCK)"
# utime + stime of a process, seconds.
cpu_s() { awk -v t="$ticks" '{ sub(/^.*\) /, ""); print ($12 + $13) / t }' "/proc/$1/stat"; }
hwm_mb() { awk '/^VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }

# Starts a server pinned to core 0 with extra flags; sets $server_pid and $server_addr.
start_server() {
  local name="$1"; shift
  local port; port="$(free_port)"
  taskset -c 0 "$bin" serve --data "$tmp/$name-data" --http-addr "127.0.0.1:$port" \
    --otlp-http-addr off --otlp-grpc-addr off "$@" 2>"$tmp/$name.log" &
  server_pid=$!
  pids+=("$server_pid")
  for _ in $(seq 1 200); do
    if grep -q "spanprof serving on http" "$tmp/$name.log"; then
      server_addr="$(sed -n 's/.*spanprof serving on https\{0,1\}:\/\///p' "$tmp/$name.log" | head -1)"
      return 0
    fi
    kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/$name.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "bench: $name server did not start" >&2; cat "$tmp/$name.log" >&2; exit 1
}

stop_server() {
  kill -TERM "$1"
  wait "$1" || true
}

# (a) push
# PUSH_FLAGS: extra server flags for (a), e.g. "--config FILE".
# shellcheck disable=SC2086
start_server push ${PUSH_FLAGS:-}
if [ -n "$perf" ]; then
  # Starts recording now; the pool encoding and peers come first, so the push phase dominates.
  perf record ${PERF_FLAGS:--g} -o "$perf" -p "$server_pid" 2>/dev/null &
  perf_pid=$!
fi
taskset -c 1 "$load" push --url "http://$server_addr" --seconds "$seconds" --clients "$clients" \
  --profiles "$profiles" --paced-seconds "$paced_seconds" --server-pid "$server_pid" \
  --server-core 0 --summary "$tmp/summary" >"$tmp/push.table"
if [ -n "$perf" ]; then kill -INT "$perf_pid"; wait "$perf_pid" || true; fi
push_hwm="$(hwm_mb "$server_pid")"
stop_server "$server_pid"
# shellcheck disable=SC1091
. "$tmp/summary"

# (a') push over TLS: the same clients and profiles, against a server with TLS on.
if [ "$tls" = 1 ]; then
  (
    cd "$tmp"
    openssl req -x509 -days 2 -subj "/CN=bench CA" -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
      -nodes -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -subj "/CN=127.0.0.1" -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout server.key -out server.csr 2>/dev/null
    echo "subjectAltName=IP:127.0.0.1" >server.ext
    openssl x509 -req -days 2 -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
      -extfile server.ext -out server.pem 2>/dev/null
  )
  # shellcheck disable=SC2086
  start_server push-tls --tls-cert "$tmp/server.pem" --tls-key "$tmp/server.key" ${PUSH_FLAGS:-}
  taskset -c 1 "$load" push --url "https://$server_addr" --ca "$tmp/ca.pem" --seconds "$seconds" \
    --clients "$clients" --profiles "$profiles" --paced-seconds "$paced_seconds" \
    --server-pid "$server_pid" --server-core 0 --summary "$tmp/summary-tls" >"$tmp/push-tls.table"
  tls_hwm="$(hwm_mb "$server_pid")"
  stop_server "$server_pid"
fi

# What an idle gap costs this machine, on the server's core with nothing else on it: the
# paced phases' CPU per profile is to be read against it.
taskset -c 0 "$load" idle-cost --seconds 3 >"$tmp/idle"
idle_busy_ms="$(sed -n 's/^idle_busy_ms=//p' "$tmp/idle")"
idle_gapped_ms="$(sed -n 's/^idle_gapped_ms=//p' "$tmp/idle")"

# (b) scrape
taskset -c 1 "$load" targets --port-file "$tmp/targets.port" &
targets_pid=$!
pids+=("$targets_pid")
for _ in $(seq 1 100); do [ -s "$tmp/targets.port" ] && break; sleep 0.1; done
tport="$(cat "$tmp/targets.port")"
scrape_args=()
for i in $(seq 1 "$targets"); do scrape_args+=(--scrape "t$i=http://127.0.0.1:$tport"); done
start_server scrape --scrape-interval 15s "${scrape_args[@]}"
echo "bench: scraping $targets targets every 15 s for $scrape_seconds s ..." >&2
s0="$(cpu_s "$server_pid")"
sleep "$scrape_seconds"
s1="$(cpu_s "$server_pid")"
scrape_hwm="$(hwm_mb "$server_pid")"
scrapes="$(curl -s "http://$server_addr/metrics" | awk '/^spanprof_scrapes_total/ { n += $NF } END { print n + 0 }')"
scrape_errors="$(curl -s "http://$server_addr/metrics" | awk '/^spanprof_scrape_errors_total/ { n += $NF } END { print n + 0 }')"
stop_server "$server_pid"
kill "$targets_pid" 2>/dev/null || true

echo
echo "== push: $clients clients for $seconds s, server on 1 core (taskset -c 0), $profiles distinct profiles"
cat "$tmp/push.table"
echo
awk -v rate="$profiles_per_s" -v p99="$p99_ms" -v hwm="$push_hwm" -v cpu="$server_cpu_s" -v elapsed="$elapsed_s" \
    -v ok="$ok" -v rej="$rejected_429" -v secs="$seconds" \
    -v sc0="$s0" -v sc1="$s1" -v k="$targets" -v t="$scrape_seconds" -v shwm="$scrape_hwm" \
    -v scrapes="$scrapes" -v serr="$scrape_errors" \
    -v idle="$core_idle_pct" -v stolen="$core_stolen_pct" \
    -v o50="${paced50_offered_per_s:-0}" -v q50="${paced50_p99_ms:-nan}" \
    -v o80="${paced80_offered_per_s:-0}" -v q80="${paced80_p99_ms:-nan}" \
    -v ib="$idle_busy_ms" -v ig="$idle_gapped_ms" 'BEGIN {
  printf "%-44s %14s %14s %s\n", "figure", "measured", "target", "met"
  printf "%-44s %14.0f %14s %s\n", "sustained profiles/s (both routes)", rate, ">= 2000", (rate >= 2000 ? "yes" : "NO")
  printf "%-44s %14.2f %14s %s\n", "p99 acknowledgement latency, ms", p99, "<= 50", (p99 <= 50 ? "yes" : "NO")
  printf "%-44s %14.1f %14s %s\n", "server peak RSS (VmHWM), MB", hwm, "<= 300", (hwm <= 300 ? "yes" : "NO")
  printf "%-44s %14.0f %14s\n", "429 answers (backpressure)", rej, "-"
  printf "%-44s %14.1f %14s\n", "server CPU during push, % of a core", cpu * 100 / elapsed, "-"
  printf "%-44s %14s %14s\n", "core 0 during push: idle / stolen by the VM, %", sprintf("%.0f / %.0f", idle, stolen), "-"
  if (ok > 0) printf "%-44s %14.3f %14s\n", "server CPU per accepted profile, ms", cpu * 1000 / ok, "<= 0.5 (2000/s)"
  printf "%-44s %14.2f %14s\n", "p99 latency paced at 50 % (" int(o50) "/s), ms", q50, "-"
  printf "%-44s %14.2f %14s\n", "p99 latency paced at 80 % (" int(o80) "/s), ms", q80, "-"
  printf "%-44s %14s %14s\n", "peer: in-process CPU ms/profile, busy / idling", sprintf("%.3f / %.3f", ib, ig), sprintf("%+.0f %%", (ig / ib - 1) * 100)
  per = (sc1 - sc0) / (k * t) * 100
  printf "%-44s %14.4f %14s %s\n", "scrape: server CPU per target, % of a core", per, "<= 0.05", (per <= 0.05 ? "yes" : "NO")
  printf "%-44s %14s %14s\n", "scrape: scrapes ok / errors in window", scrapes " / " serr, "-"
  printf "%-44s %14.1f %14s\n", "scrape: server peak RSS, MB", shwm, "-"
}'
if [ "$tls" = 1 ]; then
  echo
  echo "== push over TLS (TLS 1.3, kept-alive connections), same clients and profiles, same run"
  cat "$tmp/push-tls.table"
  echo
  # The TLS run's figures, read in a subshell so that the plain run's stay.
  tls_fig() { (. "$tmp/summary-tls"; eval "echo \$$1"); }
  awk -v r0="$profiles_per_s" -v r1="$(tls_fig profiles_per_s)" \
      -v q0="$p99_ms" -v q1="$(tls_fig p99_ms)" \
      -v c0="$server_cpu_s" -v k0="$ok" -v c1="$(tls_fig server_cpu_s)" -v k1="$(tls_fig ok)" \
      -v h0="$health_per_s" -v h1="$(tls_fig health_per_s)" \
      -v m0="$push_hwm" -v m1="$tls_hwm" 'BEGIN {
    printf "%-44s %14s %14s %10s\n", "figure", "plain", "TLS", "TLS/plain"
    printf "%-44s %14.0f %14.0f %10.2f\n", "sustained profiles/s (both routes)", r0, r1, r1 / r0
    printf "%-44s %14.2f %14.2f %10.2f\n", "p99 acknowledgement latency, ms", q0, q1, q1 / q0
    if (k0 > 0 && k1 > 0) printf "%-44s %14.3f %14.3f %10.2f\n", "server CPU per accepted profile, ms", c0 * 1000 / k0, c1 * 1000 / k1, (c1 / k1) / (c0 / k0)
    printf "%-44s %14.0f %14.0f %10.2f\n", "GET /health floor, req/s", h0, h1, h1 / h0
    printf "%-44s %14.1f %14.1f %10.2f\n", "server peak RSS (VmHWM), MB", m0, m1, m1 / m0
  }'
fi
