// The guest kernel's soft-RoCE (rdma_rxe on 0000:00:03.0, 10.77.0.2) with rdma-core's
// unmodified tools: first that the peer works (ibv_devinfo, ibv_rc_pingpong and
// ibv_ud_pingpong through rxe0), then reference frames from it. For those vfab's raw e1000e
// driver owns 0000:00:02.0 as 10.77.0.1 (GID ::ffff:10.77.0.1), answers ARP, and this test
// stands in for the tools' server over TCP on 127.0.0.1 (ibv_*_pingpong's and perftest's
// exchanges), so that the unmodified client on rxe0 sends its first RoCEv2 frames over the
// wire to vfab, which captures them whole (the ICRC included, no FCS). No one answers them:
// RC requests are retransmitted until the client is killed. Each captured frame is printed
// as hex between "@@rxe-frame begin NAME" and "@@rxe-frame end NAME" lines: the source of
// tests/unit/fixtures/rxe_frames.hpp (tests/unit/fixtures/icrc_check.py --emit LOG).
// Debian flavor only: the iommufd lab kernel has no RDMA.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>

#include "lab_env.hpp"
#include "net_peer.hpp"
#include "rxe_peer.hpp"

namespace vfab::lab {
namespace {
using namespace std::chrono_literals;

constexpr const char* kVfabNic = "0000:00:02.0";
constexpr uint32_t kVfabIp = pkt::ipv4(10, 77, 0, 1);
constexpr uint16_t kRoceV2Port = 4791;
constexpr uint32_t kQkey = 0x11111111;                 // ibv_ud_pingpong's Q_Key
constexpr uint32_t kFakeQpn = 0x000123, kFakePsn = 0x00abcd;   // the stand-in server's QP
constexpr uint32_t kFakeRkey = 0x00001234;             // and its memory region, for perftest
constexpr uint64_t kFakeVaddr = 0x00007f0000001000;

// ---- the ICRC (docs: ../shared/ROCE.md), to check what rxe put on the wire -----------------
uint32_t crc32_update(uint32_t crc, const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        crc ^= p[i];
        for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return crc;
}
// The ICRC of a whole IPv4 RoCEv2 frame (Ethernet header first, the ICRC last), as it belongs
// in the frame's last 4 bytes read little-endian.
uint32_t icrc_of(const std::vector<uint8_t>& f) {
    if (f.size() < 14 + 40 + 4) return 0;
    const uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    std::array<uint8_t, 40> h;   // IPv4 (20) + UDP (8) + BTH (12), masked
    std::copy_n(f.begin() + 14, h.size(), h.begin());
    h[1] = 0xff;             // TOS
    h[8] = 0xff;             // TTL
    h[10] = h[11] = 0xff;    // header checksum
    h[26] = h[27] = 0xff;    // UDP checksum
    h[32] = 0xff;            // BTH: FECN, BECN, reserved
    uint32_t crc = crc32_update(0xffffffffu, ones, sizeof ones);
    crc = crc32_update(crc, h.data(), h.size());
    crc = crc32_update(crc, f.data() + 14 + h.size(), f.size() - 14 - h.size() - 4);   // the rest, pad included
    return ~crc;
}
uint32_t load_le32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }
uint32_t load_be24(const uint8_t* p) { return uint32_t(p[0]) << 16 | uint32_t(p[1]) << 8 | p[2]; }
uint32_t load_be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | load_be24(p + 1); }

std::string release() { return read_line("/proc/sys/kernel/osrelease"); }

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& a : v) s += (s.empty() ? "" : " ") + a;
    return s;
}

void print_frame(const std::string& name, const std::vector<std::string>& cmd, const std::optional<PingpongDest>& client,
                 const std::vector<uint8_t>& f) {
    std::printf("@@rxe-frame begin %s\n# kernel %s, rdma_rxe on e1000e (%s) -> vfab e1000e (%s)\n# client: %s\n",
                name.c_str(), release().c_str(), kRxeNic, kVfabNic, join(cmd).c_str());
    if (client) std::printf("# the client announced QPN 0x%06x, PSN 0x%06x\n", client->qpn, client->psn);
    for (size_t i = 0; i < f.size(); i += 16) {
        for (size_t j = i; j < std::min(f.size(), i + 16); ++j) std::printf("%02x%s", f[j], j + 1 < std::min(f.size(), i + 16) ? " " : "");
        std::printf("\n");
    }
    std::printf("@@rxe-frame end %s\n", name.c_str());
}

class RxePeerTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!in_lab()) {
            setup_error_ = "run this through scripts/lab";
            return;
        }
        if (flavor() != "debian") {
            setup_error_ = "rxe needs the debian flavor (the iommufd lab kernel has no RDMA)";
            return;
        }
        rxe_ = std::make_unique<RxePeer>();
        if (setup_error_ = rxe_->start(); !setup_error_.empty()) return;
        std::printf("rxe: %s on %s (%s, %s), %s/24, link after %.0f ms, port active %.0f ms after rdma link add\n",
                    rxe_->ibdev().c_str(), rxe_->ifname().c_str(), kRxeNic,
                    rxe_->mac() ? pkt::to_string(*rxe_->mac()).c_str() : "?", pkt::to_string_ip(kRxeIp).c_str(),
                    rxe_->nic().link_ms(), rxe_->active_ms());
    }
    static void TearDownTestSuite() {
        if (!rxe_) return;
        const std::string err = rxe_->stop();
        rxe_.reset();
        if (!err.empty()) ADD_FAILURE() << err;
    }
    void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }

    // What one stand-in server saw of one client.
    struct Capture {
        std::vector<std::string> cmd;
        Outcome client;
        std::string exchange_error;
        std::optional<PingpongDest> client_dest;
        std::vector<NetPeer::Datagram> frames;   // RoCEv2 (UDP 4791) frames to vfab, in order
        std::vector<double> at_ms;               // when each arrived, from the client's start
        uint64_t arp_answered = 0;
    };

    // Runs `cmd` (a client on rxe0, its server at 127.0.0.1) with vfab on 00:02.0 and `serve`
    // answering its TCP exchange; waits for `want` RoCEv2 frames, then `linger` more for what
    // else comes (retransmissions), then kills the client.
    template <class Serve>
    static Capture capture(std::vector<std::string> cmd, Serve serve, size_t want, std::chrono::milliseconds linger) {
        Capture c;
        c.cmd = cmd;
        auto port = examples::Port::open(kVfabNic, {.send_slots = 64, .recv_slots = 255});
        if (!port) {
            c.exchange_error = port.error().message;
            return c;
        }
        NetPeer vfab(std::move(*port), kVfabIp);
        vfab.keep_frames = true;
        if (!vfab.start()) {
            c.exchange_error = vfab.error();
            return c;
        }
        // The kernel asks for vfab's MAC afresh (rxe resolves it when the client connects).
        if (auto e = kernel_forget_neighbor(kVfabIp, rxe_->ifname()); !e.empty()) {
            c.exchange_error = e;
            return c;
        }
        Fd listener = tcp_listener(kPingpongPort);
        if (!listener) {
            c.exchange_error = std::string("listen on 127.0.0.1:18515: ") + std::strerror(errno);
            return c;
        }
        std::atomic<bool> exchanged{false};
        std::thread server([&] {
            serve(listener, c);
            exchanged = true;
        });
        const auto t0 = NetPeer::Clock::now();
        Child client(cmd);
        auto roce = [&] {
            size_t n = 0;
            for (const NetPeer::Datagram& d : vfab.datagrams) n += d.dport == kRoceV2Port;
            while (c.at_ms.size() < n)
                c.at_ms.push_back(std::chrono::duration<double, std::milli>(NetPeer::Clock::now() - t0).count());
            return n;
        };
        bool ok = vfab.run_until([&] { return roce() >= want || (exchanged && !c.exchange_error.empty()); }, 40s);
        if (ok && c.exchange_error.empty()) ok = vfab.run_until([&] { return roce() > 1000; }, linger) || vfab.error().empty();
        c.client = client.wait(0ms);   // still waiting for an answer no one sends: killed
        server.join();
        if (!ok && c.exchange_error.empty()) c.exchange_error = vfab.error();
        for (const NetPeer::Datagram& d : vfab.datagrams)
            if (d.dport == kRoceV2Port) c.frames.push_back(d);
        c.arp_answered = vfab.counters.arp_requests_answered;
        std::printf("%s: %zu RoCEv2 frames, at", join(cmd).c_str(), c.frames.size());
        for (double t : c.at_ms) std::printf(" %.1f", t);
        std::printf(" ms; vfab answered %llu ARP requests\n", (unsigned long long)c.arp_answered);
        for (const NetPeer::Datagram& d : c.frames)   // opcode, PSN, AckReq; IPv4 ID, TTL; UDP source port
            if (d.frame.size() >= 54)
                std::printf("  op %02x psn %06x%s  ip id %02x%02x ttl %u  udp sport %04x\n", d.frame[42],
                            load_be24(d.frame.data() + 51), d.frame[50] & 0x80 ? " ackreq" : "       ", d.frame[18],
                            d.frame[19], d.frame[22], d.sport);
        return c;
    }

    // ibv_rc_pingpong's / ibv_ud_pingpong's exchange, the server's side.
    static void serve_pingpong(const Fd& listener, Capture& c) {
        PingpongExchange x = serve_pingpong_exchange(listener, {0, kFakeQpn, kFakePsn, ipv4_gid(kVfabIp)}, 30s);
        c.client_dest = x.client;
        c.exchange_error = x.error;
    }

    // perftest's exchange (its Ethernet side channel), the server's side: the client's version
    // (16 bytes), page and cache line sizes (4 + 4) and MTU ("3" and its NUL) are sent back as
    // they came; then three rounds of "LID:OUT_READS:QPN:PSN:RKEY:VADDR:GID bytes:SRQN:"
    // (108 bytes with its NUL), before and after the client connects its QP.
    static void serve_perftest(const Fd& listener, Capture& c) {
        pollfd p{listener.get(), POLLIN, 0};
        if (::poll(&p, 1, 30000) <= 0) {
            c.exchange_error = "no perftest client connected within 30 s";
            return;
        }
        Fd s(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
        for (size_t n : {16, 4, 4, 2}) {
            const std::string got = read_some(s.get(), n, 30s);
            if (got.size() != n || ::write(s.get(), got.data(), n) != ssize_t(n)) {
                c.exchange_error = "perftest exchange: " + std::to_string(got.size()) + " of " + std::to_string(n) + " bytes";
                return;
            }
        }
        char mine[108];
        int len = std::snprintf(mine, sizeof mine, "%04x:%04x:%06x:%06x:%08x:%016llx:", 0, 1, kFakeQpn, kFakePsn,
                                kFakeRkey, (unsigned long long)kFakeVaddr);
        for (uint8_t b : ipv4_gid(kVfabIp)) len += std::snprintf(mine + len, sizeof mine - size_t(len), "%02x:", b);
        std::snprintf(mine + len, sizeof mine - size_t(len), "%08x:", 0);
        for (int round = 0; round < 3; ++round) {
            const std::string got = read_some(s.get(), sizeof mine, 30s);
            if (got.size() != sizeof mine || ::write(s.get(), mine, sizeof mine) != ssize_t(sizeof mine)) {
                c.exchange_error = "perftest key exchange, round " + std::to_string(round + 1) + ": " +
                                   std::to_string(got.size()) + " bytes";
                return;
            }
            if (round == 0) {   // LID:OUT_READS:QPN:PSN:...
                PingpongDest d;
                unsigned lid = 0, out = 0, qpn = 0, psn = 0;
                if (std::sscanf(got.c_str(), "%x:%x:%x:%x:", &lid, &out, &qpn, &psn) == 4) c.client_dest = PingpongDest{lid, qpn, psn, {}};
            }
        }
        read_some(s.get(), 1, 2s);   // the client closes or goes on; nothing more is needed
    }

    // The checks every captured request shares; returns the offset of the payload.
    static size_t check_roce_frame(const Capture& c, const NetPeer::Datagram& d, uint8_t opcode, size_t ext_len) {
        const std::vector<uint8_t>& f = d.frame;
        EXPECT_EQ(pkt::to_string(d.src.mac), pkt::to_string(*rxe_->mac()));
        EXPECT_EQ(d.src.ip, kRxeIp);
        EXPECT_TRUE(d.checksums_ok);
        EXPECT_FALSE(d.udp_csum_present) << "rxe sends UDP checksum 0";
        EXPECT_GE(d.sport, 0xc000) << "rxe's source ports are 0xC000-0xFFFF";
        EXPECT_EQ(f[14], 0x45);                              // IPv4, IHL 5
        EXPECT_TRUE(f[14 + 6] & 0x40) << "DF";
        const uint8_t* bth = f.data() + 42;
        EXPECT_EQ(bth[0], opcode);
        EXPECT_EQ(bth[1] & 0x0f, 0) << "TVer";
        EXPECT_EQ(bth[2] << 8 | bth[3], 0xffff) << "P_Key";
        EXPECT_EQ(load_be24(bth + 5), kFakeQpn) << "destination QP";
        if (c.client_dest) {
            EXPECT_EQ(load_be24(bth + 9), c.client_dest->psn) << "the client's first PSN";
        }
        const size_t pad = (bth[1] >> 4) & 3;
        EXPECT_EQ(load_le32(f.data() + f.size() - 4), icrc_of(f)) << "the ICRC rxe sent is not the one ROCE.md's recipe gives";
        for (size_t i = f.size() - 4 - pad; i < f.size() - 4; ++i) EXPECT_EQ(f[i], 0) << "pad byte " << i;
        return 42 + 12 + ext_len;
    }

    static inline std::unique_ptr<RxePeer> rxe_;
    static inline std::string setup_error_;
};

