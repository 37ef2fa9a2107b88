// A peer no one here wrote: the guest kernel's own e1000e driver drives the second lab NIC
// (0000:00:03.0, 10.77.0.2/24) and vfab's e1000e driver the first (0000:00:02.0, 10.77.0.1),
// with a small ARP / IPv4 / ICMP / UDP responder (net_peer.hpp). They resolve each other,
// ping each other (busybox ping from the kernel side) and exchange UDP with a kernel socket
// this test opens, one way with the checksums left to the 82574L (send_ip_csum). The NIC goes
// back to vfio-pci at the end, whatever happened.
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "kernel_nic.hpp"
#include "lab_env.hpp"
#include "net_peer.hpp"

namespace vfab::lab {
namespace {
using namespace std::chrono_literals;

constexpr const char* kVfabNic = "0000:00:02.0";
constexpr const char* kKernelNic = "0000:00:03.0";
constexpr uint32_t kVfabIp = pkt::ipv4(10, 77, 0, 1);
constexpr uint32_t kKernelIp = pkt::ipv4(10, 77, 0, 2);

class KernelPeer : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!in_lab()) {
            setup_error_ = "run this through scripts/lab";
            return;
        }
        kernel_ = std::make_unique<KernelNic>(kKernelNic);
        if (setup_error_ = kernel_->take("e1000e"); !setup_error_.empty()) return;
        if (setup_error_ = kernel_->configure(kKernelIp, 24, 10s); !setup_error_.empty()) return;
        auto port = examples::Port::open(kVfabNic, {.send_slots = 64, .recv_slots = 255});
        if (!port) {
            setup_error_ = port.error().message;
            return;
        }
        vfab_ = std::make_unique<NetPeer>(std::move(*port), kVfabIp);
        if (!vfab_->start()) setup_error_ = vfab_->error();
        else if (!vfab_->port().device().link().up) setup_error_ = std::string(kVfabNic) + ": vfab's link is down";
        std::printf("kernel: e1000e%s, %s on %s (%s), %s/24, link after %.0f ms; vfab: %s (%s), %s/24\n",
                    kernel_->loaded_module() ? " (modprobe)" : " (built in or loaded)", kernel_->ifname().c_str(),
                    kKernelNic, kernel_->mac() ? pkt::to_string(*kernel_->mac()).c_str() : "?",
                    pkt::to_string_ip(kKernelIp).c_str(), kernel_->link_ms(), kVfabNic,
                    pkt::to_string(vfab_->self().mac).c_str(), pkt::to_string_ip(kVfabIp).c_str());
    }

    static void TearDownTestSuite() {
        vfab_.reset();   // vfab's NIC first: nothing of it outlives the test
        if (kernel_) {
            const std::string err = kernel_->restore();
            kernel_.reset();
            if (!err.empty()) ADD_FAILURE() << err;
        }
    }

    void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }

    // vfab resolves the kernel's address unless it already knows it.
    static void resolve_kernel() {
        if (vfab_->neighbor(kKernelIp)) return;
        ASSERT_TRUE(vfab_->send_arp_request(kKernelIp)) << vfab_->error();
        ASSERT_TRUE(vfab_->run_until([] { return vfab_->neighbor(kKernelIp).has_value(); }, 5s))
            << (vfab_->error().empty() ? "no ARP reply from the kernel within 5 s" : vfab_->error());
    }

    static inline std::unique_ptr<KernelNic> kernel_;
    static inline std::unique_ptr<NetPeer> vfab_;
    static inline std::string setup_error_;
};

// The kernel has no neighbour entry for vfab's address: busybox ping makes it ask (ARP),
// vfab answers, then answers three echo requests.
TEST_F(KernelPeer, KernelResolvesVfabAndPingsIt) {
    ASSERT_EQ(kernel_forget_neighbor(kVfabIp, kernel_->ifname()), "");
    ASSERT_FALSE(kernel_arp_entry(kVfabIp, kernel_->ifname()));
    const NetPeer::Counters before = vfab_->counters;
    Outcome ping;
    {
        Server server(*vfab_);
        ping = run_program({"ping", "-c", "3", "-w", "20", pkt::to_string_ip(kVfabIp)}, 30s);
        ASSERT_TRUE(server.stop()) << vfab_->error();
    }
    std::printf("%s", ping.out.c_str());
    EXPECT_EQ(ping.rc, 0) << ping.summary();
    EXPECT_NE(ping.out.find("3 packets transmitted, 3 packets received"), std::string::npos) << ping.summary();
    EXPECT_GE(vfab_->counters.arp_requests_answered - before.arp_requests_answered, 1u);
    EXPECT_EQ(vfab_->counters.echo_requests_answered - before.echo_requests_answered, 3u);
    EXPECT_EQ(vfab_->counters.bad_checksums, 0u);
    auto entry = kernel_arp_entry(kVfabIp, kernel_->ifname());
    ASSERT_TRUE(entry) << "the kernel has no complete ARP entry for " << pkt::to_string_ip(kVfabIp);
    EXPECT_EQ(pkt::to_string(*entry), pkt::to_string(vfab_->self().mac));
    // vfab learned the kernel's address from its request (RFC 826).
    auto learned = vfab_->neighbor(kKernelIp);
    ASSERT_TRUE(learned);
    EXPECT_EQ(pkt::to_string(*learned), pkt::to_string(*kernel_->mac()));
}

