// The vhost-user front-end against a back-end nobody here wrote: DPDK's vhost PMD in
// dpdk-testpmd, started by scripts/vhost-backend on this host (label "host": needs root and
// Debian's dpdk; every test skips, saying why, when the back-end cannot run).
//
// The handshake must leave DPDK's device ready (features, memory table, both vrings with
// their eventfds, enabled); one frame then goes through it and back (testpmd "io" forwards the
// driver's TX ring to its RX ring), which only works when guest addresses, ring addresses and
// the shared memfd agree. Stopping the back-end must show as a hang-up on the front-end, and
// the hugepages the script took must be given back.
#include "vfab/drivers/virtio/vhost_user.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "vfab/dma/dma_memory.hpp"

#ifndef VFAB_VHOST_BACKEND
#error "VFAB_VHOST_BACKEND: the path of scripts/vhost-backend"
#endif

namespace {

constexpr const char* kHowToRun =
    " — these tests need root, Debian's dpdk (scripts/setup) and 2 MiB hugepages; leave them out with ctest -LE host";

using vfab::virtio::VhostUserFrontend;
using vfab::virtio::VringConfig;
namespace vu = vfab::virtio::vhost_user;

constexpr uint64_t kNetFMq = 1ull << 22;   // VIRTIO_NET_F_MQ
constexpr const char* kNrHugepages = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";

struct ScriptRun {
    int status;
    std::string out;
};
// Runs scripts/vhost-backend with `args`; its exit status and output (stdout and stderr).
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

long read_long(const char* path) {
    std::ifstream in(path);
    long v = -1;
    in >> v;
    return v;
}

// "key=value" out of the script's output, -1 when missing.
long field(const std::string& out, const std::string& key) {
    auto p = out.find(key + "=");
    return p == std::string::npos ? -1 : std::atol(out.c_str() + p + key.size() + 1);
}

// Split virtqueue layout (VIRTIO 1.2 §2.7), just enough for one frame each way.
struct Desc {
    uint64_t addr;
    uint32_t len;
    uint16_t flags;
    uint16_t next;
};
static_assert(sizeof(Desc) == 16);
constexpr uint16_t kDescWrite = 2;
constexpr uint32_t kRingSize = 256;

struct Ring {
    uint8_t* base;
    Desc* desc() const { return reinterpret_cast<Desc*>(base); }
    uint16_t* avail() const { return reinterpret_cast<uint16_t*>(base + 0x1000); }   // flags, idx, ring[]
    uint8_t* used() const { return base + 0x2000; }                                   // flags, idx, {id, len}[]
    VringConfig config(uint32_t index) const {
        return VringConfig{.index = index, .size = kRingSize, .desc = base, .avail = avail(), .used = used()};
    }
    void post(uint16_t slot, const void* buf, uint32_t len, uint16_t flags) {
        desc()[slot] = Desc{reinterpret_cast<uintptr_t>(buf), len, flags, 0};   // IOVA = VA
        uint16_t idx = std::atomic_ref<uint16_t>(avail()[1]).load(std::memory_order_relaxed);
        avail()[2 + idx % kRingSize] = slot;
        std::atomic_ref<uint16_t>(avail()[1]).store(static_cast<uint16_t>(idx + 1), std::memory_order_release);
    }
    uint16_t used_idx() const {
        return std::atomic_ref<uint16_t>(*reinterpret_cast<uint16_t*>(used() + 2)).load(std::memory_order_acquire);
    }
    uint32_t used_len(uint16_t i) const {
        uint32_t len;
        std::memcpy(&len, used() + 4 + 8 * (i % kRingSize) + 4, 4);
        return len;
    }
};

class VhostUserHost : public ::testing::Test {
protected:
    static inline std::string dir_, socket_, skip_;
    static inline long pages_before_ = -1;
    static inline bool started_ = false;

