#!/usr/bin/env bash
# Overhead of spanprof-agent: throughput of the Rust test program (testprograms/rustapp, release,
# frame pointers) with the sampler at 100 Hz against the same program without it, in one run,
# runs interleaved (none, agent, none, agent, ...), each a fixed amount of CPU work.
#
#   bench/agent-overhead.sh [RUNS] [HZ]      (default 5 runs of each, 100 Hz)
#
# Both modes export their spans over OTLP to a `spanprof serve` started here (the agent's
# profiles too); the ratio printed is median(agent requests/s) / median(none requests/s).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
runs="${1:-5}"
hz="${2:-100}"
out="$root/bench/out/agent"
mkdir -p "$out"

echo "bench: building spanprof and testprograms/rustapp (release, frame pointers)"
cargo build -q -p spanprof
(cd testprograms/rustapp && CARGO_TARGET_DIR="$root/target/testprograms" \
  RUSTFLAGS="-C force-frame-pointers=yes" cargo build -q --release)
app="$root/target/testprograms/release/rustapp"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
otlp="127.0.0.1:$(port)"
rm -rf "$out/data"
"$root/target/debug/spanprof" serve --data "$out/data" --http-addr "127.0.0.1:0" \
  --otlp-http-addr "$otlp" --otlp-grpc-addr off >"$out/serve.log" 2>&1 &
serve=$!
trap 'kill "$serve" 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q 'spanprof serving' "$out/serve.log" && break; sleep 0.1; done

run() { # MODE -> requests/s
  SPANPROF_URL="http://$otlp" RUSTAPP_PROFILER="$1" RUSTAPP_HZ="$hz" RUSTAPP_EXPORT_MS=10000 \
    RUSTAPP_REQUESTS=96 RUSTAPP_CONCURRENCY=16 RUSTAPP_CHUNKS=20 RUSTAPP_CHUNK_ROUNDS=40 \
    RUSTAPP_WORKERS=2 "$app" | tail -1 | tee -a "$out/runs-$1.jsonl" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["requests_per_s"])'
}
: >"$out/runs-none.jsonl"
: >"$out/runs-agent.jsonl"
none=()
agent=()
for i in $(seq "$runs"); do
  none+=("$(run none)")
  agent+=("$(run agent)")
  echo "bench: run $i: none ${none[-1]} req/s, agent ${agent[-1]} req/s"
done
python3 - "${none[*]}" "${agent[*]}" "$hz" <<'EOF'
import statistics, sys
none = [float(x) for x in sys.argv[1].split()]
agent = [float(x) for x in sys.argv[2].split()]
n, a = statistics.median(none), statistics.median(agent)
print(f"bench: median requests/s: none {n:.2f}, agent at {sys.argv[3]} Hz {a:.2f}")
print(f"bench: throughput ratio agent/none = {a / n:.3f} ({(1 - a / n) * 100:+.1f} % overhead)")
EOF
