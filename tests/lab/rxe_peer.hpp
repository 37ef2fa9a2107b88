// The guest kernel's soft-RoCE (rdma_rxe) as an RDMA peer no one here wrote, for the life of
// an RxePeer: start() lends the second lab 82574L (0000:00:03.0, wired to 00:02.0 through
// QEMU's hub 0) to the kernel's e1000e driver, gives it 10.77.0.2/24, loads the rxe modules,
// adds rxe0 on its interface (`rdma link add`) and waits until the port is active with the
// RoCEv2 GID ::ffff:10.77.0.2 at index 1; it also brings lo up (the tools' TCP side channel
// runs over 127.0.0.1). stop() (or the destructor) deletes rxe0, unloads the modules it loaded,
// gives the NIC back to vfio-pci and takes lo down again, so later tests find the lab as
// before. Debian flavor only: the iommufd lab kernel has no RDMA (docs/lab.md).
//
// Also here: starting rdma-core's unmodified tools (ibverbs-utils, perftest, copied into the
// guest by scripts/lab.d/initramfs.sh) and the TCP exchange of ibv_rc_pingpong /
// ibv_ud_pingpong, so that a test can stand in for their server.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <cctype>

#include "kernel_nic.hpp"
#include "spawn.hpp"

namespace vfab::lab {

inline constexpr const char* kRxeNic = "0000:00:03.0";
inline constexpr uint32_t kRxeIp = pkt::ipv4(10, 77, 0, 2);
inline constexpr uint16_t kPingpongPort = 18515;   // ibv_*_pingpong's TCP port

// The rxe modules in load order (modprobe adds what each declares; rxe needs a crc32 provider
// it does not declare).
inline const std::vector<std::string>& rxe_modules() {
    // ... and the kernel's connection manager with its user-space access (rdma_ucm), for
    // rdmacm-utils on rxe (tests/lab/rdmacm_dropin_test.cpp).
    static const std::vector<std::string> m = {"crc32_generic", "ib_core",  "ib_uverbs", "udp_tunnel", "ip6_udp_tunnel",
                                               "rdma_rxe",      "ib_cm",    "iw_cm",     "rdma_cm",    "rdma_ucm"};
    return m;
}

// A RoCEv2 GID of an IPv4 address, ::ffff:a.b.c.d, in the 16 bytes of the wire.
inline std::array<uint8_t, 16> ipv4_gid(uint32_t ip) {
    std::array<uint8_t, 16> g{};
    g[10] = g[11] = 0xff;
    for (int i = 0; i < 4; ++i) g[12 + i] = uint8_t(ip >> (24 - 8 * i));
    return g;
}

// As /sys/class/infiniband/<dev>/ports/1/gids/<n> prints it: eight groups of four hex digits.
inline std::string sysfs_gid(uint32_t ip) {
    const auto g = ipv4_gid(ip);
    std::string s;
    char b[8];
    for (int i = 0; i < 16; i += 2) {
        std::snprintf(b, sizeof b, "%s%02x%02x", i ? ":" : "", g[i], g[i + 1]);
        s += b;
    }
    return s;
}

inline bool module_loaded(std::string m) {
    for (char& c : m) c = c == '-' ? '_' : c;
    return std::filesystem::exists("/sys/module/" + m + "/initstate");
}

// Is something listening on TCP `port` (IPv4 or IPv6, any address)? /proc/net/tcp{,6}: state 0A.
inline bool tcp_listening(uint16_t port) {
    char want[8];
    std::snprintf(want, sizeof want, ":%04X", port);
    for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
        std::ifstream in(path);
        std::string line;
        std::getline(in, line);
        while (std::getline(in, line)) {
            std::istringstream f(line);
            std::string sl, local, remote, state;
            f >> sl >> local >> remote >> state;
            if (state == "0A" && local.size() > 5 && local.compare(local.size() - 5, 5, want) == 0) return true;
        }
    }
    return false;
}

// Sets an interface's IFF_UP; its previous state, or nullopt (errno set) on failure.
inline std::optional<bool> set_link_up(const std::string& ifname, bool up) {
    Fd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    if (!s || ::ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) return std::nullopt;
    const bool was = ifr.ifr_flags & IFF_UP;
    ifr.ifr_flags = short(up ? ifr.ifr_flags | IFF_UP : ifr.ifr_flags & ~IFF_UP);
    if (was != up && ::ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) return std::nullopt;
    return was;
}

