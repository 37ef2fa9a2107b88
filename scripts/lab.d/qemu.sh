# Boots the lab guest and reads its console. Sourced by scripts/lab.
#
# Devices (slot = guest BDF 0000:00:<slot>.0), each in its own IOMMU group:
#   01 edu                                       02, 03 e1000e (82574L), both on hub 0
#   04, 06 virtio-net (modern only, iommu_platform, packed rings offered)  on hub 1, with a
#      sink port; 07 a virtio-net without iommu_platform (vfab must refuse it)
#   05, 0a igb (82576, SR-IOV capable)           on hub 2 with a sink port
#   08 virtio-net with 4 queue pairs (mq, rss) on a multi-queue tap, bridged to the tap of
#   09 a virtio-net with one queue pair; both taps live in QEMU's own network namespace
#      (netns-run). Where namespaces are not allowed, 08 and 09 are left out, loudly.
#   0b ivshmem-plain: BAR 2 is 16 MiB of host memory, a stand-in for another device's memory
#      (a GPU's BAR) that the NICs DMA to and from peer to peer (docs/rdma-p2p.md)
# Two machines (scripts/lab --pair; LAB_PAIR_ROLE a or b): both guests also get hub 3, joined to
# the other QEMU's hub 3 by a dgram netdev over two unix sockets in LAB_PAIR_DIR:
#   0c e1000 (82540EM), the kernel's NIC: 10.90.0.1 (hpc-a) or 10.90.0.2 (hpc-b), the MPI
#      launchers' TCP and the kernel's rxe
#   05, 0a the igb pair, moved from hub 2 to hub 3 with MACs of their own per guest, for vfab
# (The igb PFs' VFs take the slots above 0x15: no room for more igb.)
# A hub whose only other port cannot receive stalls TX, hence the sinks (LAB.md pitfall 6): a
# hub port with no peer, which always takes a frame and drops it (QEMU's net/hub.c and
# qemu_can_send_packet()). It replaced a dgram netdev to 127.0.0.1, whose sendto(2) per frame
# was half of a sending vCPU's time (docs/performance-history.md, "The lab's sink").

LAB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB_TAP_QUEUES=4
lab_netns=""
# Can QEMU get a network namespace with taps here? Asked once per run.
netns_available() {
    if [[ -z $lab_netns ]]; then
        if "$LAB_DIR/netns-run" --check 2>/dev/null; then lab_netns=yes; else
            lab_netns=no
            log "WARNING: no network namespace with taps here (unshare --net, /dev/net/tun, bridge):" \
                "the multi-queue virtio-net (00:08.0, 00:09.0) is left out and its tests skip"
        fi
    fi
    [[ $lab_netns == yes ]]
}

