// vfab's igbvf driver on a VF of the lab's second 82576 (00:0a.0), whose PF the guest kernel's
// own igb driver keeps (sriov_vf.hpp), with 10.79.0.1/24 on its interface. vfab's VF is
// 10.79.0.2. Both lab kernels, with the IOMMU on.
//   - bring-up through the PF's mailbox: the MAC the PF assigned, link, attributes;
//   - a peer no one here wrote: the kernel's IP stack on the PF answers vfab's ARP and pings
//     and pings vfab, and a kernel UDP socket exchanges datagrams with it (VF <-> PF traffic
//     crosses the 82576's internal switch);
//   - refusals, each leaving the VF working: the PF's interface down (no driver serving the
//     mailbox), the PF refusing unicast promiscuous mode, and requests beyond the VF;
//   - a MAC the PF's administrator fixed: kept, and another one refused with EPERM;
//   - the PF goes down during traffic: device_reset on the event fd, the queue pair in the
//     error state with every WR flushed, reset() refused until the PF is back, then
//     accepted, and new queues carry traffic both ways;
//   - the kernel turns SR-IOV off under the open VF: vfio-pci's request interrupt becomes
//     device_removal, the queues flush, closing the VF lets the kernel finish, and the VF the
//     PF makes next carries traffic again.
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <thread>

#include "lab_env.hpp"
#include "net_peer.hpp"
#include "sriov_vf.hpp"
#include "vfab/drivers/igbvf.hpp"
#include "vfab/vfab.hpp"

namespace vfab::lab {
namespace {
using namespace std::chrono_literals;

using VfPort = examples::BasicPort<igbvf::Driver>;
using VfPeer = BasicNetPeer<VfPort>;

constexpr uint32_t kPfIp = pkt::ipv4(10, 79, 0, 1);
constexpr uint32_t kVfIp = pkt::ipv4(10, 79, 0, 2);
constexpr uint32_t kBroadcastIp = pkt::ipv4(10, 79, 0, 255);

size_t open_fds() {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) n += !e.path().empty();
    return n;
}

// The VF through the direct API with one queue pair, for the tests that drive it by hand.
struct RawVf {
    std::unique_ptr<igbvf::Device> dev;
    igbvf::CompletionQueue* cq = nullptr;
    igbvf::QueuePair* qp = nullptr;
    dma::DmaArena* arena = nullptr;   // the protection domain owns it
    dma::MemoryRegion mr;
    static constexpr uint32_t kSlots = 256, kBuf = 2048;

    std::string open(const std::string& bdf, const igbvf::DeviceOptions& opts = {}) {
        auto d = igbvf::Device::open(*PciAddress::parse(bdf), opts);
        if (!d) return d.error().message;
        dev = std::move(*d);
        auto a = dev->pd().create_arena(size_t(2 * kSlots) * kBuf, dma::near_device(dev->attr().address));
        if (!a) return a.error().message;
        arena = *a;
        auto m = dev->pd().register_memory(arena->data(), arena->size(), dma::Access::local_write);
        if (!m) return m.error().message;
        mr = *m;
        return make_queues();
    }
    std::string make_queues() {
        auto c = dev->create_cq(2 * kSlots);
        if (!c) return c.error().message;
        cq = *c;
        auto q = dev->create_qp({.send_cq = cq, .recv_cq = cq, .caps = {kSlots, kSlots - 1, 1, 1}});
        if (!q) return q.error().message;
        qp = *q;
        return {};
    }
    uint8_t* send_buf(uint32_t i) const { return arena->data() + size_t(i % kSlots) * kBuf; }
    uint8_t* recv_buf(uint32_t i) const { return arena->data() + size_t(kSlots + i % kSlots) * kBuf; }
    pkt::Mac mac() const {
        pkt::Mac m;
        std::copy(dev->attr().mac, dev->attr().mac + 6, m.begin());
        return m;
    }
    // A UDP datagram from the VF's address to `to`, in send buffer `slot`.
    PostResult send_udp(uint32_t slot, const pkt::Addr& to, uint16_t dport, std::span<const uint8_t> data) {
        const size_t len = pkt::build_udp({send_buf(slot), kBuf}, {mac(), kVfIp}, 4444, to, dport, data);
        Sge sge{reinterpret_cast<uint64_t>(send_buf(slot)), uint32_t(len), mr.lkey};
        SendWr wr{slot, &sge, 1, send_signaled};
        return qp->post_send({&wr, 1});
    }
    PostResult post_recvs() {
        for (uint32_t i = 0; i < qp->caps().max_recv_wr; ++i) {
            Sge sge{reinterpret_cast<uint64_t>(recv_buf(i)), kBuf, mr.lkey};
            RecvWr wr{i, &sge, 1, 0};
            if (PostResult r = qp->post_recv({&wr, 1}); !r) return r;
        }
        return {0, qp->caps().max_recv_wr};
    }
};

bool readable(int fd, int timeout_ms) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) == 1;
}

