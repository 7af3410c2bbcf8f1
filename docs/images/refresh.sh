#!/usr/bin/env bash
# Retakes docs/images/span-flamegraph.png: the browser test (crates/spanprof/tests/it/ui.rs,
# python/ui_check.py, after `bash .ci/setup`) screenshots every view of `serve --demo` into
# target/tmp/ui-screens/; the span's flame graph in its trace is the one the README shows.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
cargo test -p spanprof --test it ui::
shot=(target/tmp/ui-screens/*-trace-flame.png)
if [ ! -f "${shot[0]}" ]; then
  echo "refresh: the UI test wrote no *-trace-flame.png under target/tmp/ui-screens/" >&2
  exit 1
fi
cp "${shot[0]}" docs/images/span-flamegraph.png
echo "refresh: docs/images/span-flamegraph.png ($(stat -c %s docs/images/span-flamegraph.png) bytes) from ${shot[0]}"
