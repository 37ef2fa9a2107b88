#!/bin/sh
# In the lab guest (bench/rdma_vs_rxe.sh boots it): RDMA figures over the two e1000e on hub 0
# (00:02.0 <-> 00:03.0) in four set-ups, ROUNDS times, interleaved (A D B C, then C B D A, ...):
#   A  vfab <-> vfab   both NICs on vfio-pci; rdma_bench local (client on 02.0, server on 03.0),
#                      a thread for each end (label vfab-vfab) and one thread for both (vfab-vfab-1t)
#   D  vfab <-> vfab   the same NICs, perftest 4.5 (Debian's binaries) on vfab's drop-in
#                      libibverbs.so.1 through vfab-run (docs/verbs.md): server on vfab1 = 03.0
#                      (10.77.0.2), client on vfab0 = 02.0 (10.77.0.1), GID index 0; the same
#                      commands and sizes as rxe <-> rxe's perftest (label vfab-vfab-perftest, and
#                      one label per progress variant asked for, below)
#   B  vfab <-> rxe    03.0 on the kernel's e1000e as 10.77.0.2 with rxe0 on it; vfab on 02.0
#                      as 10.77.0.1 — vfab initiating (label vfab-rxe) and rxe initiating (rxe-vfab)
#   C  rxe <-> rxe     02.0 on the kernel too, 10.77.0.1 with rxe1; policy routing sends the two
#                      local addresses over the wire (not through lo): the input interfaces look
#                      up the local table first, each peer's address has its own table through
#                      its NIC, the local table's own rule moves behind them, accept_local=1,
#                      rp_filter=0. Both with rdma_bench_verbs and with perftest.
# Each set-up but D also runs the pingpong tools (examples/rc_pingpong, ibv_rc_pingpong; usec/iter).
# Prints the tools' result lines ("rdma_bench ...", "perftest ...", "pingpong ..."), and
# "rdma_guest: ..." lines for what it does.
#   rdma_vs_rxe_guest.sh [ROUNDS] [bw_size=65536] [bw_iters=200] [lat_size=64] [lat_iters=1000]
#                        [atomic_iters=1000] [extra_nics=1] [setups=ABCD] [variants=LIST]
# extra_nics=1: also vfab <-> vfab over virtio-net 04.0/06.0 and igb 05.0/0a.0, once a round;
# setups: which of A, B, C, D to run (the others are only passed through);
# variants: D's progress settings (docs/verbs.md, "Progress"), comma-separated, each a label
# vfab-vfab-perftest[-NAME] of its own, run one after the other in D:
#   default  the library's defaults: a progress thread per device, asleep after 1000 idle us
#   app      VFAB_VERBS_PROGRESS=app on each end that polls its CQ for everything it waits for
#            (ib_write_bw, ib_read_lat, ib_atomic_bw: the client; ib_send_lat: both); the
#            passive end keeps its thread. ib_write_lat (both ends poll memory) is not run.
#   sleepN   VFAB_VERBS_PROGRESS_SLEEP_US=N: sleep0, the progress threads never sleep; sleep1,
#            asleep on the NIC's interrupt as soon as idle (after N us and two ticks of the
#            coarse clock without work, 8 ms in the lab)
#   nopin    the programs not pinned (the others: server on vCPU 0, client on vCPU 1, as rxe's)
#   cpu      each end's progress thread pinned to the other end's vCPU (VFAB_VERBS_PROGRESS_CPU)
rounds=${1:-3}
[ $# -gt 0 ] && shift
bw_size=65536 bw_iters=200 lat_size=64 lat_iters=1000 atomic_iters=1000 extra_nics=0 setups=ABCD variants=default
for kv in "$@"; do
    case $kv in
    bw_size=* | bw_iters=* | lat_size=* | lat_iters=* | atomic_iters=* | extra_nics=* | setups=* | variants=*) eval "${kv%%=*}=\${kv#*=}" ;;
    *) echo "rdma_guest: unknown argument $kv" >&2; exit 2 ;;
    esac
