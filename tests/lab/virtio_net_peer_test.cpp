// A peer no one here wrote: the guest kernel's own virtio_net driver drives the second lab
// virtio-net device (0000:00:06.0, 10.78.0.2/24) and vfab's virtio-net driver the first
// (0000:00:04.0, 10.78.0.1), both on QEMU hub 1, with the small ARP / IPv4 / ICMP / UDP
// responder of the e1000e peer test (net_peer.hpp). They resolve each other, ping each other
// (busybox ping from the kernel side, echo requests from vfab's) and exchange UDP with a
// kernel socket; two rounds, vfab's device opened with split and then with packed rings.
// The kernel's interface sends with its transmit checksum offload off (ETHTOOL_STXCSUM), so
// every frame on the hub carries complete checksums; on hub 1 it is off already: a hub port
// has no vnet header, so QEMU offers neither device VIRTIO_NET_F_CSUM nor GUEST_CSUM (the test
// prints what was negotiated). 06.0 goes back to vfio-pci after each round, whatever happened.
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>

#include <cstdio>
#include <memory>

#include "kernel_nic.hpp"
#include "lab_env.hpp"
#include "net_peer.hpp"
#include "vfab/drivers/virtio_net.hpp"

namespace vfab::lab {
namespace {
using namespace std::chrono_literals;
using virtio_net::RingFormat;

using VirtioPort = examples::BasicPort<virtio_net::Driver>;
using VirtioPeer = BasicNetPeer<VirtioPort>;

constexpr const char* kVfabNic = "0000:00:04.0";
constexpr const char* kKernelNic = "0000:00:06.0";
constexpr uint32_t kVfabIp = pkt::ipv4(10, 78, 0, 1);
constexpr uint32_t kKernelIp = pkt::ipv4(10, 78, 0, 2);
// Each WR takes two descriptors (header + frame) of the device's 256-entry queues.
constexpr examples::PortOptions kSlots{.send_slots = 64, .recv_slots = 128};

const char* yes_no(bool b) { return b ? "yes" : "no"; }

struct Split {
    static constexpr RingFormat ring = RingFormat::split;
};
struct Packed {
    static constexpr RingFormat ring = RingFormat::packed;
};

// One round: 06.0 lent to the kernel, 04.0 opened by vfab with the ring format R::ring.
template <class R>
class KernelVirtioPeer : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!in_lab()) {
            setup_error_ = "run this through scripts/lab";
            return;
        }
        kernel_ = std::make_unique<KernelNic>(kKernelNic);
        if (setup_error_ = kernel_->take("virtio-pci", {"virtio_net"}); !setup_error_.empty()) return;
        const std::optional<bool> csum_was = kernel_->tx_checksum();
        if (setup_error_ = kernel_->set_tx_checksum(false); !setup_error_.empty()) return;
        if (setup_error_ = kernel_->configure(kKernelIp, 24, 10s); !setup_error_.empty()) return;
        virtio_net::DeviceOptions opts;
        opts.ring = R::ring;
        auto port = VirtioPort::open(kVfabNic, kSlots, opts);
        if (!port) {
            setup_error_ = port.error().message;
            return;
        }
        vfab_ = std::make_unique<VirtioPeer>(std::move(*port), kVfabIp);
        virtio_net::Device& dev = vfab_->port().device();
        if (!vfab_->start()) setup_error_ = vfab_->error();
        else if (!dev.link().up) setup_error_ = std::string(kVfabNic) + ": vfab's link is down";
        else if (vfab_->port().qp().ring_format() != R::ring)
            setup_error_ = std::string("vfab's queue pair uses ") + to_string(vfab_->port().qp().ring_format()) + " rings";
        std::printf("kernel: virtio_net%s, %s on %s (%s), %s/24, link after %.0f ms, tx checksum offload %s -> off (ETHTOOL_STXCSUM %s); "
                    "vfab: %s (%s), %s/24, %s rings, CSUM %s, GUEST_CSUM %s\n",
                    kernel_->loaded_module() ? " (modprobe)" : " (built in or loaded)", kernel_->ifname().c_str(), kKernelNic,
                    kernel_->mac() ? pkt::to_string(*kernel_->mac()).c_str() : "?", pkt::to_string_ip(kKernelIp).c_str(),
                    kernel_->link_ms(), csum_was ? (*csum_was ? "on" : "off") : "?", kernel_->tx_checksum_set().c_str(), kVfabNic,
                    pkt::to_string(vfab_->self().mac).c_str(), pkt::to_string_ip(kVfabIp).c_str(), to_string(R::ring),
                    yes_no(virtio::has_feature(dev.features(), virtio::net_feature::CSUM)),
                    yes_no(virtio::has_feature(dev.features(), virtio::net_feature::GUEST_CSUM)));
    }

    static void TearDownTestSuite() {
        if (vfab_)
            std::printf("vfab: %lu frames, %lu with a bad checksum, %lu ignored\n", (unsigned long)vfab_->counters.frames,
                        (unsigned long)vfab_->counters.bad_checksums, (unsigned long)vfab_->counters.ignored);
        vfab_.reset();   // vfab's device first: nothing of it outlives the round
        if (kernel_) {
            const std::string err = kernel_->restore();
            kernel_.reset();
            if (!err.empty()) ADD_FAILURE() << err;
        }
        setup_error_.clear();
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
    static inline std::unique_ptr<VirtioPeer> vfab_;
    static inline std::string setup_error_;
};

