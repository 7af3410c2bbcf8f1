#!/usr/bin/env bash
# End-to-end bench: `spanprof convert` of a large JFR recording (a real JVM, 60 s of
# testprograms/javaapp/Burn under -XX:StartFlightRecording with profile.jfc and TLAB events)
# into linked OTLP (every kind of sample in one request), against the JDK's own reader,
# `jfr print --json` of the same file's sample events, in the same run on the same machine.
#
#   bench/jfr-convert.sh [RUNS] [SECONDS]     (default 5 runs of each, interleaved; 60 s)
#
# The recording is made once into bench/out/jfr/ and reused by later runs.
# Prints median wall time and peak RSS of each reader and the speed ratio.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
runs="${1:-5}"
seconds="${2:-60}"
out="$root/bench/out/jfr"
mkdir -p "$out"

for tool in javac java jfr; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is missing: apt-get install openjdk-17-jdk-headless (or run .ci/setup)" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "bench: /usr/bin/time is missing: apt-get install time" >&2; exit 1; }

echo "bench: building spanprof (release)"
cargo build --release -q -p spanprof
spanprof="$root/target/release/spanprof"

recording="$out/burn-${seconds}s.jfr"
if [ ! -s "$recording" ]; then
  echo "bench: recording Burn for ${seconds} s"
  javac -d "$out" testprograms/javaapp/Burn.java
  java "-XX:StartFlightRecording=filename=$recording,settings=profile,jdk.ObjectAllocationInNewTLAB#enabled=true,jdk.JavaMonitorEnter#threshold=1ms" \
    -cp "$out" Burn "$seconds" >"$out/burn.log" 2>&1
fi
events=jdk.ExecutionSample,jdk.NativeMethodSample,jdk.ObjectAllocationInNewTLAB,jdk.ObjectAllocationOutsideTLAB,jdk.ObjectAllocationSample,jdk.JavaMonitorEnter,jdk.ThreadPark
samples=$(jfr summary "$recording" | awk -v ev="$events" 'BEGIN { n = split(ev, e, ","); for (i = 1; i <= n; i++) want[e[i]] = 1 } ($1 in want) { s += $2 } END { print s }')
echo "bench: $(du -h "$recording" | cut -f1) recording, $samples sample events; $("$spanprof" inspect "$recording" 2>/dev/null | sed -n 's/^read //p')"

# One timed run: prints "seconds max_rss_kib" (wall time to the millisecond).
timed() {
  local start end
  start=$(date +%s%N)
  /usr/bin/time -f '%M' -o "$out/time.txt" "$@" >/dev/null 2>"$out/stderr.txt" || { cat "$out/stderr.txt" >&2; exit 1; }
  end=$(date +%s%N)
  echo "$(awk -v ns=$((end - start)) 'BEGIN { printf "%.3f", ns / 1e9 }') $(cat "$out/time.txt")"
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

: >"$out/spanprof.txt"; : >"$out/jfrprint.txt"
for _ in $(seq "$runs"); do
  timed "$spanprof" convert "$recording" -o "$out/burn.otlp" >>"$out/spanprof.txt"
  timed jfr print --json --events "$events" "$recording" >>"$out/jfrprint.txt"
done

s_t=$(cut -d' ' -f1 "$out/spanprof.txt" | median); s_m=$(cut -d' ' -f2 "$out/spanprof.txt" | median)
j_t=$(cut -d' ' -f1 "$out/jfrprint.txt" | median); j_m=$(cut -d' ' -f2 "$out/jfrprint.txt" | median)
echo
printf '%-24s %10s %12s\n' reader "median s" "peak RSS MiB"
printf '%-24s %10s %12s\n' "spanprof convert" "$s_t" "$(( s_m / 1024 ))"
printf '%-24s %10s %12s\n' "jfr print --json" "$j_t" "$(( j_m / 1024 ))"
awk -v s="$s_t" -v j="$j_t" -v n="$runs" 'BEGIN { if (s > 0) printf "spanprof is %.1fx faster (same run, %d runs each)\n", j / s, n }'
awk -v s="$s_t" -v n="$samples" 'BEGIN { if (s > 0) printf "spanprof convert: %.0f sample events/s end to end (process start and OTLP output included)\n", n / s }'
