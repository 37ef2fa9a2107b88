// vfab's multiplexed API (libvfab.so): one set of abstract classes for every device vfab has
// a provider for, the provider picked at run time from the device's PCI IDs.
//
//   auto dev = vfab::Device::open("0000:03:00.0");       // e1000e, virtio-net, ... by ID
//   if (!dev) { std::fprintf(stderr, "%s\n", dev.error().message.c_str()); return 1; }
//   vfab::CompletionQueue* cq = *(*dev)->create_cq(512);
//   vfab::QueuePair* qp = *(*dev)->create_qp({.send_cq = cq, .recv_cq = cq});
//   auto mr = (*dev)->pd().register_memory(buf, len, vfab::dma::Access::local_write);
//   qp->post_recv(wrs);                                   // one virtual call per batch
//   int n = cq->poll(wc);
//
// The operations and their semantics are those of each provider's direct API (for instance
// include/vfab/drivers/e1000e.hpp), which the provider adapter (vfab/provider.hpp) forwards
// to: the only cost over direct linking is one indirect call per batch. Provider extensions
// (device registers, ...) are reachable through the direct API only.
//
// The device owns its completion queues and queue pairs: destroy() releases one early and
// using it afterwards returns ENODEV instead of touching freed memory; the objects themselves
// go when the device is destroyed.
//
// Thread model: one thread at a time per queue pair / completion queue; control calls are
// thread-safe.
#pragma once

#include <cerrno>
#include <cstdint>
#include <ios>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "vfab/dma/protection_domain.hpp"
#include "vfab/result.hpp"
#include "vfab/types.hpp"
#include "vfab/vfio/iommu.hpp"

namespace vfab {

struct OpenOptions {
    // IOMMU backend; automatic: iommufd when the device has a VFIO cdev and /dev/iommu exists,
    // else legacy (VFAB_IOMMU_BACKEND overrides). No-IOMMU mode only when asked for.
    vfio::IommuBackend backend = vfio::IommuBackend::automatic;
    bool promiscuous = false;   // accept every unicast and multicast frame
    // The link's MTU (largest frame mtu + 14 bytes): 0 for the device's default (1500). Larger
    // ("jumbo") where the provider can (virtio-net); EOPNOTSUPP where it cannot.
    uint32_t mtu = 0;
    // Where libvfab-<name>.so provider plugins are looked for. Empty: the environment
    // variable VFAB_PROVIDER_DIR, else the install's <libdir>/vfab/providers.
    std::string provider_dir;
    // Use this provider (by name) instead of the one the PCI IDs select.
    std::string provider;
    // The sysfs tree the PCI IDs and driver binding are read from (tests use a fake one).
    std::string sysfs_root = "/sys";
};

class CompletionQueue {
public:
    // Up to out.size() completions; a negative errno when the CQ was destroyed (-ENODEV).
    virtual int poll(std::span<Completion> out) noexcept = 0;
    // Requests one notification on channel_fd() for the next completion (ibv_req_notify_cq);
    // a completion already waiting signals the channel at once.
    virtual Result<void> arm() = 0;
    // An eventfd: readable after arm() once a completion arrives.
    virtual int channel_fd() const noexcept = 0;
    // Reads and clears the channel; the number of notifications since the last call.
    virtual uint64_t take_events() noexcept = 0;
    // EBUSY while a queue pair uses it; ENODEV when already destroyed.
    virtual Result<void> destroy() = 0;

