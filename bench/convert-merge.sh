#!/usr/bin/env bash
# End-to-end bench: `spanprof convert` merging 200 real Go CPU profiles into one pprof, against
# `go tool pprof -proto` merging the same files, in the same run on the same machine.
#
#   bench/convert-merge.sh [RUNS]      (default 5 runs of each, interleaved)
#
# The profiles are captured once from the Go test program (4 instances under their own load,
# 50 one-second CPU profiles each) into bench/out/cpu/ and reused by later runs.
# Prints median wall time and peak RSS of each tool and the speed ratio.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
runs="${1:-5}"
out="$root/bench/out"
mkdir -p "$out/cpu"

command -v go >/dev/null || { echo "bench: Go is missing: apt-get install golang-go (or run .ci/setup)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench: /usr/bin/time is missing: apt-get install time" >&2; exit 1; }

echo "bench: building spanprof (release) and the Go test program"
cargo build --release -q -p spanprof
(cd testprograms/goapp && go build -o "$out/goapp" .)
spanprof="$root/target/release/spanprof"

have=$(find "$out/cpu" -name '*.pb.gz' | wc -l)
if [ "$have" -lt 200 ]; then
  echo "bench: capturing 200 one-second CPU profiles (about a minute)"
  rm -f "$out"/cpu/*.pb.gz
  pids=()
  for i in 1 2 3 4; do
    "$out/goapp" -addr 127.0.0.1:0 -load 90s >"$out/goapp-$i.log" 2>&1 &
    pids+=($!)
  done
  trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
  captures=()
  for i in 1 2 3 4; do
    for _ in $(seq 50); do grep -q 'listening on' "$out/goapp-$i.log" && break; sleep 0.1; done
    url=$(sed -n 's/^listening on //p' "$out/goapp-$i.log")
    ( for n in $(seq -w 1 50); do
        curl -sf -o "$out/cpu/app$i-$n.pb.gz" "$url/debug/pprof/profile?seconds=1"
      done ) &
    captures+=($!)
  done
  wait "${captures[@]}"
  kill "${pids[@]}" 2>/dev/null || true
  trap - EXIT
fi
files=("$out"/cpu/*.pb.gz)
echo "bench: ${#files[@]} profiles, $(du -ch "${files[@]}" | tail -1 | cut -f1) gzipped, $("$spanprof" inspect "${files[@]}" 2>/dev/null | sed -n 's/^converted //p')"

# One timed run: prints "seconds max_rss_kib" (wall time to the millisecond).
timed() {
  local start end
  start=$(date +%s%N)
  /usr/bin/time -f '%M' -o "$out/time.txt" "$@" >/dev/null 2>"$out/stderr.txt" || { cat "$out/stderr.txt" >&2; exit 1; }
  end=$(date +%s%N)
  echo "$(awk -v ns=$((end - start)) 'BEGIN { printf "%.3f", ns / 1e9 }') $(cat "$out/time.txt")"
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

: >"$out/spanprof.txt"; : >"$out/gopprof.txt"
for r in $(seq "$runs"); do
  timed "$spanprof" convert "${files[@]}" -o "$out/merged-spanprof.pb.gz" >>"$out/spanprof.txt"
  timed go tool pprof -proto "${files[@]}" >>"$out/gopprof.txt"
done
# go tool pprof writes the merged profile to stdout; capture it once for the comparison.
go tool pprof -proto "${files[@]}" >"$out/merged-go.pb.gz" 2>/dev/null

s_t=$(cut -d' ' -f1 "$out/spanprof.txt" | median); s_m=$(cut -d' ' -f2 "$out/spanprof.txt" | median)
g_t=$(cut -d' ' -f1 "$out/gopprof.txt" | median); g_m=$(cut -d' ' -f2 "$out/gopprof.txt" | median)
total() { go tool pprof -top -sample_index=cpu "$1" 2>/dev/null | sed -n 's/.*of \(.*\) total.*/\1/p' | head -1; }
echo
printf '%-22s %10s %12s\n' tool "median s" "peak RSS MiB"
printf '%-22s %10s %12s\n' "spanprof convert" "$s_t" "$(( s_m / 1024 ))"
printf '%-22s %10s %12s\n' "go tool pprof -proto" "$g_t" "$(( g_m / 1024 ))"
awk -v s="$s_t" -v g="$g_t" -v n="$runs" 'BEGIN { if (s > 0) printf "spanprof is %.1fx faster (same run, %d runs each)\n", g / s, n }'
echo "CPU total of the merged profile: spanprof $(total "$out/merged-spanprof.pb.gz"), go tool pprof $(total "$out/merged-go.pb.gz")"
