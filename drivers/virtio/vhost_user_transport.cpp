// virtio over vhost-user (docs/vhost-user.md): a back-end process serves the virtqueues.
// Negotiation and vring set-up are messages, a doorbell is the vring's kick eventfd, a
// completion channel is an eventfd given as the vrings' call, and the address space is the
// vhost-user memory table (VhostMemoryTable below), with IOVA = VA.
#include <sys/eventfd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "transport.hpp"
#include "vfab/drivers/virtio/vhost_user.hpp"

namespace vfab::virtio {
namespace {

namespace vf = feature;
namespace nf = net_feature;

// What the vhost-user transport does not carry: ACCESS_PLATFORM (the rings are this process's
// addresses), CTRL_VQ and what needs it (no VM: nobody serves a control queue; DPDK's library
// does not), STATUS and MAC (a back-end has no link or address of its own to report),
// MRG_RXBUF, GUEST_CSUM (frames with a partial checksum would need completing here).
constexpr uint64_t kNotCarried = feature_bit(vf::ACCESS_PLATFORM) | feature_bit(nf::CTRL_VQ) | feature_bit(nf::MQ) |
                                 feature_bit(nf::RSS) | feature_bit(nf::STATUS) | feature_bit(nf::MAC) |
                                 feature_bit(nf::MRG_RXBUF) | feature_bit(nf::GUEST_CSUM);

// The memory the back-end can reach: each mapping is a region of the vhost-user memory table
// (the memory's file, guest address = the IOVA, user address = the pointer), and the whole
// table is sent again (SET_MEM_TABLE). Only memory that comes with its file can be mapped:
// DMA arenas; the back-end mmap()s that file.
class VhostMemoryTable final : public vfio::AddressSpace {
public:
    explicit VhostMemoryTable(VhostUserFrontend& fe) : fe_(&fe) {
        info_.page_sizes = 4096 | (2u << 20) | (1ull << 30);
        info_.iova_ranges = {vfio::IovaRange{0x1000, (1ull << 57) - 1}};
    }

    const vfio::IommuInfo& info() const override { return info_; }
    bool translates() const override { return true; }
    const std::map<uint64_t, size_t>& mappings() const override { return mappings_; }
    const char* device_memory_refusal() const override {
        return "this domain's memory is shared with a vhost-user back-end, which maps only vfab's DMA arenas";
    }
    const char* dmabuf_refusal() const override { return device_memory_refusal(); }

    Result<Iova> map_dma(void* va, size_t len, Iova iova, unsigned, vfio::MemoryFile file) override {
        std::lock_guard lock(mu_);
        if (file.fd < 0)
            return Error{EINVAL, "over vhost-user only memory from pd().create_arena() can be registered: the "
                                 "backend maps it through its memfd"};
        if (!fe_) return Error{ENODEV, "the vhost-user device is closed"};
        if (regions_.size() >= vhost_user::kMaxMemRegions)
            return Error{ENOSPC, str_cat("the vhost-user memory table holds at most ", vhost_user::kMaxMemRegions,
                                         " regions (one per arena, the queue pair's rings included): create fewer, "
                                         "larger arenas")};
        if (regions_.count(iova.value)) return Error{EEXIST, str_cat("IOVA 0x", std::hex, iova.value, " is mapped already")};
        regions_[iova.value] = MemRegion{file.fd, iova.value, reinterpret_cast<uintptr_t>(va), len, file.offset};
        if (auto r = send(); !r) {
            regions_.erase(iova.value);
            return r.take_error();
        }
        mappings_[iova.value] = len;
        return iova;
    }
    Result<void> unmap_dma(Iova iova, size_t len) override {
        std::lock_guard lock(mu_);
        auto it = mappings_.find(iova.value);
        if (it == mappings_.end() || it->second != len)
            return Error{ENOENT, str_cat("no mapping of ", len, " bytes at 0x", std::hex, iova.value,
                                         " in the vhost-user memory table")};
        mappings_.erase(it);
        regions_.erase(iova.value);
        // Best effort: a back-end that is gone has nothing to forget.
        if (fe_ && !regions_.empty() && fe_->alive()) (void)send();
        return {};
    }

    // The connection closes: later unmaps only forget their regions.
    void detach() {
        std::lock_guard lock(mu_);
        fe_ = nullptr;
    }

private:
    Result<void> send() {
        std::vector<MemRegion> table;
        for (const auto& [iova, region] : regions_) table.push_back(region);
        return fe_->set_mem_table(table);
    }

