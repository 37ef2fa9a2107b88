// vhost_user_bench: vfab's virtio-net driver over vhost-user against a DPDK vhost back-end on
// this host (scripts/vhost-backend), no VM and no NIC. dpdk_virtio_user_bench runs the same
// modes with DPDK's virtio_user PMD (vhost_bench_common.hpp); bench/vhost_vs_dpdk.sh compares.
//
//   vhost_user_bench --socket PATH --mode tx|rx|pingpong|loop [--burst 32] [--seconds 1]
//                    [--ring packed|split] [--backend-stats CMD] [--signaled] [--header headroom|descriptor]
//                    [--json]
//
// Zero copy both ways: frames are sent from registered buffers built once; received buffers
// go straight back to the RX ring (one post_recv per poll that received anything, as DPDK's
// rx_burst refills its ring). Sends are unsignaled unless --signaled: DPDK's tx_burst reports
// no completions either; their slots are reclaimed by poll. The virtio-net header goes into the
// 64 bytes before each frame (QpInitAttr::hdr_in_headroom: one descriptor per frame, as DPDK
// puts it in the mbuf's headroom); --header descriptor gives it a descriptor of its own.
//
// The device's events are read every 4096 polls: the back-end going away (or resetting the
// device) ends the run with one line naming the socket, exit status 1 (docs/reliability.md).
#include <span>

#include "vfab/drivers/virtio_net.hpp"
#include "vhost_bench_common.hpp"
#include "vfab/log.hpp"

namespace vfab::bench::vhost {
namespace {

using namespace vfab::virtio_net;

constexpr uint32_t kBuf = 2048;
constexpr uint32_t kQueueEntries = 1024;   // descriptors per virtqueue, as DPDK's rings in the same runs
constexpr uint32_t kRoom = 64;             // bytes before each frame, for the header in headroom

// Every call into the driver's fast path goes through these, so that callgrind counts exactly
// them (--toggle-collect='*counted_*'), as dpdk_virtio_user_bench's counted_rx_burst/_tx_burst.
[[gnu::noipa]] PostResult counted_post_send(QueuePair& qp, std::span<const SendWr> wrs) { return qp.post_send(wrs); }
[[gnu::noipa]] PostResult counted_post_recv(QueuePair& qp, std::span<const RecvWr> wrs) { return qp.post_recv(wrs); }
[[gnu::noipa]] int counted_poll(CompletionQueue& cq, std::span<Completion> wc) { return cq.poll(wc); }
[[gnu::noipa]] int counted_idle_poll(CompletionQueue& cq, std::span<Completion> wc) { return cq.poll(wc); }

class VfabPort {
public:
    std::string open(const Options& o, bool signaled, bool headroom) {
        ring_ = headroom ? kQueueEntries : kQueueEntries / 2;   // WRs: one or two descriptors each
        room_ = headroom ? kRoom : 0;
        DeviceOptions d;
        d.ring = o.ring == "split" ? RingFormat::split : RingFormat::packed;
        auto dev = Device::open_vhost_user(o.socket, d);
        if (!dev) return dev.error().message;
        dev_ = std::move(*dev);
        socket_ = o.socket;
        auto cq = dev_->create_cq(2 * ring_);
        if (!cq) return cq.error().message;
        cq_ = *cq;
        auto arena = dev_->pd().create_arena(size_t(2 * ring_) * kBuf);
        if (!arena) return arena.error().message;
        mem_ = (*arena)->data();
        auto mr = dev_->pd().register_memory(mem_, (*arena)->size(), dma::Access::local_write);
        if (!mr) return mr.error().message;
        QpInitAttr a;
        a.send_cq = a.recv_cq = cq_;
        a.caps = {ring_, ring_, 1, 1};
        a.hdr_in_headroom = headroom;
        auto qp = dev_->create_qp(a);
        if (!qp) return qp.error().message;
        qp_ = *qp;
        rsge_.resize(ring_);
        ssge_.resize(ring_);
        rwr_.resize(ring_);
        swr_.resize(kMaxBurst);
        wc_.resize(2 * kMaxBurst);
        flags_ = signaled ? uint32_t(send_signaled) : 0u;
        for (uint32_t i = 0; i < ring_; ++i) {
            rsge_[i] = {reinterpret_cast<uintptr_t>(recv_buf(i)), kBuf - room_, mr->lkey};
            ssge_[i] = {reinterpret_cast<uintptr_t>(send_buf(i)), kFrameLen, mr->lkey};
            build_frame(send_buf(i), dev_->attr().mac, 0);
            rwr_[i] = {i, &rsge_[i], 1, 0};
        }
        if (PostResult r = qp_->post_recv(rwr_); r.error || r.posted != ring_)
            return "post_recv of " + std::to_string(ring_) + " buffers: " + std::strerror(r.error);
        return {};
    }
    const std::string& error() const { return error_; }
    // What was negotiated (the back-end offers; the driver takes what it supports).
    std::string features() const {
        char b[32];
        std::snprintf(b, sizeof b, "0x%llx", (unsigned long long)dev_->features());
        return b;
    }