// libibverbs (rdma-core's, with its rxe provider) sees rxe0 as a RoCE device on an Ethernet
// link with the active MTU rxe derives from the interface's 1500 (1024), and rdma shows it.
TEST_F(RxePeerTest, DevinfoSeesAnActiveRoceDevice) {
    Outcome info = run_program({"ibv_devinfo", "-v", "-d", "rxe0"}, 30s);
    ASSERT_EQ(info.rc, 0) << info.summary();
    std::printf("%s", info.out.c_str());
    // Runs of blanks as one space (no std::regex: GCC 12 warns inside it at -O1, as errors).
    std::string flat;
    for (char c : info.out) {
        const bool blank = c == ' ' || c == '\t';
        if (!blank || (!flat.empty() && flat.back() != ' ')) flat += blank ? ' ' : c;
    }
    for (const char* want : {"hca_id: rxe0", "state: PORT_ACTIVE (4)", "active_mtu: 1024 (3)", "link_layer: Ethernet",
                             "GID[ 1]: ::ffff:10.77.0.2"})
        EXPECT_NE(flat.find(want), std::string::npos) << "no '" << want << "' in\n" << info.out;
    Outcome link = run_program({"/usr/bin/rdma", "link", "show", "rxe0/1"}, 30s);
    ASSERT_EQ(link.rc, 0) << link.summary();
    std::printf("%s", link.out.c_str());
    EXPECT_NE(link.out.find("state ACTIVE"), std::string::npos) << link.out;
    EXPECT_NE(link.out.find("netdev " + rxe_->ifname()), std::string::npos) << link.out;
    Outcome addr = run_program({"/usr/sbin/ip", "-4", "-brief", "address", "show", "dev", rxe_->ifname()}, 30s);
    ASSERT_EQ(addr.rc, 0) << addr.summary();
    EXPECT_NE(addr.out.find("10.77.0.2/24"), std::string::npos) << addr.out;
    // What a failed start() adds to its message: the kernel log's last lines, no more.
    const std::string tail = kernel_log_tail(3);
    EXPECT_FALSE(tail.empty());
    EXPECT_LE(std::count(tail.begin(), tail.end(), '\n'), 3) << tail;
}

