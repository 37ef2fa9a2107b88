// Two fake raw devices wired to each other, for unit tests of the RDMA transport: frames posted
// on one device's queue pair arrive in the other's receive buffers, through the memory
// registrations of real ProtectionDomains (over an IOMMU context that maps nothing). The wire
// can lose, duplicate, reorder and corrupt frames (a seeded generator: runs repeat).
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "vfab/rdma/rdma.hpp"
#include "vfab/vfab.hpp"
#include "vfab/vfio/iommu.hpp"

namespace vfab::test {

// RdmaPair's two ends: device 0 (port A) and device 1 (port B), their MACs and IPv4 addresses.
inline constexpr uint8_t kMacA[6] = {0x02, 0, 0, 0, 0, 1}, kMacB[6] = {0x02, 0, 0, 0, 0, 2};
inline constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;   // 10.0.0.1, 10.0.0.2

class NullIommu final : public vfio::IommuContext {
public:
    NullIommu() : IommuContext(vfio::IommuBackend::legacy, vfio::Sys::real()) {
        devices_ = 1;
        info_.page_sizes = 4096;
        info_.iova_ranges = {{0x1000, (uint64_t{1} << 47) - 1}};
    }

protected:
    Result<vfio::DeviceAttachment> attach(const PciAddress&, const vfio::PciSysfs&) override {
        return Error{EOPNOTSUPP, "no device"};
    }
    Result<Iova> do_map(void*, size_t, Iova iova, unsigned) override { return iova; }
    Result<void> do_unmap(Iova, size_t) override { return {}; }
};

// What the wire does to frames, per frame, in percent.
struct Faults {
    unsigned drop = 0;
    unsigned duplicate = 0;
    unsigned reorder = 0;   // held back behind the next frame
    unsigned corrupt = 0;   // one byte flipped after the UDP header
};

class FakeWireDevice;

struct Wire {
    std::deque<std::vector<uint8_t>> in_flight[2];   // toward device 0 / 1
    Faults faults;
    std::mt19937 rng{12345};
    uint64_t dropped = 0, duplicated = 0, reordered = 0, corrupted = 0;
    // Called when a frame is put on the wire toward side 0 / 1: its raw receive CQ's channel
    // fires when armed, as a device's interrupt would.
    std::function<void()> on_arrival[2];
    // The two ports may run on two threads (a progress thread on one side): the frames in flight
    // are taken and given under this lock.
    std::mutex mu;

    // Arbitrary bytes toward side `to`, past the faults (fuzzing, hand-made frames).
    void inject(int to, const uint8_t* f, uint32_t len) {
        {
            std::lock_guard g(mu);
            in_flight[to].emplace_back(f, f + len);
        }
        if (on_arrival[to]) on_arrival[to]();
    }

