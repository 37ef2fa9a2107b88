#!/usr/bin/env bash
# Instructions per packet of the virtio-net fast path over vhost-user, vfab's driver against
# DPDK's virtio_user PMD, counted by callgrind the same way for both: mode loop (BURST frames
# out, the back-end — testpmd io — sends them back, poll until all came in), collecting only in
# the functions that call the driver (--toggle-collect='*counted_*': vfab's post_send,
# post_recv and poll; DPDK's tx_burst and rx_burst, mbuf allocation and freeing inside them
# included), counters zeroed once the connection is up. Empty polls depend on the back-end's
# timing, not on the driver: each line also gives the figure without them (an empty poll's
# cost is measured by 1000 polls with nothing in flight).
#   bench/vhost_callgrind.sh [BUILD_DIR] [RING] [BURST] [PACKETS]   (build/release, packed, 32, 20000)
# Needs root (scripts/vhost-backend), valgrind, DPDK. DPDK runs with --no-huge under valgrind
# (valgrind cannot map EAL's hugepage address space reservation).
set -euo pipefail
build=${1:-build/release}
ring=${2:-packed}
burst=${3:-32}
packets=${4:-20000}
root=$(cd "$(dirname "$0")/.." && pwd)
backend=$root/scripts/vhost-backend
vfab=$build/bench/vhost_user_bench
dpdk=$build/bench/dpdk_virtio_user_bench
case $ring in split | packed) ;; *) echo "usage: $0 [BUILD_DIR] [split|packed] [BURST] [PACKETS]" >&2; exit 2 ;; esac
[[ $burst =~ ^[0-9]+$ && $packets =~ ^[0-9]+$ ]] || { echo "usage: $0 [BUILD_DIR] [split|packed] [BURST] [PACKETS]" >&2; exit 2; }
for exe in "$vfab" "$dpdk"; do
    [[ -x $exe ]] || { echo "no $exe: cmake --build $build --target vhost_user_bench dpdk_virtio_user_bench (DPDK's needs libdpdk)" >&2; exit 1; }
done
command -v valgrind >/dev/null || { echo "valgrind is missing: scripts/setup installs it" >&2; exit 1; }
"$backend" check >/dev/null || exit $?

# Two cores: testpmd's forwarding lcore on CPU 1 (its main lcore, on CPU 0, only reads
# commands), the client on CPU 0.
CLIENT_CPU=${VFAB_BENCH_CLIENT_CPU:-0}
BACKEND_LCORES=${VFAB_BENCH_BACKEND_LCORES:-0,1}

dir=$(mktemp -d /tmp/vfab-vhost-cg.XXXXXX)
cleanup() { "$backend" stop --dir "$dir/be" >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
"$backend" start --dir "$dir/be" --socket "$dir/vhost.sock" --mode io --pages 128 --lcores "$BACKEND_LCORES" \
    --owner $$ >/dev/null

# measure NAME EXE ARGS...: runs EXE under callgrind, prints the line.
measure() {
    local name=$1 out=$dir/cg.$1
    shift
    taskset -c "$CLIENT_CPU" valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect='*counted_*' \
        "$@" --socket "$dir/vhost.sock" --mode loop --ring "$ring" --burst "$burst" --packets "$packets" \
        --settle-us 20 >"$dir/out.$name" 2>"$dir/log.$name" || { cat "$dir/out.$name" "$dir/log.$name" >&2; exit 1; }
    callgrind_annotate --inclusive=yes "$out" 2>/dev/null | awk -v name="$name" -v line="$(cat "$dir/out.$name")" '
        function kv(key,   i, n, f, p) {
            n = split(line, f, " ")
            for (i = 1; i <= n; i++) { split(f[i], p, "="); if (p[1] == key) return p[2] }
            return 0
        }
        /counted_/ {
            v = $1; gsub(",", "", v)
            if ($0 ~ /counted_idle_/) idle += v; else busy += v
        }
        END {
            pk = kv("received"); polls = kv("polls"); empty = kv("empty_polls"); idle_n = kv("idle_polls")
            if (pk == 0 || idle_n == 0) { print name ": no packets counted" > "/dev/stderr"; exit 1 }
            per_empty = idle / idle_n
            printf "%-5s %s burst %d: %d instructions for %d packets = %.0f instructions/packet " \
                   "(%d polls, %d empty; an empty poll %.0f; without them %.0f/packet)\n",
                   name, kv("ring"), kv("burst"), busy, pk, busy / pk, polls, empty, per_empty,
                   (busy - empty * per_empty) / pk
        }'
}
measure vfab "$vfab"
measure dpdk "$dpdk" --lcores "$CLIENT_CPU" --no-huge