// RC SENDs through rxe0, both ends in this guest (rxe loops them back inside the kernel).
TEST_F(RxePeerTest, RcPingpongThroughRxe) {
    const std::vector<std::string> args = {"ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-n", "20"};
    std::vector<std::string> client = args;
    client.push_back("127.0.0.1");
    PairOutcome r = run_server_client(args, client, 60s);
    EXPECT_EQ(r.server.rc, 0) << "server: " << r.server.summary();
    EXPECT_EQ(r.client.rc, 0) << "client: " << r.client.summary();
    std::printf("client: %s", r.client.out.c_str());
    EXPECT_NE(r.client.out.find("20 iters in"), std::string::npos) << r.client.out;
}

// UD SENDs through rxe0 (at most the active MTU: 1024).
TEST_F(RxePeerTest, UdPingpongThroughRxe) {
    const std::vector<std::string> args = {"ibv_ud_pingpong", "-d", "rxe0", "-g", "1", "-n", "20", "-s", "512"};
    std::vector<std::string> client = args;
    client.push_back("127.0.0.1");
    PairOutcome r = run_server_client(args, client, 60s);
    EXPECT_EQ(r.server.rc, 0) << "server: " << r.server.summary();
    EXPECT_EQ(r.client.rc, 0) << "client: " << r.client.summary();
    std::printf("client: %s", r.client.out.c_str());
    EXPECT_NE(r.client.out.find("20 iters in"), std::string::npos) << r.client.out;
}