class Igbvf : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!iommu_on()) return;
        env_ = std::make_unique<SriovVf>();
        if (setup_error_ = env_->create(); !setup_error_.empty()) return;
        setup_error_ = env_->pf().configure(kPfIp, 24, 10s);
        std::printf("PF %s on igb as %s (%s), %s/24; VF %s on vfio-pci\n", SriovVf::kPf, env_->pf().ifname().c_str(),
                    env_->pf().mac() ? pkt::to_string(*env_->pf().mac()).c_str() : "?", pkt::to_string_ip(kPfIp).c_str(),
                    env_->vf().c_str());
    }
    static void TearDownTestSuite() {
        peer_.reset();
        if (env_) {
            const std::string err = env_->restore();
            env_.reset();
            if (!err.empty()) ADD_FAILURE() << err;
        }
        setup_error_.clear();
    }
    void SetUp() override {
        if (!iommu_on()) GTEST_SKIP() << "SR-IOV with the IOMMU on (no-IOMMU VFs: not tested)";
        ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    }

    static const std::string& vf() { return env_->vf(); }
    static std::string pf_if() { return env_->pf().ifname(); }
    static pkt::Mac pf_mac() { return *env_->pf().mac(); }

    // The peer (vfab's responder on the VF), opened on first use.
    static VfPeer& peer() {
        if (!peer_) {
            auto port = VfPort::open(vf(), {.send_slots = 64, .recv_slots = 255});
            EXPECT_TRUE(port) << port.error().message;
            if (!port) std::abort();
            peer_ = std::make_unique<VfPeer>(std::move(*port), kVfIp);
            EXPECT_TRUE(peer_->start()) << peer_->error();
        }
        return *peer_;
    }

    static bool set_pf_link(bool up) {
        Outcome r = run_program({"ip", "link", "set", pf_if(), up ? "up" : "down"}, 30s);
        EXPECT_EQ(r.rc, 0) << r.summary();
        return r.rc == 0;
    }

    static inline std::unique_ptr<SriovVf> env_;
    static inline std::unique_ptr<VfPeer> peer_;
    static inline std::string setup_error_;
};

TEST_F(Igbvf, ComesUpThroughThePfsMailbox) {
    RawVf v;
    ASSERT_EQ(v.open(vf()), "");
    const DeviceAttr& a = v.dev->attr();
    EXPECT_EQ(a.provider, "igbvf");
    EXPECT_EQ(a.device_id, 0x10ca);
    EXPECT_EQ(a.max_qp, 1u);
    EXPECT_EQ(a.max_cq, 1u);
    EXPECT_EQ(v.dev->pf_address(), SriovVf::kPf);
    EXPECT_FALSE(a.mac[0] & 1) << "the PF assigned a multicast address";
    EXPECT_TRUE(v.dev->link().up) << "the PF's link is up and it cleared the VF to send";
    std::printf("VF %s: MAC %s from the PF %s, link %s %u Mb/s\n", vf().c_str(), pkt::to_string(v.mac()).c_str(),
                v.dev->pf_address().c_str(), v.dev->link().up ? "up" : "down", v.dev->link().speed_mbps);
}

