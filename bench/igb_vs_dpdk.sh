#!/bin/sh
# Packets per second between the lab's two igb (82576), 00:0a.0 -> 00:05.0, with 1, 2 and 4
# queues: vfab's igb driver (bench/igb_pps) against DPDK's igb PMD (testpmd, through
# scripts/lab.d/dpdk-pps.sh with DPDK_PPS_QUEUES) in one lab boot, runs interleaved; medians
# of received packets/s per queue count and thread mode, and the vfab/DPDK ratios.
#   bench/igb_vs_dpdk.sh [ROUNDS] [SECONDS] [BUILD_DIR] [QUEUES] [RING]   (3, 3, build/release, 1,2,4, 512)
# Exit status 1 when the lab or a run failed, 2 for a usage error. The raw lines are kept in
# $IGB_VS_DPDK_LOG when set (the whole console).
set -eu
rounds=${1:-3}
secs=${2:-3}
build=${3:-build/release}
queues=${4:-1,2,4}
ring=${5:-512}
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { echo "usage: $0 [ROUNDS 1..20] [SECONDS 1..60] [BUILD_DIR] [QUEUES e.g. 1,2,4] [RING 64..4096]" >&2; exit 2; }
case $rounds in ''|*[!0-9]*) usage ;; esac
case $secs in ''|*[!0-9]*) usage ;; esac
case $ring in 64|128|256|512|1024|2048|4096) ;; *) usage ;; esac
if [ "$rounds" -lt 1 ] || [ "$rounds" -gt 20 ] || [ "$secs" -lt 1 ] || [ "$secs" -gt 60 ]; then usage; fi
for n in $(echo "$queues" | tr ',' ' '); do case $n in 1|2|4|8) ;; *) usage ;; esac; done
pps=$build/bench/igb_pps
[ -x "$pps" ] || { echo "no $pps: cmake --build $build --target igb_pps" >&2; exit 1; }
log=${IGB_VS_DPDK_LOG:-$(mktemp)}
[ -n "${IGB_VS_DPDK_LOG:-}" ] || trap 'rm -f "$log"' EXIT
nq=$(echo "$queues" | tr ',' ' ' | wc -w)
# Per round and queue count: three igb_pps runs and one DPDK run (testpmd's start-up is slow under TCG).
"$root/scripts/lab" --dpdk --timeout $((120 + rounds * nq * (4 * secs + 60))) --extra "$pps" \
    run "$root/bench/lab/igb_vs_dpdk_guest.sh:$rounds $secs $queues $ring" >"$log" 2>&1 ||
    { tail -40 "$log" >&2; exit 1; }
grep -E '^(vfab|dpdk)-igb ' "$log" | tr -d '\r' | awk '
    function median(a, n,    i, j, t) {
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { print }
    {
        delete v
        for (f = 2; f <= NF; f++) { split($f, kv, "="); v[kv[1]] = kv[2] }
        key = sprintf("%s queues=%s%s", $1, v["queues"], ("threads" in v) ? " threads=" v["threads"] : "")
        if (!(key in n)) order[++keys] = key
        n[key]++; rx[key, n[key]] = v["rx_pps"]; tx[key, n[key]] = v["tx_pps"]
        if (("lost" in v) && v["lost"] > 0) { lost[key] += v["lost"]; sent[key] += v["tx_packets"] }
        if ($1 == "dpdk-igb") dpdk[v["queues"]] = key
        q[key] = v["queues"]
    }
    END {
        print ""
        for (k = 1; k <= keys; k++) {
            key = order[k]
            for (i = 1; i <= n[key]; i++) { r[i] = rx[key, i]; t[i] = tx[key, i] }
            mr[key] = median(r, n[key]); mt = median(t, n[key])
            extra = (key in lost) ? sprintf("  (lost %.1f%% of what it sent)", 100 * lost[key] / sent[key]) : ""
            printf "%-34s runs=%d median rx_pps=%.0f tx_pps=%.0f%s\n", key, n[key], mr[key], mt, extra
        }
        print ""
        for (k = 1; k <= keys; k++) {
            key = order[k]; d = dpdk[q[key]]
            if (key !~ /^vfab-/ || !(d in mr) || mr[d] <= 0) continue
            printf "ratio %s / %s (received pps, medians): %.2f\n", key, d, mr[key] / mr[d]
        }
    }'
