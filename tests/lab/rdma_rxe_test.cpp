// vfab's RDMA transport against the Linux kernel's own RoCEv2 (rdma_rxe), which no one here
// wrote: vfab drives 0000:00:02.0 through VFIO as 10.77.0.1; the kernel's e1000e has
// 0000:00:03.0 as 10.77.0.2 with rxe0 on it (RxePeer); the two NICs share QEMU's hub 0.
//   - rdma-core's unmodified ibv_rc_pingpong / ibv_ud_pingpong / ibv_srq_pingpong against
//     vfab's examples (examples/rc_pingpong, ud_pingpong, srq_pingpong), vfab as server and
//     as client;
//   - rxe_verbs_peer (the system's libibverbs on rxe0) running WRITE, READ, FETCH_ADD and
//     CMP_SWAP against vfab's memory, and vfab running them against rxe's, checked byte by
//     byte; a wrong rkey from either side ends in a remote access error and writes nothing.
// The pingpong tools' TCP side channel runs over 127.0.0.1 in the guest; RoCE goes over the wire.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <deque>
#include <functional>
#include <random>

#include "../unit/rdma_connect.hpp"
#include "lab_env.hpp"
#include "rxe_suite.hpp"
#include "vfab/rdma/exchange.hpp"

namespace vfab::rdma::test {
namespace {

using namespace std::chrono_literals;
using namespace vfab::lab;

constexpr const char* kVfabNic = "0000:00:02.0";
constexpr const char* kVfabIp = "10.77.0.1";
constexpr uint32_t kVfabIpv4 = 0x0a4d0001;
constexpr uint16_t kVerbsPort = 18600;

class RdmaRxe : public RxeSuite {
protected:
    static std::vector<std::string> vfab_tool(const char* name, std::vector<std::string> extra) {
        std::vector<std::string> a = {std::string("/vfab/bin/") + name, "-d", kVfabNic, "--ip", kVfabIp};
        a.insert(a.end(), extra.begin(), extra.end());
        return a;
    }
};

TEST_F(RdmaRxe, RcPingpongVfabServerRxeClient) {
    for (const char* size : {"1", "4096", "20000"}) {
        SCOPED_TRACE(size);
        auto r = run_server_client(vfab_tool("rc_pingpong", {"-n", "100", "-s", size}),
                                   {"ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-n", "100", "-s", size, "127.0.0.1"}, 120s);
        expect_pair(r, "100 iters in");
    }
}

TEST_F(RdmaRxe, RcPingpongRxeServerVfabClient) {
    for (const char* size : {"1", "4096", "20000"}) {
        SCOPED_TRACE(size);
        auto r = run_server_client({"ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-n", "100", "-s", size},
                                   vfab_tool("rc_pingpong", {"-n", "100", "-s", size, "127.0.0.1"}), 120s);
        expect_pair(r, "100 iters in");
    }
}

TEST_F(RdmaRxe, UdPingpongBothWays) {
    auto r = run_server_client(vfab_tool("ud_pingpong", {"-n", "100", "-s", "1000"}),
                               {"ibv_ud_pingpong", "-d", "rxe0", "-g", "1", "-n", "100", "-s", "1000", "127.0.0.1"}, 120s);
    expect_pair(r, "100 iters in");
    r = run_server_client({"ibv_ud_pingpong", "-d", "rxe0", "-g", "1", "-n", "100", "-s", "1000"},
                          vfab_tool("ud_pingpong", {"-n", "100", "-s", "1000", "127.0.0.1"}), 120s);
    expect_pair(r, "100 iters in");
}

// 16 RC queue pairs on each side, vfab's receiving through one SRQ (examples/srq_pingpong),
// 4 KiB messages of 4 packets each: every queue pair's messages land in whatever receive the
// SRQ has next.
TEST_F(RdmaRxe, SrqPingpongBothWays) {
    auto r = run_server_client(vfab_tool("srq_pingpong", {"-n", "200"}),
                               {"ibv_srq_pingpong", "-d", "rxe0", "-g", "1", "-n", "200", "127.0.0.1"}, 120s);
    expect_pair(r, "200 iters in");
    r = run_server_client({"ibv_srq_pingpong", "-d", "rxe0", "-g", "1", "-n", "200", "-r", "64", "-q", "32"},
                          vfab_tool("srq_pingpong", {"-n", "200", "-r", "64", "-q", "32", "127.0.0.1"}), 120s);
    expect_pair(r, "200 iters in");
}

// ---- one-sided operations with rxe_verbs_peer ----------------------------------------------------

struct Remote {
    uint32_t qpn = 0, psn = 0, rkey = 0, len = 0;
    uint64_t addr = 0;
    Gid gid;
};

// A vfab RC queue pair on 00:02.0 connected to rxe_verbs_peer's over its TCP line exchange.
class VerbsPeerTest : public RdmaRxe {
protected:
    // `timeout`: vfab's local ACK timeout (16: 268 ms, generous for TCG; the lossy test wants
    // lost packets sent again sooner).
    void connect_to_peer(const char* mode, uint8_t timeout = 16, uint8_t retry_cnt = 7) {
        helper_ = std::make_unique<Child>(std::vector<std::string>{"/vfab/bin/rxe_verbs_peer", mode, std::to_string(kVerbsPort)});
        ASSERT_TRUE(wait_for([] { return tcp_listening(kVerbsPort); }, 20s)) << helper_->wait(0ms).summary();
        auto dev = vfab::Device::open(kVfabNic);
        ASSERT_TRUE(dev) << dev.error().message;
        dev_ = std::move(*dev);
        PortConfig pc;
        pc.ipv4 = kVfabIpv4;
        auto port = Port::create(*dev_, pc);
        ASSERT_TRUE(port) << port.error().message;
        port_ = std::move(*port);
        mem_.assign(1 << 20, 0);
        me_ = make_side(*port_, QpType::rc, mem_);
        // rxe resolves 10.77.0.1 when it connects (modify to RTR), within a second, while this
        // thread waits on the TCP exchange: the progress thread answers ARP meanwhile.
        ASSERT_TRUE(port_->start_progress_thread(-1));
        fd_ = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_in sa = inet(pkt::ipv4(127, 0, 0, 1), kVerbsPort);
        ASSERT_EQ(::connect(fd_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
        const std::string line = read_line_fd();
        char gid[33] = {};
        ASSERT_EQ(std::sscanf(line.c_str(), "%x %x %32s %x %lx %x", &remote_.qpn, &remote_.psn, gid, &remote_.rkey,
                              &remote_.addr, &remote_.len),
                  6)
            << line;
        for (int i = 0; i < 16; ++i) {
            unsigned b;
            std::sscanf(gid + 2 * i, "%2x", &b);
            remote_.gid.raw[i] = uint8_t(b);
        }
        char mine[200];
        int n = std::snprintf(mine, sizeof mine, "%x %x ", me_.qp->qp_num(), 0x13579bu);
        for (uint8_t b : port_->gid().raw) n += std::snprintf(mine + n, sizeof mine - size_t(n), "%02x", b);
        std::snprintf(mine + n, sizeof mine - size_t(n), " %x %lx %x\n", me_.mr.rkey,
                      reinterpret_cast<unsigned long>(mem_.data()), uint32_t(mem_.size()));
        ASSERT_EQ(::write(fd_.get(), mine, std::strlen(mine)), ssize_t(std::strlen(mine)));
        QpAttr a;
        a.qp_state = RdmaQpState::init;
        a.qp_access_flags = kAllRemote;
        ASSERT_TRUE(me_.qp->modify(a, attr_state | attr_pkey_index | attr_port | attr_access_flags));
        a.qp_state = RdmaQpState::rtr;
        a.path_mtu = 3;
        a.dest_qp_num = remote_.qpn;
        a.rq_psn = remote_.psn;
        a.max_dest_rd_atomic = 4;
        a.min_rnr_timer = 12;
        a.ah_attr.dgid = remote_.gid;
        ASSERT_TRUE(me_.qp->modify(a, attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn |
                                          attr_max_dest_rd_atomic | attr_min_rnr_timer));
        a.qp_state = RdmaQpState::rts;
        a.sq_psn = 0x13579b;
        a.timeout = timeout;
        a.retry_cnt = retry_cnt;
        a.max_rd_atomic = 4;
        ASSERT_TRUE(me_.qp->modify(a, attr_state | attr_sq_psn | attr_timeout | attr_retry_cnt | attr_rnr_retry |
                                          attr_max_qp_rd_atomic));
        ASSERT_EQ(read_line_fd(), "ready");
        port_->stop_progress_thread();
    }
    void TearDown() override {
        if (port_) port_->stop_progress_thread();
        fd_ = Fd();
        if (helper_) {
            const Outcome o = helper_->wait(30s);
            if (HasFailure()) std::printf("rxe_verbs_peer: %s\n", o.summary().c_str());
        }
        port_.reset();
        dev_.reset();
    }
    std::string read_line_fd() {
        std::string s;
        char c;
        pollfd p{fd_.get(), POLLIN, 0};
        while (::poll(&p, 1, 60000) == 1 && ::read(fd_.get(), &c, 1) == 1 && c != '\n') s += c;
        return s;
    }
    // Runs the port until one completion.
    Wc complete_one() {
        Wc wc{};
        wc.status = RdmaWcStatus::general_err;
        wc.vendor_err = 0xdead;
        const auto end = std::chrono::steady_clock::now() + 60s;
        while (std::chrono::steady_clock::now() < end)
            if (me_.cq->poll(std::span(&wc, 1)) == 1) break;
        return wc;
    }
    Wc post(WrOpcode op, uint64_t local_off, uint32_t len, uint64_t remote_off, uint64_t cmp_add = 0, uint64_t swap = 0,
            uint32_t rkey_xor = 0) {
        Sge s{reinterpret_cast<uint64_t>(mem_.data() + local_off), len, me_.mr.lkey};
        RdmaSendWr w = wr_of(op, 1, &s);
        w.remote_addr = remote_.addr + remote_off;
        w.rkey = remote_.rkey ^ rkey_xor;
        w.compare_add = cmp_add;
        w.swap = swap;
        EXPECT_TRUE(me_.qp->post_send(std::span(&w, 1)));
        return complete_one();
    }
    std::vector<uint8_t> dump(uint64_t off, uint64_t len) {
        const std::string cmd = str_cat("dump ", std::hex, off, " ", len, "\n");
        EXPECT_EQ(::write(fd_.get(), cmd.data(), cmd.size()), ssize_t(cmd.size()));
        const std::string hex = read_line_fd();
        std::vector<uint8_t> out;
        for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(uint8_t(std::stoul(hex.substr(i, 2), nullptr, 16)));
        return out;
    }
    std::unique_ptr<Child> helper_;
    std::unique_ptr<vfab::Device> dev_;
    std::unique_ptr<Port> port_;
    std::vector<uint8_t> mem_;
    Side me_;
    Remote remote_;
    Fd fd_;
};

uint8_t peer_byte(size_t i) { return uint8_t(i * 7 + 3); }   // rxe_verbs_peer's buffer
uint8_t pattern(size_t i, unsigned seed) { return uint8_t(i * 13 + seed + (i >> 10)); }

TEST_F(VerbsPeerTest, RxeWritesReadsAndUpdatesVfabMemory) {
    ASSERT_NO_FATAL_FAILURE(connect_to_peer("initiator"));
    // vfab is the passive target: the application posts and polls nothing; the opt-in
    // progress thread serves the peer.
    ASSERT_TRUE(port_->start_progress_thread(-1));
    const Outcome o = helper_->wait(120s);
    port_->stop_progress_thread();
    EXPECT_EQ(o.rc, 0) << o.summary();
    EXPECT_EQ(o.out.find("FAIL"), std::string::npos) << o.out;
    for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(mem_[i], pattern(i, 1)) << i;
    for (size_t i = 0; i < 100000; ++i) ASSERT_EQ(mem_[16384 + i], pattern(i, 2)) << i;
    uint64_t counter;
    std::memcpy(&counter, mem_.data() + 512 * 1024, 8);
    EXPECT_EQ(counter, 0xabcdef0123456789ull);
    // Nothing else written: the wrong-rkey WRITE aimed at 600000.
    EXPECT_TRUE(std::all_of(mem_.begin() + 4096, mem_.begin() + 16384, [](uint8_t b) { return b == 0; }));
    EXPECT_TRUE(std::all_of(mem_.begin() + 116384, mem_.begin() + 512 * 1024, [](uint8_t b) { return b == 0; }));
    EXPECT_TRUE(std::all_of(mem_.begin() + 512 * 1024 + 8, mem_.end(), [](uint8_t b) { return b == 0; }));
}

TEST_F(VerbsPeerTest, VfabWritesReadsAndUpdatesRxeMemory) {
    ASSERT_NO_FATAL_FAILURE(connect_to_peer("target"));
    for (size_t i = 0; i < 4096; ++i) mem_[i] = pattern(i, 5);
    Wc wc = post(WrOpcode::rdma_write, 0, 4096, 0);
    EXPECT_EQ(wc.status, RdmaWcStatus::success) << to_string(wc.status);
    for (size_t i = 0; i < 50000; ++i) mem_[8192 + i] = pattern(i, 6);
    wc = post(WrOpcode::rdma_write, 8192, 50000, 100000);
    EXPECT_EQ(wc.status, RdmaWcStatus::success) << to_string(wc.status);
    wc = post(WrOpcode::rdma_read, 200000, 150000, 60000);
    ASSERT_EQ(wc.status, RdmaWcStatus::success) << to_string(wc.status);
    for (size_t i = 0; i < 150000; ++i) {
        const size_t r = 60000 + i;
        const uint8_t want = r >= 100000 && r < 150000 ? pattern(r - 100000, 6) : peer_byte(r);
        ASSERT_EQ(mem_[200000 + i], want) << "byte " << r << " of rxe's buffer";
    }
    for (uint64_t k = 0; k < 10; ++k) {
        wc = post(WrOpcode::atomic_fetch_and_add, 400000, 8, 512 * 1024, 5);
        ASSERT_EQ(wc.status, RdmaWcStatus::success) << to_string(wc.status);
        uint64_t before;
        std::memcpy(&before, mem_.data() + 400000, 8);
        EXPECT_EQ(before, 5 * k);
    }
    wc = post(WrOpcode::atomic_cmp_and_swp, 400000, 8, 512 * 1024, 50, 0x1122334455667788ull);
    EXPECT_EQ(wc.status, RdmaWcStatus::success);
    // A wrong rkey: rxe refuses it, vfab's WR ends in a remote access error.
    wc = post(WrOpcode::rdma_write, 0, 64, 700000, 0, 0, 0x100);
    EXPECT_EQ(wc.status, RdmaWcStatus::rem_access_err) << to_string(wc.status);

    const auto head = dump(0, 4096);
    ASSERT_EQ(head.size(), 4096u);
    for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(head[i], pattern(i, 5)) << i;
    const auto counter = dump(512 * 1024, 8);
    uint64_t c = 0;
    std::memcpy(&c, counter.data(), 8);
    EXPECT_EQ(c, 0x1122334455667788ull);
    const auto untouched = dump(700000, 64);
    ASSERT_EQ(untouched.size(), 64u);
    for (size_t i = 0; i < 64; ++i) EXPECT_EQ(untouched[i], peer_byte(700000 + i)) << i;
    ASSERT_EQ(::write(fd_.get(), "quit\n", 5), 5);
}

// vfab's masked atomics are for vfab peers: rxe drops their manufacturer-specific opcode (it is
// not RC's), vfab's WR ends when its retries run out, and rxe's word is never touched — where
// a standard opcode with longer headers would have been run as a plain atomic.
TEST_F(VerbsPeerTest, RxeDropsVfabsMaskedAtomicsAndItsMemoryStays) {
    ASSERT_NO_FATAL_FAILURE(connect_to_peer("target", 11, 2));   // 8.4 ms, 2 retries
    const auto before = dump(512 * 1024, 8);
    Sge s{reinterpret_cast<uint64_t>(mem_.data()), 8, me_.mr.lkey};
    RdmaSendWr w = wr_of(WrOpcode::masked_atomic_fetch_and_add, 1, &s);
    w.remote_addr = remote_.addr + 512 * 1024;
    w.rkey = remote_.rkey;
    w.compare_add = 0x0101010101010101ull;
    w.compare_add_mask = 0x8080808080808080ull;
    ASSERT_TRUE(me_.qp->post_send(std::span(&w, 1)));
    const Wc wc = complete_one();
    EXPECT_EQ(wc.status, RdmaWcStatus::retry_exc_err) << to_string(wc.status);
    EXPECT_EQ(dump(512 * 1024, 8), before);
    ASSERT_EQ(::write(fd_.get(), "quit\n", 5), 5);
}

}  // namespace
}  // namespace vfab::rdma::test

namespace vfab::rdma::test {
namespace {

// ---- a lossy link ----------------------------------------------------------------------------------

// Drops a frame in `percent` of the calls (a fixed seed: runs repeat).
// rxe against vfab's memory-management verbs (docs/rdma-memory.md): a key vfab made through its
// send queue — a fast-registered MR, a type 2B window — takes rxe's WRITE, is invalidated by
// rxe's SEND_WITH_INV or vfab's LOCAL_INV, and rxe's next WRITE through it is refused.
class RxeAndVfabKeys : public VerbsPeerTest {
protected:
    void SetUp() override {
        VerbsPeerTest::SetUp();
        if (IsSkipped()) return;
        ASSERT_NO_FATAL_FAILURE(connect_to_peer("invalidate"));
    }
    // Posts one memory-management WR on vfab's QP and waits for it.
    void run_local(const RdmaSendWr& w) {
        ASSERT_TRUE(me_.qp->post_send(std::span(&w, 1)));
        const Wc wc = complete_one();
        ASSERT_EQ(wc.status, RdmaWcStatus::success) << to_string(wc.status) << " vendor_err " << std::hex << wc.vendor_err;
    }
    // 8 KiB at `iova`: two 4 KiB blocks from `off`, listed second first (scattered).
    uint32_t fast_register(uint64_t off, uint64_t iova) {
        const uint32_t key = *port_->pd().alloc_mr(1 << 16);
        const uint64_t start = reinterpret_cast<uint64_t>(mem_.data() + off);
        const uint64_t blocks[2] = {start + 4096, start};
        RegMrInfo info{blocks, 2, 4096, 0, kAllRemote, 8192, iova};
        RdmaSendWr w = wr_of(WrOpcode::reg_mr, 1, nullptr, 0);
        w.mem_key = key;
        w.new_key = next_key(key);
        w.reg = &info;
        run_local(w);
        return w.new_key;
    }
    uint32_t bind_window(uint64_t off) {
        auto mr = port_->pd().register_memory(mem_.data(), mem_.size(), dma::Access(kAllRemote) | dma::Access::mw_bind);
        EXPECT_TRUE(mr) << mr.error().message;
        const uint32_t mw = *port_->pd().alloc_mw(dma::WindowType::type2);
        RdmaSendWr w = wr_of(WrOpcode::bind_mw, 2, nullptr, 0);
        w.mem_key = mw;
        w.new_key = next_key(mw);
        w.bind = {mr->lkey, uint32_t(dma::Access::remote_write), reinterpret_cast<uint64_t>(mem_.data() + off), 8192};
        run_local(w);
        return w.new_key;
    }
    void send_line(const std::string& s) { ASSERT_EQ(::write(fd_.get(), s.data(), s.size()), ssize_t(s.size())); }
    // rxe writes 4 KiB through `rkey` at `addr`, then invalidates it with SEND_WITH_INV, then
    // fails; byte i lands at mem_[where(i)].
    void rxe_invalidates(uint32_t rkey, uint64_t addr, const std::function<size_t(size_t)>& where) {
        Sge r{reinterpret_cast<uint64_t>(mem_.data() + 900000), 64, me_.mr.lkey};
        RecvWr rw{77, &r, 1, 0};
        ASSERT_TRUE(me_.qp->post_recv(std::span(&rw, 1)));
        ASSERT_TRUE(port_->start_progress_thread(-1));   // a passive target
        send_line(str_cat("remote ", std::hex, rkey, " ", addr, "\n"));
        const Outcome o = helper_->wait(120s);
        port_->stop_progress_thread();
        EXPECT_EQ(o.rc, 0) << o.summary();
        EXPECT_EQ(o.out.find("FAIL"), std::string::npos) << o.out;
        for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(mem_[where(i)], pattern(i, 5)) << i;
        const Wc wc = complete_one();
        EXPECT_EQ(wc.status, RdmaWcStatus::success) << to_string(wc.status);
        EXPECT_EQ(wc.wr_id, 77u);
        EXPECT_EQ(wc.wc_flags & wc_with_inv, wc_with_inv);
        EXPECT_EQ(wc.imm_data, rkey);
    }
};

TEST_F(RxeAndVfabKeys, RxeInvalidatesAFastRegisteredMr) {
    const uint32_t rkey = fast_register(65536, 0x7000000);
    // From the MR's byte 2048: the second half of its first block (mem_ 65536 + 4096 + 2048),
    // then the start of its second (mem_ 65536).
    ASSERT_NO_FATAL_FAILURE(rxe_invalidates(rkey, 0x7000000 + 2048, [](size_t i) {
        return i < 2048 ? 65536 + 4096 + 2048 + i : 65536 + (i - 2048);
    }));
}

TEST_F(RxeAndVfabKeys, RxeInvalidatesAType2BWindow) {
    const uint32_t rkey = bind_window(65536);
    ASSERT_NO_FATAL_FAILURE(
        rxe_invalidates(rkey, reinterpret_cast<uint64_t>(mem_.data() + 65536), [](size_t i) { return 65536 + i; }));
}

TEST_F(RxeAndVfabKeys, VfabInvalidatesAWindowRxeWroteThrough) {
    const uint32_t rkey = bind_window(131072);
    ASSERT_TRUE(port_->start_progress_thread(-1));
    send_line(str_cat("local ", std::hex, rkey, " ", reinterpret_cast<uint64_t>(mem_.data() + 131072), "\n"));
    ASSERT_EQ(read_line_fd(), "wrote");
    port_->stop_progress_thread();
    RdmaSendWr inv = wr_of(WrOpcode::local_inv, 3, nullptr, 0);
    inv.imm_data = rkey;
    run_local(inv);
    std::fill(mem_.begin() + 131072, mem_.begin() + 131072 + 8192, 0x5a);
    ASSERT_TRUE(port_->start_progress_thread(-1));
    send_line("again\n");
    const Outcome o = helper_->wait(120s);
    port_->stop_progress_thread();
    EXPECT_EQ(o.rc, 0) << o.summary();
    EXPECT_EQ(o.out.find("FAIL"), std::string::npos) << o.out;
    EXPECT_TRUE(std::all_of(mem_.begin() + 131072, mem_.begin() + 131072 + 8192, [](uint8_t b) { return b == 0x5a; }));
}

struct Dropper {
    std::mt19937 rng{2026};
    unsigned percent = 0;
    uint64_t dropped = 0;
    static bool hook(void* ctx, const uint8_t*, uint32_t) {
        auto* d = static_cast<Dropper*>(ctx);
        if (std::uniform_int_distribution<unsigned>(0, 99)(d->rng) >= d->percent) return false;
        ++d->dropped;
        return true;
    }
};

uint64_t fnv(uint64_t h, const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

// vfab runs 10,000 operations of every kind against rxe's memory while netem loses, reorders
// and duplicates what rxe sends, and vfab's own hooks drop what it sends and receives: every
// WR completes once, in order, successfully, with the right data; rxe's memory and the SENDs
// it received are what they must be.
TEST_F(VerbsPeerTest, TenThousandOperationsOverALossyLink) {
    ASSERT_NO_FATAL_FAILURE(connect_to_peer("target", 11));   // 8.4 ms
    const uint64_t ops = [] {
        const char* e = std::getenv("VFAB_RDMA_LAB_LOSS_OPS");
        return e ? std::strtoull(e, nullptr, 0) : 10000ull;
    }();
    Outcome mod = run_program({"modprobe", "sch_netem"});
    ASSERT_EQ(mod.rc, 0) << mod.summary();
    Outcome tc = run_program({"/usr/bin/tc", "qdisc", "add", "dev", peer_->ifname(), "root", "netem", "loss", "3%",
                              "delay", "1ms", "reorder", "10%", "duplicate", "2%"});
    ASSERT_EQ(tc.rc, 0) << tc.summary();
    Dropper rx, tx;
    rx.percent = tx.percent = 3;
    port_->set_rx_drop_hook(&Dropper::hook, &rx);
    port_->set_tx_drop_hook(&Dropper::hook, &tx);

    // rxe's buffer as the test expects it: 16 slots of 32 KiB, a counter, a swap word.
    constexpr uint32_t kSlots = 16, kSlot = 32768, kCounter = 512 * 1024, kSwap = kCounter + 8;
    std::vector<uint8_t> model(kSlots * kSlot);
    for (size_t i = 0; i < model.size(); ++i) model[i] = peer_byte(i);
    uint64_t counter = 0, swap = 0, send_hash = 14695981039346656037ull, sends = 0;
    std::mt19937 rng(7);
    struct Expect {
        WrOpcode op;
        uint64_t local;       // where READ data / atomic results land
        std::vector<uint8_t> data;   // READ: the bytes; atomics: the 8-byte original
    };
    std::deque<Expect> outstanding;
    uint64_t posted = 0, done = 0;
    constexpr uint32_t kWindow = 8;
    // Local memory: [0, 512K) sources, [512K, 1M) READ and atomic results, one 64 KiB area per
    // outstanding WR.
    for (size_t i = 0; i < 512 * 1024; ++i) mem_[i] = uint8_t(i * 31 + (i >> 12));
    const auto end = std::chrono::steady_clock::now() + 600s;
    while (done < ops && std::chrono::steady_clock::now() < end) {
        while (posted < ops && outstanding.size() < kWindow) {
            const uint64_t area = 512 * 1024 + (posted % kWindow) * 65536 / 2;
            const uint32_t kind = uint32_t(rng() % 7);
            const uint32_t len = std::array<uint32_t, 6>{0, 1, 100, 1024, 5000, 32768}[rng() % 6];
            const uint32_t slot = uint32_t(rng() % kSlots), src = uint32_t(rng() % (256 * 1024));
            Sge s{};
            RdmaSendWr w;
            w.wr_id = posted;
            w.sg_list = &s;
            w.num_sge = 1;
            w.send_flags = wr_signaled;
            Expect e{};
            switch (kind) {
            case 0:   // WRITE (twice as often as the others)
            case 1:
                // Fenced: a READ answered again after a loss reads the memory as it is then
                // (IB spec 9.4.3: responders may execute a repeated READ again), so a WRITE
                // must not pass an earlier READ of the same bytes.
                w.opcode = WrOpcode::rdma_write;
                w.send_flags |= wr_fence;
                s = {reinterpret_cast<uint64_t>(mem_.data() + src), len, me_.mr.lkey};
                w.remote_addr = remote_.addr + slot * kSlot;
                w.rkey = remote_.rkey;
                std::memcpy(model.data() + slot * kSlot, mem_.data() + src, len);
                break;
            case 2:   // READ
                w.opcode = WrOpcode::rdma_read;
                s = {reinterpret_cast<uint64_t>(mem_.data() + area), len, me_.mr.lkey};
                w.remote_addr = remote_.addr + slot * kSlot;
                w.rkey = remote_.rkey;
                e.data.assign(model.begin() + slot * kSlot, model.begin() + slot * kSlot + len);
                break;
            case 3:   // FETCH_ADD
                w.opcode = WrOpcode::atomic_fetch_and_add;
                s = {reinterpret_cast<uint64_t>(mem_.data() + area), 8, me_.mr.lkey};
                w.remote_addr = remote_.addr + kCounter;
                w.rkey = remote_.rkey;
                w.compare_add = 1;
                e.data.resize(8);
                std::memcpy(e.data.data(), &counter, 8);
                ++counter;
                break;
            case 4:   // CMP_SWAP that matches
                w.opcode = WrOpcode::atomic_cmp_and_swp;
                s = {reinterpret_cast<uint64_t>(mem_.data() + area), 8, me_.mr.lkey};
                w.remote_addr = remote_.addr + kSwap;
                w.rkey = remote_.rkey;
                w.compare_add = swap;
                w.swap = posted * 0x9e3779b97f4a7c15ull;
                e.data.resize(8);
                std::memcpy(e.data.data(), &swap, 8);
                swap = w.swap;
                break;
            default: {   // SEND / SEND with immediate
                const bool imm = kind == 6;
                w.opcode = imm ? WrOpcode::send_with_imm : WrOpcode::send;
                w.imm_data = htonl(uint32_t(posted));
                s = {reinterpret_cast<uint64_t>(mem_.data() + src), len, me_.mr.lkey};
                const uint32_t host_imm = imm ? uint32_t(posted) : 0;
                send_hash = fnv(send_hash, &len, 4);
                send_hash = fnv(send_hash, &host_imm, 4);
                send_hash = fnv(send_hash, mem_.data() + src, len);
                ++sends;
            }
            }
            e.op = w.opcode;
            e.local = area;
            ASSERT_TRUE(me_.qp->post_send(std::span(&w, 1)));
            outstanding.push_back(std::move(e));
            ++posted;
        }
        Wc wc[8];
        const int n = me_.cq->poll(wc);
        for (int i = 0; i < n; ++i) {
            ASSERT_EQ(wc[i].wr_id, done) << "completions in posting order";
            ASSERT_EQ(wc[i].status, RdmaWcStatus::success) << to_string(wc[i].status) << " op " << done;
            const Expect& e = outstanding.front();
            if (!e.data.empty()) {
                ASSERT_EQ(std::memcmp(mem_.data() + e.local, e.data.data(), e.data.size()), 0)
                    << "op " << done << " (opcode " << int(e.op) << ") brought the wrong data";
            }
            outstanding.pop_front();
            ++done;
        }
    }
    port_->set_rx_drop_hook(nullptr, nullptr);
    port_->set_tx_drop_hook(nullptr, nullptr);
    (void)run_program({"/usr/bin/tc", "qdisc", "del", "dev", peer_->ifname(), "root"});
    ASSERT_EQ(done, ops) << "operations completed before the time limit";
    const PortStats st = port_->stats();
    std::printf("lossy link: %lu operations, vfab dropped %lu received and %lu sent frames, %lu retransmissions, "
                "%lu NAKs sent\n",
                ops, rx.dropped, tx.dropped, st.retransmits, st.naks_sent);

    const auto slots = dump(0, model.size());
    ASSERT_EQ(slots.size(), model.size());
    EXPECT_TRUE(slots == model) << "rxe's buffer is not what the WRITEs made it";
    const auto words = dump(kCounter, 16);
    uint64_t c = 0, w = 0;
    std::memcpy(&c, words.data(), 8);
    std::memcpy(&w, words.data() + 8, 8);
    EXPECT_EQ(c, counter) << "each FETCH_ADD ran once";
    EXPECT_EQ(w, swap);
    ASSERT_EQ(::write(fd_.get(), "recvlog\n", 8), 8);
    const std::string log = read_line_fd();
    uint64_t got = 0, hash = 0;
    int errors = -1;
    ASSERT_EQ(std::sscanf(log.c_str(), "%lu %lx %d", &got, &hash, &errors), 3) << log;
    EXPECT_EQ(got, sends) << "each SEND received once";
    EXPECT_EQ(hash, send_hash) << "the SENDs' bytes, lengths and immediates, in order";
    EXPECT_EQ(errors, 0);
    ASSERT_EQ(::write(fd_.get(), "quit\n", 5), 5);
}

}  // namespace
}  // namespace vfab::rdma::test
