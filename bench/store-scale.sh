#!/usr/bin/env bash
# End-to-end bench of the embedded store at scale, on a stream of distinct profiles made from
# the real Go CPU profile testdata/go/cpu-10s.pb.gz (fresh span and trace ids, shifted times):
#
#   bench/store-scale.sh [--samples N] [--spans M] [--batch B] [--instances I] [--keep] [--dir DIR]
#
# Defaults: 10M pprof samples (16,723 profiles), a pool of 1M distinct spans, 20 profiles per
# durable ingest call, 6 instances of one service each profiled every 10 s (one hour holds
# 1.29M samples). 30-80 s on 2 shared cores, under 1 GiB of RAM; the stores (about 600 MiB with
# the 25 % and 50 % copies) go to a temporary directory removed afterwards unless --keep.
#
# Prints, with targets next to the figures: (a) sustained durable ingest rate; (b) reopen time
# and flame graphs of 200 random spans, p50/p99; (c) the flame graph of one service over one
# hour, p50 of 10; (d) disk bytes against the gzipped pprof of 1,000 consecutive profiles;
# (e) peak RSS after ingest, reopen and queries, and RSS after reopening 25/50/100 % of it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

echo "bench: building the store_scale example (release)"
cargo build --release -q -p spanprof-store --example store_scale
exec "$root/target/release/examples/store_scale" "$@"
