// virtio-net over vhost-user: the same Device, queues and fast path as over VFIO/PCI, with a
// back-end process serving the virtqueues through the vhost-user protocol. What changes is
// the transport: feature negotiation and vring setup are messages, the doorbell is the vring's
// kick eventfd, a completion queue's channel is the call eventfd of its vrings, and the
// "IOMMU" is the vhost-user memory table (VhostMemory below), so ProtectionDomain and the
// queue pair's ring arenas work unchanged, with IOVA = VA.
#include <poll.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <map>

#include "vfab/drivers/virtio_net.hpp"

namespace vfab::virtio_net {
namespace {

using virtio::feature_bit;
namespace vf = virtio::feature;
namespace nf = virtio::net_feature;

constexpr uint64_t kTagHangup = 3;
constexpr uint32_t kVhostCqs = 8;            // completion channels (eventfds) a device offers
constexpr uint32_t kVhostMaxQueue = 1024;    // entries per virtqueue (QEMU's limit, DPDK's default)
constexpr uint32_t kRxVring = 0, kTxVring = 1;

// The memory the back-end can reach, as an IOMMU context: every mapping becomes a region of the
// vhost-user memory table (the DmaMemory's memfd, guest address = the IOVA, user address = the
// pointer) and the whole table is sent again (SET_MEM_TABLE). Only DMA memory can be mapped:
// the back-end mmap()s its memfd.
class VhostMemory final : public vfio::IommuContext {
public:
    explicit VhostMemory(virtio::VhostUserFrontend& fe)
        : IommuContext(vfio::IommuBackend::legacy, vfio::Sys::real()), fe_(&fe) {
        info_.page_sizes = 4096 | (2u << 20) | (1ull << 30);
        info_.iova_ranges = {vfio::IovaRange{0x1000, (1ull << 57) - 1}};
        devices_ = 1;
    }
    const char* device_memory_refusal() const override {
        return "this domain's memory is shared with a vhost-user back-end, which maps only vfab's DMA arenas";
    }
    // The device is closing: later unmaps only forget their regions.
    void detach() {
        std::lock_guard lock(mutex_);
        fe_ = nullptr;
    }

protected:
    Result<vfio::DeviceAttachment> attach(const PciAddress&, const vfio::PciSysfs&) override {
        return Error{ENOTSUP, "a vhost-user memory table takes no PCI device"};
    }
    Result<Iova> do_map(void* va, size_t len, Iova iova, unsigned) override {
        auto shared = dma::find_dma_memory(va, len);
        if (!shared)
            return Error{EINVAL, "over vhost-user only memory from pd().create_arena() can be registered: the "
                                 "backend maps it through its memfd"};
        if (!fe_) return Error{ENODEV, "the vhost-user device is closed"};
        if (regions_.size() >= virtio::vhost_user::kMaxMemRegions)
            return Error{ENOSPC, str_cat("the vhost-user memory table holds at most ", virtio::vhost_user::kMaxMemRegions,
                                         " regions (one per arena, the queue pair's rings included): create fewer, "
                                         "larger arenas")};
        regions_[iova.value] = virtio::MemRegion{shared->fd, iova.value, reinterpret_cast<uintptr_t>(va), len,
                                                 shared->offset};
        if (auto r = send(); !r) {
            regions_.erase(iova.value);
            return r.take_error();
        }
        return iova;
    }
    Result<void> do_unmap(Iova iova, size_t) override {
        regions_.erase(iova.value);
        // Best effort: a back-end that is gone has nothing to forget.
        if (fe_ && !regions_.empty() && fe_->alive()) (void)send();
        return {};
    }

private:
    Result<void> send() {
        std::vector<virtio::MemRegion> table;
        for (const auto& [iova, region] : regions_) table.push_back(region);
        return fe_->set_mem_table(table);
    }

    virtio::VhostUserFrontend* fe_;
    std::map<uint64_t, virtio::MemRegion> regions_;   // by guest address (IOVA)
};

}  // namespace

Result<std::unique_ptr<Device>> Device::open_vhost_user(std::string_view socket_path, const DeviceOptions& opts) {
    auto fe = virtio::VhostUserFrontend::connect(socket_path);
    if (!fe) return fe.take_error();
    auto events = vfio::EventWaiter::create();
    if (!events) return events.take_error();
    std::unique_ptr<Device> dev(new Device(std::move(*fe), std::move(*events)));
    if (auto r = dev->init_vhost(opts); !r) return r.take_error();
    return dev;
}

Result<void> Device::init_vhost(const DeviceOptions& opts) {
    if (opts.mtu && (opts.mtu < 68 || opts.mtu > kMaxMtu))
        return Error{EINVAL, str_cat("virtio-net: MTU ", opts.mtu, " is out of range: 68 to ", kMaxMtu, " (0: 1500)")};
    opts_ = opts;
    const std::string where = str_cat("the vhost-user backend at ", vhost_->path());
    // Not negotiated: ACCESS_PLATFORM (vhost-user rings are this process's addresses), CTRL_VQ
    // (no VM: nobody serves the control queue; DPDK's library does not), STATUS and MAC (a
    // back-end has no link or address of its own to report), MRG_RXBUF, MQ (one queue pair),
    // GUEST_CSUM (as over PCI: frames with a partial checksum would need completing here).
    uint64_t wanted = feature_bit(nf::CSUM);
    if (opts.event_idx) wanted |= feature_bit(vf::EVENT_IDX);
    if (opts.in_order) wanted |= feature_bit(vf::IN_ORDER);
    if (opts.ring != RingFormat::split) wanted |= feature_bit(vf::RING_PACKED);
    auto negotiated = vhost_->negotiate(wanted, feature_bit(vf::VERSION_1));
    if (!negotiated) return negotiated.take_error();
    features_ = *negotiated;
    packed_ = virtio::has_feature(features_, vf::RING_PACKED);
    if (opts.ring == RingFormat::packed && !packed_)
        return Error{ENOTSUP, str_cat("packed virtqueues were asked for but ", where,
                                      " does not offer VIRTIO_F_RING_PACKED: use RingFormat::split or automatic")};
    if (auto r = events_.add(vhost_->socket_fd(), kTagHangup); !r) return r;
    vectors_ = kVhostCqs + 1;   // vector 0 stands for configuration changes over PCI: unused here
    for (uint32_t i = 0; i < vectors_; ++i) {
        const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fd < 0) return Error::from_errno(errno, "eventfd for a completion channel", "raise `ulimit -n`");
        vhost_calls_.emplace_back(fd, vfio::Sys::real());
    }
    vhost_mem_ = std::make_shared<VhostMemory>(*vhost_);
    auto pd = dma::ProtectionDomain::create(vhost_mem_, opts.pd);
    if (!pd) return pd.take_error();
    pd_ = std::move(*pd);

