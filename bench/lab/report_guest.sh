#!/bin/sh
# In the lab guest (bench/run boots it with --dpdk): every lab figure of bench/run in one boot.
# Each tool's JSON goes to the console between "@@json-begin NAME" and "@@json-end NAME rc=N"
# (bench/labreport.py reads them back); progress lines stream in between.
#   report_guest.sh SECONDS ROUNDS BATCHES DRIVERS COUNT DPDK [mmio]
#     BATCHES and DRIVERS comma-separated (1,2,4 / e1000e,virtio-net,igb); DPDK 1 or 0.
#     mmio: the packets-per-second runs only, each one's measured window marked for the QEMU
#     trace of the devices' registers that bench/run's second boot takes (lab_bench
#     --mmio-mark, DPDK_PPS_MMIO_MARK: run N is marked N).
secs=$1 rounds=$2 batches=$(echo "$3" | tr , ' ') drivers=$(echo "$4" | tr , ' ') count=$5 dpdk=$6 mmio=${7:-}
bin=$(dirname "$0")

json() {   # json NAME COMMAND...: COMMAND's stdout framed, its stderr (progress) live
    name=$1; shift
    "$@" >/tmp/out.json
    rc=$?
    echo "@@json-begin $name"
    cat /tmp/out.json
    echo "@@json-end $name rc=$rc"
}

mark=0 marked=""
# next_mark PREFIX: sets $marked to PREFIX and the next mark number when tracing, else to nothing.
next_mark() { marked=""; [ "$mmio" = mmio ] && marked="$1$mark" && mark=$((mark + 1)); }

round=1
while [ "$round" -le "$rounds" ]; do
    echo "== round $round of $rounds: packets per second against batch size"
    for drv in $drivers; do
        for b in $batches; do
            next_mark --mmio-mark=
            # shellcheck disable=SC2086
            json pps "$bin/lab_bench" pps --driver "$drv" --batch "$b" --seconds "$secs" --progress --json $marked
            if [ "$dpdk" = 1 ]; then
                # testpmd's --burst is its batch: packets per rte_eth_tx_burst / rx_burst call.
                case $drv in
                e1000e) env=""; tag="dpdk-e1000" ;;
                igb) env="DPDK_PPS_TX=0000:00:0a.0 DPDK_PPS_RX=0000:00:05.0"; tag="dpdk-igb" ;;
                *) env="DPDK_PPS_TX=0000:00:04.0 DPDK_PPS_RX=0000:00:06.0"; tag="dpdk-virtio" ;;
                esac
                next_mark DPDK_PPS_MMIO_MARK=
                # shellcheck disable=SC2086
                line=$(env $env $marked DPDK_PPS_TESTPMD="--burst=$b" "$bin/dpdk-pps" "$secs")
                rc=$?
                echo "$line"
                echo "@@json-begin dpdk-pps"
                echo "$line" | sed "s/^dpdk-e1000 /driver=$tag batch=$b rc=$rc /"
                echo "@@json-end dpdk-pps rc=$rc"
            fi
        done
    done
    round=$((round + 1))
done
[ "$mmio" = mmio ] && exit 0

# Busy-polling answerers, vfab's and DPDK's e1000 PMD (testpmd 5tswap on 00:03.0), in turn
# for ROUNDS rounds; vfab's pinger times both.
round=1
while [ "$round" -le "$rounds" ]; do
    echo "== ping-pong round trips: $count, e1000e 00:02.0 -> 00:03.0 -> back, round $round of $rounds"
    json rtt-vfab-poll "$bin/pingpong" --ping 0000:00:02.0 --pong 0000:00:03.0 --count "$count" --progress --json
    if [ "$dpdk" = 1 ]; then
        echo "== the same with DPDK's e1000 PMD answering on 00:03.0 (testpmd 5tswap)"
        json rtt-dpdk-pong "$bin/dpdk-pong.sh" "$bin/pingpong" --ping 0000:00:02.0 --peer-mac 52:54:00:00:00:02 \
            --count "$count" --progress --json
    fi
    round=$((round + 1))
done
echo "== ping-pong with both sides in interrupt mode"
json rtt-vfab-interrupt "$bin/pingpong" --ping 0000:00:02.0 --pong 0000:00:03.0 --count "$count" --progress --interrupt --json
for drv in $drivers; do
    echo "== interrupt wake-up against busy polling, $drv, $count frames each"
    json wakeup "$bin/lab_bench" wakeup --driver "$drv" --count "$count" --json
done
echo "== registering 256 MiB of malloc'ed memory through the IOMMU"
"$bin/mr_register_big" 256 | tee /tmp/mr.txt
