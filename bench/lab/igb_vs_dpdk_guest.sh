#!/bin/sh
# In the lab guest (bench/igb_vs_dpdk.sh boots it): vfab's igb driver and DPDK's igb PMD,
# 00:0a.0 -> 00:05.0 with 1, 2 and 4 queues, interleaved, ROUNDS times SECONDS each. Prints the
# tools' own lines.
#   igb_vs_dpdk_guest.sh [ROUNDS] [SECONDS] [QUEUES] [RING]   (3, 3, 1,2,4, 512)
# Per round and queue count N: igb_pps with a thread per queue (2N threads), DPDK (testpmd
# txonly --txq=N --txonly-multi-flow and rxonly --rxq=N --rss-udp, one polling lcore each),
# igb_pps with one sender and one receiver thread (as testpmd; N > 1 only: for N = 1 it is the
# first run again), igb_pps with one thread for everything. RING descriptors per queue, both.
rounds=${1:-3}
secs=${2:-3}
queues=$(echo "${3:-1,2,4}" | tr ',' ' ')
ring=${4:-512}
bin=$(dirname "$0")
case $rounds$secs$ring in *[!0-9]*) echo "usage: $0 [ROUNDS] [SECONDS] [QUEUES] [RING]" >&2; exit 2 ;; esac

# Each testpmd takes tens of MiB of hugepages (--in-memory gives them back at exit), igb_pps a
# few more; the guest reserves 64 of 2 MiB. Less than half of them free means something kept
# its share, and the next run would fail or measure something else.
hugepages_ok() {
    free=$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo)
    [ "${free:-0}" -ge 32 ] && return 0
    echo "igb_vs_dpdk: only ${free:-0} free hugepages ($1)" >&2
    return 1
}
hugepages_ok "at start" || exit 1
i=0
while [ "$i" -lt "$rounds" ]; do
    for n in $queues; do
        "$bin/igb_pps" --queues "$n" --threads per-queue --seconds "$secs" --ring "$ring" || exit 1
        DPDK_PPS_TX=0000:00:0a.0 DPDK_PPS_RX=0000:00:05.0 DPDK_PPS_QUEUES=$n DPDK_PPS_NAME=dpdk-igb \
            DPDK_PPS_TESTPMD="--rxd=$ring --txd=$ring" "$bin/dpdk-pps" "$secs" || exit 1
        hugepages_ok "after DPDK, $n queues" || exit 1
        if [ "$n" -gt 1 ]; then
            "$bin/igb_pps" --queues "$n" --threads 2 --seconds "$secs" --ring "$ring" || exit 1
        fi
        "$bin/igb_pps" --queues "$n" --threads 1 --seconds "$secs" --ring "$ring" || exit 1
    done
    i=$((i + 1))
done