    const std::array<uint8_t, 6> mac = opts.mac.value_or(kDefaultVhostMac);
    attr_.provider = "virtio-net";
    attr_.name = "virtio-net (vhost-user)";
    attr_.vendor_id = kPciIds[0].vendor;   // what a virtio-net device over PCI would be
    attr_.device_id = kPciIds[0].device;
    std::copy(mac.begin(), mac.end(), attr_.mac);
    attr_.mtu = opts.mtu ? opts.mtu : kDefaultMtu;
    attr_.max_qp = 1;
    qps_.resize(1);
    attr_.max_cq = kVhostCqs;
    attr_.max_qp_wr = kVhostMaxQueue;
    attr_.max_send_sge = kMaxSendSge;
    attr_.max_recv_sge = kMaxRecvSge;
    attr_.recv_buffer_size = attr_.mtu + kEthHeader;
    attr_.offloads = (virtio::has_feature(features_, nf::CSUM) ? offload_tx_ip_csum : 0u) |
                     (virtio::has_feature(features_, nf::GUEST_CSUM) ? offload_rx_ip_csum : 0u);
    attr_.interrupt_vectors = vectors_;
    link_up_ = true;
    return {};
}

// Both vrings start together (DPDK stops the whole device on any GET_VRING_BASE): receiveq1 is
// vring 0, transmitq1 vring 1, each signalling its completion queue's eventfd.
Result<void> Device::start_vhost_queues(QueuePair& qp, const virtio::QueueMemory& rx, uint32_t rx_size,
                                        const virtio::QueueMemory& tx, uint32_t tx_size) {
    // A new ring: index 0, and for packed rings the wrap counter 1 (bit 15, as DPDK reads it).
    const uint32_t base = packed_ ? 0x8000u : 0u;
    const struct { uint32_t index; const virtio::QueueMemory& m; uint32_t size; int call; } rings[] = {
        {kRxVring, rx, rx_size, qp.recv_cq_->efd_}, {kTxVring, tx, tx_size, qp.send_cq_->efd_}};
    driver_ok_ = true;   // from here, stop_vhost_queues() stops whatever started
    for (const auto& r : rings) {
        virtio::VringConfig c{};
        c.index = r.index;
        c.size = r.size;
        c.desc = r.m.desc;
        c.avail = r.m.driver;
        c.used = r.m.device;
        c.base = base;
        c.call_fd = r.call;
        if (auto s = vhost_->start_vring(c); !s) {
            stop_vhost_queues();
            return Error{s.error().code, str_cat("create_qp: starting vring ", r.index, ": ", s.error().message)};
        }
    }
    qp.rx_bell_ = {nullptr, vhost_->kick_fd(kRxVring), uint16_t(kRxVring)};
    qp.tx_bell_ = {nullptr, vhost_->kick_fd(kTxVring), uint16_t(kTxVring)};
    return {};
}

void Device::stop_vhost_queues() {
    if (!driver_ok_) return;
    driver_ok_ = false;
    if (removed_ || !vhost_->alive()) return;
    for (uint32_t i : {kRxVring, kTxVring}) (void)vhost_->stop_vring(i);
}

// Caller holds mu_. True once the back-end has hung up; the first time, the queue pair goes
// to the error state (outstanding WRs flush) and every completion channel fires.
bool Device::vhost_hung_up() {
    if (!removed_ && !vhost_->alive()) {
        removed_ = true;
        enter_error_state();
    }
    return removed_;
}

void Device::close_vhost() {
    stop_vhost_queues();
    // The back-end forgets the memory table with the connection: no more SET_MEM_TABLE.
    if (vhost_mem_) static_cast<VhostMemory&>(*vhost_mem_).detach();
    qps_.clear();
    dead_qps_.clear();
    cqs_.clear();
    pd_.reset();
    vhost_mem_.reset();
}

std::shared_ptr<vfio::IommuContext> Device::iommu_shared() const {
    return vhost_ ? vhost_mem_ : vfio_->iommu_shared();
}

void CompletionQueue::check_backend() noexcept {
    std::unique_lock lock(dev_->mu_, std::try_to_lock);   // busy: the next check will do
    if (lock) (void)dev_->vhost_hung_up();
}

}  // namespace vfab::virtio_net
