#!/bin/sh
# Packets per second between the lab's two NICs of one kind, vfab's driver against DPDK's PMD
# in the same boot, runs interleaved; medians and the vfab/DPDK ratio of received packets/s.
#   bench/vs_dpdk.sh [e1000e|virtio-net] [ROUNDS] [SECONDS] [BUILD_DIR]   (e1000e, 5, 3, build/release)
#   e1000e:     bench/e1000e_pps (one and two threads) against the e1000 PMD, 02.0 -> 03.0
#   virtio-net: bench/virtio_net_pps against the virtio PMD, 04.0 -> 06.0
# DPDK's side is scripts/lab.d/dpdk-pps.sh (testpmd txonly on one port, rxonly on the other).
set -eu
driver=${1:-e1000e}
rounds=${2:-5}
secs=${3:-3}
build=${4:-build/release}
root=$(cd "$(dirname "$0")/.." && pwd)
case $driver in
e1000e) bin=e1000e_pps guest=e1000e_vs_dpdk_guest.sh ;;
virtio-net) bin=virtio_net_pps guest=virtio_vs_dpdk_guest.sh ;;
*) echo "usage: $0 [e1000e|virtio-net] [ROUNDS] [SECONDS] [BUILD_DIR]" >&2; exit 2 ;;
esac
pps=$build/bench/$bin
[ -x "$pps" ] || { echo "no $pps: cmake --build --preset release --target $bin" >&2; exit 1; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$root/scripts/lab" --dpdk --timeout $((60 + rounds * secs * 3 * 4)) --extra "$pps" \
    run "$root/bench/lab/$guest:$rounds $secs" >"$log" 2>&1 ||
    { tail -40 "$log" >&2; exit 1; }
grep -E '^(vfab|dpdk)-' "$log" | tr -d '\r' | awk '
    function median(a, n,    i, j, t) {
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    {
        delete v
        for (f = 2; f <= NF; f++) { split($f, kv, "="); v[kv[1]] = kv[2] }
        key = $1 (("threads" in v) ? " threads=" v["threads"] : "")
        n[key]++; rx[key, n[key]] = v["rx_pps"]; tx[key, n[key]] = v["tx_pps"]
        if ($1 ~ /^dpdk-/) dpdk = key
    }
    END {
        for (k in n) {
            for (i = 1; i <= n[k]; i++) { r[i] = rx[k, i]; t[i] = tx[k, i] }
            mr[k] = median(r, n[k]); mt[k] = median(t, n[k])
            printf "%-28s runs=%d median rx_pps=%.0f tx_pps=%.0f\n", k, n[k], mr[k], mt[k]
        }
        if (mr[dpdk] > 0)
            for (k in n) if (k != dpdk) printf "ratio %s / %s (received pps, medians): %.2f\n", k, dpdk, mr[k] / mr[dpdk]
    }'
