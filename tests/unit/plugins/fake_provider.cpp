// A provider with no hardware, built as a plugin for the unit tests: a frame posted on a queue
// pair's send queue loops back into the same queue pair's receive queue, through the memory
// registrations of a real ProtectionDomain (over an IOMMU context that maps nothing). Direct
// classes like a driver's, so that the multiplexed API and the C API run over the generic
// Adapter exactly as over e1000e.
//
// FAKE_NAME and FAKE_VENDOR/FAKE_DEVICE choose the name and the one PCI ID it registers. The
// device's attr().name records the options it was opened with, for the tests to check.
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <deque>

#include "vfab/provider.hpp"
#include "vfab/vfio/device.hpp"
#include "vfab/vfio/pci_sysfs.hpp"

namespace fake {
using namespace vfab;

class Iommu final : public vfio::IommuContext {
public:
    Iommu() : IommuContext(vfio::IommuBackend::legacy, vfio::Sys::real()) {
        devices_ = 1;
        info_.page_sizes = 4096;
        info_.iova_ranges = {{0x1000, (uint64_t{1} << 47) - 1}};
    }

protected:
    Result<vfio::DeviceAttachment> attach(const PciAddress&, const vfio::PciSysfs&) override {
        return Error{EOPNOTSUPP, "the fake IOMMU attaches no device"};
    }
    Result<Iova> do_map(void*, size_t, Iova iova, unsigned) override { return iova; }
    Result<void> do_unmap(Iova, size_t) override { return {}; }
};

struct EventFd {
    int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ~EventFd() { ::close(fd); }
    void signal() const {
        uint64_t one = 1;
        (void)!::write(fd, &one, sizeof one);
    }
    uint64_t drain() const {
        uint64_t n = 0;
        return ::read(fd, &n, sizeof n) == sizeof n ? n : 0;
    }
};

class QueuePair;

class CompletionQueue {
public:
    int poll(std::span<Completion> out) noexcept {
        if (destroyed_) return -ENODEV;
        size_t n = 0;
        for (; n < out.size() && !ring_.empty(); ++n) {
            out[n] = ring_.front();
            ring_.pop_front();
        }
        return int(n);
    }
    Result<void> arm() {
        if (destroyed_) return Error{ENODEV, "arm(): the completion queue was destroyed"};
        armed_ = true;
        if (!ring_.empty()) notify();
        return {};
    }
    int channel_fd() const noexcept { return efd_.fd; }
    uint64_t take_events() noexcept { return efd_.drain(); }
    Result<void> destroy() {
        if (destroyed_) return Error{ENODEV, "this completion queue was already destroyed"};
        if (users_) return Error{EBUSY, "the completion queue is still used by a queue pair"};
        destroyed_ = true;
        return {};
    }

private:
    friend class QueuePair;
    friend class Device;
    void push(const Completion& c) {
        ring_.push_back(c);
        if (armed_) notify();
    }
    void notify() {
        armed_ = false;
        efd_.signal();
    }
    std::deque<Completion> ring_;
    EventFd efd_;
    int users_ = 0;
    bool armed_ = false;
    bool destroyed_ = false;
};

struct QpInitAttr {
    CompletionQueue* send_cq = nullptr;
    CompletionQueue* recv_cq = nullptr;
    QpCaps caps;
    bool sq_sig_all = false;
};

class QueuePair {
public:
    PostResult post_send(std::span<const SendWr> wrs) noexcept {
        if (state_ != QpState::ready) return {state_ == QpState::destroyed ? ENODEV : EIO, 0};
        for (uint32_t i = 0; i < wrs.size(); ++i) {
            const SendWr& wr = wrs[i];
            if (wr.num_sge == 0 || wr.num_sge > caps_.max_send_sge || !wr.sg_list) return {EINVAL, i};
            send(wr);
        }
        return {0, uint32_t(wrs.size())};
    }
    PostResult post_recv(std::span<const RecvWr> wrs) noexcept {
        if (state_ != QpState::ready) return {state_ == QpState::destroyed ? ENODEV : EIO, 0};
        for (uint32_t i = 0; i < wrs.size(); ++i) {
            if (wrs[i].num_sge != 1 || !wrs[i].sg_list) return {EINVAL, i};
            if (rq_.size() >= caps_.max_recv_wr) return {ENOMEM, i};
            rq_.push_back({wrs[i].wr_id, wrs[i].sg_list[0]});
        }
        return {0, uint32_t(wrs.size())};
    }
    QpState state() const noexcept { return state_; }
    uint32_t qp_num() const noexcept { return 7; }
    const QpCaps& caps() const noexcept { return caps_; }
    uint32_t queue() const noexcept { return 0; }
    QpStats stats() const noexcept { return {}; }
    Result<void> destroy() {
        if (state_ == QpState::destroyed) return Error{ENODEV, "this queue pair was already destroyed"};
        state_ = QpState::destroyed;
        --send_cq_->users_;
        --recv_cq_->users_;
        rq_.clear();
        return {};
    }

private:
    friend class Device;
    struct Posted {
        uint64_t wr_id;
        Sge sge;
    };
    QueuePair(dma::ProtectionDomain& pd, const QpInitAttr& a, DeviceStats& stats)
        : pd_(&pd), send_cq_(a.send_cq), recv_cq_(a.recv_cq), caps_(a.caps), sq_sig_all_(a.sq_sig_all), stats_(&stats) {}

