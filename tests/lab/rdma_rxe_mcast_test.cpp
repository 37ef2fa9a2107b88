// UD multicast between vfab and the Linux kernel's rxe (docs/rdma-multicast.md): vfab drives
// 0000:00:02.0 (e1000e) through VFIO as 10.77.0.1; the kernel's e1000e has 0000:00:03.0 with
// rxe0 on it (RxePeer), and rxe_mcast_peer (the system's libibverbs) has a UD queue pair in
// group 224.5.6.7. vfab's queue pair joins the same group — its device's multicast filter now
// passes 01:00:5e:05:06:07, as the kernel's does for rxe — sends 20 datagrams to the group,
// which rxe receives whole, then receives rxe's 20; it is made with block_self_mcast_lb, so
// its own sends never come back to it. Also: the lab's rxe has no XRC.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstring>

#include "../unit/rdma_connect.hpp"
#include "lab_env.hpp"
#include "rxe_suite.hpp"
#include "vfab/rdma/wire.hpp"

namespace vfab::rdma::test {
namespace {

using namespace std::chrono_literals;
using namespace vfab::lab;

constexpr const char* kVfabNic = "0000:00:02.0";
constexpr uint32_t kVfabIpv4 = 0x0a4d0001;
constexpr uint16_t kPeerPort = 18610;
constexpr uint32_t kGroup = 0xE0050607;   // 224.5.6.7
constexpr uint32_t kQkey = 0x11111111;
constexpr uint32_t kCount = 20;

class RxeMulticast : public RxeSuite {
protected:
    std::string read_line() {
        std::string s;
        char c;
        pollfd p{fd_.get(), POLLIN, 0};
        while (::poll(&p, 1, 60000) == 1 && ::read(fd_.get(), &c, 1) == 1 && c != '\n') s += c;
        return s;
    }
    void write_line(const std::string& s) { ASSERT_EQ(::write(fd_.get(), s.data(), s.size()), ssize_t(s.size())); }