// The kernel has no neighbour entry for vfab's address: busybox ping makes it ask (ARP),
// vfab answers, then answers three echo requests.
TEST_F(Igbvf, KernelPfResolvesTheVfAndPingsIt) {
    VfPeer& vfab = peer();
    ASSERT_EQ(kernel_forget_neighbor(kVfIp, pf_if()), "");
    const VfPeer::Counters before = vfab.counters;
    Outcome ping;
    {
        Server server(vfab);
        ping = run_program({"ping", "-c", "3", "-w", "20", pkt::to_string_ip(kVfIp)}, 30s);
        ASSERT_TRUE(server.stop()) << vfab.error();
    }
    std::printf("%s", ping.out.c_str());
    EXPECT_NE(ping.out.find("3 packets transmitted, 3 packets received"), std::string::npos) << ping.summary();
    EXPECT_GE(vfab.counters.arp_requests_answered - before.arp_requests_answered, 1u);
    EXPECT_EQ(vfab.counters.echo_requests_answered - before.echo_requests_answered, 3u);
    EXPECT_EQ(vfab.counters.bad_checksums, 0u);
    auto entry = kernel_arp_entry(kVfIp, pf_if());
    ASSERT_TRUE(entry) << "the kernel has no complete ARP entry for " << pkt::to_string_ip(kVfIp);
    EXPECT_EQ(pkt::to_string(*entry), pkt::to_string(vfab.self().mac));
}

// vfab resolves the PF's address and pings it three times; the replies come back intact.
TEST_F(Igbvf, VfResolvesTheKernelPfAndPingsIt) {
    VfPeer& vfab = peer();
    vfab.forget(kPfIp);
    ASSERT_TRUE(vfab.send_arp_request(kPfIp)) << vfab.error();
    ASSERT_TRUE(vfab.run_until([&] { return vfab.neighbor(kPfIp).has_value(); }, 5s))
        << (vfab.error().empty() ? "no ARP reply from the kernel within 5 s" : vfab.error());
    EXPECT_EQ(pkt::to_string(*vfab.neighbor(kPfIp)), pkt::to_string(pf_mac()));
    const auto icmp_before = kernel_snmp("Icmp");
    for (uint16_t seq = 1; seq <= 3; ++seq) {
        const std::vector<uint8_t> data = pattern_bytes(100 * seq, uint8_t(seq));
        const size_t replies = vfab.echo_replies.size();
        ASSERT_TRUE(vfab.send_echo_request(kPfIp, 0x7fab, seq, data)) << vfab.error();
        ASSERT_TRUE(vfab.run_until([&] { return vfab.echo_replies.size() > replies; }, 5s))
            << (vfab.error().empty() ? "no echo reply within 5 s" : vfab.error());
        const VfPeer::EchoReply& r = vfab.echo_replies.back();
        EXPECT_EQ(r.src_ip, kPfIp);
        EXPECT_EQ(r.seq, seq);
        EXPECT_TRUE(r.checksums_ok);
        EXPECT_TRUE(r.data == data);
    }
    auto icmp_after = kernel_snmp("Icmp");
    EXPECT_EQ(icmp_after["InEchos"] - icmp_before.at("InEchos"), 3);
}

