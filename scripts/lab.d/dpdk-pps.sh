#!/bin/sh
# dpdk-pps [SECONDS]: packets per second of DPDK's e1000 PMD from NIC0 to NIC1 in the lab
# guest (scripts/lab --dpdk copies it to /vfab/bin/dpdk-pps). Prints one line:
#   dpdk-e1000 tx_pps=N rx_pps=N seconds=S tx_packets=N rx_packets=N rx_missed=N
# tx_* are NIC0's hardware counters, rx_* NIC1's, over the SECONDS (default 5) measured;
# rx_pps is what arrived. Under TCG NIC0 sends faster than NIC1 is refilled: QEMU queues what
# NIC1 has no descriptor for and drops it when its queue is full, uncounted by either NIC
# (rx_missed stays 0), so tx_pps > rx_pps.
#
# testpmd's forwarding mode applies to all of its ports, and each of its modes either
# transmits on both ports or on none. So two testpmd processes run side by side, each with
# its own device, hugepage memory (--in-memory: given back at exit) and VFIO container:
# "txonly" on NIC0 and "rxonly" on NIC1, their busy-polling lcores on different vCPUs. NIC1 is
# polled from before NIC0 sends until after it stops.
#
# Environment: DPDK_PPS_TX, DPDK_PPS_RX (BDFs; 0000:00:02.0, 0000:00:03.0),
# DPDK_PPS_TXPKTS (frame length without FCS, 64), DPDK_PPS_VERBOSE=1 (print testpmd's output),
# DPDK_PPS_EAL (more EAL arguments for both processes, e.g. --iova-mode=pa), DPDK_PPS_TESTPMD
# (more testpmd arguments for both, e.g. --rxd=1024 --txd=1024; default 256 descriptors each),
# DPDK_PPS_NAME (the line's first word; dpdk-e1000).
# DPDK_PPS_MMIO_MARK=N (0..63): marks the measured window for a QEMU trace of the devices'
# registers, as lab_bench --mmio-mark does (0x80+N, then 0x40+N into the Interrupt Line byte of
# the edu device 00:01.0; bench/run counts the accesses between); the line ends with mmio_mark=N.
# DPDK_PPS_QUEUES=N (unset: one queue, as above): N queues on each port (--rxq=N --txq=N: testpmd
# makes min(rxq, txq) streams per port), the sender's flows spread by --txonly-multi-flow (it
# varies the IPv4 source address) and the receiver's by RSS on UDP (--rss-udp), both forwarding
# lcores polling all N queues round-robin; 8192 mbufs (N receive rings are filled on both
# sides). The line then ends with queues=N rx_queues=a,b,... (packets per receive queue over
# the whole run, from testpmd's per-stream statistics).
# Exit status 0 when both ports counted packets, 1 otherwise (testpmd's output is printed).
secs=${1:-5}
tx_bdf=${DPDK_PPS_TX:-0000:00:02.0}
rx_bdf=${DPDK_PPS_RX:-0000:00:03.0}
txpkts=${DPDK_PPS_TXPKTS:-64}
name=${DPDK_PPS_NAME:-dpdk-e1000}
queues=${DPDK_PPS_QUEUES:-}
case $secs in ''|*[!0-9]*|0) echo "usage: dpdk-pps [SECONDS>0]" >&2; exit 2 ;; esac
case $queues in ''|[1-9]|1[0-6]) ;; *) echo "dpdk-pps: DPDK_PPS_QUEUES must be 1..16" >&2; exit 2 ;; esac
mark=${DPDK_PPS_MMIO_MARK:-}
case $mark in ''|[0-9]|[1-5][0-9]|6[0-3]) ;; *) echo "dpdk-pps: DPDK_PPS_MMIO_MARK must be 0..63" >&2; exit 2 ;; esac
# mmio_mark BASE: writes BASE + N into edu's config byte 0x3c (nothing without a mark).
mmio_mark() {
    [ -n "$mark" ] || return 0
    # shellcheck disable=SC2059   # the format is the byte, as an octal escape
    printf "\\$(printf %o $(($1 + mark)))" |
        dd of=/sys/bus/pci/devices/0000:00:01.0/config bs=1 seek=60 count=1 conv=notrunc 2>/dev/null
}
tx_args="" rx_args=""
if [ -n "$queues" ]; then
    tx_args="--rxq=$queues --txq=$queues --total-num-mbufs=8192 --txonly-multi-flow"
    rx_args="--rxq=$queues --txq=$queues --total-num-mbufs=8192 --rss-udp"
fi

work=$(mktemp -d /tmp/dpdk-pps.XXXXXX)
mkdir -p /var/run
rx_pid="" tx_pid=""

fail() {
    echo "dpdk-pps: $*" >&2
    for side in rx tx; do
        echo "----- testpmd $side output -----" >&2
        cat "$work/$side.log" >&2
    done
    [ -n "$tx_pid" ] && kill "$tx_pid" 2>/dev/null
    [ -n "$rx_pid" ] && kill "$rx_pid" 2>/dev/null
    sleep 1
    [ -n "$tx_pid" ] && kill -9 "$tx_pid" 2>/dev/null
    [ -n "$rx_pid" ] && kill -9 "$rx_pid" 2>/dev/null
    rm -rf "$work"
    exit 1
}

prompts() { grep -o 'testpmd>' "$work/$1.log" 2>/dev/null | wc -l; }