// The kernel log's last `n` lines (dmesg), for a failure's message.
inline std::string kernel_log_tail(size_t n) {
    const Outcome r = run_program({"dmesg"}, std::chrono::seconds(10));
    if (r.rc != 0) return "(dmesg: " + r.summary() + ")";
    size_t at = r.out.size();
    for (size_t lines = 0; at > 0 && lines <= n;)
        if (r.out[--at] == '\n') ++lines;
    return r.out.substr(at == 0 ? 0 : at + 1);
}

class RxePeer {
public:
    explicit RxePeer(std::string bdf = kRxeNic, uint32_t ip = kRxeIp, std::string ibdev = "rxe0")
        : nic_(std::move(bdf)), ip_(ip), ibdev_(std::move(ibdev)) {}
    ~RxePeer() {
        if (const std::string e = stop(); !e.empty()) std::fprintf(stderr, "RxePeer: %s\n", e.c_str());
    }
    RxePeer(const RxePeer&) = delete;
    RxePeer& operator=(const RxePeer&) = delete;

    // Empty on success, else what failed (stop() undoes whatever was done by then), how long
    // into start() and the guest kernel's last lines: a CI run's only clue to a failed set-up.
    std::string start(std::chrono::milliseconds limit = std::chrono::seconds(30)) {
        const auto t0 = std::chrono::steady_clock::now();
        std::string e = start_steps(limit);
        if (!e.empty())
            e += str_cat(" (", std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count(),
                         " ms into start())\nthe kernel's last lines:\n", kernel_log_tail(20));
        return e;
    }

    // Deletes the rxe device, unloads the modules start() loaded, gives the NIC back to
    // vfio-pci. Empty on success, else every step that failed.
    std::string stop() {
        if (!started_) return {};
        started_ = false;
        std::string err;
        auto note = [&](const std::string& e) {
            if (!e.empty()) err += (err.empty() ? "" : "; ") + e;
        };
        if (linked_) {
            linked_ = false;
            Outcome del = run_program({"/usr/bin/rdma", "link", "delete", ibdev_}, std::chrono::seconds(30));
            if (del.rc != 0) note("rdma link delete " + ibdev_ + ": " + del.summary());
            else if (!wait_for([&] { return !std::filesystem::exists("/sys/class/infiniband/" + ibdev_); },
                               std::chrono::seconds(10)))
                note(ibdev_ + " still in /sys/class/infiniband 10 s after rdma link delete");
        }
        for (auto m = loaded_.rbegin(); m != loaded_.rend(); ++m) {
            Outcome r = run_program({"rmmod", *m}, std::chrono::seconds(30));
            if (r.rc != 0) note("rmmod " + *m + ": " + r.summary());
        }
        loaded_.clear();
        note(nic_.restore());
        if (lo_was_down_ && !set_link_up("lo", false)) note(std::string("lo down: ") + std::strerror(errno));
        lo_was_down_ = false;
        return err;
    }

    const std::string& ibdev() const { return ibdev_; }
    const std::string& ifname() const { return nic_.ifname(); }
    uint32_t ip() const { return ip_; }
    std::optional<pkt::Mac> mac() const { return nic_.mac(); }
    KernelNic& nic() { return nic_; }
    double active_ms() const { return active_ms_; }   // rdma link add until ibv_devinfo saw the port active
    const std::vector<std::string>& loaded_modules() const { return loaded_; }

private:
    // start()'s steps: empty, or the first that failed.
    std::string start_steps(std::chrono::milliseconds limit) {
        started_ = true;
        for (const char* tool : {"/usr/bin/rdma", "/usr/bin/ibv_devinfo"})
            if (!std::filesystem::exists(tool))
                return std::string(tool) + " is not in the guest (scripts/lab gives rdma-core's tools to the debian flavor only)";
        // The tools' TCP side channel runs over 127.0.0.1; the lab's init leaves lo down.
        const std::optional<bool> lo = set_link_up("lo", true);
        if (!lo) return std::string("lo up: ") + std::strerror(errno);
        lo_was_down_ = !*lo;
        if (auto e = nic_.take("e1000e"); !e.empty()) return e;
        if (auto e = nic_.configure(ip_, 24, std::chrono::seconds(10)); !e.empty()) return e;
        for (const std::string& m : rxe_modules()) {
            if (module_loaded(m)) continue;
            Outcome r = run_program({"modprobe", m}, std::chrono::seconds(30));
            if (r.rc != 0) return "modprobe " + m + ": " + r.summary();
            if (module_loaded(m)) loaded_.push_back(m);   // (a built-in one has no initstate)
        }
        Outcome add = run_program({"/usr/bin/rdma", "link", "add", ibdev_, "type", "rxe", "netdev", nic_.ifname()},
                                  std::chrono::seconds(30));
        if (add.rc != 0) return "rdma link add " + ibdev_ + ": " + add.summary();
        linked_ = true;
        const std::string port = "/sys/class/infiniband/" + ibdev_ + "/ports/1/";
        const auto t0 = std::chrono::steady_clock::now();
        if (!wait_for([&] { return read_line(port + "state").find("ACTIVE") != std::string::npos; }, limit))
            return ibdev_ + ": port 1 is '" + read_line(port + "state") + "', not ACTIVE, after " +
                   std::to_string(limit.count()) + " ms";
        if (!wait_for([&] { return read_line(port + "gids/1") == sysfs_gid(ip_); }, limit))
            return ibdev_ + ": GID index 1 is '" + read_line(port + "gids/1") + "', not " + sysfs_gid(ip_);
        // libibverbs' view of it, through the rxe provider.
        Outcome info;
        if (!wait_for(
                [&] {
                    info = run_program({"ibv_devinfo", "-d", ibdev_}, std::chrono::seconds(30));
                    return info.rc == 0 && info.out.find("PORT_ACTIVE") != std::string::npos;
                },
                limit))
            return "ibv_devinfo -d " + ibdev_ + " does not show PORT_ACTIVE: " + info.summary();
        active_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        return {};
    }

