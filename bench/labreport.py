#!/usr/bin/env python3
"""Reads the results that lab guest scripts frame on the console and prints reports.

Guest scripts (examples/lab/demo.sh, bench/lab/report_guest.sh) print each tool's result as
    @@json-begin NAME
    {...JSON...}          (or one line of key=value pairs, as dpdk-pps prints)
    @@json-end NAME rc=N
`blocks()` returns them in order; `python3 bench/labreport.py demo LOG` prints scripts/demo's
report. bench/run imports this module."""
import json
import re
import sys


def parse_payload(text):
    """JSON, or a line of key=value pairs (numbers converted)."""
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        out = {}
        for k, v in re.findall(r'(\w+)=(\S+)', text):
            try:
                out[k] = float(v) if '.' in v else int(v)
            except ValueError:
                out[k] = v
        return out or None


def blocks(log_text):
    """[(name, rc, payload or None)] in console order."""
    out, name, lines = [], None, []
    for line in log_text.replace('\r', '').splitlines():
        m = re.match(r'^@@json-begin (\S+)', line)
        if m:
            name, lines = m.group(1), []
            continue
        m = re.match(r'^@@json-end (\S+) rc=(\d+)', line)
        if m and name is not None:
            out.append((name, int(m.group(2)), parse_payload('\n'.join(lines))))
            name = None
            continue
        if name is not None:
            lines.append(line)
    return out


def fmt_us(v):
    return f'{v:.0f} µs' if v >= 100 else f'{v:.1f} µs'


def demo_report(log_text):
    """scripts/demo's report; returns (text, ok)."""
    res = {name: (rc, p) for name, rc, p in blocks(log_text)}
    lines, ok = ['', 'vfab demo report (QEMU TCG lab: the emulator, not the driver, sets these figures)'], True
    rc, pp = res.get('pingpong', (None, None))
    if pp and pp.get('completed'):
        r = pp['rtt_us']
        lines.append(f"  ping-pong   {pp['completed']} of {pp['count']} round trips, {pp['size']}-byte frames: "
                     f"median {fmt_us(r['median'])}, p99 {fmt_us(r['p99'])}, p99.9 {fmt_us(r['p999'])}, "
                     f"max {fmt_us(r['max'])}")
        if pp.get('lost'):
            lines.append(f"              LOST {pp['lost']} round trips")
            ok = False
    else:
        lines.append('  ping-pong   no result (see the output above)')
        ok = False
    for name, what in (('pktgen', 'busy-poll'), ('pktgen-interrupt', 'interrupt')):
        rc, pg = res.get(name, (None, None))
        if not pg or 'rx' not in pg:
            lines.append(f'  throughput  ({what}) no result (see the output above)')
            ok = False
            continue
        rx, tx = pg['rx'], pg['tx']
        lost = tx['frames'] - rx['frames'] + rx.get('lost', 0)
        label = f'  throughput  {what:9s}'
        if lost > 0 or rx.get('bad') or rc != 0 or not pg.get('ok', False):
            lines.append(f"{label} LOST {max(lost, 0)} of {tx['frames']} frames "
                         f"(bad {rx.get('bad', 0)}, dropped by the NIC {rx.get('missed', 0)}): no rate")
            ok = False
            continue
        cpu = pg.get('cpu', {})
        lines.append(f"{label} {rx['pps'] / 1e3:.0f} kpps ({rx['frames']} frames of {pg['size']} bytes in "
                     f"{rx['seconds']:.1f} s, none lost), CPU {cpu.get('ns_per_frame', 0):.0f} ns per packet "
                     f"({cpu.get('seconds', 0):.2f} s user+system)")
    # perftest between vfab's drop-in libibverbs (server) and the kernel's rxe (client): the
    # columns after #bytes and #iterations (a, b, c) are bandwidth's peak and average, and
    # latency's minimum, maximum and typical.
    perftest = (('rdma-write-bw', 'RDMA write', 'b',
                 lambda p: f"ib_write_bw, {p['bytes']}-byte WRITEs, vfab <-> the kernel's rxe: {p['b']} Gb/s average (peak {p['a']})"),
                ('rdma-read-lat', 'RDMA read ', 'c',
                 lambda p: f"ib_read_lat, {p['bytes']}-byte READs, vfab <-> rxe: typical {p['c']} µs (min {p['a']}, max {p['b']})"))
    for name, label, needs, text in perftest:
        rc, p = res.get(name, (None, None))
        if p and needs in p:
            lines.append(f'  {label}  {text(p)}')
        elif name in res:
            lines.append(f'  {label}  no result (see the output above)')
            ok = False
    rc, p = res.get('rping', (None, None))
    if 'rping' in res:
        if rc == 0 and p and int(p.get('pings', 0)) > 0:
            lines.append(f"  rdma_cm     rping, vfab's librdmacm (server) <-> the kernel's rdma_cm on rxe: "
                         f"{p['pings']} pings, each one's data checked")
        else:
            lines.append('  rdma_cm     rping: no result (see the output above)')
            ok = False
    lines.append('  CPU per packet is getrusage() time over frames received, for the whole process (both ports);')
    lines.append('  a busy-polling loop never idles, so there it is about 1 / rate; interrupt mode sleeps instead.')
    return '\n'.join(lines), ok


def main(argv):
    if len(argv) != 3 or argv[1] != 'demo':
        print('usage: labreport.py demo CONSOLE_LOG', file=sys.stderr)
        return 2
    with open(argv[2], errors='replace') as f:
        text, ok = demo_report(f.read())
    print(text)
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv))