qemu_args() {   # qemu_args VMLINUX INITRD CMDLINE IOMMU
    local args=(-accel tcg,thread=multi -cpu max -machine q35,kernel-irqchip=split
                -smp 2 -m 2048 -nographic -no-reboot -nodefaults
                -kernel "$1" -initrd "$2" -append "$3")
    # Two NUMA nodes, a CPU and half the memory each: memory placement is checked where the
    # kernel put it (tests/lab/dma_arena_test.cpp, DmaMemory.LiesOnTheNumaNodeAskedFor).
    args+=(-object memory-backend-ram,id=node0,size=1024M -object memory-backend-ram,id=node1,size=1024M
           -numa node,nodeid=0,cpus=0,memdev=node0 -numa node,nodeid=1,cpus=1,memdev=node1)
    # No 64-bit PCI window, so the guest puts the igb VFs' BARs below 4 GiB: QEMU 10.0's
    # igbvf registers its BARs before the PF says they are 64-bit, decodes only their low
    # 32 bits, and a VF placed above 4 GiB answers nothing (docs/igb-model.md §8).
    args+=(-global q35-pcihost.pci-hole64-size=0)
    # 48 address bits so that IOVA = VA fits (LAB.md pitfall 5).
    [[ $4 == on ]] && args+=(-device intel-iommu,intremap=on,aw-bits=48)
    # Two machines: the igb pair moves to hub 3, the link between the guests, with MACs of
    # their own per guest.
    local igb_hub=2 igb_mac=52:54:00:00:00 me=${LAB_PAIR_ROLE:-} other=a g=2
    [[ $me == a ]] && other=b g=1
    [[ -n $me ]] && igb_hub=3 igb_mac=52:54:00:0$g:00
    # edu with a 48-bit DMA mask (default 28 bits) so IOVA = VA and no-IOMMU physical addresses fit.
    args+=(-device edu,addr=01.0,dma_mask=0xffffffffffff
           -netdev hubport,id=p0,hubid=0 -device e1000e,addr=02.0,romfile=,netdev=p0,mac=52:54:00:00:00:01
           -netdev hubport,id=p1,hubid=0 -device e1000e,addr=03.0,romfile=,netdev=p1,mac=52:54:00:00:00:02
           -netdev hubport,id=p2,hubid=1
           -device virtio-net-pci,addr=04.0,romfile=,netdev=p2,disable-legacy=on,iommu_platform=on,packed=on,in_order=on,mac=52:54:00:00:00:03
           -netdev hubport,id=p6,hubid=1
           -device virtio-net-pci,addr=06.0,romfile=,netdev=p6,disable-legacy=on,iommu_platform=on,packed=on,in_order=on,mac=52:54:00:00:00:06
           -netdev hubport,id=p7,hubid=1
           -device virtio-net-pci,addr=07.0,romfile=,netdev=p7,disable-legacy=on,mac=52:54:00:00:00:07
           -netdev hubport,id=p3,hubid=1   # the sink: no peer
           -netdev hubport,id=p4,hubid=$igb_hub -device igb,addr=05.0,romfile=,netdev=p4,mac=$igb_mac:05
           -netdev hubport,id=p9,hubid=$igb_hub -device igb,addr=0a.0,romfile=,netdev=p9,mac=$igb_mac:0a
           -netdev hubport,id=p5,hubid=2   # the sink: no peer
           -object memory-backend-ram,id=ivshm,size=16M,share=on -device ivshmem-plain,addr=0b.0,memdev=ivshm)
    if netns_available; then
        args+=(-netdev "tap,id=mq,ifname=vfabmq,script=no,downscript=no,vhost=off,queues=$LAB_TAP_QUEUES"
               -device virtio-net-pci,addr=08.0,romfile=,netdev=mq,disable-legacy=on,iommu_platform=on,packed=on,mq=on,rss=on,mac=52:54:00:00:00:08
               -netdev tap,id=sq,ifname=vfabsq,script=no,downscript=no,vhost=off
               -device virtio-net-pci,addr=09.0,romfile=,netdev=sq,disable-legacy=on,iommu_platform=on,packed=on,mac=52:54:00:00:00:09)
    fi
    if [[ -n ${LAB_PAIR_ROLE:-} ]]; then
        args+=(-netdev "dgram,id=pair,local.type=unix,local.path=$LAB_PAIR_DIR/$me.sock,remote.type=unix,remote.path=$LAB_PAIR_DIR/$other.sock"
               -netdev hubport,id=p10,hubid=3,netdev=pair
               -netdev hubport,id=p11,hubid=3 -device e1000,addr=0c.0,romfile=,netdev=p11,mac=52:54:00:0$g:00:0c)
    fi
    # VFAB_LAB_QEMU_EXTRA: more QEMU arguments (debugging: -d, -trace, extra devices).
    # shellcheck disable=SC2206
    [[ -n ${VFAB_LAB_QEMU_EXTRA:-} ]] && args+=($VFAB_LAB_QEMU_EXTRA)
    printf '%s\n' "${args[@]}"
}

qemu_launcher() { netns_available && echo "$LAB_DIR/netns-run"; }

qemu_run_interactive() {
    netns_available || true
    local args; mapfile -t args < <(qemu_args "$@")
    $(qemu_launcher) qemu-system-x86_64 "${args[@]}" -serial mon:stdio
}

# A TCG guest sometimes stops running the timers of one idle vCPU and never recovers (the
# kernel keeps printing RCU stall reports; seen on 2-core hosts; see scripts/lab's cmdline).
# After this many reports the boot is ended and reported as stalled instead of waiting for
# --timeout.
RCU_STALL_REPORTS=3
# Worse, both vCPUs can go to sleep for good: the guest prints nothing more and QEMU's vCPU
# threads wait forever. guest-init writes a heartbeat to the second serial port (LOG.heartbeat
# here) every 2 s; a boot whose heartbeat has stopped this long is ended and reported frozen.
FROZEN_SECONDS=${VFAB_LAB_FROZEN_SECONDS:-60}
# And a guest can hang before its kernel prints anything (the console stops at SeaBIOS's
# "Booting from ROM.."): init normally starts beating within 5 s; a boot with no heartbeat
# after this long is ended and reported as hung while booting.
BOOT_SECONDS=${VFAB_LAB_BOOT_SECONDS:-90}