    uint32_t send(uint32_t n) {
        if (qp_->caps().max_send_wr - qp_->send_outstanding() < n) poll(n);   // reclaims sent slots
        n = std::min(n, qp_->caps().max_send_wr - qp_->send_outstanding());
        for (uint32_t i = 0; i < n; ++i) {
            const uint32_t slot = (next_send_ + i) % ring_;
            swr_[i] = {slot, &ssge_[slot], 1, flags_};
        }
        if (n == 0) return 0;
        const PostResult r = counted_post_send(*qp_, std::span<const SendWr>(swr_.data(), n));
        if (r.error && r.error != ENOMEM) error_ = std::string("post_send: ") + std::strerror(r.error);
        next_send_ += r.posted;
        return r.posted;
    }
    bool send_one(uint32_t seq) {
        for (int tries = 0; tries < 1000000 && error_.empty(); ++tries) {
            if (qp_->send_outstanding() < qp_->caps().max_send_wr) {
                std::memcpy(send_buf(next_send_ % ring_) + kSeqOffset, &seq, 4);
                return send(1) == 1;
            }
            poll(1);
        }
        return false;
    }
    uint32_t recv(uint32_t max, uint32_t* seq) {
        const uint32_t n = poll(max);
        if (seq && n) *seq = last_seq_;
        return n;
    }
    void finish_tx() {
        const auto deadline = Clock::now() + std::chrono::seconds(5);
        while (qp_->send_outstanding() && error_.empty() && Clock::now() < deadline) poll(kMaxBurst);
    }
    // Mode loop: `burst` frames out; the back-end (io) sends them back; poll until all came in.
    void loop_round(uint32_t burst, const Options& o, LoopStats& st) {
        for (uint32_t sent = 0; sent < burst;) {
            sent += send(burst - sent);
            if (!error_.empty()) return void(st.failed = true);
        }
        if (o.settle_us) {
            const auto until = Clock::now() + std::chrono::microseconds(o.settle_us);
            while (Clock::now() < until) {}
        }
        const auto deadline = Clock::now() + std::chrono::seconds(1);
        for (uint32_t got = 0; got < burst;) {
            const uint32_t n = poll(2 * burst);
            ++st.polls;
            st.empty_polls += n == 0;
            got += n;
            if (!error_.empty() || (n == 0 && Clock::now() > deadline)) return void(st.failed = true);
        }
        st.packets += burst;
    }

    void idle_polls(uint32_t n) {
        for (uint32_t i = 0; i < n; ++i) (void)counted_idle_poll(*cq_, wc_);
    }

private:
    // Where frame i starts (room_ bytes into its 2 KiB buffer).
    uint8_t* recv_buf(uint32_t i) const { return mem_ + size_t(i) * kBuf + room_; }
    uint8_t* send_buf(uint32_t i) const { return mem_ + size_t(ring_ + i) * kBuf + room_; }