    std::mutex mu_;
    VhostUserFrontend* fe_;
    vfio::IommuInfo info_;
    std::map<uint64_t, MemRegion> regions_;   // by guest address (IOVA)
    std::map<uint64_t, size_t> mappings_;
};

class VhostUserTransport final : public Transport {
public:
    VhostUserTransport(VhostUserFrontend fe, const VhostUserTransportOptions& opts)
        : Transport(str_cat("the vhost-user backend at ", fe.path())), fe_(std::move(fe)), opts_(opts),
          memory_(std::make_shared<VhostMemoryTable>(fe_)) {}

    Result<void> create_channels() {
        for (uint32_t i = 0; i < vectors(); ++i) {
            const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
            if (fd < 0) return Error::from_errno(errno, "eventfd for a completion channel", "raise `ulimit -n`");
            calls_.emplace_back(fd, vfio::Sys::real());
        }
        return {};
    }

    const char* kind() const override { return "vhost-user"; }
    std::string device_hint(std::string_view) const override { return {}; }
    std::string gone_message() const override {
        return str_cat(where_, " is gone: close the device and open it again once the backend runs");
    }

    std::shared_ptr<vfio::AddressSpace> address_space() const override { return memory_; }
    dma::DmaMemoryOptions memory_options() const override { return {}; }

    // Vector 0 stands for configuration changes over PCI: unused here.
    uint32_t vectors() const override { return opts_.channels + 1; }
    int channel_fd(uint32_t vector) const override { return calls_[vector].get(); }
    Result<void> watch(vfio::EventWaiter& events, uint64_t, uint64_t gone_tag) override {
        return events.add(fe_.socket_fd(), gone_tag);
    }

    Result<uint64_t> begin_negotiation() override { return fe_.get_features(); }
    Result<uint64_t> negotiate(uint64_t wanted, uint64_t required) override {
        auto accepted = fe_.negotiate(wanted & ~kNotCarried, required);
        if (accepted) packed_ = has_feature(*accepted, vf::RING_PACKED);
        return accepted;
    }
    void fail() override {}
    // Features stay negotiated; the vrings stop and can be started again.
    Result<void> restart() override {
        stop();
        return {};
    }
    void stop() override {
        const uint64_t started = std::exchange(started_, 0);
        if (!fe_.alive()) return;
        for (uint32_t i = 0; i < 64; ++i)
            if (started & (1ull << i)) (void)fe_.stop_vring(i);
    }

    uint16_t queue_max_size(uint16_t) const override { return opts_.max_queue; }
    Result<Doorbell> start_queue(uint16_t queue, uint32_t size, const QueueMemory& mem, uint32_t vector) override {
        if (queue >= 64) return Error{EINVAL, str_cat("vring ", queue, ": vfab starts vrings 0 to 63")};
        VringConfig c{};
        c.index = queue;
        c.size = size;
        c.desc = mem.desc;
        c.avail = mem.driver;
        c.used = mem.device;
        c.base = packed_ ? 0x8000u : 0u;   // a new ring: index 0; packed: wrap counter 1 (bit 15, as DPDK reads it)
        if (vector == kNoChannel)
            c.call = Notify::none;
        else
            c.call_fd = calls_[vector].get();
        started_ |= 1ull << queue;   // from here, stop() stops it
        if (auto r = fe_.start_vring(c); !r)
            return Error{r.error().code, str_cat("starting vring ", queue, ": ", r.error().message)};
        return Doorbell{nullptr, fe_.kick_fd(queue), queue};
    }
    Result<void> driver_ok() override { return {}; }

    // None of the features that read the configuration space is carried.
    void read_config(uint32_t, void* out, uint32_t len) const override { std::memset(out, 0, len); }
    uint32_t config_length() const override { return 0; }
    uint8_t config_generation() const override { return 0; }
    bool needs_reset() override { return false; }
    bool gone() override { return !fe_.alive(); }
    bool polls_for_gone() const override { return true; }   // no interrupt tells a busy poller
    void removal_reported(vfio::EventWaiter& events) override { (void)events.remove(fe_.socket_fd()); }
    void shutdown() override {
        stop();
        memory_->detach();   // the back-end forgets the memory table with the connection
    }

private:
    VhostUserFrontend fe_;
    VhostUserTransportOptions opts_;
    std::shared_ptr<VhostMemoryTable> memory_;
    std::vector<vfio::UniqueFd> calls_;   // completion channels by vector
    uint64_t started_ = 0;                // vrings started (or being started), by index
    bool packed_ = false;
};

}  // namespace

Result<std::unique_ptr<Transport>> open_vhost_user(std::string_view path, const VhostUserTransportOptions& opts) {
    auto fe = VhostUserFrontend::connect(path);
    if (!fe) return fe.take_error();
    auto t = std::make_unique<VhostUserTransport>(std::move(*fe), opts);
    if (auto r = t->create_channels(); !r) return r.take_error();
    return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace vfab::virtio
