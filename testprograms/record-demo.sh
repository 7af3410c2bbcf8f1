#!/usr/bin/env bash
# Records the data `spanprof serve --demo` loads: the Go test program (testprograms/goapp)
# under its own load, its CPU profile taken in back-to-back windows and a heap profile
# at the end, exactly as /debug/pprof serves them, and every span it exported (OTLP JSON,
# one request per line). The server re-stamps all of it to the present when it loads it.
#
#   testprograms/record-demo.sh [WINDOWS] [SECONDS]   (default: 3 windows of 10 s)
#
# Writes crates/spanprof-server/demo/goapp/{cpu-N.pb.gz,heap.pb.gz,spans.jsonl.gz}.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
windows="${1:-3}"
seconds="${2:-10}"
out="$root/crates/spanprof-server/demo/goapp"
tmp="$(mktemp -d)"
trap 'kill "${app_pid:-}" 2>/dev/null || true; rm -rf "$tmp"' EXIT

command -v go >/dev/null || { echo "record-demo: needs Go (apt-get install golang-go)" >&2; exit 1; }
(cd "$root/testprograms/goapp" && go build -o "$tmp/goapp" .)

total=$((windows * seconds + 2))
OTEL_SERVICE_NAME=goapp "$tmp/goapp" -spans-file "$tmp/spans.jsonl" -load "${total}s" >"$tmp/stdout" &
app_pid=$!
for _ in $(seq 50); do
  grep -q '^listening on ' "$tmp/stdout" 2>/dev/null && break
  sleep 0.1
done
base="$(sed -n 's/^listening on //p' "$tmp/stdout")"
[ -n "$base" ] || { echo "record-demo: goapp did not start" >&2; exit 1; }
echo "record-demo: goapp at $base, $windows CPU windows of ${seconds}s"

rm -rf "$out"
mkdir -p "$out"
for i in $(seq 1 "$windows"); do
  curl -fsS "$base/debug/pprof/profile?seconds=$seconds" -o "$out/cpu-$i.pb.gz"
  echo "record-demo: window $i: $(stat -c %s "$out/cpu-$i.pb.gz") bytes"
done
curl -fsS "$base/debug/pprof/heap" -o "$out/heap.pb.gz"
kill "$app_pid"
wait "$app_pid" 2>/dev/null || true
gzip -9 -c "$tmp/spans.jsonl" >"$out/spans.jsonl.gz"
echo "record-demo: $(wc -l <"$tmp/spans.jsonl") span requests; wrote $out:"
ls -l "$out"