done
bin=$(dirname "$0")
IP=/usr/sbin/ip
A=0000:00:02.0
B=0000:00:03.0
bw_opts="-s $bw_size -n $bw_iters --window 32 --signal 8"
say() { echo "rdma_guest: $*"; }

# ---- NICs between vfio-pci and the kernel -------------------------------------------------------
ifname_of() { ls "/sys/bus/pci/devices/$1/net" 2>/dev/null | head -n1; }
driver_of() { basename "$(readlink "/sys/bus/pci/devices/$1/driver" 2>/dev/null)" 2>/dev/null; }
# to_kernel BDF ADDR: the kernel's e1000e, ADDR/24, up, carrier.
to_kernel() {
    d=/sys/bus/pci/devices/$1
    [ -e "$d/driver" ] && echo "$1" > "$d/driver/unbind"
    echo > "$d/driver_override"
    if [ -d /sys/bus/pci/drivers/e1000e ]; then echo "$1" > /sys/bus/pci/drivers/e1000e/bind; else modprobe e1000e; fi
    i=0
    while [ -z "$(ifname_of "$1")" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    nic=$(ifname_of "$1")
    [ -n "$nic" ] || { say "$1: no interface on e1000e"; return 1; }
    $IP addr add "$2/24" dev "$nic"
    $IP link set "$nic" up
    i=0
    while [ "$(cat "/sys/class/net/$nic/carrier" 2>/dev/null)" != 1 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    say "$1 is $nic ($2) on e1000e, carrier $(cat "/sys/class/net/$nic/carrier" 2>/dev/null)"
}
to_vfio() {
    d=/sys/bus/pci/devices/$1
    [ "$(driver_of "$1")" = vfio-pci ] && return 0
    [ -e "$d/driver" ] && echo "$1" > "$d/driver/unbind"
    echo vfio-pci > "$d/driver_override"
    echo "$1" > /sys/bus/pci/drivers_probe
    [ "$(driver_of "$1")" = vfio-pci ] || { say "$1 did not go back to vfio-pci"; return 1; }
    say "$1 back on vfio-pci"
}
# rxe_add IBDEV BDF ADDR: rxe on the NIC's interface, its RoCEv2 GID (index 1) in place.
rxe_add() {
    nic=$(ifname_of "$2")
    /usr/bin/rdma link add "$1" type rxe netdev "$nic" || return 1
    # shellcheck disable=SC2046,SC2183 # the four octets as four arguments
    want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' $(echo "$3" | tr . ' '))
    i=0
    while [ "$(cat "/sys/class/infiniband/$1/ports/1/gids/1" 2>/dev/null)" != "$want" ] && [ $i -lt 100 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    say "$1 on $nic: $(cat "/sys/class/infiniband/$1/ports/1/state" 2>/dev/null), gid 1 $(cat "/sys/class/infiniband/$1/ports/1/gids/1" 2>/dev/null)"
}
rxe_del() { /usr/bin/rdma link delete "$1" && say "$1 deleted"; }
# Both NICs the kernel's: each local address over its own wire.
routing_on() {
    na=$(ifname_of $A)
    nb=$(ifname_of $B)
    for c in all default "$na" "$nb"; do
        echo 0 > "/proc/sys/net/ipv4/conf/$c/rp_filter"
        echo 1 > "/proc/sys/net/ipv4/conf/$c/accept_local"
    done
    $IP rule add pref 100 iif "$na" lookup local
    $IP rule add pref 101 iif "$nb" lookup local
    $IP route add 10.77.0.2 dev "$na" src 10.77.0.1 table 100
    $IP route add 10.77.0.1 dev "$nb" src 10.77.0.2 table 101
    $IP rule add pref 200 to 10.77.0.2 lookup 100
    $IP rule add pref 201 to 10.77.0.1 lookup 101
    $IP rule add pref 300 lookup local
    $IP rule del pref 0 lookup local
    say "policy routing: 10.77.0.1 ($na) <-> 10.77.0.2 ($nb) over the wire: $($IP route get 10.77.0.2 from 10.77.0.1 | head -n1)"
}
routing_off() {
    $IP rule add pref 0 lookup local
    for p in 300 201 200 101 100; do $IP rule del pref $p; done
    $IP route flush table 100
    $IP route flush table 101
}

# ---- the runs ---------------------------------------------------------------------------------------
# tcp_listening PORT: something listens on it (IPv4 or IPv6).
tcp_listening() {
    hex=$(printf '%04X' "$1")
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }'
}
wait_listen() {
    i=0
    while ! tcp_listening "$1" && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
}
# pair SERVER_CMD -- CLIENT_CMD: the server in the background, the client once it listens
# on PORT ($port), both with a time limit; the server on CPU 0, the client on CPU 1 (left to
# themselves, the guest's scheduler now and then put both busy-polling ends on one vCPU, where
# they took turns at its 4 ms tick). rdma_bench local pins its two threads the same way.
pair() {
    scmd=""
    while [ "$1" != -- ]; do scmd="$scmd $1"; shift; done
    shift
    # shellcheck disable=SC2086
    timeout 120 taskset -c 0 $scmd > /tmp/server.out 2>&1 &
    spid=$!
    wait_listen "$port"
    timeout 120 taskset -c 1 "$@" > /tmp/client.out 2>&1
    crc=$?
    wait $spid
    src=$?
    cat /tmp/client.out
    [ $crc -eq 0 ] && [ $src -eq 0 ] && return 0
    say "exit $crc (client) / $src (server): $*"
    sed 's/^/rdma_guest: server: /' /tmp/server.out
    return 1
}

modes() { echo write_bw read_lat send_lat write_lat atomic_rate reg_rate; }
opts_of() {
    case $1 in
    write_bw) echo "$bw_opts" ;;
    atomic_rate) echo "-n $atomic_iters --window 16" ;;
    reg_rate) echo "-s $bw_size -n $atomic_iters" ;;   # 64 KiB: 16 pages pinned by ibv_reg_mr
    *) echo "-s $lat_size -n $lat_iters" ;;
    esac
}