    CompletionQueue(const CompletionQueue&) = delete;
    CompletionQueue& operator=(const CompletionQueue&) = delete;

protected:
    CompletionQueue() = default;
    virtual ~CompletionQueue() = default;   // the device deletes it
};

struct QpInitAttr {
    CompletionQueue* send_cq = nullptr;   // required; may be the same as recv_cq
    CompletionQueue* recv_cq = nullptr;
    QpCaps caps = {};          // its defaults: 256 WRs each way, 1 SGE
    bool sq_sig_all = false;   // every send completes (else only send_signaled ones and errors)
};

// create_qp_ex's attributes: QpInitAttr's, then the fields comp_mask names. A struct of its
// own (as verbs' ibv_qp_init_attr_ex), so that QpInitAttr keeps the layout programs built
// against libvfab.so.1 pass, and so that it cannot be handed to create_qp by mistake (its
// flags would be lost).
enum QpInitAttrMask : uint32_t {
    qp_init_attr_create_flags = 1u << 0,   // create_flags is set
};
enum QpCreateFlags : uint32_t {
    // The application keeps attr().frame_headroom bytes free before every WR's first SGE, in
    // the same memory region (with local_write for receives): a provider with a header of its
    // own in front of each frame puts it there, so that a frame of one SGE is one descriptor
    // instead of two (virtio-net: its queues then hold twice the WRs; a WR whose headroom lies
    // outside its MR completes with local_protection_error). Providers whose frame_headroom is
    // 0 (e1000e, igb, igbvf) ignore it.
    qp_create_hdr_in_headroom = 1u << 0,
};
struct QpInitAttrEx {
    CompletionQueue* send_cq = nullptr;   // as in QpInitAttr
    CompletionQueue* recv_cq = nullptr;
    QpCaps caps = {};
    bool sq_sig_all = false;
    uint32_t comp_mask = 0;      // QpInitAttrMask
    uint32_t create_flags = 0;   // QpCreateFlags, with qp_init_attr_create_flags

    // The QpInitAttr part.
    QpInitAttr base() const { return {send_cq, recv_cq, caps, sq_sig_all}; }
};

// A comp_mask bit or create flag this library does not know, as the error create_qp_ex
// returns (a program built against newer headers then fails clearly instead of losing what it
// asked for); nothing when all are known.
inline std::optional<Error> unknown_qp_init_bits(const QpInitAttrEx& init) {
    constexpr uint32_t known_mask = qp_init_attr_create_flags, known_flags = qp_create_hdr_in_headroom;
    if (init.comp_mask & ~known_mask)
        return Error{EINVAL, str_cat("create_qp_ex: comp_mask 0x", std::hex, init.comp_mask & ~known_mask, std::dec,
                                     " is not known to this libvfab (it knows 0x", std::hex, known_mask, std::dec,
                                     "): clear it, or run with the libvfab the program was built against")};
    if ((init.comp_mask & qp_init_attr_create_flags) && (init.create_flags & ~known_flags))
        return Error{EINVAL, str_cat("create_qp_ex: create_flags 0x", std::hex, init.create_flags & ~known_flags, std::dec,
                                     " are not known to this libvfab (it knows 0x", std::hex, known_flags, std::dec, ")")};
    return std::nullopt;
}

// Whether create_qp_ex was asked for the header in the headroom.
inline bool wants_hdr_in_headroom(const QpInitAttrEx& init) {
    return (init.comp_mask & qp_init_attr_create_flags) && (init.create_flags & qp_create_hdr_in_headroom);
}

class QueuePair {
public:
    // Queues frames to send: `posted` WRs from the front were queued; see PostResult for the errors.
    virtual PostResult post_send(std::span<const SendWr> wrs) noexcept = 0;
    // Queues receive buffers: `posted` WRs from the front were queued; see PostResult.
    virtual PostResult post_recv(std::span<const RecvWr> wrs) noexcept = 0;
    // ready, error (after a device removal, fatal error or reset: destroy it) or destroyed.
    virtual QpState state() const noexcept = 0;
    // Its number in completions (Completion::qp_num): queue() + 1.
    virtual uint32_t qp_num() const noexcept = 0;
    // What it was created with, rounded up to what the device supports.
    virtual const QpCaps& caps() const noexcept = 0;
    // Its index among the device's queue pairs (0 to attr().max_qp - 1): RssConfig names
    // queue pairs by it.
    virtual uint32_t queue() const noexcept = 0;
    // Packets and bytes this queue pair sent and received (successful completions).
    virtual QpStats stats() const noexcept = 0;
    // Stops the queues and frees the rings; outstanding WRs are dropped (as ibv_destroy_qp).
    virtual Result<void> destroy() = 0;