struct RingName {
    template <class T>
    static std::string GetName(int) {
        return to_string(T::ring);
    }
};
using Rings = ::testing::Types<Split, Packed>;
TYPED_TEST_SUITE(KernelVirtioPeer, Rings, RingName);

// The kernel has no neighbour entry for vfab's address: busybox ping makes it ask (ARP),
// vfab answers, then answers three echo requests.
TYPED_TEST(KernelVirtioPeer, KernelResolvesVfabAndPingsIt) {
    auto& vfab = *TestFixture::vfab_;
    KernelNic& kernel = *TestFixture::kernel_;
    ASSERT_EQ(kernel_forget_neighbor(kVfabIp, kernel.ifname()), "");
    ASSERT_FALSE(kernel_arp_entry(kVfabIp, kernel.ifname()));
    const VirtioPeer::Counters before = vfab.counters;
    Outcome ping;
    {
        Server server(vfab);
        ping = run_program({"ping", "-c", "3", "-w", "20", pkt::to_string_ip(kVfabIp)}, 30s);
        ASSERT_TRUE(server.stop()) << vfab.error();
    }
    std::printf("%s", ping.out.c_str());
    EXPECT_EQ(ping.rc, 0) << ping.summary();
    EXPECT_NE(ping.out.find("3 packets transmitted, 3 packets received"), std::string::npos) << ping.summary();
    EXPECT_GE(vfab.counters.arp_requests_answered - before.arp_requests_answered, 1u);
    EXPECT_EQ(vfab.counters.echo_requests_answered - before.echo_requests_answered, 3u);
    EXPECT_EQ(vfab.counters.bad_checksums, 0u);
    auto entry = kernel_arp_entry(kVfabIp, kernel.ifname());
    ASSERT_TRUE(entry) << "the kernel has no complete ARP entry for " << pkt::to_string_ip(kVfabIp);
    EXPECT_EQ(pkt::to_string(*entry), pkt::to_string(vfab.self().mac));
    auto learned = vfab.neighbor(kKernelIp);   // from the kernel's request (RFC 826)
    ASSERT_TRUE(learned);
    EXPECT_EQ(pkt::to_string(*learned), pkt::to_string(*kernel.mac()));
}