    Fd fd_;
};

TEST_F(RxeMulticast, DatagramsToAGroupGoBothWays) {
    char group_text[16];
    std::snprintf(group_text, sizeof group_text, "%u.%u.%u.%u", kGroup >> 24, (kGroup >> 16) & 255, (kGroup >> 8) & 255,
                  kGroup & 255);
    Child helper({"/vfab/bin/rxe_mcast_peer", std::to_string(kPeerPort), group_text, std::to_string(kCount)});
    ASSERT_TRUE(wait_for([] { return tcp_listening(kPeerPort); }, 20s)) << helper.wait(0ms).summary();

    auto dev = vfab::Device::open(kVfabNic);
    ASSERT_TRUE(dev) << dev.error().message;
    PortConfig pc;
    pc.ipv4 = kVfabIpv4;
    auto port = Port::create(**dev, pc);
    ASSERT_TRUE(port) << port.error().message;
    std::vector<uint8_t> mem(1 << 20);
    auto mr = (*port)->pd().register_memory(mem.data(), mem.size(), dma::Access::local_write);
    ASSERT_TRUE(mr) << mr.error().message;
    Cq* cq = *(*port)->create_cq(256);
    RdmaQpInitAttr ia;
    ia.qp_type = QpType::ud;
    ia.send_cq = ia.recv_cq = cq;
    ia.create_flags = qp_create_block_self_mcast_lb;
    auto qp = (*port)->create_qp(ia);
    ASSERT_TRUE(qp) << qp.error().message;
    QpAttr x;
    x.qp_state = RdmaQpState::init;
    x.qkey = kQkey;
    ASSERT_TRUE((*qp)->modify(x, attr_state | attr_pkey_index | attr_port | attr_qkey));
    x.qp_state = RdmaQpState::rtr;
    ASSERT_TRUE((*qp)->modify(x, attr_state));
    x.qp_state = RdmaQpState::rts;
    ASSERT_TRUE((*qp)->modify(x, attr_state | attr_sq_psn));
    constexpr uint32_t kSlot = 2048;
    for (uint64_t i = 0; i < 64; ++i) {
        Sge r{reinterpret_cast<uint64_t>(mem.data() + (i + 1) * kSlot), kSlot, mr->lkey};
        RecvWr rw{i + 1, &r, 1, 0};
        ASSERT_TRUE((*qp)->post_recv(std::span(&rw, 1)));
    }
    const Gid group = Gid::from_ipv4(kGroup);
    auto attached = (*qp)->attach_mcast(group, 0);
    ASSERT_TRUE(attached) << attached.error().message;

    fd_ = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in sa = inet(pkt::ipv4(127, 0, 0, 1), kPeerPort);
    ASSERT_EQ(::connect(fd_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    ASSERT_EQ(read_line().rfind("ready ", 0), 0u);

    // vfab -> the group: rxe receives each datagram whole.
    AhAttr ah;
    ah.dgid = group;
    AddressHandle* to_group = *(*port)->create_ah(ah);
    for (uint32_t k = 0; k < kCount; ++k) {
        for (uint32_t i = 0; i < 200; ++i) mem[i] = uint8_t(k * 31 + i);
        Sge s{reinterpret_cast<uint64_t>(mem.data()), 200, mr->lkey};
        RdmaSendWr w = wr_of(WrOpcode::send, 1000 + k, &s);
        w.ah = to_group;
        w.remote_qpn = wire::kMulticastQpn;
        w.remote_qkey = kQkey;
        ASSERT_TRUE((*qp)->post_send(std::span(&w, 1)));
        Wc wc{};
        const auto end = std::chrono::steady_clock::now() + 10s;
        while (std::chrono::steady_clock::now() < end && cq->poll(std::span(&wc, 1)) == 0) {
        }
        ASSERT_EQ(wc.wr_id, 1000 + k) << "a receive came back: the sender's own datagram was not blocked";
        ASSERT_EQ(wc.status, RdmaWcStatus::success) << to_string(wc.status);
        std::this_thread::sleep_for(2ms);   // rxe's receive ring at a gentle pace
    }
    EXPECT_EQ(read_line(), "got 20 20");

    // rxe -> the group: vfab receives each one whole, after its GRH.
    write_line("send\n");
    uint32_t got = 0;
    const auto end = std::chrono::steady_clock::now() + 60s;
    while (got < kCount && std::chrono::steady_clock::now() < end) {
        Wc wc{};
        if (cq->poll(std::span(&wc, 1)) == 0) continue;
        ASSERT_EQ(wc.status, RdmaWcStatus::success) << to_string(wc.status);
        ASSERT_EQ(wc.opcode, RdmaWcOpcode::recv);
        EXPECT_EQ(wc.byte_len, 40u + 300u);
        EXPECT_NE(wc.wc_flags & wc_grh, 0u);
        const uint8_t* m = mem.data() + wc.wr_id * kSlot + 40;
        for (uint32_t i = 0; i < 300; ++i) ASSERT_EQ(m[i], uint8_t(got * 17 + i + 5)) << "message " << got << " byte " << i;
        ++got;
    }
    EXPECT_EQ(got, kCount);
    EXPECT_EQ(read_line(), "sent 20");
    write_line("quit\n");
    const Outcome o = helper.wait(30s);
    EXPECT_EQ(o.rc, 0) << o.summary();
    ASSERT_TRUE((*qp)->detach_mcast(group, 0));
}

// The lab kernel's rxe has no XRC (ibv_devinfo lists no XRC among its device_cap_flags), so
// vfab's XRC is proven vfab to vfab (RdmaOverNic.Xrc, docs/rdma-xrc.md). Should a kernel's rxe
// gain it, this test fails and says so: then prove interop with ibv_xsrq_pingpong.
TEST_F(RxeMulticast, RxeHasNoXrc) {
    const Outcome r = run_program({"/usr/bin/ibv_devinfo", "-v", "-d", "rxe0"}, 30s);
    ASSERT_EQ(r.rc, 0) << r.summary();
    ASSERT_NE(r.out.find("device_cap_flags"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("XRC"), std::string::npos) << "rxe offers XRC now: test vfab's XRC against it\n" << r.out;
}

}  // namespace
}  // namespace vfab::rdma::test
