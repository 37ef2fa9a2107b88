#!/bin/sh
# In the lab guest (bench/vs_dpdk.sh boots it): vfab's e1000e driver and DPDK's e1000
# PMD NIC0 -> NIC1, interleaved, ROUNDS times SECONDS each. Prints the tools' own lines.
rounds=${1:-5}
secs=${2:-3}
bin=$(dirname "$0")
i=0
while [ "$i" -lt "$rounds" ]; do
    "$bin/e1000e_pps" "$secs" 32 2 || exit 1
    "$bin/dpdk-pps" "$secs" || exit 1
    "$bin/e1000e_pps" "$secs" 32 1 || exit 1
    i=$((i + 1))
done
