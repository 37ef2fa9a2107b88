#!/bin/sh
# dpdk-pong COMMAND...: runs COMMAND while DPDK's e1000 PMD answers on the lab's NIC1
# (0000:00:03.0; DPDK_PONG_BDF): dpdk-testpmd in "5tswap" mode swaps the Ethernet and IP
# addresses and the UDP ports of every frame and sends it back, which is what pingpong's
# answering side does. Exit status: COMMAND's; 1 when testpmd does not start.
# testpmd runs interactively, fed through a fifo: its prompts are written unbuffered, while
# its other output into a file is block-buffered (as in lab.d/dpdk-pps.sh).
bdf=${DPDK_PONG_BDF:-0000:00:03.0}
work=$(mktemp -d /tmp/dpdk-pong.XXXXXX)
mkdir -p /var/run
mkfifo "$work/in"
# shellcheck disable=SC2086
dpdk-testpmd -l 0,1 --main-lcore 0 -n 1 --in-memory --file-prefix dpdk-pong -a "$bdf" -- -i \
    --forward-mode=5tswap --total-num-mbufs=4096 --no-lsc-interrupt ${DPDK_PONG_TESTPMD:-} \
    <"$work/in" >"$work/log" 2>&1 &
pid=$!
exec 4>"$work/in"
prompts() { grep -o 'testpmd>' "$work/log" 2>/dev/null | wc -l; }
wait_prompts() {   # wait_prompts N: until testpmd printed its N-th prompt (60 s at most)
    t=0
    while [ "$(prompts)" -lt "$1" ]; do
        t=$((t + 1))
        if [ "$t" -gt 600 ] || ! kill -0 "$pid" 2>/dev/null; then
            echo "dpdk-pong: testpmd did not get ready:" >&2; cat "$work/log" >&2
            kill -9 "$pid" 2>/dev/null; rm -rf "$work"; exit 1
        fi
        usleep 100000
    done
}
wait_prompts 1
echo start >&4
wait_prompts 2
"$@"
rc=$?
echo stop >&4
wait_prompts 3
echo quit >&4
exec 4>&-
t=0
while kill -0 "$pid" 2>/dev/null && [ "$t" -lt 300 ]; do usleep 100000; t=$((t + 1)); done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
[ "${DPDK_PONG_VERBOSE:-0}" = 1 ] && cat "$work/log" >&2
rm -rf "$work"
exit "$rc"