    static void SetUpTestSuite() {
        ScriptRun check = backend("check");
        if (check.status != 0) {
            skip_ = check.out;
            return;
        }
        dir_ = (std::filesystem::temp_directory_path() / ("vfab-vhost-host-" + std::to_string(::getpid()))).string();
        socket_ = dir_ + "/vhost.sock";
        pages_before_ = read_long(kNrHugepages);
        // --owner: should this process die, the back-end stops and gives its hugepages back.
        ScriptRun start = backend("start --dir " + dir_ + " --socket " + socket_ + " --queues 2 --mode io --owner " +
                                  std::to_string(::getpid()));
        if (start.status == 77) {
            skip_ = start.out;
            return;
        }
        ASSERT_EQ(start.status, 0) << start.out;
        started_ = true;
    }
    static void TearDownTestSuite() {
        if (started_) backend("stop --dir " + dir_);
        started_ = false;
        if (!dir_.empty()) std::filesystem::remove_all(dir_);
    }
    void SetUp() override {
        // CI provides the back-end (scripts/test: root, Debian's DPDK, hugepages): its absence is
        // a failure, not a skip. Without root: ctest -LE host.
        if (!skip_.empty()) GTEST_FAIL() << "no DPDK vhost back-end on this host: " << skip_ << kHowToRun;
        ASSERT_TRUE(started_);
    }
    // Polls the script's status until `key` is 1 (5 s at most).
    static bool wait_status(const char* key) {
        for (int i = 0; i < 50; ++i) {
            if (field(backend("status --dir " + dir_).out, key) == 1) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        return false;
    }
};

TEST_F(VhostUserHost, HandshakeLeavesDpdkReadyAndAFrameGoesThroughAndBack) {
    auto fe = VhostUserFrontend::connect(socket_);
    ASSERT_TRUE(fe.ok()) << fe.error().message;
    auto features = fe->negotiate(vu::kFeatureVersion1 | kNetFMq);
    ASSERT_TRUE(features.ok()) << features.error().message;
    EXPECT_EQ(*features, vu::kFeatureVersion1 | kNetFMq);
    EXPECT_TRUE(fe->backend_features() & vu::kFeatureProtocolFeatures);
    EXPECT_TRUE(fe->protocol_features() & (1ull << vu::kProtocolReplyAck));   // every step acknowledged
    // DPDK answers GET_QUEUE_NUM with its library-wide maximum (128 pairs), not --queues.
    EXPECT_GE(fe->queue_num(), 2u);

    // Hugepage memory when the script's reserve has room, else 4 KiB pages: both work.
    auto mem = vfab::dma::DmaMemory::allocate(2u << 20);
    ASSERT_TRUE(mem.ok()) << mem.error().message;
    auto region = vfab::virtio::mem_region(*mem);
    auto mt = fe->set_mem_table({&region, 1});
    ASSERT_TRUE(mt.ok()) << mt.error().message;

    Ring rx{mem->data()}, tx{mem->data() + 0x10000};
    uint8_t* rx_bufs = mem->data() + 0x100000;
    for (uint16_t i = 0; i < 16; ++i) rx.post(i, rx_bufs + i * 2048, 2048, kDescWrite);
    for (uint32_t q : {0u, 1u}) {
        auto r = fe->start_vring((q == 0 ? rx : tx).config(q));
        ASSERT_TRUE(r.ok()) << r.error().message;
    }
    EXPECT_TRUE(wait_status("ready")) << backend("log --dir " + dir_).out;

    // One frame out on the TX ring (vring 1): a 12-byte virtio-net header, then the frame.
    uint8_t* pkt = mem->data() + 0x180000;
    const uint8_t frame[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 1, 0x88, 0xb5,
                             'v', 'f', 'a', 'b', ' ', 'v', 'h', 'o', 's', 't', '-', 'u', 's', 'e', 'r'};
    std::memset(pkt, 0, 12 + 60);
    std::memcpy(pkt + 12, frame, sizeof frame);
    tx.post(0, pkt, 12 + 60, 0);
    EXPECT_TRUE(fe->kick(1));

    // testpmd "io" sends it back: it lands in the first RX buffer and the call eventfd fires.
    for (int i = 0; i < 500 && rx.used_idx() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_EQ(rx.used_idx(), 1) << backend("log --dir " + dir_).out;
    EXPECT_EQ(tx.used_idx(), 1);
    EXPECT_EQ(rx.used_len(0), 12u + 60u);
    EXPECT_EQ(std::memcmp(rx_bufs + 12, frame, sizeof frame), 0);
    pollfd call{fe->call_fd(0), POLLIN, 0};
    EXPECT_EQ(::poll(&call, 1, 1000), 1);

    ScriptRun stats = backend("stats --dir " + dir_);
    EXPECT_EQ(field(stats.out, "rx_packets"), 1) << stats.out;   // from the driver's TX ring
    EXPECT_EQ(field(stats.out, "tx_packets"), 1) << stats.out;   // into its RX ring

    // Stopping a vring stops DPDK's whole device (it destroys it on GET_VRING_BASE), and its
    // PMD then only queues again on vrings that change state: stop and start all of them, as
    // QEMU does. Restarted from the bases they returned, the next frame goes through.
    uint32_t bases[2];
    for (uint32_t q : {1u, 0u}) {
        auto base = fe->stop_vring(q);
        ASSERT_TRUE(base.ok()) << base.error().message;
        bases[q] = *base;
    }
    EXPECT_EQ(bases[0], 1u);   // each had taken one available entry
    EXPECT_EQ(bases[1], 1u);
    EXPECT_EQ(field(backend("status --dir " + dir_).out, "ready"), 0);
    for (uint32_t q : {0u, 1u}) {
        VringConfig cfg = (q == 0 ? rx : tx).config(q);
        cfg.base = bases[q];
        auto r = fe->start_vring(cfg);
        ASSERT_TRUE(r.ok()) << r.error().message;
    }
    EXPECT_TRUE(wait_status("ready"));
    tx.post(1, pkt, 12 + 60, 0);
    EXPECT_TRUE(fe->kick(1));
    for (int i = 0; i < 500 && rx.used_idx() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(tx.used_idx(), 2);
    EXPECT_EQ(rx.used_idx(), 2) << backend("stats --dir " + dir_).out;
    EXPECT_TRUE(fe->alive());
}

TEST_F(VhostUserHost, BackendStoppingIsAHangupAndItsHugepagesGoBack) {
    auto fe = VhostUserFrontend::connect(socket_);
    ASSERT_TRUE(fe.ok()) << fe.error().message;
    ASSERT_TRUE(fe->negotiate(vu::kFeatureVersion1).ok());
    ASSERT_TRUE(fe->alive());

    ScriptRun stop = backend("stop --dir " + dir_);
    ASSERT_EQ(stop.status, 0) << stop.out;
    started_ = false;
    pollfd p{fe->socket_fd(), POLLRDHUP, 0};
    EXPECT_EQ(::poll(&p, 1, 5000), 1);
    EXPECT_FALSE(fe->alive());
    auto r = fe->set_owner();
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("connection is down"), std::string::npos) << r.error().message;

    vfab::virtio::VhostUserOptions fast;
    fast.connect_timeout_ms = 0;
    auto again = VhostUserFrontend::connect(socket_, fast);
    ASSERT_FALSE(again.ok());
    EXPECT_NE(again.error().message.find("no vhost-user backend at " + socket_ + " ("), std::string::npos)
        << again.error().message;
    EXPECT_EQ(read_long(kNrHugepages), pages_before_);
}

}  // namespace
