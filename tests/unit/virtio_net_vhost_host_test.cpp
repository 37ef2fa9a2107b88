// The virtio-net driver (Device, CompletionQueue, QueuePair: the same classes and fast path as
// over VFIO/PCI) over vhost-user against DPDK's vhost PMD in dpdk-testpmd, started by
// scripts/vhost-backend on this host, no VM (label "host": root and Debian's dpdk; every test
// skips, saying why, where the back-end cannot run). Both ring formats:
//   - transmit N frames, testpmd rxonly counts them;
//   - testpmd txonly generates, the driver receives and checks the frames;
//   - testpmd io sends every frame back: content and order checked, frame by frame (the
//     virtio-net header in a descriptor of its own, and in the frames' headroom);
//   - testpmd killed mid-traffic: the queues fail, every WR completes (flushed), nothing hangs.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "vfab/drivers/virtio_net.hpp"

#ifndef VFAB_VHOST_BACKEND
#error "VFAB_VHOST_BACKEND: the path of scripts/vhost-backend"
#endif

namespace {

constexpr const char* kHowToRun =
    " — these tests need root, Debian's dpdk (scripts/setup) and 2 MiB hugepages; leave them out with ctest -LE host";

using namespace vfab;
using namespace vfab::virtio_net;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kBuf = 2048;
constexpr uint32_t kRecvBufs = 256;
constexpr uint32_t kSendBufs = 256;

struct ScriptRun {
    int status;
    std::string out;
};
ScriptRun backend(const std::string& args) {
    std::string cmd = std::string(VFAB_VHOST_BACKEND) + " " + args + " 2>&1";
    FILE* f = ::popen(cmd.c_str(), "r");
    if (!f) return {-1, "popen failed"};
    std::string out;
    char buf[512];
    while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
    int st = ::pclose(f);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}
long field(const std::string& out, const std::string& key) {
    auto p = out.find(key + "=");
    return p == std::string::npos ? -1 : std::atol(out.c_str() + p + key.size() + 1);
}

// Frame `seq`: to 02:00:00:00:00:02 from the driver's MAC, EtherType 0x88b5 (local
// experimental), the sequence number, then a pattern that depends on it.
uint32_t frame_len(uint32_t seq) { return 60 + seq % 200; }
void build_frame(uint8_t* p, uint32_t seq, const uint8_t* mac) {
    const uint8_t dst[6] = {0x02, 0, 0, 0, 0, 0x02};
    std::memcpy(p, dst, 6);
    std::memcpy(p + 6, mac, 6);
    p[12] = 0x88;
    p[13] = 0xb5;
    std::memcpy(p + 14, &seq, 4);
    for (uint32_t i = 18; i < frame_len(seq); ++i) p[i] = uint8_t(seq * 7 + i);
}
bool check_frame(const uint8_t* p, uint32_t len, uint32_t seq, const uint8_t* mac) {
    uint8_t want[kBuf];
    build_frame(want, seq, mac);
    return len == frame_len(seq) && std::memcmp(p, want, len) == 0;
}

class VhostNet : public ::testing::TestWithParam<RingFormat> {
protected:
    std::string dir_, socket_;
    bool started_ = false;
    std::unique_ptr<Device> dev_;
    CompletionQueue* cq_ = nullptr;
    QueuePair* qp_ = nullptr;
    dma::DmaArena* arena_ = nullptr;
    dma::MemoryRegion mr_;
    bool headroom_ = false;   // QpInitAttr::hdr_in_headroom, the frames kRoom bytes into their buffers
    static constexpr uint32_t kRoom = 64;