    KernelNic nic_;
    uint32_t ip_;
    std::string ibdev_;
    std::vector<std::string> loaded_;
    bool started_ = false, linked_ = false, lo_was_down_ = false;
    double active_ms_ = 0;
};

// A server and a client of one of rdma-core's tools on this guest (their TCP side channel over
// 127.0.0.1): the server first, the client once the server listens on `port`. Outcomes of
// both; the client's is rc -1 when the server never listened.
inline PairOutcome run_server_client(const std::vector<std::string>& server_args, std::vector<std::string> client_args,
                                     std::chrono::milliseconds limit, uint16_t port = kPingpongPort) {
    PairOutcome r;
    Child server(server_args);
    if (!wait_for([&] { return tcp_listening(port); }, limit)) {
        r.server = server.wait(std::chrono::milliseconds(0));
        r.client.err = "not started: the server did not listen on TCP port " + std::to_string(port);
        return r;
    }
    r.client = run_program(std::move(client_args), limit);
    r.server = server.wait(limit);
    return r;
}

// A server, then its client, again a second later while what the client says shows the server
// was not listening yet (any of `not_yet`), at most `tries` times; all within `limit` (the
// server given at least 15 s to end after the last client).
inline PairOutcome run_until_listening(const std::vector<std::string>& server_args, const std::vector<std::string>& client_args,
                                       std::chrono::milliseconds limit, const std::vector<std::string>& not_yet, int tries) {
    using Clock = std::chrono::steady_clock;
    const auto end = Clock::now() + limit;
    auto left = [&] {
        return std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()));
    };
    PairOutcome r;
    Child server(server_args);
    for (int i = 0; i < tries && Clock::now() < end; ++i) {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        r.client = run_program(client_args, left());
        const std::string said = r.client.out + r.client.err;
        if (r.client.rc == 0 || std::none_of(not_yet.begin(), not_yet.end(), [&](const std::string& w) { return said.find(w) != std::string::npos; }))
            break;
    }
    r.server = server.wait(std::max(left(), std::chrono::milliseconds(15000)));   // a last client may have used it up
    return r;
}

// Both ends exited 0; each failure shows both.
inline void expect_both_ok(const PairOutcome& r) {
    EXPECT_EQ(r.server.rc, 0) << "server: " << r.server.summary() << "\nclient: " << r.client.summary();
    EXPECT_EQ(r.client.rc, 0) << "client: " << r.client.summary() << "\nserver: " << r.server.summary();
}

// Both ends of a run_server_client() exited 0 and printed `line` (e.g. "100 iters in").
inline void expect_pair(const PairOutcome& r, const std::string& line) {
    expect_both_ok(r);
    EXPECT_NE(r.server.out.find(line), std::string::npos) << r.server.summary();
    EXPECT_NE(r.client.out.find(line), std::string::npos) << r.client.summary();
}