# wait_prompts SIDE N SECONDS: until testpmd SIDE has printed its N-th prompt.
wait_prompts() {
    t=0
    while [ "$(prompts "$1")" -lt "$2" ]; do
        kill -0 "$(eval echo "\$${1}_pid")" 2>/dev/null || fail "testpmd ($1) exited early"
        t=$((t + 1))
        [ "$t" -gt $(($3 * 10)) ] && fail "testpmd ($1): no prompt within $3 s"
        usleep 100000
    done
}

# cmd SIDE COMMAND: runs COMMAND in testpmd SIDE and waits for it to finish.
cmd() {
    n=$(prompts "$1")
    if [ "$1" = rx ]; then echo "$2" >&4; else echo "$2" >&5; fi
    wait_prompts "$1" $((n + 1)) 30
}

# testpmd SIDE BDF MAIN_LCORE MODE [ARGS]: starts an interactive testpmd reading SIDE.in.
# -l 0,1: the main lcore only reads commands; the other one polls. --no-lsc-interrupt: the
# em PMD on QEMU's e1000e takes a link-status interrupt per received burst (hundreds a
# second, each a "link state change event" line), which only costs the receiver time.
testpmd() {
    mkfifo "$work/$1.in"
    # shellcheck disable=SC2086
    dpdk-testpmd -l 0,1 --main-lcore "$3" -n 1 --in-memory --file-prefix "dpdk-pps-$1" \
        -a "$2" ${DPDK_PPS_EAL:-} -- -i --forward-mode="$4" --total-num-mbufs=4096 \
        --txpkts="$txpkts" --no-lsc-interrupt ${5:-} ${DPDK_PPS_TESTPMD:-} <"$work/$1.in" >"$work/$1.log" 2>&1 &
}
uptime_cs() { awk '{ split($1, a, "."); print a[1] * 100 + a[2] }' /proc/uptime; }

# The receiver first: its forwarding lcore on CPU 0, the sender's on CPU 1.
testpmd rx "$rx_bdf" 1 rxonly "$rx_args"; rx_pid=$!
exec 4>"$work/rx.in"
testpmd tx "$tx_bdf" 0 txonly "$tx_args"; tx_pid=$!
exec 5>"$work/tx.in"
wait_prompts rx 1 120
wait_prompts tx 1 120
cmd rx start
cmd tx start
sleep 1                                 # past the first bursts
cmd rx "show port stats all"; cmd tx "show port stats all"
t0=$(uptime_cs)
mmio_mark 128
sleep "$secs"
mmio_mark 64
cmd rx "show port stats all"; cmd tx "show port stats all"
t1=$(uptime_cs)
cmd tx stop
sleep 1                                 # the last frames reach NIC1
cmd rx stop
echo quit >&5; echo quit >&4
exec 4>&- 5>&-
# reap PID: waits up to 30 s for testpmd to close its port and exit, then kills it.
reap() {
    t=0
    while kill -0 "$1" 2>/dev/null && [ "$t" -lt 300 ]; do usleep 100000; t=$((t + 1)); done
    kill -9 "$1" 2>/dev/null
    wait "$1" 2>/dev/null
}
reap "$tx_pid"; reap "$rx_pid"
[ "${DPDK_PPS_VERBOSE:-0}" = 1 ] && { cat "$work/rx.log"; cat "$work/tx.log"; }

# The last two readings of a counter in SIDE's "show port stats" blocks: "first last".
counter() {
    awk -v key="$2:" '/NIC statistics for port/ {on = 1} /Throughput/ {on = 0}
        on { for (i = 1; i < NF; i++) if ($i == key) print $(i + 1) }' "$work/$1.log" \
        | tail -n 2 | tr '\n' ' '
}
# shellcheck disable=SC2046   # two numbers, split on purpose
{
set -- $(counter tx TX-packets); tx0=${1:-0} tx1=${2:-0}
set -- $(counter rx RX-packets); rx0=${1:-0} rx1=${2:-0}
set -- $(counter rx RX-missed); missed0=${1:-0} missed1=${2:-0}
}
line=$(awk -v tx0="$tx0" -v tx1="$tx1" -v rx0="$rx0" -v rx1="$rx1" -v m0="$missed0" \
           -v m1="$missed1" -v t0="$t0" -v t1="$t1" -v name="$name" 'BEGIN {
    s = (t1 - t0) / 100; if (s <= 0) s = 0.01
    printf name " tx_pps=%d rx_pps=%d seconds=%.2f tx_packets=%d rx_packets=%d rx_missed=%d\n",
           (tx1 - tx0) / s, (rx1 - rx0) / s, s, tx1 - tx0, rx1 - rx0, m1 - m0 }')
if [ -n "$queues" ]; then
    # testpmd's "stop" prints a block per stream when a port has several ("Forward Stats for
    # RX Port= 0/Queue= 1 -> ...", then "RX-packets: N"), and the port's total after them.
    per_queue=$(awk '/Forward Stats for RX Port=/ { on = 1; next }
        /Forward statistics for port/ { port = 1; next }
        on && /RX-packets:/ { q = q sep $2; sep = ","; on = 0 }
        port && /RX-packets:/ { total = $2; port = 0 }
        END { print (q != "" ? q : total) }' "$work/rx.log")
    line="$line queues=$queues rx_queues=$per_queue"
fi
[ -n "$mark" ] && line="$line mmio_mark=$mark"
echo "$line"
case $line in
    *" tx_packets=0 "*|*" rx_packets=0 "*) fail "no packets counted" ;;
esac
rm -rf "$work"
exit 0