// A kernel UDP socket on the PF's address sends to vfab's echo port and gets each datagram
// back; then vfab sends to the socket with the checksums left to the VF (send_ip_csum).
TEST_F(Igbvf, UdpBothWaysWithTheKernel) {
    VfPeer& vfab = peer();
    Fd s = udp_socket(kPfIp, 0);
    ASSERT_TRUE(s) << std::strerror(errno);
    const timeval tv{5, 0};
    ASSERT_EQ(::setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    const uint64_t echoed = vfab.counters.udp_echoed;
    {
        Server server(vfab);
        for (size_t size : {1, 300, 1472}) {
            const std::vector<uint8_t> out = pattern_bytes(size, uint8_t(size));
            const sockaddr_in to = inet(kVfIp, vfab.echo_port);
            ASSERT_EQ(::sendto(s.get(), out.data(), out.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to), ssize_t(size));
            std::vector<uint8_t> back(2048);
            const ssize_t n = ::recv(s.get(), back.data(), back.size(), 0);
            ASSERT_EQ(n, ssize_t(size)) << (n < 0 ? std::strerror(errno) : "a datagram of another size");
            back.resize(size_t(n));
            EXPECT_TRUE(back == out);
        }
        ASSERT_TRUE(server.stop()) << vfab.error();
    }
    EXPECT_EQ(vfab.counters.udp_echoed - echoed, 3u);

    const uint16_t port = local_port(s);
    ASSERT_TRUE(vfab.neighbor(kPfIp) || (vfab.send_arp_request(kPfIp) &&
                                         vfab.run_until([&] { return vfab.neighbor(kPfIp).has_value(); }, 5s)));
    for (int i = 0; i < 3; ++i) {
        const std::vector<uint8_t> data = pattern_bytes(200 + i, uint8_t(i));
        ASSERT_TRUE(vfab.send_udp(kPfIp, vfab.echo_port, port, data, true)) << vfab.error();
        std::vector<uint8_t> got(2048);
        ssize_t n = -1;
        std::thread poller([&] { (void)vfab.run_until([&] { return n >= 0; }, 5s); });
        n = ::recv(s.get(), got.data(), got.size(), 0);
        poller.join();
        ASSERT_EQ(n, ssize_t(data.size())) << (n < 0 ? std::strerror(errno) : "a datagram of another size");
        got.resize(size_t(n));
        EXPECT_TRUE(got == data);
    }
    DeviceStats st = vfab.port().device().stats();
    std::printf("VF counters: rx %lu packets %lu bytes, tx %lu packets %lu bytes\n", (unsigned long)st.rx_packets,
                (unsigned long)st.rx_bytes, (unsigned long)st.tx_packets, (unsigned long)st.tx_bytes);
}

// Sends `count` datagrams to a kernel socket on the PF and counts what arrives.
int kernel_receives(RawVf& v, int count, const pkt::Mac& pf) {
    Fd s = udp_socket(kPfIp, 0);
    const timeval tv{2, 0};
    (void)::setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const uint16_t port = local_port(s);
    for (int i = 0; i < count; ++i) {
        const std::vector<uint8_t> data = pattern_bytes(64, uint8_t(i));
        if (!v.send_udp(uint32_t(i), {pf, kPfIp}, port, data)) return -1;
    }
    int got = 0;
    uint8_t buf[2048];
    while (got < count && ::recv(s.get(), buf, sizeof buf, 0) > 0) ++got;
    Completion wc[64];
    while (v.qp->send_outstanding() > 0 && v.cq->poll(wc) >= 0) {}
    return got;
}

// The multiplexed API (libvfab) picks the igbvf provider by PCI ID and drives the VF through
// it: 20 datagrams reach a kernel socket, the statistics count them.
TEST_F(Igbvf, MultiplexedApiDrivesTheVf) {
    peer_.reset();
    auto dev = vfab::Device::open(vf());
    ASSERT_TRUE(dev.ok()) << dev.error().message;
    vfab::Device& d = **dev;
    EXPECT_EQ(d.attr().provider, "igbvf");
    EXPECT_TRUE(d.link().up);
    auto cq = d.create_cq(64);
    ASSERT_TRUE(cq.ok()) << cq.error().message;
    auto qp = d.create_qp({.send_cq = *cq, .recv_cq = *cq, .caps = {32, 32, 1, 1}});
    ASSERT_TRUE(qp.ok()) << qp.error().message;
    auto arena = d.pd().create_arena(32 * 2048, dma::near_device(d.attr().address));
    ASSERT_TRUE(arena.ok()) << arena.error().message;
    auto mr = d.pd().register_memory((*arena)->data(), (*arena)->size(), dma::Access::local_write);
    ASSERT_TRUE(mr.ok()) << mr.error().message;
    Fd s = udp_socket(kPfIp, 0);
    const timeval tv{2, 0};
    ASSERT_EQ(::setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    pkt::Mac mac;
    std::copy(d.attr().mac, d.attr().mac + 6, mac.begin());
    const std::vector<uint8_t> data = pattern_bytes(64, 9);
    const DeviceStats before = d.stats();
    for (uint32_t i = 0; i < 20; ++i) {
        uint8_t* f = (*arena)->data() + size_t(i) * 2048;
        const size_t len = pkt::build_udp({f, 2048}, {mac, kVfIp}, 4444, {pf_mac(), kPfIp}, local_port(s), data);
        Sge sge{reinterpret_cast<uint64_t>(f), uint32_t(len), mr->lkey};
        SendWr wr{i, &sge, 1, send_signaled};
        ASSERT_TRUE((*qp)->post_send({&wr, 1}));
    }
    int got = 0;
    uint8_t buf[2048];
    while (got < 20 && ::recv(s.get(), buf, sizeof buf, 0) > 0) ++got;
    EXPECT_EQ(got, 20);
    Completion wc[32];
    int completed = 0;
    ASSERT_TRUE(wait_for([&] {
        const int n = (*cq)->poll(wc);
        for (int i = 0; i < n; ++i) completed += wc[i].status == WcStatus::success;
        return completed >= 20;
    }, 5s));
    EXPECT_EQ((*qp)->stats().tx_packets, 20u);
    EXPECT_EQ(d.stats().tx_packets - before.tx_packets, 20u) << "the VF's own counter (VFGPTC)";
    EXPECT_EQ(d.next_event().type, EventType::none);
}

// Each refusal is clear and leaves the VF as it was; nothing leaks when open fails.
TEST_F(Igbvf, RefusalsAreClearAndLeaveTheVfWorking) {
    peer_.reset();
    igbvf::DeviceOptions bad_mac;
    bad_mac.mac = igbvf::MacAddress{0x01, 0, 0x5e, 0, 0, 1};
    auto r = igbvf::Device::open(*PciAddress::parse(vf()), bad_mac);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, EINVAL);
    std::printf("multicast MAC: %s\n", r.error().message.c_str());

    // The PF's interface down: no one serves the mailbox, and the PF holds RSTI.
    ASSERT_TRUE(set_pf_link(false));
    const size_t fds = open_fds();
    igbvf::DeviceOptions quick;
    quick.pf_timeout_ms = 500;
    r = igbvf::Device::open(*PciAddress::parse(vf()), quick);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, EAGAIN);
    EXPECT_NE(r.error().message.find("ip link set " + pf_if() + " up"), std::string::npos) << r.error().message;
    EXPECT_EQ(open_fds(), fds) << "a refused open left descriptors behind";
    std::printf("PF down: %s\n", r.error().message.c_str());
    ASSERT_TRUE(set_pf_link(true));
    ASSERT_TRUE(wait_for([&] { return read_line("/sys/class/net/" + pf_if() + "/carrier") == "1"; }, 10s));

    // An address of the application's choosing, which the PF accepts.
    igbvf::DeviceOptions own;
    own.mac = igbvf::MacAddress{0x02, 0x00, 0x00, 0x79, 0x00, 0x02};
    RawVf v;
    ASSERT_EQ(v.open(vf(), own), "");
    EXPECT_EQ(pkt::to_string(v.mac()), "02:00:00:79:00:02");

    auto p = v.dev->set_promiscuous(true, false);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.error().code, EPERM);
    std::printf("unicast promiscuous: %s\n", p.error().message.c_str());
    EXPECT_TRUE(v.dev->set_promiscuous(false, true).ok());
    EXPECT_TRUE(v.dev->set_promiscuous(false, false).ok());

    std::vector<igbvf::MacAddress> groups(31, igbvf::MacAddress{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01});
    auto m = v.dev->set_multicast(groups);
    EXPECT_EQ(m.error().code, EINVAL);
    groups.resize(2);
    groups[1][5] = 0xfb;
    EXPECT_TRUE(v.dev->set_multicast(groups).ok());

    auto qp2 = v.dev->create_qp({.send_cq = v.cq, .recv_cq = v.cq});
    EXPECT_FALSE(qp2.ok());
    auto cq2 = v.dev->create_cq(64);
    EXPECT_EQ(cq2.error().code, ENOSPC);
    const uint16_t table[] = {0};
    auto rss = v.dev->configure_rss({.key = {}, .table = table, .hash_types = rss_ipv4});
    EXPECT_EQ(rss.error().code, ENOTSUP);
    std::printf("second queue pair: %s\nsecond CQ: %s\nRSS: %s\n", qp2.error().message.c_str(), cq2.error().message.c_str(),
                rss.error().message.c_str());

    EXPECT_EQ(kernel_receives(v, 20, pf_mac()), 20) << "the VF no longer sends after the refusals";
}