    QueuePair(const QueuePair&) = delete;
    QueuePair& operator=(const QueuePair&) = delete;

protected:
    QueuePair() = default;
    virtual ~QueuePair() = default;   // the device deletes it
};

class Device {
public:
    // Opens the PCI function at `pci_address` ("0000:03:00.0" or "03:00.0"), which must be
    // bound to vfio-pci, with the provider registered for its vendor/device ID (or the one
    // opts.provider names): the plugins of the provider directory first, then the providers
    // built into libvfab (see vfab/provider.hpp).
    static Result<std::unique_ptr<Device>> open(std::string_view pci_address, const OpenOptions& opts = {});

    virtual ~Device() = default;
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    // What the device is and can do: provider, name, address, IDs, MAC, limits, offloads.
    virtual const DeviceAttr& attr() const = 0;
    // The link as the device reports it now.
    virtual LinkState link() const = 0;
    // The device's counters: frames and bytes each way, frames dropped, receive errors.
    virtual DeviceStats stats() = 0;
    // Memory registration: keys for the SGEs of work requests.
    virtual dma::ProtectionDomain& pd() = 0;

    // `cqe` is a capacity hint.
    virtual Result<CompletionQueue*> create_cq(uint32_t cqe) = 0;
    // The completion queues must come from this device's create_cq().
    virtual Result<QueuePair*> create_qp(const QpInitAttr& attr) = 0;
    // Receive-side scaling over the queue pairs (attr().rss_table_size > 0): ENOTSUP on
    // devices without it, EINVAL for a table, key or hash type the device cannot take.
    virtual Result<void> configure_rss(const RssConfig& cfg) = 0;
    // The multicast groups the device receives besides broadcast (a hash filter may let other
    // groups through: filter again in software); EOPNOTSUPP where the provider has no filter.
    virtual Result<void> set_multicast(std::span<const MacAddress> groups) = 0;

    // Asynchronous events: event_fd() becomes readable when one may be waiting; next_event()
    // returns it (EventType::none when there is none).
    virtual int event_fd() const = 0;
    // The next event, without blocking; EventType::none when there is none. A removal, a fatal
    // error or a reset puts the queue pairs in the error state (docs/reliability.md).
    virtual Event next_event() = 0;

    // Resets the device; queue pairs go to the error state: destroy and create them again.
    virtual Result<void> reset() = 0;

    // IEEE 1588 timestamps (attr().offloads & offload_tx_timestamp / offload_rx_timestamp):
    // ENOTSUP where the device has none; the take_ calls then return nothing.
    virtual Result<void> enable_timestamps(const TimestampConfig& cfg) = 0;
    // The device's clock, in ns.
    virtual Result<uint64_t> clock_ns() = 0;
    // The clock reads `ns` from now on (latched times too); the epoch is the device's until then.
    virtual Result<void> set_clock_ns(uint64_t ns) = 0;
    // The latched time of the last send_timestamp WR / timestamped frame, once; nothing if
    // none is waiting.
    virtual std::optional<uint64_t> take_tx_timestamp() = 0;
    // The latched time of the last timestamped received frame, once; nothing if none is waiting.
    virtual std::optional<RxTimestamp> take_rx_timestamp() = 0;

    // create_qp with what QpInitAttrEx adds (last among the virtual functions, so that programs
    // built before it find the others where they were). EINVAL for a bit or flag it does not
    // know. This default serves a device with no header of its own (frame_headroom 0), which
    // ignores qp_create_hdr_in_headroom.
    virtual Result<QueuePair*> create_qp_ex(const QpInitAttrEx& init) {
        if (auto e = unknown_qp_init_bits(init)) return *e;
        if (wants_hdr_in_headroom(init) && attr().frame_headroom != 0)
            return Error{ENOTSUP, str_cat("create_qp_ex: the ", attr().provider, " device does not take its header in the headroom")};
        return create_qp(init.base());
    }

protected:
    Device() = default;
};

}  // namespace vfab