// vfab asks for the kernel's address (broadcast ARP request), gets the kernel's reply, then
// sends three echo requests and checks the kernel's replies byte for byte.
TEST_F(KernelPeer, VfabResolvesTheKernelAndPingsIt) {
    vfab_->forget(kKernelIp);
    const NetPeer::Counters before = vfab_->counters;
    const auto icmp_before = kernel_snmp("Icmp");
    ASSERT_NO_FATAL_FAILURE(resolve_kernel());
    EXPECT_GE(vfab_->counters.arp_replies - before.arp_replies, 1u);
    EXPECT_EQ(pkt::to_string(*vfab_->neighbor(kKernelIp)), pkt::to_string(*kernel_->mac()));

    constexpr uint16_t kId = 0x7fab;
    for (uint16_t seq = 1; seq <= 3; ++seq) {
        SCOPED_TRACE("seq " + std::to_string(seq));
        const std::vector<uint8_t> data = pattern_bytes(56 * seq, uint8_t(seq));
        const size_t replies = vfab_->echo_replies.size();
        const auto t0 = NetPeer::Clock::now();
        ASSERT_TRUE(vfab_->send_echo_request(kKernelIp, kId, seq, data)) << vfab_->error();
        ASSERT_TRUE(vfab_->run_until([&] { return vfab_->echo_replies.size() > replies; }, 5s))
            << (vfab_->error().empty() ? "no echo reply within 5 s" : vfab_->error());
        const NetPeer::EchoReply& r = vfab_->echo_replies.back();
        EXPECT_EQ(r.src_ip, kKernelIp);
        EXPECT_EQ(r.id, kId);
        EXPECT_EQ(r.seq, seq);
        EXPECT_TRUE(r.checksums_ok);
        EXPECT_GT(r.ttl, 0);
        EXPECT_TRUE(r.data == data) << "the kernel's reply carries other data (" << r.data.size() << " bytes)";
        std::printf("vfab -> kernel: echo seq %u, %zu bytes: reply after %.0f us\n", seq, data.size(),
                    std::chrono::duration<double, std::micro>(r.when - t0).count());
    }
    auto icmp_after = kernel_snmp("Icmp");
    EXPECT_EQ(icmp_after["InEchos"] - icmp_before.at("InEchos"), 3);
    EXPECT_EQ(icmp_after["OutEchoReps"] - icmp_before.at("OutEchoReps"), 3);
    EXPECT_EQ(icmp_after["InCsumErrors"], icmp_before.at("InCsumErrors"));
}

// A kernel UDP socket sends to vfab's echo port; vfab (checking the checksums in software and
// reading the receiving NIC's verdict) sends each datagram back; the socket receives it.
TEST_F(KernelPeer, KernelUdpSocketTalksToVfab) {
    Fd s = udp_socket(kKernelIp, 0);
    ASSERT_TRUE(s) << "kernel UDP socket: " << std::strerror(errno);
    const uint16_t port = local_port(s);
    const size_t first = vfab_->datagrams.size();
    const uint64_t echoed = vfab_->counters.udp_echoed;
    const size_t sizes[] = {1, 200, 1400};
    std::vector<std::vector<uint8_t>> sent;
    {
        Server server(*vfab_);
        for (size_t i = 0; i < std::size(sizes); ++i) {
            SCOPED_TRACE("datagram " + std::to_string(i));
            sent.push_back(pattern_bytes(sizes[i], uint8_t(100 + i)));
            const sockaddr_in to = inet(kVfabIp, vfab_->echo_port);
            ASSERT_EQ(::sendto(s.get(), sent[i].data(), sent[i].size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to),
                      ssize_t(sent[i].size()))
                << std::strerror(errno);
            std::vector<uint8_t> back(2048);
            sockaddr_in from{};
            socklen_t flen = sizeof from;
            const ssize_t n = ::recvfrom(s.get(), back.data(), back.size(), 0, reinterpret_cast<sockaddr*>(&from), &flen);
            ASSERT_EQ(n, ssize_t(sent[i].size())) << (n < 0 ? std::strerror(errno) : "a datagram of another size");
            back.resize(size_t(n));
            EXPECT_TRUE(back == sent[i]) << "the echo differs";
            EXPECT_EQ(ntohl(from.sin_addr.s_addr), kVfabIp);
            EXPECT_EQ(ntohs(from.sin_port), vfab_->echo_port);
        }
        ASSERT_TRUE(server.stop()) << vfab_->error();
    }
    ASSERT_EQ(vfab_->datagrams.size() - first, std::size(sizes));
    EXPECT_EQ(vfab_->counters.udp_echoed - echoed, std::size(sizes));
    for (size_t i = 0; i < std::size(sizes); ++i) {
        const NetPeer::Datagram& d = vfab_->datagrams[first + i];
        SCOPED_TRACE("datagram " + std::to_string(i));
        EXPECT_EQ(d.src.ip, kKernelIp);
        EXPECT_EQ(d.sport, port);
        EXPECT_EQ(d.dport, vfab_->echo_port);
        EXPECT_TRUE(d.data == sent[i]);
        EXPECT_TRUE(d.checksums_ok);
        EXPECT_TRUE(d.udp_csum_present) << "Linux always sends UDP checksums over IPv4";
        EXPECT_TRUE(d.nic_csum_ok) << "vfab's 82574L did not report the checksums verified";
    }
}