// ---- ibv_rc_pingpong / ibv_ud_pingpong's TCP exchange ----------------------------------------
// The client connects and writes "LLLL:QQQQQQ:PPPPPP:GGGG...G" (LID, QPN, PSN in hex, the GID
// as 32 hex digits in wire order) with its NUL: 52 bytes. The server answers the same way;
// the client writes "done" (5 bytes) and connects its QP.

struct PingpongDest {
    uint32_t lid = 0, qpn = 0, psn = 0;
    std::array<uint8_t, 16> gid{};
};

inline constexpr size_t kPingpongMsg = sizeof "0000:000000:000000:00000000000000000000000000000000";

inline std::string pingpong_message(const PingpongDest& d) {
    char m[kPingpongMsg];
    int n = std::snprintf(m, sizeof m, "%04x:%06x:%06x:", d.lid, d.qpn, d.psn);
    for (uint8_t b : d.gid) n += std::snprintf(m + n, sizeof m - size_t(n), "%02x", b);
    return std::string(m, kPingpongMsg);   // with the NUL, as the tools send it
}

inline std::optional<PingpongDest> parse_pingpong_message(const std::string& m) {
    const std::string t = m.substr(0, m.find('\0'));
    // LLLL:QQQQQQ:PPPPPP:GGGG... (4, 6, 6 and 32 hex digits)
    if (t.size() != kPingpongMsg - 1 || t[4] != ':' || t[11] != ':' || t[18] != ':') return std::nullopt;
    for (size_t i = 0; i < t.size(); ++i)
        if (i != 4 && i != 11 && i != 18 && !std::isxdigit(uint8_t(t[i]))) return std::nullopt;
    PingpongDest d;
    d.lid = uint32_t(std::stoul(t.substr(0, 4), nullptr, 16));
    d.qpn = uint32_t(std::stoul(t.substr(5, 6), nullptr, 16));
    d.psn = uint32_t(std::stoul(t.substr(12, 6), nullptr, 16));
    for (size_t i = 0; i < 16; ++i) d.gid[i] = uint8_t(std::stoul(t.substr(19 + i * 2, 2), nullptr, 16));
    return d;
}

// A TCP listener on 127.0.0.1:port. Fd() (errno set) on failure.
inline Fd tcp_listener(uint16_t port) {
    Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const int one = 1;
    const sockaddr_in a = inet(pkt::ipv4(127, 0, 0, 1), port);
    if (!s || ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        ::bind(s.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(s.get(), 1) != 0)
        return Fd();
    return s;
}

// Reads exactly n bytes unless the peer closes or `limit` passes; what was read.
inline std::string read_some(int fd, size_t n, std::chrono::milliseconds limit) {
    std::string got;
    const auto end = std::chrono::steady_clock::now() + limit;
    while (got.size() < n) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
        pollfd p{fd, POLLIN, 0};
        if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0) break;
        char b[128];
        const ssize_t r = ::read(fd, b, std::min(sizeof b, n - got.size()));
        if (r <= 0) break;
        got.append(b, size_t(r));
    }
    return got;
}

// The server's side of the exchange on `listener`: accepts one client, reads its message,
// answers with `self`, reads its "done". The client's destination, or what went wrong.
struct PingpongExchange {
    std::optional<PingpongDest> client;
    std::string raw, error;
};
inline PingpongExchange serve_pingpong_exchange(const Fd& listener, const PingpongDest& self, std::chrono::milliseconds limit) {
    PingpongExchange x;
    pollfd p{listener.get(), POLLIN, 0};
    if (::poll(&p, 1, int(limit.count())) <= 0) {
        x.error = "no client connected within " + std::to_string(limit.count()) + " ms";
        return x;
    }
    Fd c(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!c) {
        x.error = std::string("accept: ") + std::strerror(errno);
        return x;
    }
    x.raw = read_some(c.get(), kPingpongMsg, limit);
    x.client = parse_pingpong_message(x.raw);
    if (x.raw.size() != kPingpongMsg || !x.client) {
        x.error = "the client's message is not LLLL:QQQQQQ:PPPPPP:GID (" + std::to_string(x.raw.size()) + " bytes)";
        return x;
    }
    const std::string m = pingpong_message(self);
    if (::write(c.get(), m.data(), m.size()) != ssize_t(m.size())) {
        x.error = std::string("write: ") + std::strerror(errno);
        return x;
    }
    if (const std::string done = read_some(c.get(), sizeof "done", limit); done != std::string("done", sizeof "done"))
        x.error = "the client did not write \"done\" (" + std::to_string(done.size()) + " bytes)";
    return x;
}

}  // namespace vfab::lab