# local_runs LABEL NICS THREADS: every mode with rdma_bench local.
local_runs() {
    for m in $(modes); do
        # shellcheck disable=SC2046
        timeout 120 "$bin/rdma_bench" local "$m" $(opts_of "$m") --nics "$2" --threads "$3" --cpus 1,0 --label "$1" ||
            say "$1 $m failed"
    done
}
run_A() {
    case $setups in *A*) ;; *) return 0 ;; esac
    local_runs vfab-vfab $A,$B 2
    local_runs vfab-vfab-1t $A,$B 1
    port=18515
    pair "$bin/rc_pingpong" -d $B --ip 10.88.0.2 -s "$lat_size" -n 1000 -- \
        "$bin/rc_pingpong" -d $A --ip 10.88.0.1 -s "$lat_size" -n 1000 127.0.0.1 > /tmp/pp.out
    echo "pingpong label=vfab-vfab $(grep 'usec/iter' /tmp/pp.out)"
    if [ "$extra_nics" = 1 ]; then
        local_runs vfab-vfab-virtio 0000:00:04.0,0000:00:06.0 2
        local_runs vfab-vfab-virtio-1t 0000:00:04.0,0000:00:06.0 1
        local_runs vfab-vfab-igb 0000:00:05.0,0000:00:0a.0 2
        local_runs vfab-vfab-igb-1t 0000:00:05.0,0000:00:0a.0 1
    fi
}
run_B() {
    case $setups in *B*) ;; *) return 0 ;; esac
    port=18600
    for m in $(modes); do
        # shellcheck disable=SC2046
        pair "$bin/rdma_bench_verbs" server -d rxe0 -x 1 --label vfab-rxe -- \
            "$bin/rdma_bench" client "$m" 127.0.0.1 -d $A --ip 10.77.0.1 $(opts_of "$m") --label vfab-rxe ||
            say "vfab-rxe $m failed"
        # shellcheck disable=SC2046
        pair "$bin/rdma_bench" server -d $A --ip 10.77.0.1 --label rxe-vfab -- \
            "$bin/rdma_bench_verbs" client "$m" 127.0.0.1 -d rxe0 -x 1 $(opts_of "$m") --label rxe-vfab ||
            say "rxe-vfab $m failed"
    done
    port=18515
    pair ibv_rc_pingpong -d rxe0 -g 1 -s "$lat_size" -n 1000 -- \
        "$bin/rc_pingpong" -d $A --ip 10.77.0.1 -s "$lat_size" -n 1000 127.0.0.1 > /tmp/pp.out
    echo "pingpong label=vfab-rxe $(grep 'usec/iter' /tmp/pp.out)"
}
# perftest LABEL TOOL ARGS...: the server on 03.0's device, the client on 02.0's — rxe0 / rxe1
# (GID index 1) on the system's libibverbs for rxe-rxe-perftest, vfab1 / vfab0 (GID index 0)
# through vfab-run for vfab-vfab-perftest[-VARIANT] — both with -F and ARGS. A run whose clock
# calibration failed under TCG (a warning and zeros) is run again, twice at most.
vdevs=$A=10.77.0.1,$B=10.77.0.2
perftest() {
    label=$1 tool=$2
    shift 2
    case $label in
    rxe-rxe-perftest) scmd="$tool -d rxe0 -x 1" ccmd="$tool -d rxe1 -x 1" ;;
    vfab-vfab-perftest*)
        scmd="env VFAB_VERBS_DEVICES=$vdevs $(variant_env "$label" "$tool" server) $bin/vfab-run $tool -d vfab1 -x 0"
        ccmd="env VFAB_VERBS_DEVICES=$vdevs $(variant_env "$label" "$tool" client) $bin/vfab-run $tool -d vfab0 -x 0"
        ;;
    esac
    port=18515
    for attempt in 1 2 3; do
        # shellcheck disable=SC2086 # the commands' words
        pair $scmd -F "$@" -- $ccmd -F "$@" 127.0.0.1 > /tmp/pt.out
        line=$(grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+' /tmp/pt.out | tail -n1)
        if grep -qi 'r^2\|calibrat\|conflicting' /tmp/pt.out || [ -z "$line" ]; then
            say "$label $tool attempt $attempt: clock calibration failed or no result; $(grep -i 'r^2\|calibrat\|conflicting\|error\|fail' /tmp/pt.out | head -n2 | tr '\n' ' ')"
            continue
        fi
        echo "perftest label=$label tool=$tool $line"
        return 0
    done
}
# variant_env LABEL TOOL server|client: the environment of one end of a vfab perftest run (the
# variants in the header). pair() pins the server to vCPU 0 and the client to vCPU 1; taskset
# inside the command (nopin) widens that again.
variant_env() {
    case $1 in
    *-app)
        case $2:$3 in
        ib_write_bw:client | ib_read_lat:client | ib_atomic_bw:client | ib_send_lat:*) echo VFAB_VERBS_PROGRESS=app ;;
        esac
        ;;
    *-sleep[0-9]*) echo "VFAB_VERBS_PROGRESS_SLEEP_US=${1##*-sleep}" ;;
    *-nopin) echo "taskset -c 0,1" ;;
    *-cpu) if [ "$3" = server ]; then echo VFAB_VERBS_PROGRESS_CPU=1; else echo VFAB_VERBS_PROGRESS_CPU=0; fi ;;
    esac
}
perftests() {
    perftest "$1" ib_write_bw -s "$bw_size" -n "$bw_iters" --report_gbits
    perftest "$1" ib_read_lat -s "$lat_size" -n "$lat_iters"
    perftest "$1" ib_send_lat -s "$lat_size" -n "$lat_iters"
    case $1 in *-app) ;; *) perftest "$1" ib_write_lat -s "$lat_size" -n "$lat_iters" ;; esac
    perftest "$1" ib_atomic_bw -n "$atomic_iters"
}
run_D() {
    case $setups in *D*) ;; *) return 0 ;; esac
    for v in $(echo "$variants" | tr , ' '); do
        case $v in
        default) perftests vfab-vfab-perftest ;;
        app | sleep[0-9]* | nopin | cpu) perftests "vfab-vfab-perftest-$v" ;;
        *) say "unknown variant $v" ;;
        esac
    done
}
# frames NIC: what its interface sent and received so far.
frames() { echo "$(cat "/sys/class/net/$1/statistics/tx_packets") $(cat "/sys/class/net/$1/statistics/rx_packets")"; }
run_C() {
    case $setups in *C*) ;; *) return 0 ;; esac
    na=$(ifname_of $A)
    nb=$(ifname_of $B)
    # shellcheck disable=SC2046
    set -- $(frames "$na") $(frames "$nb") $(frames lo)
    port=18600
    for m in $(modes); do
        # shellcheck disable=SC2046
        pair "$bin/rdma_bench_verbs" server -d rxe0 -x 1 --label rxe-rxe -- \
            "$bin/rdma_bench_verbs" client "$m" 127.0.0.1 -d rxe1 -x 1 $(opts_of "$m") --label rxe-rxe ||
            say "rxe-rxe $m failed"
    done
    perftests rxe-rxe-perftest
    port=18515
    pair ibv_rc_pingpong -d rxe0 -g 1 -s "$lat_size" -n 1000 -- \
        ibv_rc_pingpong -d rxe1 -g 1 -s "$lat_size" -n 1000 127.0.0.1 > /tmp/pp.out
    echo "pingpong label=rxe-rxe $(grep 'usec/iter' /tmp/pp.out)"
    # shellcheck disable=SC2046
    set -- "$@" $(frames "$na") $(frames "$nb") $(frames lo)
    say "rxe <-> rxe went over the wire: $na sent $(($7 - $1)) and received $(($8 - $2)) frames, $nb sent $(($9 - $3)) and received $((${10} - $4)); lo carried $((${11} - $5)) (the side channels)"
}