    // The frame goes to the oldest receive buffer, if there is one (else it is missed).
    void send(const SendWr& wr) {
        uint8_t frame[2048];
        uint32_t len = 0;
        WcStatus status = WcStatus::success;
        for (uint32_t s = 0; s < wr.num_sge && status == WcStatus::success; ++s) {
            const Sge& g = wr.sg_list[s];
            if (pd_->translate(g.lkey, g.addr, g.length, dma::Access::none).status != dma::MrStatus::ok)
                status = WcStatus::local_protection_error;
            else if (len + g.length > sizeof frame)
                status = WcStatus::local_length_error;
            else
                std::memcpy(frame + len, reinterpret_cast<const void*>(g.addr), g.length), len += g.length;
        }
        if (status == WcStatus::success) {
            ++stats_->tx_packets;
            stats_->tx_bytes += len;
            if (rq_.empty()) {
                ++stats_->rx_missed;
            } else {
                const Posted r = rq_.front();
                rq_.pop_front();
                Completion c{r.wr_id, WcStatus::success, WcOpcode::recv, 0, len, qp_num(), 0};
                if (pd_->translate(r.sge.lkey, r.sge.addr, r.sge.length, dma::Access::local_write).status != dma::MrStatus::ok)
                    c.status = WcStatus::local_protection_error;
                else if (len > r.sge.length)
                    c.status = WcStatus::local_length_error;
                else
                    std::memcpy(reinterpret_cast<void*>(r.sge.addr), frame, len), ++stats_->rx_packets, stats_->rx_bytes += len;
                recv_cq_->push(c);
            }
        }
        if (sq_sig_all_ || (wr.flags & send_signaled) || status != WcStatus::success)
            send_cq_->push({wr.wr_id, status, WcOpcode::send, 0, len, qp_num(), 0});
    }

    dma::ProtectionDomain* pd_;
    CompletionQueue* send_cq_;
    CompletionQueue* recv_cq_;
    QpCaps caps_;
    bool sq_sig_all_;
    DeviceStats* stats_;
    QpState state_ = QpState::ready;
    std::deque<Posted> rq_;
};

struct DeviceOptions {
    vfio::DeviceOptions vfio;
    bool promiscuous = false;
};

class Device {
public:
    static Result<std::unique_ptr<Device>> open(const PciAddress& addr, const DeviceOptions& o) {
        auto ids = vfio::PciSysfs(o.vfio.sysfs_root).ids(addr);
        if (!ids) return ids.take_error();
        std::unique_ptr<Device> d(new Device);
        auto pd = dma::ProtectionDomain::create(std::make_shared<Iommu>());
        if (!pd) return pd.take_error();
        d->pd_ = std::move(*pd);
        d->attr_.provider = FAKE_NAME;
        d->attr_.name = str_cat("fake (backend ", vfio::to_string(o.vfio.backend), ", promiscuous ", o.promiscuous, ")");
        d->attr_.address = addr;
        d->attr_.vendor_id = ids->vendor;
        d->attr_.device_id = ids->device;
        d->attr_.recv_buffer_size = 2048;
        d->attr_.max_qp = d->attr_.max_cq = 4;
        log(LogLevel::info, str_cat("fake provider opened ", addr.to_string()));   // the plugin's own copy of log()
        return d;
    }

    const DeviceAttr& attr() const { return attr_; }
    LinkState link() const { return {true, 10000, true}; }
    DeviceStats stats() { return stats_; }
    dma::ProtectionDomain& pd() { return *pd_; }
    Result<CompletionQueue*> create_cq(uint32_t cqe) {
        if (cqe == 0) return Error{EINVAL, "create_cq(0): the capacity must be at least 1"};
        cqs_.push_back(std::make_unique<CompletionQueue>());
        return cqs_.back().get();
    }
    Result<QueuePair*> create_qp(const QpInitAttr& a) {
        if (!a.send_cq || !a.recv_cq) return Error{EINVAL, "create_qp: send_cq and recv_cq are required"};
        if (a.send_cq->destroyed_ || a.recv_cq->destroyed_) return Error{ENODEV, "create_qp: the completion queue was destroyed"};
        ++a.send_cq->users_;
        ++a.recv_cq->users_;
        qps_.push_back(std::unique_ptr<QueuePair>(new QueuePair(*pd_, a, stats_)));
        return qps_.back().get();
    }
    Result<void> configure_rss(const RssConfig&) { return Error{ENOTSUP, "the fake provider has no RSS"}; }
    int event_fd() const { return events_.fd; }
    Event next_event() { return {}; }
    Result<void> reset() {
        for (auto& q : qps_)
            if (q->state_ == QpState::ready) q->state_ = QpState::error;
        return {};
    }

private:
    Device() = default;
    std::unique_ptr<dma::ProtectionDomain> pd_;
    DeviceAttr attr_;
    DeviceStats stats_;
    EventFd events_;
    std::vector<std::unique_ptr<CompletionQueue>> cqs_;
    std::vector<std::unique_ptr<QueuePair>> qps_;
};

using Provider = provider::Adapter<Device, CompletionQueue, QueuePair, QpInitAttr>;
constexpr provider::PciId kIds[] = {{FAKE_VENDOR, FAKE_DEVICE}};
constexpr provider::Record kRecord = provider::make_record<Provider>(FAKE_NAME, kIds);

}  // namespace fake

VFAB_PROVIDER_PLUGIN(fake::kRecord)
