#!/bin/sh
# In the lab guest (scripts/demo boots it): vfab's examples between the two wired e1000e ports,
# 0000:00:02.0 <-> 0000:00:03.0. A ping-pong latency run, a busy-polling throughput run and an
# interrupt-mode one, each with a progress line a second. Their JSON results go to the console
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
echo
echo "lab devices bound to vfio-pci (vfio-devctl list):"
"$bin/vfio-devctl" list 2>&1 | head -n 12