# A guest's request to the host, one console line: "@@host set_link NAME on|off" takes QEMU
# net client NAME's link down or up (QMP set_link; the hubports p0.. are the NICs' peers, so
# the NIC sees it: tests/lab/link_events_test.cpp). Nothing else is accepted. Answered within
# about two seconds, by the loop below.
host_request() {   # host_request QMP_SOCKET LINE
    if [[ $2 =~ ^@@host\ set_link\ ([a-z0-9]+)\ (on|off)$ ]]; then
        "$LAB_DIR/qmp-set-link" "$1" "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" >&2 \
            || log "the guest's request failed: $2"
    else
        log "ignored a guest request the lab does not know: $2"
    fi
}

# A boot that qemu_run_logged ended for the emulator's trouble, not the tests': hung while
# booting (123), stalled (125), frozen (126), QEMU aborting on an assertion (134).
is_emulator_flake() { [[ $1 -eq 123 || $1 -eq 125 || $1 -eq 126 || $1 -eq 134 ]]; }

# qemu_run_logged VMLINUX INITRD CMDLINE IOMMU TIMEOUT LOG: console to stdout and LOG.
# Returns QEMU's exit status, 124 when the timeout ended it, 123 when the guest never started
# beating, 125 when the guest stalled, 126 when it froze.
qemu_run_logged() {
    local args timeout=$5 log=$6 pid stalled=0 frozen=0 unborn=0 beat_size=0 beat_at=$SECONDS size start=$SECONDS
    local qmp_dir requests answered=0 line
    netns_available || true
    mapfile -t args < <(qemu_args "$1" "$2" "$3" "$4")
    : > "$log"
    rm -f "$log.pid" "$log.heartbeat"
    qmp_dir=$(mktemp -d /tmp/vfab-qmp.XXXXXX)   # short: a socket's path has 107 bytes at most
    ( timeout -k 5 "$timeout" $(qemu_launcher) qemu-system-x86_64 "${args[@]}" -serial stdio \
          -serial "file:$log.heartbeat" -monitor none -qmp "unix:$qmp_dir/qmp,server=on,wait=off" \
          -pidfile "$log.pid" 2>"$log.qemu-stderr" </dev/null | stdbuf -o0 tr -d '\r' | tee "$log"
      exit "${PIPESTATUS[0]}" ) &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if (( $(grep -c 'rcu: INFO: rcu_[a-z]* detected stalls' "$log") >= RCU_STALL_REPORTS )); then
            stalled=1
            kill "$(cat "$log.pid" 2>/dev/null)" 2>/dev/null
            break
        fi
        size=$(stat -c %s "$log.heartbeat" 2>/dev/null || echo 0)
        if (( size != beat_size )); then
            beat_size=$size beat_at=$SECONDS
        elif (( size > 0 && SECONDS - beat_at >= FROZEN_SECONDS )); then
            frozen=1
            kill "$(cat "$log.pid" 2>/dev/null)" 2>/dev/null
            break
        elif (( size == 0 && SECONDS - start >= BOOT_SECONDS )); then
            unborn=1
            kill "$(cat "$log.pid" 2>/dev/null)" 2>/dev/null
            break
        fi
        mapfile -t requests < <(grep '^@@host ' "$log")
        for line in "${requests[@]:answered}"; do
            host_request "$qmp_dir/qmp" "$line"
        done
        answered=${#requests[@]}
        sleep 2
    done
    wait "$pid"
    local rc=$?
    rm -rf "$qmp_dir"
    (( stalled )) && return 125
    (( frozen )) && return 126
    (( unborn )) && return 123
    return "$rc"
}

# lab_failure LOG QEMU_RC TIMEOUT: explains a boot that did not reach @@vfab:done, exits 2.
lab_failure() {
    local log=$1 rc=$2 timeout=$3 running
    running=$(awk '/^@@vfab:begin /{t=$2} /^@@vfab:end /{t=""} END{print t}' "$log")
    if ! grep -q '^@@vfab:booted' "$log"; then
        if [[ $rc -eq 124 || $rc -eq 123 ]]; then
            die "the guest hung while booting (no sign of life from init within $((rc == 123 ? BOOT_SECONDS : timeout)) s)"
        elif [[ ! -s $log ]]; then
            die "QEMU failed to start (exit $rc): $(tail -n3 "$log.qemu-stderr" | tr '\n' ' ')"
        fi
        die "the guest kernel died before init ran (QEMU exit $rc, $(wc -c < "$log") bytes of console; QEMU said: $(qemu_errors "$log")); last console lines:
$(tail -n 15 "$log")"
    fi
    if [[ $rc -eq 125 ]]; then
        die "the guest kernel stalled (repeated RCU stall reports: the timers of an idle vCPU stopped running)${running:+ in test $running}"
    fi
    if [[ $rc -eq 126 ]]; then
        die "the guest froze (no heartbeat for ${FROZEN_SECONDS} s: its vCPUs went to sleep for good)${running:+ in test $running}"
    fi
    if [[ $rc -eq 124 ]]; then
        die "the guest hung: still running after ${timeout} s${running:+, in test $running} (raise --timeout if it is only slow)"
    fi
    die "the guest died before finishing${running:+ (in test $running)}; QEMU exit $rc $(qemu_errors "$log"); last console lines:
$(tail -n 15 "$log")"
}

# QEMU's own complaints from a run, without the expected warnings and IOMMU fault chatter.
qemu_errors() {
    grep -vE 'is not connected to host network|vtd_|New fault is not recorded' "$1.qemu-stderr" 2>/dev/null \
        | tail -n 3 | tr '\n' ' '
}

signal_name() { kill -l "$1" 2>/dev/null || echo "?"; }

# report_tests LOG QEMU_RC TIMEOUT FLAVOR BIN...: one line per test; exit 0 iff all passed.
report_tests() {
    local log=$1 rc=$2 timeout=$3 flavor=$4; shift 4
    local bin name line status failed=0
    grep -q '^@@vfab:done' "$log" || lab_failure "$log" "$rc" "$timeout"
    echo
    for bin in "$@"; do
        name=$(basename "$bin")
        line=$(grep -m1 "^@@vfab:end $name " "$log" || true)
        status=${line#*rc=}; status=${status%% *}
        if [[ -z $line ]]; then
            echo "lab[$flavor]: $name NOT RUN"; failed=1
        elif [[ $line == *missing* ]]; then
            echo "lab[$flavor]: $name MISSING (not built? no executable at $bin)"; failed=1
        elif [[ $status -ne 0 ]]; then
            if ((status > 128)); then
                echo "lab[$flavor]: $name CRASHED (signal $((status - 128)), SIG$(signal_name $((status - 128))))"
            else
                echo "lab[$flavor]: $name FAILED (exit $status)"
            fi
            failed=1
        elif awk -v n="$name" '$0 == "@@vfab:begin " n {on=1; next} on && /^@@vfab:end /{exit} on' "$log" \
                | grep -qE '^\[==========\] 0 tests? from'; then
            echo "lab[$flavor]: $name RAN NO TEST (a GoogleTest filter matched nothing?)"; failed=1
        else
            echo "lab[$flavor]: $name passed"
        fi
        report_skips "$log" "$name" "$flavor" || failed=1
    done
    return $failed
}

# report_skips LOG NAME SUITE: names each test the binary NAME skipped in the run of SUITE, and
# fails for a skip tests/lab/expected_skips does not list for that suite (a test that silently
# stopped running is a failure, not a pass).
report_skips() {
    local log=$1 name=$2 suite=$3 test reason
    local expected=${LAB_EXPECTED_SKIPS:-$(dirname "${BASH_SOURCE[0]}")/../../tests/lab/expected_skips}
    local rc=0
    while read -r test; do
        [[ -n $test ]] || continue
        reason=$(awk -v s="$suite" -v t="$test" '!/^#/ && NF >= 2 && ($1 == s || $1 == "*") && t ~ ("^" $2 "$") {
                     $1 = ""; $2 = ""; sub(/^ +/, ""); print; exit }' "$expected" 2>/dev/null)
        if [[ -n $reason ]]; then
            echo "lab[$suite]: $name skipped $test, as expected here: $reason"
        else
            echo "lab[$suite]: $name SKIPPED $test — not expected on this suite: fix what made it skip, or list it in tests/lab/expected_skips with the reason"
            rc=1
        fi
    done < <(awk -v n="$name" '$0 == "@@vfab:begin " n {on=1; next} on && /^@@vfab:end /{exit}
                               on && /^\[  SKIPPED \] [A-Za-z_][A-Za-z0-9_\/]*\.[A-Za-z0-9_\/.]+ \([0-9]+ ms\)$/ {print $4}' "$log" | sort -u)
    return $rc
}