// The PF's interface goes down while the VF transmits: the VF's event fd reports device_reset,
// the queue pair is in the error state and every WR completes (flushed); reset() is refused
// while the PF is down and succeeds once it is up; new queues carry traffic both ways.
TEST_F(Igbvf, PfDownDuringTrafficThenReinitRecovers) {
    peer_.reset();
    RawVf v;
    ASSERT_EQ(v.open(vf()), "");
    Fd sink = udp_socket(kPfIp, 9999);
    ASSERT_TRUE(sink);
    const std::vector<uint8_t> data = pattern_bytes(200, 7);
    std::thread downer([] {
        std::this_thread::sleep_for(300ms);
        (void)run_program({"ip", "link", "set", pf_if(), "down"}, 30s);
    });
    uint64_t sent = 0, completed = 0, flushed = 0;
    Event ev;
    const auto end = std::chrono::steady_clock::now() + 15s;
    Completion wc[64];
    while (ev.type == EventType::none && std::chrono::steady_clock::now() < end) {
        while (v.qp->send_outstanding() < 128 && v.qp->state() == QpState::ready)
            if (v.send_udp(uint32_t(sent), {pf_mac(), kPfIp}, 9999, data)) ++sent;
            else break;
        const int n = v.cq->poll(wc);
        for (int i = 0; i < n; ++i) (wc[i].status == WcStatus::success ? completed : flushed) += 1;
        if (readable(v.dev->event_fd(), 1)) ev = v.dev->next_event();
    }
    downer.join();
    ASSERT_EQ(ev.type, EventType::device_reset) << "no device_reset on the event fd within 15 s; got " << to_string(ev.type);
    EXPECT_EQ(v.qp->state(), QpState::error);
    EXPECT_FALSE(v.dev->link().up);
    ASSERT_TRUE(wait_for([&] {
        const int n = v.cq->poll(wc);
        for (int i = 0; i < n; ++i) (wc[i].status == WcStatus::success ? completed : flushed) += 1;
        return v.qp->send_outstanding() == 0 && v.qp->recv_outstanding() == 0;
    }, 5s)) << "WRs still outstanding after the reset";
    EXPECT_EQ(completed + flushed, sent);
    EXPECT_EQ(v.send_udp(0, {pf_mac(), kPfIp}, 9999, data).error, EIO);
    std::printf("PF down after %lu frames sent by the VF: %lu completed, %lu flushed\n", (unsigned long)sent,
                (unsigned long)completed, (unsigned long)flushed);

    auto r = v.dev->reset();
    ASSERT_FALSE(r.ok()) << "reset() while the PF is down";
    EXPECT_NE(r.error().message.find("ip link set " + pf_if() + " up"), std::string::npos) << r.error().message;
    std::printf("reset() with the PF down: %s\n", r.error().message.c_str());

    ASSERT_TRUE(set_pf_link(true));
    ASSERT_TRUE(wait_for([&] { return read_line("/sys/class/net/" + pf_if() + "/carrier") == "1"; }, 10s));
    r = v.dev->reset();
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_TRUE(v.dev->link().up);
    ASSERT_TRUE(v.qp->destroy().ok());
    ASSERT_TRUE(v.cq->destroy().ok());
    ASSERT_EQ(v.make_queues(), "");
    EXPECT_EQ(kernel_receives(v, 20, pf_mac()), 20) << "VF -> kernel after the re-init";

    // Kernel -> VF: broadcast datagrams reach the new receive queue.
    ASSERT_TRUE(v.post_recvs());
    Fd s = udp_socket(kPfIp, 0);
    const int on = 1;
    ASSERT_EQ(::setsockopt(s.get(), SOL_SOCKET, SO_BROADCAST, &on, sizeof on), 0);
    const std::vector<uint8_t> hello = pattern_bytes(100, 0x42);
    for (int i = 0; i < 5; ++i) {
        const sockaddr_in to = inet(kBroadcastIp, 7777);
        ASSERT_EQ(::sendto(s.get(), hello.data(), hello.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to), ssize_t(hello.size()));
    }
    int got = 0;
    ASSERT_TRUE(wait_for([&] {
        const int n = v.cq->poll(wc);
        for (int i = 0; i < n; ++i)
            if (wc[i].opcode == WcOpcode::recv && wc[i].status == WcStatus::success &&
                wc[i].byte_len >= pkt::kUdpHeaders + hello.size() &&
                std::memcmp(v.recv_buf(uint32_t(wc[i].wr_id)) + pkt::kUdpHeaders, hello.data(), hello.size()) == 0)
                ++got;
        return got >= 5;
    }, 5s)) << "the VF received " << got << " of 5 broadcast datagrams after the re-init";
}

