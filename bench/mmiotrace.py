"""MMIO accesses per packet in the lab, counted from QEMU's own trace of the devices' registers.

bench/run boots the lab a second time with QEMU tracing every MMIO dispatch
(memory_region_ops_read / _write: each names the memory region, its offset and the value) and
every config-space write (pci_cfg_write), its log (-D) a FIFO read here as it is written: no
file of hundreds of MB. Inside the guest each packets-per-second run, vfab's (lab_bench
--mmio-mark N) and DPDK's (dpdk-pps, DPDK_PPS_MMIO_MARK=N), writes 0x80 + N into the edu
device's Interrupt Line byte (config offset 0x3c) where its measured window starts and 0x40 + N
where it ends; the accesses in between, to the driver's device family, are window N's. vfab's
lab_bench counts the frames of exactly that window; testpmd's counters are read around it, so
DPDK's frames in the window are its rates times the window's length (QEMU's timestamps on the
two marks, -msg timestamp=on).

Each access is the sender's or the receiver's by the register it touches — the transmit or
receive queue's registers (e1000e/igb) or the virtqueue a notification names (virtio-net: even
queues receive, odd ones transmit, virtio 1.2 §5.1.2) — and is divided by the frames that side
handled: DPDK's testpmd sends open loop, so its sender handles more frames than its receiver.
Anything else of the device (interrupt registers, the common configuration) counts against the
frames received.
"""
import os
import re
import threading

TRACE_EVENTS = ['memory_region_ops_read', 'memory_region_ops_write', 'pci_cfg_write']
QEMU_ARGS = ' '.join(f'-trace enable={e}' for e in TRACE_EVENTS) + ' -msg timestamp=on'
MARK_BEGIN, MARK_END = 0x80, 0x40

# Memory regions of each driver's device as QEMU names them (hw/net/e1000e.c, igb.c,
# hw/virtio/virtio-pci.c), and the register ranges of the transmit and receive queues (82574L
# datasheet §10.2.6 / §10.2.7, 82576 datasheet §8.10 / §8.9 with the legacy aliases at
# 0x2800 / 0x3800). The drivers' own register definitions are in drivers/intel.
FAMILY = {'e1000e': ('e1000e',), 'igb': ('igb',), 'virtio-net': ('virtio-pci',)}
# The trace gives the address in the BAR's parent (BAR base + offset); BAR 0 of both Intel
# devices is 128 KiB, aligned to its size.
BAR_MASK = {'e1000e': 0x1ffff, 'igb': 0x1ffff}
TX_RANGES = {'e1000e': [(0x3800, 0x3a00)], 'igb': [(0x3800, 0x3a00), (0xe000, 0xe400)]}
RX_RANGES = {'e1000e': [(0x2800, 0x2a00)], 'igb': [(0x2800, 0x2a00), (0xc000, 0xc400)]}

ACCESS = re.compile(r"memory_region_ops_(read|write) cpu -?\d+ mr (0x[0-9a-f]+) addr (0x[0-9a-f]+) "
                    r"value (0x[0-9a-f]+) size \d+ name '([^']*)'")
MARK = re.compile(r'(\d+\.\d+):pci_cfg_write edu .*@0x3c <- 0x([0-9a-f]+)')


class Counter(threading.Thread):
    """Reads QEMU's trace from FIFO until stop(); windows[N] = {(rw, mr, name, addr, value): count}
    (value kept for notifications only: the queue index; None elsewhere), seconds[N] its length."""

    def __init__(self, fifo):
        super().__init__(daemon=True)
        self.fifo, self.windows, self.seconds, self.lines, self._stopping = fifo, {}, {}, 0, False

    def run(self):
        while not self._stopping:   # QEMU opens the log again when the lab retries a boot
            with open(self.fifo, errors='replace') as f:
                cur = None
                for line in f:
                    self.lines += 1
                    if cur is not None and 'memory_region_ops_' in line:
                        m = ACCESS.search(line)
                        if m:
                            rw, mr, addr, value, name = m.groups()
                            key = (rw, mr, name, int(addr, 16), int(value, 16) if 'notify' in name else None)
                            cur[key] = cur.get(key, 0) + 1
                    elif 'pci_cfg_write' in line:
                        m = MARK.search(line)
                        if m:
                            t, v = float(m.group(1)), int(m.group(2), 16)
                            if v & MARK_BEGIN:
                                cur, began = {}, t
                                self.windows[v & 0x3f] = cur
                            elif v & MARK_END and cur is not None:
                                self.seconds[v & 0x3f] = t - began
                                cur = None

    def stop(self):
        """Ends the thread once QEMU has closed the FIFO (or never opened it)."""
        self._stopping = True
        try:   # a reader still waiting in open() needs a writer to come and go
            os.close(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        self.join(timeout=10)


def side(driver, name, addr, value):
    """'tx', 'rx' or 'other' for an access of DRIVER's device."""
    if driver == 'virtio-net':
        if 'notify' in name and value is not None:
            return 'tx' if value & 1 else 'rx'
        return 'other'
    addr &= BAR_MASK[driver]
    for lo, hi in TX_RANGES[driver]:
        if lo <= addr < hi:
            return 'tx'
    for lo, hi in RX_RANGES[driver]:
        if lo <= addr < hi:
            return 'rx'
    return 'other'


def per_packet(driver, window, tx_frames, rx_frames):
    """Reads and writes per packet for one window: of the queues' registers, each side's over the
    frames it handled; of the device's other registers, over the frames received. With the
    registers touched (name+offset -> [reads, writes]) and what fell outside the family."""
    n = {(s, rw): 0 for s in ('tx', 'rx', 'other') for rw in ('read', 'write')}
    registers, foreign = {}, {}
    for (rw, _mr, name, addr, value), count in window.items():
        if not name.startswith(FAMILY[driver]):
            foreign[name] = foreign.get(name, 0) + count
            continue
        s = side(driver, name, addr, value)
        n[(s, rw)] += count
        off = addr & BAR_MASK.get(driver, ~0)
        reg = registers.setdefault(f'{name}+{off:#x}' + (f' queue {value}' if value is not None else ''), [0, 0])
        reg[rw == 'write'] += count
    if not tx_frames or not rx_frames:
        return None
    # The queues' registers (the fast path) apart from the device's others (link, status,
    # interrupt causes: what a device-event check reads).
    out = {}
    for rw in ('read', 'write'):
        out[rw + 's'] = n[('tx', rw)] / tx_frames + n[('rx', rw)] / rx_frames
        out['other_' + rw + 's'] = n[('other', rw)] / rx_frames
    out.update({'tx_frames': tx_frames, 'rx_frames': rx_frames,
                'accesses': {f'{s}_{rw}s': c for (s, rw), c in n.items()}, 'registers': registers,
                'outside_the_device': foreign})
    return out