// vfab sends UDP with send_ip_csum: both checksum fields hold a wrong value until the 82574L
// fills them. The kernel socket gets every datagram, the kernel counts no checksum error,
// and a packet socket on the kernel's interface shows the checksums as they crossed the wire.
TEST_F(KernelPeer, VfabUdpWithChecksumOffloadIsAcceptedByTheKernel) {
    ASSERT_NO_FATAL_FAILURE(resolve_kernel());
    constexpr uint16_t kKernelPort = 5555, kVfabPort = 4444;
    Fd s = udp_socket(kKernelIp, kKernelPort);
    ASSERT_TRUE(s) << "kernel UDP socket: " << std::strerror(errno);
    Fd cap(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_IP)));
    ASSERT_TRUE(cap) << "packet socket: " << std::strerror(errno);
    sockaddr_ll ll{};
    ll.sll_family = AF_PACKET;
    ll.sll_protocol = htons(ETH_P_IP);
    ll.sll_ifindex = kernel_->ifindex();
    const timeval tv{5, 0};
    ASSERT_EQ(::bind(cap.get(), reinterpret_cast<const sockaddr*>(&ll), sizeof ll), 0) << std::strerror(errno);
    ASSERT_EQ(::setsockopt(cap.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    const auto udp_before = kernel_snmp("Udp");

    const size_t sizes[] = {18, 333, 1472};
    for (size_t i = 0; i < std::size(sizes); ++i) {
        SCOPED_TRACE("datagram " + std::to_string(i));
        const std::vector<uint8_t> data = pattern_bytes(sizes[i], uint8_t(200 + i));
        ASSERT_TRUE(vfab_->send_udp(kKernelIp, kVfabPort, kKernelPort, data, true)) << vfab_->error();
        std::vector<uint8_t> got(2048);
        sockaddr_in from{};
        socklen_t flen = sizeof from;
        const ssize_t n = ::recvfrom(s.get(), got.data(), got.size(), 0, reinterpret_cast<sockaddr*>(&from), &flen);
        ASSERT_EQ(n, ssize_t(data.size())) << (n < 0 ? std::strerror(errno) : "a datagram of another size");
        got.resize(size_t(n));
        EXPECT_TRUE(got == data);
        EXPECT_EQ(ntohl(from.sin_addr.s_addr), kVfabIp);
        EXPECT_EQ(ntohs(from.sin_port), kVfabPort);
        ASSERT_TRUE(vfab_->poll()) << vfab_->error();   // reap the send completion
    }

    int seen = 0;
    uint8_t frame[2048];
    while (seen < int(std::size(sizes))) {
        const ssize_t n = ::recv(cap.get(), frame, sizeof frame, 0);
        ASSERT_GT(n, 0) << "packet socket: " << std::strerror(errno) << " after " << seen << " datagrams";
        const pkt::Frame f = pkt::parse({frame, size_t(n)});
        if (f.kind != pkt::Kind::udp || f.dport != kKernelPort) continue;
        SCOPED_TRACE("captured datagram " + std::to_string(seen));
        EXPECT_EQ(f.payload.size(), sizes[seen]);
        EXPECT_TRUE(f.ip_csum_ok) << "the 82574L did not fill the IPv4 header checksum";
        EXPECT_TRUE(f.udp_csum_present && f.l4_csum_ok) << "the 82574L did not fill the UDP checksum";
        ++seen;
    }
    auto udp_after = kernel_snmp("Udp");
    EXPECT_GE(udp_after["InDatagrams"] - udp_before.at("InDatagrams"), 3);
    EXPECT_EQ(udp_after["InCsumErrors"], udp_before.at("InCsumErrors"));
    EXPECT_EQ(udp_after["InErrors"], udp_before.at("InErrors"));
}

// After the suite: the NIC is back on vfio-pci and vfab can drive it again.
TEST(KernelPeerAfterwards, TheKernelsNicIsBackOnVfioPci) {
    ASSERT_TRUE(in_lab());
    EXPECT_EQ(driver_of(kKernelNic), "vfio-pci");
    auto port = examples::Port::open(kKernelNic, {.send_slots = 8, .recv_slots = 15});
    ASSERT_TRUE(port.ok()) << port.error().message;
    EXPECT_TRUE(port->device().link().up);
}

}  // namespace
}  // namespace vfab::lab