// The PF's administrator fixes the VF's MAC (`ip link set PF vf 0 mac M`): the VF comes up
// with M, and asking for another address is refused with EPERM and a message that says why,
// leaving nothing open. Lifting the choice (an all-zero MAC) lets the application pick again.
TEST_F(Igbvf, MacFixedByThePfsAdministratorIsKept) {
    peer_.reset();
    const pkt::Mac fixed{0x02, 0x79, 0x00, 0x00, 0x00, 0x22};
    igbvf::DeviceOptions other_mac;
    other_mac.mac = igbvf::MacAddress{0x02, 0x79, 0x00, 0x00, 0x00, 0x33};
    ASSERT_EQ(env_->set_vf_mac(fixed), "");
    struct Lift {
        ~Lift() { (void)env_->set_vf_mac({}); }
    } lift;
    {
        RawVf v;
        ASSERT_EQ(v.open(vf()), "");
        EXPECT_EQ(v.mac(), fixed);
        EXPECT_EQ(kernel_receives(v, 5, pf_mac()), 5) << "VF -> kernel with the administrator's MAC";
    }

    const size_t fds = open_fds();
    auto refused = igbvf::Device::open(*PciAddress::parse(vf()), other_mac);
    ASSERT_FALSE(refused) << "the PF let the VF replace an address its administrator fixed";
    EXPECT_EQ(refused.error().code, EPERM);
    const std::string& why = refused.error().message;
    EXPECT_NE(why.find("02:79:00:00:00:22"), std::string::npos) << why;
    EXPECT_NE(why.find("ip link set"), std::string::npos) << why;
    EXPECT_EQ(open_fds(), fds) << "the refused open left descriptors behind";
    std::printf("another MAC on a VF whose MAC is fixed: %s\n", why.c_str());

    ASSERT_EQ(env_->set_vf_mac({}), "");
    RawVf v;
    ASSERT_EQ(v.open(vf(), other_mac), "");
    EXPECT_EQ(v.mac(), pkt::Mac(*other_mac.mac));
}

