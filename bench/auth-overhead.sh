#!/usr/bin/env bash
# What authentication and tenants cost `spanprof serve` under push load:
#
#   bench/auth-overhead.sh [--seconds N] [--clients C] [--rounds R]
#
# The same server binary, pinned to core 0, takes the push load of bench/serve-load.sh (half
# pyroscope-go multipart to /ingest, half OTLP protobuf, closed loop, load generator on core 1)
# in R rounds of three runs each, in turn: plain (no credentials, one tenant); credentials,
# one tenant (every profile carries tenant a's bearer token); credentials and two tenants
# (tokens of tenants a and b alternating, each tenant its own store and pipeline). Prints
# profiles/s of each run, the ratios to plain and the server's CPU µs per profile (less
# sensitive to other load than profiles/s), per round, and the median of the rounds' ratios (the
# machine's noise moves single runs by up to a fifth; the order rotates each round). Defaults
# (15 s, 32 clients, 3 rounds: one whole rotation) take about 3 minutes after the build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

seconds=15 clients=32 rounds=3
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    *) echo "usage: $0 [--seconds N] [--clients C] [--rounds R]" >&2; exit 2 ;;
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
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

token_a="bench-token-of-tenant-a-6c1f0e9b27d4"
token_b="bench-token-of-tenant-b-93a8d5e0c14f"
printf %s "$token_a" >"$tmp/a.token"
printf %s "$token_b" >"$tmp/b.token"
chmod 600 "$tmp"/*.token
cat >"$tmp/auth.yaml" <<YAML
auth:
  credentials:
    - {name: agents-a, scopes: [write], tenant: a, token_file: $tmp/a.token}
    - {name: agents-b, scopes: [write], tenant: b, token_file: $tmp/b.token}
YAML

# run NAME TOKENS [server flags...]: one push run; prints its profiles/s.
run() {
  local name="$1" tokens="$2"; shift 2
  local port; port="$(free_port)"
  rm -rf "$tmp/$name-data"
  taskset -c 0 "$bin" serve --data "$tmp/$name-data" --http-addr "127.0.0.1:$port" \
    --otlp-http-addr off --otlp-grpc-addr off "$@" 2>"$tmp/$name.log" &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 1 200); do
    grep -q "spanprof serving on http://" "$tmp/$name.log" && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/$name.log" >&2; exit 1; }
    sleep 0.1
  done
  SPANPROF_LOAD_TOKENS="$tokens" taskset -c 1 "$load" push --url "http://127.0.0.1:$port" \
    --seconds "$seconds" --clients "$clients" --paced-seconds 0 --health-seconds 1 \
    --server-pid "$pid" --server-core 0 --summary "$tmp/$name.summary" >/dev/null 2>"$tmp/$name.load"
  kill -TERM "$pid"; wait "$pid" || true
  local rate rejected ok cpu
  rate="$(sed -n 's/^profiles_per_s=//p' "$tmp/$name.summary")"
  rejected="$(sed -n 's/^rejected_429=//p' "$tmp/$name.summary")"
  ok="$(sed -n 's/^ok=//p' "$tmp/$name.summary")"
  cpu="$(sed -n 's/^server_cpu_s=//p' "$tmp/$name.summary")"
  if grep -q '401\|403' "$tmp/$name.load"; then
    echo "bench: $name: requests were refused:" >&2; grep '401\|403' "$tmp/$name.load" >&2; exit 1
  fi
  # The server's CPU per profile (µs): less sensitive than profiles/s to what else runs.
  echo "$rate $rejected $(echo "$cpu * 1000000 / $ok" | bc -l)"
}

echo "== push: $clients clients for $seconds s per run, server on 1 core, $rounds rounds"
echo "   (each round runs the three in a rotated order, so no setup always runs first)"
row() { printf "%-6s %10.0f %12.0f %12.0f %14.3f %14.3f %24s\n" "$@"; }
printf "%-6s %10s %12s %12s %14s %14s %24s\n" round "plain /s" "auth 1 /s" "auth 2 /s" "auth 1/plain" "auth 2/plain" "CPU µs/profile p/1/2"
ratio() { echo "$1 / $2" | bc -l; }
# median N...: the middle value (the mean of the two middle ones for an even count).
median() { printf "%s\n" "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratios_one=() ratios_two=() cpu_ratios_one=() cpu_ratios_two=()
for r in $(seq 1 "$rounds"); do
  declare -A rate=() cpu=()
  # Rotation: round 1 plain, one, two; round 2 one, two, plain; round 3 two, plain, one; ...
  order=(plain one two)
  for i in 0 1 2; do
    setup="${order[$(( (i + r - 1) % 3 ))]}"
    case "$setup" in
      plain) read -r rate[plain] _ cpu[plain] < <(run "plain$r" "") ;;
      one) read -r rate[one] _ cpu[one] < <(run "one$r" "$token_a" --config "$tmp/auth.yaml") ;;
      two) read -r rate[two] _ cpu[two] < <(run "two$r" "$token_a,$token_b" --config "$tmp/auth.yaml") ;;
    esac
  done
  [ -d "$tmp/two$r-data/tenants/a" ] && [ -d "$tmp/two$r-data/tenants/b" ] \
    || { echo "bench: the tenants' stores are missing" >&2; exit 1; }
  row "$r" "${rate[plain]}" "${rate[one]}" "${rate[two]}" "$(ratio "${rate[one]}" "${rate[plain]}")" \
    "$(ratio "${rate[two]}" "${rate[plain]}")" \
    "$(printf "%.0f/%.0f/%.0f" "${cpu[plain]}" "${cpu[one]}" "${cpu[two]}")"
  ratios_one+=("$(ratio "${rate[one]}" "${rate[plain]}")")
  ratios_two+=("$(ratio "${rate[two]}" "${rate[plain]}")")
  cpu_ratios_one+=("$(ratio "${cpu[one]}" "${cpu[plain]}")")
  cpu_ratios_two+=("$(ratio "${cpu[two]}" "${cpu[plain]}")")
  unset rate cpu
done
printf "median of the rounds' ratios to plain: profiles/s auth 1 %.3f, auth 2 %.3f; CPU per profile auth 1 %.3f, auth 2 %.3f\n" \
  "$(median "${ratios_one[@]}")" "$(median "${ratios_two[@]}")" \
  "$(median "${cpu_ratios_one[@]}")" "$(median "${cpu_ratios_two[@]}")"