    // Polls once (at most `max` completions); receive buffers go back to the ring at once.
    // Returns the frames received.
    uint32_t poll(uint32_t max) {
        if ((++polls_ & 4095) == 0) watch_events();   // outside the counted calls
        const int n = counted_poll(*cq_, std::span<Completion>(wc_.data(), std::min<size_t>(max, wc_.size())));
        if (n < 0) {
            error_ = std::string("poll: ") + std::strerror(-n);
            return 0;
        }
        uint32_t rx = 0;
        for (int i = 0; i < n; ++i) {
            const Completion& c = wc_[i];
            if (c.status != WcStatus::success) {
                error_ = std::string("completion: ") + to_string(c.status);
                return rx;
            }
            if (c.opcode != WcOpcode::recv) continue;
            const auto slot = uint32_t(c.wr_id);
            if (c.byte_len >= kSeqOffset + 4) last_seq_ = frame_seq(recv_buf(slot));
            rwr_[rx++] = {slot, &rsge_[slot], 1, 0};
        }
        if (rx) {
            const PostResult r = counted_post_recv(*qp_, std::span<const RecvWr>(rwr_.data(), rx));
            if (r.error || r.posted != rx) error_ = std::string("post_recv: ") + std::strerror(r.error);
        }
        return rx;
    }

    void watch_events() {
        for (Event e = dev_->next_event(); e.type != EventType::none && error_.empty(); e = dev_->next_event())
            if (e.type == EventType::device_removal || e.type == EventType::device_fatal || e.type == EventType::device_reset)
                error_ = socket_ + ": " + to_string(e.type) + " (the vhost-user back-end went away or reset the device): stopping";
    }

    std::unique_ptr<Device> dev_;
    std::string socket_;
    uint64_t polls_ = 0;
    CompletionQueue* cq_ = nullptr;
    QueuePair* qp_ = nullptr;
    uint8_t* mem_ = nullptr;
    std::vector<Sge> rsge_, ssge_;
    std::vector<RecvWr> rwr_;
    std::vector<SendWr> swr_;
    std::vector<Completion> wc_;
    uint32_t flags_ = 0, next_send_ = 0, last_seq_ = 0;
    uint32_t ring_ = kQueueEntries, room_ = 0;
    std::string error_;
};

int run(int argc, char** argv) {
    Options o;
    bool signaled = false;
    std::string header = "headroom";
    if (auto rc = parse_options("vhost_user_bench", argc, argv, o, [&](CLI::App& app) {
            app.add_flag("--signaled", signaled, "Ask for a completion for every send (the driver's fastpath bench does)");
            app.add_option("--header", header, "Where the virtio-net header goes: the frame's headroom (one descriptor "
                                               "per frame) or a descriptor of its own")
                ->capture_default_str()
                ->check(CLI::IsMember({"headroom", "descriptor"}));
        }))
        return *rc;
    VfabPort p;
    if (std::string e = p.open(o, signaled, header == "headroom"); !e.empty()) {
        std::fprintf(stderr, "vhost_user_bench: %s\n", e.c_str());
        return 1;
    }
    Report r = run_bench(p, o, "vfab");
    r.info["features"] = p.features();
    r.info["header"] = header;
    return print_report(r, o);
}

}  // namespace
}  // namespace vfab::bench::vhost

int main(int argc, char** argv) {
    vfab::set_log_handler(vfab::log_to_stderr, nullptr, vfab::LogLevel::warning);   // vfab's warnings on stderr
    try {
        return vfab::bench::vhost::run(argc, argv);
    } catch (const std::exception& e) {   // out of memory and the like: setup only
        std::fprintf(stderr, "vhost_user_bench: %s\n", e.what());
        return 1;
    }
}