# Set-ups: state A (both on vfio-pci) <-> B (03.0 the kernel's) <-> C (both the kernel's).
to_A_from_B() { rxe_del rxe0 && to_vfio $B; }
to_B_from_A() { to_kernel $B 10.77.0.2 && rxe_add rxe0 $B 10.77.0.2; }
to_C_from_B() { to_kernel $A 10.77.0.1 && rxe_add rxe1 $A 10.77.0.1 && routing_on; }
to_B_from_C() { routing_off; rxe_del rxe1 && to_vfio $A; }

$IP link set lo up
for m in crc32_generic ib_core ib_uverbs udp_tunnel ip6_udp_tunnel rdma_rxe; do modprobe $m || { say "modprobe $m failed"; exit 1; }; done
say "rounds=$rounds setups=$setups variants=$variants write_bw: $bw_opts; latency: -s $lat_size -n $lat_iters; atomic_rate: -n $atomic_iters --window 16"
r=1
while [ $r -le "$rounds" ]; do
    say "round $r"
    if [ $((r % 2)) = 1 ]; then
        run_A
        run_D
        to_B_from_A || exit 1
        run_B
        to_C_from_B || exit 1
        run_C
    else
        run_C
        to_B_from_C || exit 1
        run_B
        to_A_from_B || exit 1
        run_D
        run_A
    fi
    r=$((r + 1))
done
# Leave the lab as found: both NICs on vfio-pci.
if [ "$(driver_of $A)" != vfio-pci ]; then to_B_from_C; fi
if [ "$(driver_of $B)" != vfio-pci ]; then to_A_from_B; fi
exit 0
