#!/bin/sh
# The HPC stack on vfab against the same on the kernel's rxe, in ONE two-machine lab boot
# (scripts/lab --pair --hpc; docs/hpc.md): tests/lab/hpc_test's runs across the two machines —
# ucx_perftest (UCP tag, put, get, active messages), the project's MPI ping-pong under Open
# MPI and MPICH, and libfabric's fi_pingpong at 4 KiB (MSG and RDM over rxm on both; DGRAM and
# RDM over rxd on vfab) — vfab <-> vfab and rxe <-> rxe, then a table of both and the ratio. The figures are
# the tests' "figure:" lines; nothing there is timed against a limit.
#   bench/hpc_vs_rxe.sh [BUILD_DIR]                  (build/release)
# Needs the lab binaries built: cmake --build --preset release -j2 --target hpc_test lab-rsh
#   mpi_check_openmpi mpi_check_mpich vfab_ibverbs vfab_rdmacm
# The boot's console goes to BUILD_DIR/hpc_vs_rxe.log (the table is made from it again with
# HPC_VS_RXE_REPLAY=that.log).
set -eu
build=${1:-build/release}
root=$(cd "$(dirname "$0")/.." && pwd)
log=$build/hpc_vs_rxe.log
if [ -n "${HPC_VS_RXE_REPLAY:-}" ]; then
    log=$HPC_VS_RXE_REPLAY
else
    for b in tests/lab/hpc_test tests/lab/lab-rsh tests/lab/mpi_check_openmpi tests/lab/mpi_check_mpich \
             verbs/lib/libibverbs.so.1 verbs/lib/librdmacm.so.1 tools/vfab-run; do
        [ -e "$build/$b" ] || { echo "no $build/$b: build the lab binaries first (this script's header)" >&2; exit 1; }
    done
    extras=""
    for b in verbs/lib/libibverbs.so.1 verbs/lib/librdmacm.so.1 tools/vfab-run tests/lab/lab-rsh \
             tests/lab/mpi_check_openmpi tests/lab/mpi_check_mpich; do
        extras="$extras --extra $build/$b"
    done
    # shellcheck disable=SC2086
    "$root/scripts/lab" --kernel debian --pair --hpc --timeout 1500 --log "$log" $extras \
        run "$build/tests/lab/hpc_test:--gtest_filter=*AcrossThe*Machines*:*TheSameOnTheKernelsRxe*" > /dev/null \
        || echo "hpc_vs_rxe: the lab run failed (its console: $log); the table has what it measured" >&2
fi

# The lines read: "figure: ucx_perftest tag_bw size=65536 vfab two-machines ... latency_us=...
# bandwidth_MBps=..." and "figure: openmpi np=2 vfab pingpong size=65536 ... latency_us=...".
awk '
# The value of KEY= among the words of the line, or "".
function field(key,   i) { for (i = 1; i in w; i++) if (index(w[i], key "=") == 1) return substr(w[i], length(key) + 2); return "" }
function note(key, side, is_latency) {
    val[key, side] = is_latency ? field("latency_us") : field("bandwidth_MBps")
    unit[key] = is_latency ? "us" : "MB/s"
    if (!(key in order)) order[key] = ++n
}
/^figure: ucx_perftest .* two-machines / { split($0, w, " "); note("ucx " w[3] " " w[4], w[5], w[3] ~ /lat$/) }
/^figure: (openmpi|mpich) np=2 (vfab|rxe) pingpong size=(8|65536) / { split($0, w, " "); note(w[2] " ping-pong " w[6], w[4], w[6] == "size=8") }
# "figure: fi_pingpong verbs msg vfab two-machines size=4k 4k 50 =50 400k 0.13s 3.06 1338.21 0.00":
# after the size, fi_pingpong'"'"'s row (bytes, sent, acknowledged, total, time, MB/s, µs per transfer,
# Mxfers/s).
/^figure: fi_pingpong .* two-machines size=4k 4k / {
    split($0, w, " "); key = "fi_pingpong " w[3] " " w[4] " 4k"
    val[key, w[5]] = w[14]; unit[key] = "us"
    if (!(key in order)) order[key] = ++n
}
END {
    printf "%-40s %12s %12s %8s\n", "figure (two machines)", "vfab", "rxe", "vfab/rxe"
    for (k = 1; k <= n; k++) for (key in order) if (order[key] == k) {
        v = val[key, "vfab"]; r = val[key, "rxe"]
        ratio = (v != "" && r != "" && r + 0 > 0) ? sprintf("%.2f", v / r) : "-"
        printf "%-40s %12s %12s %8s\n", key " (" unit[key] ")", (v == "" ? "-" : v), (r == "" ? "-" : r), ratio
    }
}' "$log"
