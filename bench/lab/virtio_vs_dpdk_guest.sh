#!/bin/sh
# In the lab guest: vfab's virtio-net driver and DPDK's virtio PMD 00:04.0 -> 00:06.0,
# interleaved, ROUNDS times SECONDS each (bench/vs_dpdk.sh virtio-net boots it).
rounds=${1:-5}
secs=${2:-3}
bin=$(dirname "$0")
i=0
while [ "$i" -lt "$rounds" ]; do
    "$bin/virtio_net_pps" "$secs" 32 1 || exit 1
    DPDK_PPS_TX=0000:00:04.0 DPDK_PPS_RX=0000:00:06.0 "$bin/dpdk-pps" "$secs" | sed 's/^dpdk-e1000 /dpdk-virtio /' || exit 1
    i=$((i + 1))
done