// ibv_rc_pingpong's first message, 64 bytes of 0x7b: one RC SEND ONLY (opcode 0x04) with
// AckReq; unanswered, rxe sends it again with the same PSN.
TEST_F(RxePeerTest, CapturesRcSendOnly) {
    Capture c = capture({"ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-n", "1", "-s", "64", "127.0.0.1"}, serve_pingpong, 1, 1500ms);
    ASSERT_EQ(c.exchange_error, "") << c.client.summary();
    ASSERT_GE(c.frames.size(), 1u) << c.client.summary();
    EXPECT_GE(c.arp_answered, 1u) << "rxe resolved vfab's MAC without asking";
    const std::vector<uint8_t>& f = c.frames[0].frame;
    ASSERT_EQ(f.size(), 42 + 12 + 64 + 4u);
    const size_t at = check_roce_frame(c, c.frames[0], 0x04, 0);
    EXPECT_TRUE(f[42 + 8] & 0x80) << "AckReq";
    for (size_t i = at; i < at + 64; ++i) ASSERT_EQ(f[i], 0x7b) << "payload byte " << i - at;
    print_frame("rc_send_only", c.cmd, c.client_dest, f);
    for (size_t i = 1; i < c.frames.size(); ++i) {
        const std::vector<uint8_t>& g = c.frames[i].frame;
        // The ICRC covers the IPv4 ID, which rxe takes anew for every packet it sends.
        EXPECT_TRUE(g.size() == f.size() && std::equal(g.begin() + 42, g.end() - 4, f.begin() + 42))
            << "retransmission " << i << " carries another BTH or payload";
        EXPECT_EQ(load_le32(g.data() + g.size() - 4), icrc_of(g));
        if (i == 1) print_frame("rc_send_only_retransmitted", c.cmd, c.client_dest, g);
    }
}

// A 1501-byte message at path MTU 1024: SEND FIRST (0x00, 1024 bytes) and SEND LAST (0x02, 477
// bytes and 3 pad bytes, AckReq), consecutive PSNs.
TEST_F(RxePeerTest, CapturesRcSendFirstAndLast) {
    Capture c = capture({"ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-n", "1", "-s", "1501", "127.0.0.1"}, serve_pingpong, 2, 300ms);
    ASSERT_EQ(c.exchange_error, "") << c.client.summary();
    ASSERT_GE(c.frames.size(), 2u) << c.client.summary();
    const std::vector<uint8_t>& first = c.frames[0].frame;
    const std::vector<uint8_t>& last = c.frames[1].frame;
    ASSERT_EQ(first.size(), 42 + 12 + 1024 + 4u);
    ASSERT_EQ(last.size(), 42 + 12 + 477 + 3 + 4u);
    check_roce_frame(c, c.frames[0], 0x00, 0);
    EXPECT_EQ(load_be24(last.data() + 42 + 9), (load_be24(first.data() + 42 + 9) + 1) & 0xffffff);
    EXPECT_EQ(last[42], 0x02);
    EXPECT_EQ((last[43] >> 4) & 3, 3) << "pad count";
    EXPECT_EQ(load_le32(last.data() + last.size() - 4), icrc_of(last));
    EXPECT_TRUE(last[42 + 8] & 0x80) << "AckReq on the last packet";
    print_frame("rc_send_first", c.cmd, c.client_dest, first);
    print_frame("rc_send_last", c.cmd, c.client_dest, last);
}