// vfab asks for the kernel's address (broadcast ARP request), gets the kernel's reply, then
// sends three echo requests and checks the kernel's replies byte for byte.
TYPED_TEST(KernelVirtioPeer, VfabResolvesTheKernelAndPingsIt) {
    auto& vfab = *TestFixture::vfab_;
    vfab.forget(kKernelIp);
    const VirtioPeer::Counters before = vfab.counters;
    const auto icmp_before = kernel_snmp("Icmp");
    ASSERT_NO_FATAL_FAILURE(TestFixture::resolve_kernel());
    EXPECT_GE(vfab.counters.arp_replies - before.arp_replies, 1u);
    EXPECT_EQ(pkt::to_string(*vfab.neighbor(kKernelIp)), pkt::to_string(*TestFixture::kernel_->mac()));

    constexpr uint16_t kId = 0x7fab;
    for (uint16_t seq = 1; seq <= 3; ++seq) {
        SCOPED_TRACE("seq " + std::to_string(seq));
        const std::vector<uint8_t> data = pattern_bytes(56 * seq, uint8_t(seq));
        const size_t replies = vfab.echo_replies.size();
        const auto t0 = VirtioPeer::Clock::now();
        ASSERT_TRUE(vfab.send_echo_request(kKernelIp, kId, seq, data)) << vfab.error();
        ASSERT_TRUE(vfab.run_until([&] { return vfab.echo_replies.size() > replies; }, 5s))
            << (vfab.error().empty() ? "no echo reply within 5 s" : vfab.error());
        const VirtioPeer::EchoReply& r = vfab.echo_replies.back();
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

// A kernel UDP socket sends to vfab's echo port; vfab checks the checksums in software (a
// frame with a partial checksum would count as bad and go unanswered) and sends each datagram
// back; the socket receives it.
TYPED_TEST(KernelVirtioPeer, KernelUdpSocketTalksToVfab) {
    auto& vfab = *TestFixture::vfab_;
    Fd s = udp_socket(kKernelIp, 0);
    ASSERT_TRUE(s) << "kernel UDP socket: " << std::strerror(errno);
    const uint16_t port = local_port(s);
    const size_t first = vfab.datagrams.size();
    const uint64_t echoed = vfab.counters.udp_echoed, bad = vfab.counters.bad_checksums;
    const size_t sizes[] = {1, 200, 1472};
    std::vector<std::vector<uint8_t>> sent;
    {
        Server server(vfab);
        for (size_t i = 0; i < std::size(sizes); ++i) {
            SCOPED_TRACE("datagram " + std::to_string(i));
            sent.push_back(pattern_bytes(sizes[i], uint8_t(100 + i)));
            const sockaddr_in to = inet(kVfabIp, vfab.echo_port);
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
            EXPECT_EQ(ntohs(from.sin_port), vfab.echo_port);
        }
        ASSERT_TRUE(server.stop()) << vfab.error();
    }
    EXPECT_EQ(vfab.counters.bad_checksums, bad) << "frames with unfinished checksums reached vfab";
    ASSERT_EQ(vfab.datagrams.size() - first, std::size(sizes));
    EXPECT_EQ(vfab.counters.udp_echoed - echoed, std::size(sizes));
    for (size_t i = 0; i < std::size(sizes); ++i) {
        const VirtioPeer::Datagram& d = vfab.datagrams[first + i];
        SCOPED_TRACE("datagram " + std::to_string(i));
        EXPECT_EQ(d.src.ip, kKernelIp);
        EXPECT_EQ(d.sport, port);
        EXPECT_EQ(d.dport, vfab.echo_port);
        EXPECT_TRUE(d.data == sent[i]);
        EXPECT_TRUE(d.checksums_ok);
        EXPECT_TRUE(d.udp_csum_present) << "Linux always sends UDP checksums over IPv4";
        std::printf("kernel -> vfab: UDP %zu bytes, checksums complete, device says DATA_VALID: %s\n", d.data.size(),
                    yes_no(d.nic_csum_ok));
    }
}

// vfab sends UDP to a kernel socket, the checksums left to the device (send_ip_csum) where it
// offers VIRTIO_NET_F_CSUM, else computed in software. The socket gets every datagram, the
// kernel counts no checksum error, and a packet socket on the kernel's interface shows the
// checksums as they crossed the hub.
TYPED_TEST(KernelVirtioPeer, VfabUdpIsAcceptedByTheKernel) {
    auto& vfab = *TestFixture::vfab_;
    ASSERT_NO_FATAL_FAILURE(TestFixture::resolve_kernel());
    const bool offload = vfab.port().device().attr().offloads & offload_tx_ip_csum;
    std::printf("vfab -> kernel: UDP checksums %s\n", offload ? "by the device (send_ip_csum)" : "in software (no CSUM)");
    constexpr uint16_t kKernelPort = 5555, kVfabPort = 4444;
    Fd s = udp_socket(kKernelIp, kKernelPort);
    ASSERT_TRUE(s) << "kernel UDP socket: " << std::strerror(errno);
    Fd cap(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_IP)));
    ASSERT_TRUE(cap) << "packet socket: " << std::strerror(errno);
    sockaddr_ll ll{};
    ll.sll_family = AF_PACKET;
    ll.sll_protocol = htons(ETH_P_IP);
    ll.sll_ifindex = TestFixture::kernel_->ifindex();
    const timeval tv{5, 0};
    ASSERT_EQ(::bind(cap.get(), reinterpret_cast<const sockaddr*>(&ll), sizeof ll), 0) << std::strerror(errno);
    ASSERT_EQ(::setsockopt(cap.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    const auto udp_before = kernel_snmp("Udp");

    const size_t sizes[] = {18, 333, 1472};
    for (size_t i = 0; i < std::size(sizes); ++i) {
        SCOPED_TRACE("datagram " + std::to_string(i));
        const std::vector<uint8_t> data = pattern_bytes(sizes[i], uint8_t(200 + i));
        ASSERT_TRUE(vfab.send_udp(kKernelIp, kVfabPort, kKernelPort, data, offload)) << vfab.error();
        std::vector<uint8_t> got(2048);
        sockaddr_in from{};
        socklen_t flen = sizeof from;
        const ssize_t n = ::recvfrom(s.get(), got.data(), got.size(), 0, reinterpret_cast<sockaddr*>(&from), &flen);
        ASSERT_EQ(n, ssize_t(data.size())) << (n < 0 ? std::strerror(errno) : "a datagram of another size");
        got.resize(size_t(n));
        EXPECT_TRUE(got == data);
        EXPECT_EQ(ntohl(from.sin_addr.s_addr), kVfabIp);
        EXPECT_EQ(ntohs(from.sin_port), kVfabPort);
        ASSERT_TRUE(vfab.poll()) << vfab.error();   // reap the send completion
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
        EXPECT_TRUE(f.ip_csum_ok) << "the IPv4 header checksum is wrong on the wire";
        EXPECT_TRUE(f.udp_csum_present && f.l4_csum_ok) << "the UDP checksum is missing or wrong on the wire";
        ++seen;
    }
    auto udp_after = kernel_snmp("Udp");
    EXPECT_GE(udp_after["InDatagrams"] - udp_before.at("InDatagrams"), 3);
    EXPECT_EQ(udp_after["InCsumErrors"], udp_before.at("InCsumErrors"));
    EXPECT_EQ(udp_after["InErrors"], udp_before.at("InErrors"));
}

// After both rounds: 06.0 is back on vfio-pci and vfab's virtio-net driver can drive it again.
TEST(KernelVirtioPeerAfterwards, TheKernelsDeviceIsBackOnVfioPci) {
    ASSERT_TRUE(in_lab());
    EXPECT_EQ(driver_of(kKernelNic), "vfio-pci");
    auto port = VirtioPort::open(kKernelNic, {.send_slots = 8, .recv_slots = 16});
    ASSERT_TRUE(port.ok()) << port.error().message;
    EXPECT_TRUE(port->device().link().up);
}

}  // namespace
}  // namespace vfab::lab
