#!/bin/sh
# In the lab guest (scripts/demo boots it): vfab's examples between the two wired e1000e ports,
# 0000:00:02.0 <-> 0000:00:03.0. A ping-pong latency run, a busy-polling throughput run and an
# interrupt-mode one, each with a progress line a second; then (where rdma-core's tools are in the
# guest: the debian kernel) perftest between vfab's drop-in libibverbs and the kernel's rxe, and
# rping between vfab's drop-in librdmacm and the kernel's rdma_cm. Their JSON results go to the console
# between "@@json-begin NAME" and "@@json-end NAME rc=N" lines, which scripts/demo turns into
# the report (bench/labreport.py).
#   demo.sh [SECONDS] [ROUND_TRIPS]      (5, 2000)
secs=${1:-5}
count=${2:-2000}
bin=$(dirname "$0")
nic0=0000:00:02.0 nic1=0000:00:03.0

# json NAME COMMAND...: runs COMMAND --json, its progress (stderr) live, its JSON framed.
json() {
    name=$1; shift
    "$@" --json >/tmp/"$name".json
    rc=$?
    echo "@@json-begin $name"
    cat /tmp/"$name".json
    echo "@@json-end $name rc=$rc"
}

echo "vfab demo in the lab guest ($(uname -r), IOMMU ${VFAB_LAB_IOMMU:-?}): two emulated Intel 82574L"
echo "wired to each other, driven from user space through VFIO by vfab's e1000e driver."
for d in $nic0 $nic1; do
    g=$(basename "$(readlink /sys/bus/pci/devices/"$d"/iommu_group)")
    echo "  $d  e1000e  driver $(basename "$(readlink /sys/bus/pci/devices/"$d"/driver)")  IOMMU group $g"
done
echo
echo "== ping-pong: $count round trips of a 64-byte UDP frame, $nic0 -> $nic1 -> back (busy-poll)"
json pingpong "$bin/pingpong" --ping $nic0 --pong $nic1 --count "$count" --progress
echo "== throughput: 60-byte UDP frames $nic0 -> $nic1 for $secs s, batches of 32 (busy-poll)"
json pktgen "$bin/pktgen" --tx $nic0 --rx $nic1 --seconds "$secs" --progress
isecs=$(( (secs + 1) / 2 ))
echo "== throughput in interrupt mode: the same for $isecs s, sleeping on the completion channels"
json pktgen-interrupt "$bin/pktgen" --tx $nic0 --rx $nic1 --seconds "$isecs" --progress --interrupt

# ---- RDMA: Debian's own ibverbs programs on vfab (docs/verbs.md) against the kernel's rxe -----
# vfab keeps 00:02.0 as vfab0 (10.77.0.1) through its drop-in libibverbs; 00:03.0 goes to the
# kernel's e1000e with rxe0 on it (10.77.0.2). perftest's lines are summed up as key=value.
if [ -x "$bin/vfab-run" ] && [ -x /usr/bin/ib_write_bw ]; then
    echo
    echo "== RDMA: ibv_devinfo on vfab's device, no kernel RDMA on its side"
    run="$bin/vfab-run --device $nic0=10.77.0.1 --"
    $run ibv_devinfo -d vfab0
    echo "== RDMA: lending $nic1 to the kernel's e1000e and soft-RoCE (rxe0, 10.77.0.2)"
    ip link set lo up
    echo "$nic1" > /sys/bus/pci/devices/$nic1/driver/unbind
    echo e1000e > /sys/bus/pci/devices/$nic1/driver_override
    modprobe e1000e && echo "$nic1" > /sys/bus/pci/drivers_probe
    ifc=$(ls /sys/bus/pci/devices/$nic1/net)
    /usr/sbin/ip addr add 10.77.0.2/24 dev "$ifc" && /usr/sbin/ip link set "$ifc" up
    for m in crc32_generic ib_core ib_uverbs udp_tunnel ip6_udp_tunnel rdma_rxe; do modprobe $m; done
    /usr/bin/rdma link add rxe0 type rxe netdev "$ifc"
    i=0; until grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
    # perftest NAME ARGS...: vfab0 serves, rxe0 is the client; the client's result line framed.
    perftest() {
        name=$1; shift
        echo "== RDMA: $name, vfab (server) <-> rxe (client): $*"
        $run "$@" -d vfab0 -x 0 -F >/tmp/"$name".server 2>&1 &
        spid=$!
        i=0; until grep -q ":4853 " /proc/net/tcp 2>/dev/null || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
        "$@" -d rxe0 -x 1 -F 127.0.0.1 >/tmp/"$name".client 2>&1
        rc=$?
        wait $spid || rc=1
        grep -A1 '#bytes' /tmp/"$name".client
        echo "@@json-begin $name"
        awk '/#bytes/ {getline; print "bytes=" $1, "iters=" $2, "a=" $3, "b=" $4, "c=" $5, "d=" $6}' /tmp/"$name".client
        echo "@@json-end $name rc=$rc"
    }
    perftest rdma-write-bw ib_write_bw --report_gbits -n 500
    perftest rdma-read-lat ib_read_lat -n 500
    # rping through rdma_cm (docs/cm.md): vfab's drop-in librdmacm speaks the connection manager
    # itself on vfab0; the kernel's rdma_cm answers on rxe0. Each ping's data is checked (-V).
    if [ -e "$bin/librdmacm.so.1" ] && [ -x /usr/bin/rping ]; then
        for m in ib_cm iw_cm rdma_cm rdma_ucm; do modprobe $m; done
        echo "== RDMA: rping through rdma_cm, vfab (server) <-> the kernel's rdma_cm on rxe (client)"
        $run rping -s -a 10.77.0.1 -C 10 -V >/tmp/rping.server 2>&1 &
        spid=$!
        i=0; rc=1
        while [ $i -lt 20 ]; do   # until vfab's listener answers (a REJ before)
            sleep 1; i=$((i + 1))
            rping -c -a 10.77.0.1 -C 10 -V -v >/tmp/rping.client 2>&1 && { rc=0; break; }
        done
        wait $spid || rc=1
        tail -n 2 /tmp/rping.client
        echo "@@json-begin rping"
        echo "pings=$(grep -c 'ping data: rdma-ping-' /tmp/rping.client) verified=1"
        echo "@@json-end rping rc=$rc"
    fi
fi
echo
echo "lab devices bound to vfio-pci (vfio-devctl list):"
"$bin/vfio-devctl" list 2>&1 | head -n 12
