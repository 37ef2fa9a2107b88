// The public face of an Intel e1000-family device (e1000e, igb, igbvf): the calls every one of
// them has, each forwarded to the device's private implementation (its DeviceImpl, an
// intel::QueueSet with the device's bring-up, in drivers/<name>/device_impl.hpp). A driver's
// Device derives from it and adds the calls of its own (igb's clock, igbvf's promiscuous
// modes). The definitions are in drivers/intel/device_handle_impl.hpp, instantiated once per
// driver: no control-path state or declaration in the public header.
#pragma once

#include <memory>
#include <span>

#include "vfab/dma/protection_domain.hpp"
#include "vfab/drivers/intel/queue_set.hpp"
#include "vfab/result.hpp"
#include "vfab/types.hpp"

namespace vfab::vfio {
class Device;
class Region;
}  // namespace vfab::vfio

namespace vfab::intel {

template <class Derived, class Impl, class Traits, class Options>
class DeviceHandle {
public:
    // Opens the function at `addr` (bound to vfio-pci), resets and sets it up and waits up to
    // opts.link_timeout_ms for link (still down: no error); deleting the device quiesces it and
    // frees its queues and protection domain. ENODEV: its PCI IDs are not the driver's
    // (kPciIds); EINVAL: a bad option (mtu, mac); EIO: BAR 0 cannot be mmapped or the reset
    // does not complete; ENOTSUP: too few MSI-X vectors; igbvf: ETIMEDOUT, EAGAIN, ECONNRESET
    // or EPROTO from its PF's mailbox; VFIO's errors. Set-up only.
    static Result<std::unique_ptr<Derived>> open(const PciAddress& addr, const Options& opts = {});
    ~DeviceHandle();
    DeviceHandle(const DeviceHandle&) = delete;
    DeviceHandle& operator=(const DeviceHandle&) = delete;

    // What the device offers, filled in at open() (its MAC address — the EEPROM's, opts.mac or
    // an igbvf's PF's —, mtu, max_qp, max_cq, recv_buffer_size, offloads, RSS sizes).
    const DeviceAttr& attr() const;
    // The link as the status register says now (speed in Mb/s; an igbvf's is down while its PF
    // has not cleared it to send), down once the device is gone. One register read, no lock.
    LinkState link() const;
    // The device's counters since open(), all queues together: its hardware counters are read
    // and added up (the last totals once it was removed; an igbvf fills packets, bytes and
    // rx_multicast only). Control path: register reads under the device's lock.
    DeviceStats stats();
    // The device's protection domain: register the buffers WRs name here (their lkey). It
    // lives as long as the device, which frees it only after its queues have stopped.
    dma::ProtectionDomain& pd();

    // One MSI-X vector per completion queue (attr().max_cq of them). `cqe` is a capacity hint
    // (completions are read from the queues' own rings, so a CQ cannot overflow).
    Result<CompletionQueue<Traits>*> create_cq(uint32_t cqe);
    // Up to attr().max_qp queue pairs, the lowest free queue index first; each starts at once
    // (the others keep running). A completion queue takes the sends of one queue pair and the
    // receives of one.
    Result<QueuePair<Traits>*> create_qp(const QpInitAttr<Traits>& attr);

    // RSS over the queue pairs where the device has it (igb); ENOTSUP elsewhere.
    Result<void> configure_rss(const RssConfig& cfg);
    // The multicast groups the device receives besides broadcast; kept across reset().
    Result<void> set_multicast(std::span<const MacAddress> groups);

    // Asynchronous events: event_fd() becomes readable when one may be waiting; next_event()
    // returns it (EventType::none when there is none). Put event_fd() in the application's
    // epoll set, or call next_event() now and then: a device removal waits for it.
    int event_fd() const;
    // The next asynchronous event (link_up/link_down, device_fatal, device_removal; igbvf's
    // device_reset), EventType::none when there is none, and always none once the device is
    // gone. Reads the device's eventfds and registers under its lock: not for the fast path.
    Event next_event();
    // Resets the device: every queue pair goes to the error state (outstanding WRs complete
    // with wr_flush_error); destroy them and create them again.
    Result<void> reset();

    // Provider extensions: the VFIO device and its register BAR.
    vfio::Device& vfio();
    // BAR 0, the device's registers, mmapped (for diagnostics and tests: a register written
    // behind the driver's back can break it). Lives as long as the device.
    vfio::Region& bar0();

protected:
    // Takes the implementation open() built; a driver's Device constructor passes it on.
    explicit DeviceHandle(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace vfab::intel
