#!/usr/bin/env bash
# vfab's virtio-net driver over vhost-user (bench/vhost_user_bench) against DPDK's virtio_user
# PMD (bench/dpdk_virtio_user_bench), both talking to the same DPDK vhost back-end on this host
# (scripts/vhost-backend: dpdk-testpmd with net_vhost), runs interleaved; prints medians and
# the ratio vfab / DPDK. No VM, no NIC. Figures:
#   tx        Mpps the back-end received (testpmd rxonly) from the driver sending bursts
#   rx        Mpps the driver received from testpmd txonly, and the frames txonly made that
#             found no free buffer in the driver's receive ring (0: the rate is the back-end's)
#   pingpong  round-trip time of one frame at a time through testpmd macswap: median, p99
#   loop      Mpps of bursts sent and received back through testpmd io (both directions)
#   bench/vhost_vs_dpdk.sh [ROUNDS] [SECONDS] [BUILD_DIR] [RING] [BURST]
#                         (10, 1, build/release, packed, 32)
# The back-end is started once per mode; each round runs vfab, then DPDK. It and its
# hugepages are released on exit, however the script ends. Needs root and Debian's DPDK
# (exit 77 where the back-end cannot run). Two cores: testpmd forwards on CPU 1, the client
# polls on CPU 0 (VFAB_BENCH_CLIENT_CPU, VFAB_BENCH_BACKEND_LCORES to change).
set -euo pipefail
rounds=${1:-10}
secs=${2:-1}
build=${3:-build/release}
ring=${4:-packed}
burst=${5:-32}
usage() { echo "usage: $0 [ROUNDS] [SECONDS] [BUILD_DIR] [split|packed] [BURST]" >&2; exit 2; }
[[ $rounds =~ ^[0-9]+$ && $rounds -ge 1 && $secs =~ ^[0-9]+([.][0-9]+)?$ && $burst =~ ^[0-9]+$ ]] || usage
case $ring in split | packed) ;; *) usage ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
backend=$root/scripts/vhost-backend
vfab=$build/bench/vhost_user_bench
dpdk=$build/bench/dpdk_virtio_user_bench
for exe in "$vfab" "$dpdk"; do
    [[ -x $exe ]] || { echo "no $exe: cmake --build $build --target vhost_user_bench dpdk_virtio_user_bench (DPDK's needs libdpdk)" >&2; exit 1; }
done
"$backend" check >/dev/null || exit $?

CLIENT_CPU=${VFAB_BENCH_CLIENT_CPU:-0}
BACKEND_LCORES=${VFAB_BENCH_BACKEND_LCORES:-0,1}   # main lcore (reads commands) 0, forwarding 1

dir=$(mktemp -d /tmp/vfab-vhost-vs-dpdk.XXXXXX)
cleanup() { "$backend" stop --dir "$dir/be" >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
results=$dir/results

# --pages: testpmd's 64 MiB plus room for the client (DPDK's -m 64, vfab's DMA memory).
for mode in tx rx pingpong loop; do
    case $mode in
    tx) fwd=rxonly ;;
    rx) fwd=txonly ;;
    pingpong) fwd=macswap ;;
    loop) fwd=io ;;
    esac
    "$backend" start --dir "$dir/be" --socket "$dir/vhost.sock" --mode "$fwd" --pages 128 \
        --lcores "$BACKEND_LCORES" --owner $$ >/dev/null
    common=(--socket "$dir/vhost.sock" --mode "$mode" --ring "$ring" --burst "$burst" --seconds "$secs"
            --backend-stats "$backend stats --dir $dir/be")
    for ((i = 1; i <= rounds; i++)); do
        for who in vfab dpdk; do
            if [[ $who == vfab ]]; then
                cmd=(taskset -c "$CLIENT_CPU" "$vfab" "${common[@]}")
            else
                cmd=("$dpdk" "${common[@]}" --lcores "$CLIENT_CPU")
            fi
            if ! "${cmd[@]}" >"$dir/out" 2>"$dir/err"; then
                echo "$who $mode round $i failed:" >&2
                cat "$dir/out" "$dir/err" >&2
                exit 1
            fi
            grep -E '^(.* )?driver=' "$dir/out" >>"$results"
            grep -v -E 'No free 1048576 kB hugepages|use random|legacy socket' "$dir/err" >&2 || true
        done
    done
    "$backend" stop --dir "$dir/be" >/dev/null
done

echo "vhost-user, $ring rings, burst $burst: $rounds interleaved runs of $secs s per driver and mode; median (min-max)"
awk '
    function median(a, n,    i, j, t) {
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function add(key, v) { n[key]++; val[key, n[key]] = v; if (!(key in lo) || v < lo[key]) lo[key] = v; if (!(key in hi) || v > hi[key]) hi[key] = v }
    {
        delete f
        for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
        d = f["driver"]; m = f["mode"]
        if (m == "pingpong") {
            add(d SUBSEP "rtt median us", f["rtt_us_median"]); add(d SUBSEP "rtt p99 us", f["rtt_us_p99"])
            add(d SUBSEP "rtt p99.9 us", f["rtt_us_p999"]); add(d SUBSEP "rtt max us", f["rtt_us_max"])
        } else {
            add(d SUBSEP m " Mpps", f["mpps"])
        }
        if (m == "tx") loss[d] += f["loss"]
        if (m == "rx") { rxmiss[d] += f["backend_tx_missed"]; rxmade[d] += f["backend_tx_packets"] + f["backend_tx_missed"] }
    }
    END {
        split("tx Mpps|rx Mpps|rtt median us|rtt p99 us|rtt p99.9 us|rtt max us|loop Mpps", figs, "|")
        printf "%-15s %30s %30s %10s\n", "figure", "vfab", "dpdk", "vfab/dpdk"
        for (k = 1; k <= 7; k++) {
            fig = figs[k]
            for (w = 1; w <= 2; w++) {
                d = w == 1 ? "vfab" : "dpdk"; key = d SUBSEP fig
                for (i = 1; i <= n[key]; i++) a[i] = val[key, i]
                med[d] = n[key] ? median(a, n[key]) : 0
                cell[d] = sprintf("%.3f (%.3f-%.3f)", med[d], lo[key], hi[key])
            }
            ratio = med["dpdk"] > 0 ? sprintf("%.2f", med["vfab"] / med["dpdk"]) : "-"
            printf "%-15s %30s %30s %10s\n", fig, cell["vfab"], cell["dpdk"], ratio
        }
        printf "tx loss (sent - received by the back-end, all runs): vfab %d, dpdk %d\n", loss["vfab"], loss["dpdk"]
        # rx: what testpmd txonly made that found no buffer in the driver'"'"'s receive ring; 0 means
        # the driver kept up and the rate is the back-end'"'"'s own.
        printf "rx: frames the back-end had no receive buffer for, all runs: vfab %d of %d, dpdk %d of %d\n",
               rxmiss["vfab"], rxmade["vfab"], rxmiss["dpdk"], rxmade["dpdk"]
        print "Mpps and RTT: higher Mpps is better, lower RTT is better (a ratio < 1 for RTT favours vfab)"
    }' "$results"
