#!/bin/sh
# RDMA over the lab's two e1000e (hub 0): vfab <-> vfab, vfab <-> rxe and rxe <-> rxe in ONE lab
# boot, ROUNDS interleaved rounds (bench/lab/rdma_vs_rxe_guest.sh), then a table of medians and
# the ratios against rxe <-> rxe: write bandwidth, READ / SEND / WRITE latency, FETCH_ADD rate,
# registrations (vfab: REG_MR + LOCAL_INV work requests; rxe: ibv_reg_mr + ibv_dereg_mr) per second,
# and the pingpong tools' usec/iter. perftest 4.5 runs on both: rxe <-> rxe on the system's
# libibverbs, vfab <-> vfab on vfab's drop-in libibverbs.so.1 (vfab-run), each with the same
# commands; a second table compares the two.
#   bench/rdma_vs_rxe.sh [ROUNDS] [BUILD_DIR] [key=value ...]        (3, build/release)
#   keys (passed to the guest): bw_size=65536 bw_iters=200 lat_size=64 lat_iters=1000
#                               atomic_iters=1000 extra_nics=0|1 setups=ABCD
#                               variants=default[,app,sleepN,nopin,cpu]   (the guest script's header)
# Needs rdma_bench, rdma_bench_verbs, rc_pingpong and the drop-in library built:
#   cmake --build --preset release -j2 --target rdma_bench rdma_bench_verbs rc_pingpong vfab_ibverbs
# The guest's raw lines go to BUILD_DIR/rdma_vs_rxe.log (the table is made from them again
# with RDMA_VS_RXE_REPLAY=that.log).
set -eu
rounds=${1:-3}
build=${2:-build/release}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
log=$build/rdma_vs_rxe.log
if [ -n "${RDMA_VS_RXE_REPLAY:-}" ]; then
    log=$RDMA_VS_RXE_REPLAY
else
    for b in bench/rdma_bench bench/rdma_bench_verbs examples/rc_pingpong verbs/lib/libibverbs.so.1 tools/vfab-run; do
        t=$(basename "$b")
        case $t in libibverbs.so.1) t=vfab_ibverbs ;; vfab-run) t="(cmake configures it)" ;; esac
        [ -e "$build/$b" ] || { echo "no $build/$b: cmake --build --preset release -j2 --target $t" >&2; exit 1; }
    done
    case $rounds in '' | *[!0-9]*) echo "usage: $0 [ROUNDS] [BUILD_DIR] [key=value ...]" >&2; exit 2 ;; esac
    # the perftest set-up takes about a minute a variant, the rest of a round about two
    nv=1
    for kv in "$@"; do case $kv in variants=*) nv=$(echo "${kv#variants=}" | tr , '\n' | grep -c .) ;; esac; done
    echo "one lab boot, $rounds rounds (about $((rounds * (2 + nv) * 2 / 3 + 1)) minutes); raw lines in $log" >&2
    "$root/scripts/lab" --timeout $((300 + rounds * (400 + 300 * nv))) --log "$log.console" \
        --extra "$build/bench/rdma_bench" --extra "$build/bench/rdma_bench_verbs" --extra "$build/examples/rc_pingpong" \
        --extra "$build/verbs/lib/libibverbs.so.1" --extra "$build/tools/vfab-run" \
        run "$root/bench/lab/rdma_vs_rxe_guest.sh:$rounds $*" >"$log" 2>&1 ||
        { grep -E 'FAILED|failed|rdma_guest|lab\[' "$log" | tail -40 >&2; exit 1; }
fi
tr -d '\r' <"$log" | python3 -c '
import re, statistics, sys
runs = {}      # (figure, label) -> [values]
failed = []
def add(fig, label, v):
    runs.setdefault((fig, label), []).append(float(v))
# The lab boots again after a stall, a freeze or a QEMU abort: only the last boot counts (its
# rounds are the ones interleaved with each other).
lines = sys.stdin.read().splitlines()
starts = [i for i, l in enumerate(lines) if l.startswith("@@vfab:begin rdma_vs_rxe_guest.sh")]
if len(starts) > 1:
    print("the guest script started %d times (the lab booted again after a TCG stall, freeze or QEMU abort): figures of the last boot only\n"
          % len(starts))
for line in lines[starts[-1] if starts else 0:]:
    line = line.strip()
    if line.startswith("rdma_bench ") and "role=server" not in line:
        f = dict(w.split("=", 1) for w in line.split() if "=" in w)
        label, mode = f.get("label"), f.get("mode")
        if "FAILED" in line:
            failed.append(line)
            continue
        if mode == "write_bw": add("write_bw Gb/s", label, f["gbps"])
        elif mode == "atomic_rate": add("atomic kops/s", label, float(f["ops_per_s"]) / 1e3)
        elif mode == "reg_rate": add("reg+inv kops/s", label, float(f["ops_per_s"]) / 1e3)
        else:
            add(mode + " median us", label, f["median_us"])
            add(mode + " p99 us", label, f["p99_us"])
    elif line.startswith("perftest "):
        w = line.split()
        label, tool = w[1].split("=")[1], w[2].split("=")[1]
        n = [float(x) for x in w[3:]]
        if tool == "ib_write_bw": add("write_bw Gb/s", label, n[3])
        elif tool == "ib_atomic_bw": add("atomic kops/s", label, n[4] * 1e3)
        else:
            mode = tool[3:]   # ib_read_lat -> read_lat
            add(mode + " median us", label, n[4])    # t_typical
            add(mode + " p99 us", label, n[7])       # 99% percentile
    elif line.startswith("pingpong ") and "usec/iter" in line:
        m = re.search(r"label=(\S+).*= ([0-9.]+) usec/iter", line)
        if m: add("pingpong usec/iter", m.group(1), m.group(2))