// sriov_numvfs = 0 while vfab has the VF open. The kernel removes the VF first; vfio-pci holds
// that removal until the device is closed and asks the application for it on the request
// interrupt. The application sees device_removal, its WRs flush, and closing the VF lets the
// kernel's write return. The PF then makes a VF again and vfab drives it.
TEST_F(Igbvf, PfTurningSriovOffTakesTheVfBackCleanly) {
    peer_.reset();
    auto v = std::make_unique<RawVf>();
    ASSERT_EQ(v->open(vf()), "");
    ASSERT_TRUE(v->post_recvs());
    const uint64_t posted = v->qp->caps().max_recv_wr;
    const std::string vf_dir = "/sys/bus/pci/devices/" + vf();

    std::atomic<bool> finished{false};
    std::string write_error;
    std::thread pf([&] {
        write_error = write_sysfs(SriovVf::pf_dir() + "/sriov_numvfs", "0");   // blocks until the VF is closed
        finished = true;
    });
    uint64_t received = 0, flushed = 0;
    auto count = [&] {
        Completion wc[64];
        const int n = v->cq->poll(wc);
        for (int i = 0; i < n; ++i) (wc[i].status == WcStatus::success ? received : flushed) += 1;
    };
    std::vector<EventType> events;
    const auto end = std::chrono::steady_clock::now() + 20s;
    while ((events.empty() || events.back() != EventType::device_removal) && std::chrono::steady_clock::now() < end) {
        count();
        if (readable(v->dev->event_fd(), 5))
            if (Event ev = v->dev->next_event(); ev.type != EventType::none) events.push_back(ev.type);
    }
    const bool removal = !events.empty() && events.back() == EventType::device_removal;
    const bool finished_while_open = finished.load();
    const QpState state = v->qp->state();
    wait_for([&] { count(); return v->qp->recv_outstanding() == 0; }, 5s);
    const int post_error = v->send_udp(0, {pf_mac(), kPfIp}, 9999, pattern_bytes(64, 1)).error;
    v.reset();   // closing the VF lets the kernel's removal go on
    pf.join();

    std::string seen;
    for (EventType t : events) seen += std::string(seen.empty() ? "" : ", ") + to_string(t);
    std::printf("sriov_numvfs=0 under the open VF: events [%s]; %lu receives posted: %lu completed, %lu flushed\n",
                seen.c_str(), (unsigned long)posted, (unsigned long)received, (unsigned long)flushed);
    ASSERT_TRUE(removal) << "no device_removal within 20 s; events: [" << seen << "]";
    EXPECT_FALSE(finished_while_open) << "the kernel removed the VF while vfab still had it open";
    EXPECT_EQ(state, QpState::error);
    EXPECT_EQ(received + flushed, posted);
    EXPECT_EQ(post_error, EIO);
    EXPECT_EQ(write_error, "");
    EXPECT_TRUE(finished.load());
    EXPECT_FALSE(std::filesystem::exists(vf_dir)) << vf() << " still exists after sriov_numvfs=0";

    ASSERT_EQ(env_->add_vfs(), "");
    RawVf again;
    ASSERT_EQ(again.open(vf()), "");
    EXPECT_TRUE(again.dev->link().up);
    EXPECT_EQ(kernel_receives(again, 20, pf_mac()), 20) << "VF -> kernel on the VF made again";
}

}  // namespace
}  // namespace vfab::lab
