#!/bin/sh
# Instructions per packet of vfab's e1000e fast path (post_recv + post_send + poll of both
# completions), counted by callgrind in the driver_* functions of e1000e_fastpath only.
#   bench/e1000e_callgrind.sh [BUILD_DIR]     (default build/release)
set -eu
build=${1:-build/release}
bin=$build/bench/e1000e_fastpath
[ -x "$bin" ] || { echo "no $bin: cmake --build --preset release --target e1000e_fastpath" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is missing: scripts/setup installs it" >&2; exit 1; }
frames=20000
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for batch in 1 8 32; do
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$batch" --toggle-collect='*driver_post*' \
        --toggle-collect='*driver_poll*' "$bin" "$batch" "$frames" >/dev/null 2>"$tmp/log.$batch" ||
        { cat "$tmp/log.$batch" >&2; exit 1; }
    ir=$(callgrind_annotate "$tmp/cg.$batch" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }')
    echo "batch $batch: $ir instructions for $frames packets = $(( ir / frames )) instructions/packet (rx + tx + completions)"
done