if not runs:
    sys.exit("no figures in the log")
figs = ["write_bw Gb/s", "read_lat median us", "read_lat p99 us", "send_lat median us", "send_lat p99 us",
        "write_lat median us", "write_lat p99 us", "atomic kops/s", "reg+inv kops/s", "pingpong usec/iter"]
order = ["vfab-vfab", "vfab-vfab-1t", "vfab-rxe", "rxe-vfab", "rxe-rxe", "rxe-rxe-perftest"]
# perftest on the drop-in libibverbs of vfab: a table of their own, against perftest on rxe
vperf = ["vfab-vfab-perftest"] + sorted({k[1] for k in runs if k[1].startswith("vfab-vfab-perftest-")})
vperf = [l for l in vperf if any(k[1] == l for k in runs)]
labels = [l for l in order if any(k[1] == l for k in runs)] + sorted({k[1] for k in runs} - set(order) - set(vperf))
med = {k: statistics.median(v) for k, v in runs.items()}
def cell(fig, label):
    v = med.get((fig, label))
    return "-" if v is None else ("%.3f" % v if v < 1 else "%.1f" % v if v < 100 else "%.0f" % v)
ratios = [l for l in ["vfab-vfab", "vfab-vfab-1t", "vfab-rxe", "rxe-vfab"] if l in labels]
# The baseline: rxe <-> rxe at its best — the better median of rdma_bench_verbs and perftest.
more_is_better = lambda fig: fig.startswith("write_bw") or fig.startswith("atomic") or fig.startswith("reg+inv")
def base(fig):
    v = [med[(fig, l)] for l in ("rxe-rxe", "rxe-rxe-perftest") if (fig, l) in med]
    return None if not v else (max(v) if more_is_better(fig) else min(v))
print("medians over rounds (runs per cell: %s); ratios against rxe-best, the better of rxe-rxe and rxe-rxe-perftest"
      % ", ".join(sorted({"%d" % len(v) for v in runs.values()})))
head = ["figure"] + labels + ["rxe-best"] + ["%s / rxe-best" % l for l in ratios]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
def num(v):
    return "-" if v is None else ("%.3f" % v if v < 1 else "%.1f" % v if v < 100 else "%.0f" % v)
for fig in figs:
    b = base(fig)
    row = [fig] + [cell(fig, l) for l in labels] + [num(b)]
    for l in ratios:
        v = med.get((fig, l))
        row.append("-" if v is None or not b else "%.2f" % (v / b))
    print("| " + " | ".join(row) + " |")
print()
def verdict(name, fig, label, want, better):
    v, b = med.get((fig, label)), base(fig)
    if v is None or not b:
        return
    r = v / b
    ok = r >= want if better == "more" else r <= want
    print("target %-26s %-13s %.2fx rxe-best (%s %.1fx): %s" % (name, label, r, ">=" if better == "more" else "<=", want,
                                                              "met" if ok else "NOT met"))
for label in ["vfab-vfab", "vfab-vfab-1t"]:
    verdict("write bandwidth", "write_bw Gb/s", label, 3.0, "more")
    verdict("read latency (median)", "read_lat median us", label, 0.3, "less")
    verdict("send latency (median)", "send_lat median us", label, 0.3, "less")
print()
if vperf:
    ref = "rxe-rxe-perftest"
    print("perftest 4.5, the same commands: vfab <-> vfab on the drop-in libibverbs.so.1 (vfab-run) against rxe <-> rxe")
    head = ["figure", ref] + vperf + ["%s / %s" % (l, ref) for l in vperf]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for fig in ["write_bw Gb/s", "read_lat median us", "read_lat p99 us", "send_lat median us", "send_lat p99 us",
                "write_lat median us", "write_lat p99 us", "atomic kops/s"]:
        b = med.get((fig, ref))
        row = [fig, num(b)] + [cell(fig, l) for l in vperf]
        for l in vperf:
            v = med.get((fig, l))
            row.append("-" if v is None or not b else "%.2f" % (v / b))
        print("| " + " | ".join(row) + " |")
    print()
    for label in vperf:
        for name, fig, want, better in [("write bandwidth", "write_bw Gb/s", 5.0, "more"),
                                        ("read latency (median)", "read_lat median us", 0.2, "less"),
                                        ("send latency (median)", "send_lat median us", 0.2, "less")]:
            v, b = med.get((fig, label)), med.get((fig, ref))
            if v is None or not b:
                continue
            r = v / b
            ok = r >= want if better == "more" else r <= want
            print("target %-26s %-26s %.2fx %s (%s %.1fx): %s" % (name, label, r, ref, ">=" if better == "more" else "<=",
                                                                  want, "met" if ok else "NOT met"))
    print()
print("every run (figure / label: values in run order):")
for (fig, label), v in sorted(runs.items(), key=lambda kv: (figs.index(kv[0][0]) if kv[0][0] in figs else 99, kv[0][1])):
    print("  %-20s %-26s %s" % (fig, label, " ".join("%g" % x for x in v)))
if failed:
    print("\nFAILED runs:")
    for l in failed: print("  " + l)
    sys.exit(1)
'