// ibv_ud_pingpong's first message, 61 bytes of 0x7b: one UD SEND ONLY (0x64) with a DETH
// (Q_Key 0x11111111, the client's QPN) and 3 pad bytes.
TEST_F(RxePeerTest, CapturesUdSendOnly) {
    Capture c = capture({"ibv_ud_pingpong", "-d", "rxe0", "-g", "1", "-n", "1", "-s", "61", "127.0.0.1"}, serve_pingpong, 1, 300ms);
    ASSERT_EQ(c.exchange_error, "") << c.client.summary();
    ASSERT_GE(c.frames.size(), 1u) << c.client.summary();
    EXPECT_GE(c.arp_answered, 1u) << "rxe resolved vfab's MAC without asking";
    const std::vector<uint8_t>& f = c.frames[0].frame;
    ASSERT_EQ(f.size(), 42 + 12 + 8 + 61 + 3 + 4u);
    const size_t at = check_roce_frame(c, c.frames[0], 0x64, 8);
    EXPECT_EQ((f[43] >> 4) & 3, 3) << "pad count";
    EXPECT_EQ(load_be32(f.data() + 54), kQkey);
    ASSERT_TRUE(c.client_dest);
    EXPECT_EQ(load_be24(f.data() + 59), c.client_dest->qpn) << "DETH source QP";
    for (size_t i = at; i < at + 61; ++i) ASSERT_EQ(f[i], 0x7b) << "payload byte " << i - at;
    EXPECT_EQ(c.frames.size(), 1u) << "UD is never retransmitted";
    print_frame("ud_send_only", c.cmd, c.client_dest, f);
}

// perftest's ib_write_bw and ib_read_bw clients: RDMA WRITE ONLY (0x0A: RETH with the
// stand-in's VA, R_Key and length, then 64 bytes) and RDMA READ REQUEST (0x0C: RETH only).
TEST_F(RxePeerTest, CapturesRdmaWriteAndReadRequests) {
    struct Case {
        const char* tool;
        const char* name;
        uint8_t opcode;
        size_t payload;
    };
    for (const Case& k : {Case{"ib_write_bw", "rc_rdma_write_only", 0x0a, 64}, Case{"ib_read_bw", "rc_rdma_read_request", 0x0c, 0}}) {
        SCOPED_TRACE(k.tool);
        Capture c = capture({k.tool, "-d", "rxe0", "-x", "1", "-F", "-s", "64", "-n", "5", "127.0.0.1"}, serve_perftest, 1, 300ms);
        ASSERT_EQ(c.exchange_error, "") << c.client.summary();
        ASSERT_GE(c.frames.size(), 1u) << c.client.summary();
        const std::vector<uint8_t>& f = c.frames[0].frame;
        ASSERT_EQ(f.size(), 42 + 12 + 16 + k.payload + 4);
        check_roce_frame(c, c.frames[0], k.opcode, 16);
        const uint8_t* reth = f.data() + 54;
        EXPECT_EQ(uint64_t(load_be32(reth)) << 32 | load_be32(reth + 4), kFakeVaddr);
        EXPECT_EQ(load_be32(reth + 8), kFakeRkey);
        EXPECT_EQ(load_be32(reth + 12), 64u) << "DMA length";
        print_frame(k.name, c.cmd, c.client_dest, f);
    }
}

// After the suite: rxe0 is gone, its modules unloaded, the NIC back on vfio-pci.
TEST(RxePeerAfterwards, TheLabIsAsBefore) {
    ASSERT_TRUE(in_lab());
    if (flavor() != "debian") GTEST_SKIP() << "no rxe on this flavor";
    EXPECT_EQ(driver_of(kRxeNic), "vfio-pci");
    EXPECT_FALSE(std::filesystem::exists("/sys/class/infiniband/rxe0"));
    EXPECT_FALSE(module_loaded("rdma_rxe"));
    auto port = examples::Port::open(kRxeNic, {.send_slots = 8, .recv_slots = 15});
    ASSERT_TRUE(port.ok()) << port.error().message;
}

}  // namespace
}  // namespace vfab::lab