    void send(int to, const uint8_t* f, uint32_t len) {
        std::unique_lock g(mu);
        std::vector<uint8_t> v(f, f + len);
        auto roll = [&](unsigned pct) { return pct && std::uniform_int_distribution<unsigned>(0, 99)(rng) < pct; };
        if (roll(faults.drop)) {
            ++dropped;
            return;
        }
        if (roll(faults.corrupt) && len > 50) {
            v[42 + std::uniform_int_distribution<uint32_t>(0, len - 43)(rng)] ^= 0x5a;
            ++corrupted;
        }
        auto& q = in_flight[to];
        if (roll(faults.reorder) && !q.empty()) {
            q.insert(q.end() - 1, v);
            ++reordered;
        } else {
            q.push_back(v);
        }
        if (roll(faults.duplicate)) {
            q.push_back(v);
            ++duplicated;
        }
        g.unlock();
        if (on_arrival[to]) on_arrival[to]();
    }
};

class FakeCq final : public vfab::CompletionQueue {
public:
    std::function<void()> before_poll;
    int poll(std::span<Completion> out) noexcept override {
        if (before_poll) before_poll();
        size_t n = 0;
        for (; n < out.size() && !ring.empty(); ++n) {
            out[n] = ring.front();
            ring.pop_front();
        }
        return int(n);
    }
    Result<void> arm() override {
        armed = true;
        if (!ring.empty()) notify();
        return {};
    }
    int channel_fd() const noexcept override { return efd; }
    uint64_t take_events() noexcept override {
        uint64_t n = 0;
        return ::read(efd, &n, sizeof n) == sizeof n ? n : 0;
    }
    Result<void> destroy() override { return {}; }
    void push(const Completion& c) {
        ring.push_back(c);
        if (armed) notify();
    }
    void notify() {
        armed = false;
        uint64_t one = 1;
        (void)!::write(efd, &one, sizeof one);
    }
    FakeCq() = default;
    ~FakeCq() override { ::close(efd); }
    std::deque<Completion> ring;
    int efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    bool armed = false;
};

class FakeQp final : public vfab::QueuePair {
public:
    FakeQp(FakeWireDevice& dev, FakeCq* scq, FakeCq* rcq) : dev_(dev), scq_(scq), rcq_(rcq) {}
    PostResult post_send(std::span<const SendWr> wrs) noexcept override;
    PostResult post_recv(std::span<const RecvWr> wrs) noexcept override {
        for (const RecvWr& r : wrs) rq.push_back({r.wr_id, r.sg_list[0]});
        return {0, uint32_t(wrs.size())};
    }
    QpState state() const noexcept override { return QpState::ready; }
    uint32_t qp_num() const noexcept override { return 1; }
    const QpCaps& caps() const noexcept override { return caps_; }
    uint32_t queue() const noexcept override { return 0; }
    QpStats stats() const noexcept override { return {}; }
    Result<void> destroy() override { return {}; }
    // Frames waiting on the wire toward this device land in posted buffers.
    void deliver();
    struct Posted {
        uint64_t wr_id;
        Sge sge;
    };
    std::deque<Posted> rq;
    FakeCq* scq() const { return scq_; }

private:
    FakeWireDevice& dev_;
    FakeCq* scq_;
    FakeCq* rcq_;
    QpCaps caps_;
};

class FakeWireDevice final : public vfab::Device {
public:
    FakeWireDevice(Wire& wire, int side, uint32_t mtu) : wire_(wire), side_(side) {
        attr_.provider = "fake-wire";
        attr_.mtu = mtu;
        attr_.max_cq = 2;
        attr_.max_qp = 1;
        attr_.recv_buffer_size = mtu + 14;
        std::memcpy(attr_.mac, side == 0 ? kMacA : kMacB, 6);
        pd_ = std::move(*dma::ProtectionDomain::create(std::make_shared<NullIommu>()));
    }
    const DeviceAttr& attr() const override { return attr_; }
    // As a provider with a header of its own in front of each frame would say (create_qp_ex).
    void set_frame_headroom(uint32_t bytes) { attr_.frame_headroom = bytes; }
    LinkState link() const override { return {link_up.load(), 1000, true}; }
    std::atomic<bool> link_up{true};   // a test takes the link down
    // Send completions kept back (the NIC still owns the buffers) until release_sends(): a test
    // makes the port run out of send buffers.
    bool hold_sends = false;
    std::vector<Completion> held_sends;
    void release_sends();
    DeviceStats stats() override { return {}; }
    dma::ProtectionDomain& pd() override { return *pd_; }
    Result<vfab::CompletionQueue*> create_cq(uint32_t) override {
        cqs_.push_back(std::make_unique<FakeCq>());
        return cqs_.back().get();
    }
    Result<vfab::QueuePair*> create_qp(const vfab::QpInitAttr& a) override {
        auto* s = static_cast<FakeCq*>(a.send_cq);
        auto* r = static_cast<FakeCq*>(a.recv_cq);
        qp_ = std::make_unique<FakeQp>(*this, s, r);
        FakeQp* qp = qp_.get();
        r->before_poll = [qp] { qp->deliver(); };
        wire_.on_arrival[side_] = [r] {
            if (r->armed) r->notify();
        };
        return qp;
    }
    Result<void> configure_rss(const RssConfig&) override { return Error{ENOTSUP, "no"}; }
    // The wire passes every frame; the list is kept for tests to look at.
    Result<void> set_multicast(std::span<const MacAddress> groups) override {
        multicast.assign(groups.begin(), groups.end());
        return {};
    }
    std::vector<MacAddress> multicast;
    int event_fd() const override { return -1; }
    Event next_event() override { return {}; }
    Result<void> reset() override { return {}; }
    Result<void> enable_timestamps(const TimestampConfig&) override { return Error{ENOTSUP, "no"}; }
    Result<uint64_t> clock_ns() override { return Error{ENOTSUP, "no"}; }
    Result<void> set_clock_ns(uint64_t) override { return Error{ENOTSUP, "no"}; }
    std::optional<uint64_t> take_tx_timestamp() override { return std::nullopt; }
    std::optional<RxTimestamp> take_rx_timestamp() override { return std::nullopt; }

    Wire& wire_;
    const int side_;

private:
    DeviceAttr attr_;
    std::unique_ptr<dma::ProtectionDomain> pd_;
    std::vector<std::unique_ptr<FakeCq>> cqs_;
    std::unique_ptr<FakeQp> qp_;
};

inline PostResult FakeQp::post_send(std::span<const SendWr> wrs) noexcept {
    for (const SendWr& wr : wrs) {
        const Sge& g = wr.sg_list[0];
        dev_.wire_.send(1 - dev_.side_, reinterpret_cast<const uint8_t*>(g.addr), g.length);
        const Completion c{wr.wr_id, WcStatus::success, WcOpcode::send, 0, g.length, 1, 0};
        if (dev_.hold_sends) dev_.held_sends.push_back(c);
        else scq_->push(c);
    }
    return {0, uint32_t(wrs.size())};
}

inline void FakeWireDevice::release_sends() {
    hold_sends = false;
    for (const Completion& c : held_sends) qp_->scq()->push(c);
    held_sends.clear();
}

inline void FakeQp::deliver() {
    std::lock_guard g(dev_.wire_.mu);
    auto& q = dev_.wire_.in_flight[dev_.side_];
    while (!q.empty() && !rq.empty()) {
        const std::vector<uint8_t> f = std::move(q.front());
        q.pop_front();
        const Posted r = rq.front();
        rq.pop_front();
        const uint32_t len = uint32_t(std::min<size_t>(f.size(), r.sge.length));
        if (len) std::memcpy(reinterpret_cast<void*>(r.sge.addr), f.data(), len);
        rcq_->push({r.wr_id, WcStatus::success, WcOpcode::recv, 0, len, 1, 0});
    }
}

// Two ports on the two ends of a wire, 10.0.0.1 and 10.0.0.2.
struct RdmaPair {
    Wire wire;
    FakeWireDevice dev_a, dev_b;
    std::unique_ptr<rdma::Port> a, b;
    explicit RdmaPair(uint32_t mtu = 1500) : dev_a(wire, 0, mtu), dev_b(wire, 1, mtu) {
        rdma::PortConfig ca, cb;
        ca.ipv4 = kIpA;
        cb.ipv4 = kIpB;
        ca.arp_timeout_ms = cb.arp_timeout_ms = 20;
        a = std::move(*rdma::Port::create(dev_a, ca));
        b = std::move(*rdma::Port::create(dev_b, cb));
    }
};

}  // namespace vfab::test
