#!/bin/sh
# Packets per second NIC0 -> NIC1 in the lab: vfab's e1000e driver (bench/e1000e_pps, one and
# two threads) against DPDK's e1000 PMD (dpdk-testpmd txonly/rxonly, scripts/lab.d/dpdk-pps.sh)
# in the same boot, runs interleaved; medians and the vfab/DPDK ratio of received packets/s.
#   bench/e1000e_vs_dpdk.sh [ROUNDS] [SECONDS] [BUILD_DIR]    (5, 3, build/release)
set -eu
rounds=${1:-5}
secs=${2:-3}
build=${3:-build/release}
root=$(cd "$(dirname "$0")/.." && pwd)
pps=$build/bench/e1000e_pps
[ -x "$pps" ] || { echo "no $pps: cmake --build --preset release --target e1000e_pps" >&2; exit 1; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$root/scripts/lab" --dpdk --timeout $((60 + rounds * secs * 3 * 4)) --extra "$pps" \
    run "$root/bench/lab/e1000e_vs_dpdk_guest.sh:$rounds $secs" >"$log" 2>&1 ||
    { tail -40 "$log" >&2; exit 1; }
grep -E '^(vfab-e1000e|dpdk-e1000) ' "$log" | tr -d '\r' | awk '
    function median(a, n,    i, j, t) {
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    {
        for (f = 2; f <= NF; f++) { split($f, kv, "="); v[kv[1]] = kv[2] }
        key = $1 (($1 == "vfab-e1000e") ? " threads=" v["threads"] : "")
        n[key]++; rx[key, n[key]] = v["rx_pps"]; tx[key, n[key]] = v["tx_pps"]
    }
    END {
        for (k in n) {
            for (i = 1; i <= n[k]; i++) { r[i] = rx[k, i]; t[i] = tx[k, i] }
            mr[k] = median(r, n[k]); mt[k] = median(t, n[k])
            printf "%-24s runs=%d median rx_pps=%.0f tx_pps=%.0f\n", k, n[k], mr[k], mt[k]
        }
        d = "dpdk-e1000"
        if (mr[d] > 0) {
            printf "ratio vfab/DPDK (received pps, medians): 2 threads %.2f, 1 thread %.2f\n",
                mr["vfab-e1000e threads=2"] / mr[d], mr["vfab-e1000e threads=1"] / mr[d]
        }
    }'