    void start(const std::string& mode) {
        ScriptRun check = backend("check");
        // CI provides the back-end (scripts/test): its absence is a failure, not a skip.
        if (check.status != 0) GTEST_FAIL() << "no DPDK vhost back-end on this host: " << check.out << kHowToRun;
        dir_ = (std::filesystem::temp_directory_path() / ("vfab-vhost-net-" + std::to_string(::getpid()))).string();
        socket_ = dir_ + "/vhost.sock";
        ScriptRun s = backend("start --dir " + dir_ + " --socket " + socket_ + " --mode " + mode + " --owner " +
                              std::to_string(::getpid()));
        if (s.status == 77) GTEST_FAIL() << "no DPDK vhost back-end on this host: " << s.out << kHowToRun;
        ASSERT_EQ(s.status, 0) << s.out;
        started_ = true;
        DeviceOptions o;
        o.ring = GetParam();
        auto d = Device::open_vhost_user(socket_, o);
        ASSERT_TRUE(d) << d.error().message;
        dev_ = std::move(*d);
        ASSERT_EQ(dev_->ring_format(), GetParam());
        auto cq = dev_->create_cq(4096);
        ASSERT_TRUE(cq) << cq.error().message;
        cq_ = *cq;
        auto arena = dev_->pd().create_arena(size_t(kRecvBufs + kSendBufs) * kBuf);
        ASSERT_TRUE(arena) << arena.error().message;
        arena_ = *arena;
        auto mr = dev_->pd().register_memory(arena_->data(), arena_->size(), dma::Access::local_write);
        ASSERT_TRUE(mr) << mr.error().message;
        mr_ = *mr;
        QpInitAttr a;
        a.send_cq = a.recv_cq = cq_;
        a.caps = {kSendBufs, kRecvBufs, 1, 1};
        a.sq_sig_all = true;
        a.hdr_in_headroom = headroom_;
        auto qp = dev_->create_qp(a);
        ASSERT_TRUE(qp) << qp.error().message;
        qp_ = *qp;
        for (int i = 0; i < 50 && field(backend("status --dir " + dir_).out, "ready") != 1; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        ASSERT_EQ(field(backend("status --dir " + dir_).out, "ready"), 1) << backend("log --dir " + dir_).out;
    }
    void io_forwarding();
    void TearDown() override {
        dev_.reset();
        if (started_) backend("stop --dir " + dir_);
        if (!dir_.empty()) std::filesystem::remove_all(dir_);
    }
    uint32_t room() const { return headroom_ ? kRoom : 0; }
    uint8_t* recv_buf(uint32_t i) const { return arena_->data() + size_t(i) * kBuf + room(); }
    uint8_t* send_buf(uint32_t i) const { return arena_->data() + size_t(kRecvBufs + i) * kBuf + room(); }
    bool post_recv(uint32_t i) {
        Sge s{reinterpret_cast<uintptr_t>(recv_buf(i)), kBuf - room(), mr_.lkey};
        RecvWr wr{i, &s, 1, 0};
        return qp_->post_recv({&wr, 1}).error == 0;
    }
    // Sends frame `seq` from send buffer `slot`; the send completion carries the slot.
    int post_send(uint32_t slot, uint32_t seq) {
        build_frame(send_buf(slot), seq, dev_->attr().mac);
        Sge s{reinterpret_cast<uintptr_t>(send_buf(slot)), frame_len(seq), mr_.lkey};
        SendWr wr{slot, &s, 1, 0};
        return qp_->post_send({&wr, 1}).error;
    }
};

TEST_P(VhostNet, TransmitToRxonly) {
    start("rxonly");
    if (IsSkipped() || HasFatalFailure()) return;
    // Memory that is not DMA memory cannot be given to the back-end.
    std::vector<uint8_t> plain(8192);
    auto bad = dev_->pd().register_memory(plain.data(), plain.size(), dma::Access::local_write);
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().message.find("pd().create_arena()"), std::string::npos) << bad.error().message;
    // Nor another device's memory: the back-end maps only vfab's arenas.
    EXPECT_FALSE(dev_->pd().maps_device_memory());
    auto p2p = dev_->pd().register_device_memory(nullptr, 2, 0, 4096, dma::Access::local_write);
    ASSERT_FALSE(p2p);
    EXPECT_EQ(p2p.error().code, ENOTSUP);
    EXPECT_NE(p2p.error().message.find("vhost-user"), std::string::npos) << p2p.error().message;

    constexpr uint32_t kFrames = 10000;
    std::vector<uint32_t> free_slots;
    for (uint32_t i = 0; i < kSendBufs; ++i) free_slots.push_back(i);
    uint32_t sent = 0, done = 0;
    uint64_t bytes = 0;
    Completion wc[64];
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (done < kFrames && Clock::now() < deadline) {
        while (sent < kFrames && !free_slots.empty()) {
            ASSERT_EQ(post_send(free_slots.back(), sent), 0);
            free_slots.pop_back();
            bytes += frame_len(sent++);
        }
        int n = cq_->poll(wc);
        ASSERT_GE(n, 0);
        for (int i = 0; i < n; ++i) {
            ASSERT_EQ(wc[i].status, WcStatus::success);
            ASSERT_EQ(wc[i].opcode, WcOpcode::send);
            free_slots.push_back(uint32_t(wc[i].wr_id));
            ++done;
        }
    }
    ASSERT_EQ(done, kFrames);
    std::string stats;
    for (int i = 0; i < 50; ++i) {
        stats = backend("stats --dir " + dir_).out;
        if (field(stats, "rx_packets") >= long(kFrames)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(field(stats, "rx_packets"), long(kFrames)) << stats;
    EXPECT_EQ(field(stats, "rx_bytes"), long(bytes)) << stats;
    EXPECT_EQ(dev_->stats().tx_packets, kFrames);
}

TEST_P(VhostNet, ReceiveFromTxonly) {
    start("txonly");
    if (IsSkipped() || HasFatalFailure()) return;
    for (uint32_t i = 0; i < kRecvBufs; ++i) ASSERT_TRUE(post_recv(i));
    constexpr uint32_t kFrames = 10000;
    uint32_t got = 0;
    Completion wc[64];
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (got < kFrames && Clock::now() < deadline) {
        int n = cq_->poll(wc);
        ASSERT_GE(n, 0);
        for (int i = 0; i < n; ++i) {
            ASSERT_EQ(wc[i].status, WcStatus::success);
            ASSERT_EQ(wc[i].opcode, WcOpcode::recv);
            const uint8_t* p = recv_buf(uint32_t(wc[i].wr_id));
            // testpmd txonly: 64-byte IPv4/UDP frames by default.
            ASSERT_GE(wc[i].byte_len, 42u);
            ASSERT_LE(wc[i].byte_len, kBuf);
            ASSERT_EQ(p[12], 0x08);
            ASSERT_EQ(p[13], 0x00);
            ASSERT_EQ(p[14] >> 4, 4);   // IPv4
            ++got;
            ASSERT_TRUE(post_recv(uint32_t(wc[i].wr_id)));
        }
    }
    EXPECT_GE(got, kFrames);
    EXPECT_GE(uint64_t(field(backend("stats --dir " + dir_).out, "tx_packets")), got);
    EXPECT_GE(dev_->stats().rx_packets, got);
}

TEST_P(VhostNet, IoForwardingKeepsContentAndOrder) {
    start("io");
    if (IsSkipped() || HasFatalFailure()) return;
    io_forwarding();
}

TEST_P(VhostNet, IoForwardingWithTheHeaderInHeadroom) {
    headroom_ = true;
    start("io");
    if (IsSkipped() || HasFatalFailure()) return;
    EXPECT_TRUE(qp_->hdr_in_headroom());
    io_forwarding();
}

void VhostNet::io_forwarding() {
    for (uint32_t i = 0; i < kRecvBufs; ++i) ASSERT_TRUE(post_recv(i));
    constexpr uint32_t kFrames = 10000;
    constexpr uint32_t kWindow = kRecvBufs / 2;   // never more in flight than receive buffers
    std::vector<uint32_t> free_slots;
    for (uint32_t i = 0; i < kSendBufs; ++i) free_slots.push_back(i);
    uint32_t sent = 0, received = 0, send_done = 0;
    Completion wc[64];
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (received < kFrames && Clock::now() < deadline) {
        while (sent < kFrames && !free_slots.empty() && sent - received < kWindow) {
            ASSERT_EQ(post_send(free_slots.back(), sent), 0);
            free_slots.pop_back();
            ++sent;
        }
        int n = cq_->poll(wc);
        ASSERT_GE(n, 0);
        for (int i = 0; i < n; ++i) {
            ASSERT_EQ(wc[i].status, WcStatus::success) << to_string(wc[i].status);
            if (wc[i].opcode == WcOpcode::send) {
                free_slots.push_back(uint32_t(wc[i].wr_id));
                ++send_done;
                continue;
            }
            const auto b = uint32_t(wc[i].wr_id);
            ASSERT_TRUE(check_frame(recv_buf(b), wc[i].byte_len, received, dev_->attr().mac))
                << "frame " << received << " came back wrong or out of order (" << wc[i].byte_len << " bytes)";
            ++received;
            ASSERT_TRUE(post_recv(b));
        }
    }
    EXPECT_EQ(received, kFrames);
    const std::string stats = backend("stats --dir " + dir_).out;
    EXPECT_EQ(field(stats, "rx_packets"), long(kFrames)) << stats;
    EXPECT_EQ(field(stats, "tx_packets"), long(kFrames)) << stats;
}

TEST_P(VhostNet, BackendKilledMidTraffic) {
    start("io");
    if (IsSkipped() || HasFatalFailure()) return;
    for (uint32_t i = 0; i < kRecvBufs; ++i) ASSERT_TRUE(post_recv(i));
    std::vector<uint32_t> free_slots;
    for (uint32_t i = 0; i < kSendBufs; ++i) free_slots.push_back(i);
    uint32_t sent = 0, received = 0, flushed = 0;
    bool killed = false, failed = false;
    Completion wc[64];
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
        if (!killed && received >= 2000) {
            const long pid = field(backend("status --dir " + dir_).out, "pid");
            ASSERT_GT(pid, 0);
            ASSERT_EQ(::kill(pid_t(pid), SIGKILL), 0);
            killed = true;
        }
        while (!failed && !free_slots.empty()) {
            const int err = post_send(free_slots.back(), sent);
            if (err == EIO) {   // the queue pair is in the error state
                failed = true;
                break;
            }
            ASSERT_EQ(err, 0);
            free_slots.pop_back();
            ++sent;
        }
        int n = cq_->poll(wc);
        ASSERT_GE(n, 0);
        for (int i = 0; i < n; ++i) {
            if (wc[i].status == WcStatus::wr_flush_error) {
                ++flushed;
                if (wc[i].opcode == WcOpcode::send) free_slots.push_back(uint32_t(wc[i].wr_id));
                continue;
            }
            ASSERT_EQ(wc[i].status, WcStatus::success);
            if (wc[i].opcode == WcOpcode::send)
                free_slots.push_back(uint32_t(wc[i].wr_id));
            else if (qp_->state() == QpState::ready && post_recv(uint32_t(wc[i].wr_id)))
                ++received;
        }
        if (qp_->state() == QpState::error && qp_->send_outstanding() == 0 && qp_->recv_outstanding() == 0) break;
    }
    ASSERT_TRUE(killed);
    ASSERT_EQ(qp_->state(), QpState::error) << "the hang-up was not noticed";
    EXPECT_EQ(qp_->send_outstanding(), 0u);
    EXPECT_EQ(qp_->recv_outstanding(), 0u);
    EXPECT_GT(flushed, 0u);   // at least the receive buffers
    // The device's event fd is readable and next_event() says why; once.
    pollfd p{dev_->event_fd(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 1000), 1);
    EXPECT_EQ(dev_->next_event().type, EventType::device_removal);
    EXPECT_EQ(dev_->next_event().type, EventType::none);
    EXPECT_FALSE(dev_->link().up);
    EXPECT_EQ(qp_->post_send({}).error, EIO);
    auto r = dev_->reset();
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("is gone"), std::string::npos) << r.error().message;
}

// Interrupt mode: one eventfd is the call fd of both vrings and the CQ's channel.
TEST_P(VhostNet, InterruptModeWakesThroughTheCallEventfd) {
    start("io");
    if (IsSkipped() || HasFatalFailure()) return;
    for (uint32_t i = 0; i < kRecvBufs; ++i) ASSERT_TRUE(post_recv(i));
    Completion wc[64];
    for (uint32_t seq = 0; seq < 100; ++seq) {
        ASSERT_TRUE(cq_->arm());
        ASSERT_EQ(post_send(seq % kSendBufs, seq), 0);
        uint32_t sends = 0, recvs = 0;
        const auto deadline = Clock::now() + std::chrono::seconds(5);
        while ((sends == 0 || recvs == 0) && Clock::now() < deadline) {
            pollfd p{cq_->channel_fd(), POLLIN, 0};
            ASSERT_EQ(::poll(&p, 1, 2000), 1) << "no notification for frame " << seq;
            cq_->take_events();
            for (int n; (n = cq_->poll(wc)) > 0;)
                for (int i = 0; i < n; ++i) {
                    ASSERT_EQ(wc[i].status, WcStatus::success);
                    if (wc[i].opcode == WcOpcode::send) {
                        ++sends;
                    } else {
                        ASSERT_TRUE(check_frame(recv_buf(uint32_t(wc[i].wr_id)), wc[i].byte_len, seq, dev_->attr().mac));
                        ++recvs;
                        ASSERT_TRUE(post_recv(uint32_t(wc[i].wr_id)));
                    }
                }
            ASSERT_TRUE(cq_->arm());
        }
        ASSERT_EQ(sends, 1u);
        ASSERT_EQ(recvs, 1u);
    }
}

// Destroying the queue pair stops both vrings; a new one starts them again on new rings.
TEST_P(VhostNet, QueuePairCanBeRecreated) {
    start("io");
    if (IsSkipped() || HasFatalFailure()) return;
    for (int round = 0; round < 3; ++round) {
        if (round > 0) {
            ASSERT_TRUE(qp_->destroy());
            QpInitAttr a;
            a.send_cq = a.recv_cq = cq_;
            a.caps = {kSendBufs, kRecvBufs, 1, 1};
            a.sq_sig_all = true;
            auto qp = dev_->create_qp(a);
            ASSERT_TRUE(qp) << qp.error().message;
            qp_ = *qp;
        }
        for (uint32_t i = 0; i < kRecvBufs; ++i) ASSERT_TRUE(post_recv(i));
        for (uint32_t seq = 0; seq < 10; ++seq) ASSERT_EQ(post_send(seq, seq), 0);
        uint32_t recvs = 0;
        Completion wc[64];
        const auto deadline = Clock::now() + std::chrono::seconds(5);
        while (recvs < 10 && Clock::now() < deadline)
            for (int n = cq_->poll(wc), i = 0; i < n; ++i) {
                ASSERT_EQ(wc[i].status, WcStatus::success);
                if (wc[i].opcode == WcOpcode::recv) {
                    ASSERT_TRUE(check_frame(recv_buf(uint32_t(wc[i].wr_id)), wc[i].byte_len, recvs, dev_->attr().mac));
                    ++recvs;
                }
            }
        ASSERT_EQ(recvs, 10u) << "round " << round;
    }
}

// An application asleep on the device's event fd and the CQ channel learns of the hang-up.
TEST_P(VhostNet, HangupWakesASleepingApplication) {
    start("io");
    if (IsSkipped() || HasFatalFailure()) return;
    for (uint32_t i = 0; i < kRecvBufs; ++i) ASSERT_TRUE(post_recv(i));
    ASSERT_TRUE(cq_->arm());
    const long pid = field(backend("status --dir " + dir_).out, "pid");
    ASSERT_GT(pid, 0);
    ASSERT_EQ(::kill(pid_t(pid), SIGKILL), 0);
    pollfd p{dev_->event_fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 5000), 1) << "the event fd did not report the hang-up";
    EXPECT_EQ(dev_->next_event().type, EventType::device_removal);
    EXPECT_EQ(qp_->state(), QpState::error);
    pollfd c{cq_->channel_fd(), POLLIN, 0};
    EXPECT_EQ(::poll(&c, 1, 0), 1) << "the completion channel did not fire";
    Completion wc[kRecvBufs];
    uint32_t flushed = 0;
    for (int n; (n = cq_->poll(wc)) > 0;)
        for (int i = 0; i < n; ++i) flushed += wc[i].status == WcStatus::wr_flush_error;
    EXPECT_EQ(flushed, kRecvBufs);
    EXPECT_EQ(qp_->recv_outstanding(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Rings, VhostNet, ::testing::Values(RingFormat::split, RingFormat::packed),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
