// Debian's unmodified rdma_cm programs (rdmacm-utils) on vfab's drop-in librdmacm.so.1 and
// libibverbs.so.1 (docs/cm.md): vfab's connection manager in MADs on its port's QP1, against
// the kernel's rdma_cm on rxe both ways, and against itself. vfab drives 0000:00:02.0 as
// 10.77.0.1; the kernel's rxe has 0000:00:03.0 as 10.77.0.2 (RxePeer, which loads the kernel's
// CM modules too). vfab <-> vfab: the igb pair 00:05.0 / 00:0a.0, each in a process of its own.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <csignal>
#include <iostream>
#include <thread>

#include "rxe_suite.hpp"

namespace vfab::lab {
namespace {

using namespace std::chrono_literals;

constexpr const char* kVfabIp = "10.77.0.1";
constexpr const char* kRxeIp = "10.77.0.2";

std::vector<std::string> on_vfab(const std::string& device, std::vector<std::string> args) {
    // VFAB_RDMACM_DEBUG: the CM's events and the QPs' transitions on stderr, shown on a failure.
    std::vector<std::string> a = {"env", "VFAB_RDMACM_DEBUG=1", "/vfab/bin/vfab-run", "--device", device, "--"};
    a.insert(a.end(), args.begin(), args.end());
    return a;
}
std::vector<std::string> on_vfab0(std::vector<std::string> args) { return on_vfab(std::string("0000:00:02.0=") + kVfabIp, std::move(args)); }

// The server first; the client again while the server is not listening yet (the peer's CM
// refuses the REQ: REJECTED, reason 8, which perftest names by number), up to `tries` times.
PairOutcome run_cm_pair(const std::vector<std::string>& server_args, const std::vector<std::string>& client_args,
                        std::chrono::milliseconds limit, int tries = 20) {
    return run_until_listening(server_args, client_args, limit, {"REJECTED", "Unexpected CM event", "Connection refused"}, tries);
}

std::vector<std::string> rping_server(const std::string& ip, const std::string& count, const std::string& size) {
    return {"rping", "-s", "-a", ip, "-p", "7471", "-C", count, "-S", size, "-V"};
}
std::vector<std::string> rping_client(const std::string& ip, const std::string& count, const std::string& size) {
    return {"rping", "-c", "-a", ip, "-p", "7471", "-C", count, "-S", size, "-V", "-v"};
}

// rping -v prints each ping's data ("ping data: rdma-ping-<n>: ...") on the client.
void expect_pings(const Outcome& client, int count) {
    const std::string last = "rdma-ping-" + std::to_string(count - 1) + ":";
    EXPECT_NE(client.out.find(last), std::string::npos) << client.summary();
}

// ---- vfab <-> vfab (no kernel RDMA) ------------------------------------------------------------

constexpr const char* kPairA = "0000:00:05.0=10.78.0.1";
constexpr const char* kPairB = "0000:00:0a.0=10.78.0.2";

// These run with no kernel RDMA code at all: none of the kernel's RDMA modules is loaded (an
// earlier suite's are taken out first), so there is no kernel RDMA device and no device file in
// /dev/infiniband (the directory itself stays: vfab's devices name their VFIO files from it).
class RdmacmVfab : public ::testing::Test {
protected:
    void SetUp() override {
        if (!in_lab()) GTEST_SKIP() << "needs the lab (scripts/lab)";
        const auto& mods = rxe_modules();
        for (auto m = mods.rbegin(); m != mods.rend(); ++m)
            if (std::filesystem::exists("/sys/module/" + *m + "/refcnt")) (void)run_program({"rmmod", *m}, 30s);
        ASSERT_FALSE(std::filesystem::exists("/sys/module/ib_core")) << "the kernel's RDMA core is loaded";
        std::error_code ec;
        ASSERT_TRUE(!std::filesystem::exists("/dev/infiniband") || std::filesystem::is_empty("/dev/infiniband", ec))
            << "kernel RDMA device files exist";
    }
};

TEST_F(RdmacmVfab, RpingBetweenTwoProcessesWithDataChecked) {
    const auto r = run_cm_pair(on_vfab(kPairA, rping_server("10.78.0.1", "20", "1000")),
                               on_vfab(kPairB, rping_client("10.78.0.1", "20", "1000")), 180s);
    expect_both_ok(r);
    expect_pings(r.client, 20);
}

// ucmatose (several RC connections at once), udaddy (UD, the peer's QP found through SIDR) and
// rdma_server / rdma_client (rdma_getaddrinfo, rdma_create_ep, synchronous ids, rdma_post_*).
TEST_F(RdmacmVfab, UcmatoseUdaddyAndRdmaServerBetweenTwoProcesses) {
    auto r = run_cm_pair(on_vfab(kPairA, {"ucmatose", "-b", "10.78.0.1", "-c", "4", "-C", "20"}),
                         on_vfab(kPairB, {"ucmatose", "-s", "10.78.0.1", "-c", "4", "-C", "20"}), 180s);
    expect_both_ok(r);
    r = run_cm_pair(on_vfab(kPairA, {"udaddy", "-b", "10.78.0.1", "-c", "2", "-C", "20"}),
                    on_vfab(kPairB, {"udaddy", "-s", "10.78.0.1", "-c", "2", "-C", "20"}), 180s);
    expect_both_ok(r);
    r = run_cm_pair(on_vfab(kPairA, {"rdma_server", "-p", "7472"}), on_vfab(kPairB, {"rdma_client", "-s", "10.78.0.1", "-p", "7472"}), 180s);
    expect_both_ok(r);
}

// rdma_xserver / rdma_xclient with XRC (-c x): the REQ's transport type XRC, the request's id an
// XRC receiver with an XRC SRQ (rdma_create_srq) whose number goes back in the REP's private
// data; the client's XRC send names it (rxe has no XRC: vfab with itself only).
TEST_F(RdmacmVfab, XrcThroughRdmaCmBetweenTwoProcesses) {
    const auto r = run_cm_pair(on_vfab(kPairA, {"rdma_xserver", "-c", "x", "-p", "7475"}),
                               on_vfab(kPairB, {"rdma_xclient", "-c", "x", "-s", "10.78.0.1", "-p", "7475"}), 180s);
    expect_both_ok(r);
    EXPECT_NE(r.client.out.find("rdma_xclient: end 0"), std::string::npos) << r.client.summary();
    EXPECT_NE(r.server.out.find("rdma_xserver: end 0"), std::string::npos) << r.server.summary();
}

// rstream (rsockets): the 16-byte sync, then 50 messages of 4000 bytes each way twice, every byte
// checked (-T v); again with 8 KiB socket buffers (16 KiB receive buffers: a new half given back
// every 8 KiB) and 1000-byte messages. Nonblocking, spinning (rstream's default).
std::vector<std::string> rstream(const std::string& role, const std::string& ip, std::vector<std::string> more = {}) {
    std::vector<std::string> a = {"rstream", "-f", "ip", role, ip, "-T", "v"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
}
const std::vector<std::string> kRstreamPlain = {"-S", "4000", "-C", "50", "-I", "2"};
const std::vector<std::string> kRstreamSmallBuffers = {"-S", "1000", "-C", "200", "-I", "2", "-B", "8192"};

TEST_F(RdmacmVfab, RstreamBetweenTwoProcesses) {
    for (const auto& opts : {kRstreamPlain, kRstreamSmallBuffers}) {
        const auto r = run_cm_pair(on_vfab(kPairA, rstream("-b", "10.78.0.1", opts)), on_vfab(kPairB, rstream("-s", "10.78.0.1", opts)), 180s);
        expect_both_ok(r);
    }
}

// ---- against the kernel's rdma_cm on rxe ---------------------------------------------------------

class RdmacmDropin : public RxeSuite {};

TEST_F(RdmacmDropin, RpingWithRxeBothRoles) {
    for (const char* size : {"64", "4000"}) {
        SCOPED_TRACE(size);
        auto r = run_cm_pair(on_vfab0(rping_server(kVfabIp, "10", size)), rping_client(kVfabIp, "10", size), 180s);
        expect_both_ok(r);
        expect_pings(r.client, 10);
        r = run_cm_pair(rping_server(kRxeIp, "10", size), on_vfab0(rping_client(kRxeIp, "10", size)), 180s);
        expect_both_ok(r);
        expect_pings(r.client, 10);
    }
}

TEST_F(RdmacmDropin, UcmatoseSeveralConnectionsWithRxeBothRoles) {
    auto r = run_cm_pair(on_vfab0({"ucmatose", "-b", kVfabIp, "-c", "4", "-C", "20"}), {"ucmatose", "-s", kVfabIp, "-c", "4", "-C", "20"}, 180s);
    expect_both_ok(r);
    r = run_cm_pair({"ucmatose", "-b", kRxeIp, "-c", "4", "-C", "20"}, on_vfab0({"ucmatose", "-s", kRxeIp, "-c", "4", "-C", "20"}), 180s);
    expect_both_ok(r);
}

TEST_F(RdmacmDropin, UdaddyThroughSidrWithRxeBothRoles) {
    auto r = run_cm_pair(on_vfab0({"udaddy", "-b", kVfabIp, "-c", "2", "-C", "20"}), {"udaddy", "-s", kVfabIp, "-c", "2", "-C", "20"}, 180s);
    expect_both_ok(r);
    r = run_cm_pair({"udaddy", "-b", kRxeIp, "-c", "2", "-C", "20"}, on_vfab0({"udaddy", "-s", kRxeIp, "-c", "2", "-C", "20"}), 180s);
    expect_both_ok(r);
}

TEST_F(RdmacmDropin, RdmaServerAndClientWithRxeBothRoles) {
    auto r = run_cm_pair(on_vfab0({"rdma_server", "-s", kVfabIp, "-p", "7472"}), {"rdma_client", "-s", kVfabIp, "-p", "7472"}, 180s);
    expect_both_ok(r);
    r = run_cm_pair({"rdma_server", "-s", kRxeIp, "-p", "7472"}, on_vfab0({"rdma_client", "-s", kRxeIp, "-p", "7472"}), 180s);
    expect_both_ok(r);
}

// perftest's tools connected through rdma_cm (-R) instead of their TCP side channel.
TEST_F(RdmacmDropin, PerftestThroughRdmaCmWithRxeBothRoles) {
    for (const char* tool : {"ib_send_bw", "ib_write_lat", "ib_read_bw"}) {
        SCOPED_TRACE(tool);
        // -F: no CPU frequency check (perftest's clock estimate fails under the emulator).
        auto r = run_cm_pair(on_vfab0({tool, "-d", "vfab0", "-R", "-F", "-n", "200"}), {tool, "-d", "rxe0", "-R", "-F", "-n", "200", kVfabIp}, 120s, 5);
        expect_both_ok(r);
        r = run_cm_pair({tool, "-d", "rxe0", "-R", "-F", "-n", "200"}, on_vfab0({tool, "-d", "vfab0", "-R", "-F", "-n", "200", kRxeIp}), 120s, 5);
        expect_both_ok(r);
    }
}

// The kernel's rdma_cm ids left (iproute2's `rdma resource show cm_id`), listeners included.
std::string kernel_cm_ids() {
    const Outcome r = run_program({"/usr/bin/rdma", "resource", "show", "cm_id"}, 30s);
    return r.out;
}

// cmtime: 100 connections set up and torn down at once, each step timed (its server serves until
// killed); both roles. Nothing is left behind on the kernel's side.
TEST_F(RdmacmDropin, CmtimeHundredConnectionsLeaveNothingBehind) {
    auto hundred = [](std::vector<std::string> server, std::vector<std::string> client) {
        Child s(server);
        Outcome c;
        for (int i = 0; i < 20; ++i) {
            std::this_thread::sleep_for(1s);
            c = run_program(client, 180s);
            if (c.rc == 0 || (c.out + c.err).find("REJECTED") == std::string::npos) break;
        }
        EXPECT_EQ(c.rc, 0) << c.summary();
        EXPECT_NE(c.out.find("disconnect"), std::string::npos) << c.summary();
        std::cerr << c.out;   // the steps' times, for the log
        ::kill(s.pid(), SIGKILL);
        (void)s.wait(10s);
    };
    hundred(on_vfab0({"cmtime", "-b", kVfabIp, "-c", "100"}), {"cmtime", "-s", kVfabIp, "-c", "100"});
    hundred({"cmtime", "-b", kRxeIp, "-c", "100"}, on_vfab0({"cmtime", "-s", kRxeIp, "-c", "100"}));
    std::this_thread::sleep_for(2s);
    EXPECT_EQ(kernel_cm_ids().find("src-addr"), std::string::npos) << kernel_cm_ids();
}

// A vfab listener (rping -P, a thread per connection) hears a killed client's disconnect and
// serves the next one; killed and started again, it serves again (same QP numbers, same CA GUID:
// the kernel must not take it for a stale connection).
TEST_F(RdmacmDropin, AKilledClientAndARestartedListener) {
    const auto server = on_vfab0({"rping", "-s", "-P", "-a", kVfabIp, "-p", "7473", "-V"});
    const std::vector<std::string> client = {"rping", "-c", "-a", kVfabIp, "-p", "7473", "-C", "5", "-V"};
    auto connect_ok = [&] {
        Outcome c;
        for (int i = 0; i < 20; ++i) {
            std::this_thread::sleep_for(1s);
            c = run_program(client, 120s);
            if (c.rc == 0 || (c.out + c.err).find("REJECTED") == std::string::npos) break;
        }
        EXPECT_EQ(c.rc, 0) << c.summary();
    };
    {
        Child s(server);
        connect_ok();
        Child endless({"rping", "-c", "-a", kVfabIp, "-p", "7473", "-C", "100000", "-V"});
        std::this_thread::sleep_for(3s);
        ::kill(endless.pid(), SIGKILL);
        (void)endless.wait(10s);
        connect_ok();
        ::kill(s.pid(), SIGKILL);
        (void)s.wait(10s);
    }
    Child again(server);
    connect_ok();
    ::kill(again.pid(), SIGKILL);
    (void)again.wait(10s);
}

// mckey: UD multicast through rdma_cm (the group joined with rdma_join_multicast, its address
// vector from the MULTICAST_JOIN event), the receiver first; vfab sends to rxe's receiver, then
// the other way.
TEST_F(RdmacmDropin, MckeyMulticastWithRxeBothWays) {
    auto send_to = [](std::vector<std::string> receiver, std::vector<std::string> sender) {
        Child r(receiver);
        Outcome s;
        for (int i = 0; i < 10 && r.started(); ++i) {   // until the receiver has joined and heard them
            std::this_thread::sleep_for(2s);
            s = run_program(sender, 60s);
            if (::waitpid(r.pid(), nullptr, WNOHANG) != 0) break;
        }
        const Outcome got = r.wait(10s);
        EXPECT_EQ(s.rc, 0) << "sender: " << s.summary();
        EXPECT_NE(got.out.find("receiving data transfers"), std::string::npos) << "receiver: " << got.summary();
        EXPECT_NE(got.out.find("data transfers complete"), std::string::npos) << "receiver: " << got.summary();
    };
    send_to({"mckey", "-m", "239.1.1.1", "-b", kRxeIp, "-C", "5"}, on_vfab0({"mckey", "-m", "239.1.1.1", "-s", "-b", kVfabIp, "-C", "5"}));
    send_to(on_vfab0({"mckey", "-m", "239.1.1.2", "-b", kVfabIp, "-C", "5"}), {"mckey", "-m", "239.1.1.2", "-s", "-b", kRxeIp, "-C", "5"});
}

// The kernel's RC queue pairs (iproute2's `rdma resource show qp`, lines of "type RC").
int kernel_rc_qps() {
    const Outcome r = run_program({"/usr/bin/rdma", "resource", "show", "qp"}, 30s);
    int n = 0;
    for (size_t at = 0; (at = r.out.find("type RC", at)) != std::string::npos; ++at) ++n;
    return n;
}

// kernel_rc_qps() once it is `want`, looked at every 100 ms up to `tries` times (a connection's
// set-up or teardown); what it is then.
int kernel_rc_qps_once(int want, int tries) {
    int n = kernel_rc_qps();
    for (int i = 0; i < tries && n != want; ++i) {
        std::this_thread::sleep_for(100ms);
        n = kernel_rc_qps();
    }
    return n;
}

// A client program run again, a second apart, until the kernel's listener is up (up to 20 times).
Outcome client_once_listening(const std::vector<std::string>& client) {
    Outcome c;
    for (int i = 0; i < 20; ++i) {
        std::this_thread::sleep_for(1s);
        c = run_program(client, 60s);
        if (c.rc == 0) break;
    }
    return c;
}

// 100 vfab client processes one after another against one kernel listener (rping -P, a thread
// and a QP per connection), each connecting as soon as the last has gone: the kernel refuses
// none as stale (each process's CM has a CA GUID of its own; its QP numbers are new), and each
// one's DREQ leaves before it exits, so the kernel tears down every connection: nothing is left.
TEST_F(RdmacmDropin, HundredClientProcessesOneAfterAnotherLeaveNothingBehind) {
    Child server({"rping", "-s", "-P", "-a", kRxeIp, "-p", "7474", "-V"});
    const auto client = on_vfab0({"rping", "-c", "-a", kRxeIp, "-p", "7474", "-C", "1", "-V"});
    Outcome c = client_once_listening(client);
    ASSERT_EQ(c.rc, 0) << c.summary();
    int failed = 0;
    for (int i = 1; i < 100 && failed < 3; ++i) {
        c = run_program(client, 60s);
        EXPECT_EQ(c.rc, 0) << i << ": " << c.summary();
        failed += c.rc != 0;
    }
    EXPECT_EQ(kernel_rc_qps_once(0, 50), 0) << "the kernel still has connections of exited vfab clients";
    ::kill(server.pid(), SIGKILL);
    (void)server.wait(10s);
}

// With netem losing 15% of what the kernel sends (its MADs among them: a REP, an RTU, a DREP
// lost), connections still come up and go down: vfab's CM sends its REQ (or REP, DREQ) again on
// its timer and answers the kernel's repeated messages; the kernel does the same the other way.
TEST_F(RdmacmDropin, ConnectionsThroughALossyLinkBothRoles) {
    ASSERT_EQ(run_program({"modprobe", "sch_netem"}).rc, 0);
    const Outcome tc = run_program({"/usr/bin/tc", "qdisc", "add", "dev", peer_->ifname(), "root", "netem", "loss", "15%"});
    ASSERT_EQ(tc.rc, 0) << tc.summary();
    auto r = run_cm_pair(on_vfab0({"ucmatose", "-b", kVfabIp, "-c", "4", "-C", "10"}), {"ucmatose", "-s", kVfabIp, "-c", "4", "-C", "10"}, 240s);
    expect_both_ok(r);
    r = run_cm_pair({"ucmatose", "-b", kRxeIp, "-c", "4", "-C", "10"}, on_vfab0({"ucmatose", "-s", kRxeIp, "-c", "4", "-C", "10"}), 240s);
    expect_both_ok(r);
    (void)run_program({"/usr/bin/tc", "qdisc", "del", "dev", peer_->ifname(), "root"});
}

// A vfab client killed mid-run sends no DREQ: the kernel's listener keeps the connection (its
// QP) while it waits to receive. The next vfab process on the device finds the connection in the
// port's ledger and disconnects it: the kernel tears it down.
TEST_F(RdmacmDropin, AKilledVfabClientsConnectionIsEndedByTheNextProcess) {
    Child server({"rping", "-s", "-P", "-a", kRxeIp, "-p", "7476", "-V"});
    const auto client = on_vfab0({"rping", "-c", "-a", kRxeIp, "-p", "7476", "-C", "1", "-V"});
    Outcome c = client_once_listening(client);
    ASSERT_EQ(c.rc, 0) << c.summary();
    Child forever(on_vfab0({"rping", "-c", "-a", kRxeIp, "-p", "7476", "-C", "1000000", "-V"}));
    ASSERT_EQ(kernel_rc_qps_once(1, 100), 1) << "the long client connected";
    ::kill(forever.pid(), SIGKILL);
    (void)forever.wait(10s);
    std::this_thread::sleep_for(2s);
    EXPECT_EQ(kernel_rc_qps(), 1) << "nothing told the kernel yet";
    c = run_program(client, 60s);   // opens the device: the ledger's connection is disconnected
    EXPECT_EQ(c.rc, 0) << c.summary();
    EXPECT_EQ(kernel_rc_qps_once(0, 50), 0) << "the killed client's connection is still on the kernel";
    ::kill(server.pid(), SIGKILL);
    (void)server.wait(10s);
}

// rstream between vfab's rsockets and Debian's (librdmacm1 over the kernel's rdma_cm), both roles.
TEST_F(RdmacmDropin, RstreamWithRxeBothRoles) {
    for (const auto& opts : {kRstreamPlain, kRstreamSmallBuffers}) {
        auto r = run_cm_pair(on_vfab0(rstream("-b", kVfabIp, opts)), rstream("-s", kVfabIp, opts), 180s);
        expect_both_ok(r);
        r = run_cm_pair(rstream("-b", kRxeIp, opts), on_vfab0(rstream("-s", kRxeIp, opts)), 180s);
        expect_both_ok(r);
    }
}

// librspreload (Debian's librdmacm1) makes a TCP program's sockets rsockets: rstream in its plain
// socket mode (-T s: socket, bind, listen, accept, connect, fcntl, send, recv, poll), unmodified,
// under LD_PRELOAD on vfab (whose rsockets are vfab's librdmacm) and on the kernel's side. It
// can only be RDMA: vfab's address is no kernel interface's, so a fallback to TCP fails.
TEST_F(RdmacmDropin, PreloadMovesATcpProgramOntoRsocketsBothRoles) {
    const std::string preload = "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so";
    auto tcp = [&](const std::string& role, const std::string& ip) {
        std::vector<std::string> a = {"env", preload, "rstream", "-T", "s", "-f", "ip", role, ip, "-T", "v"};
        a.insert(a.end(), kRstreamPlain.begin(), kRstreamPlain.end());
        return a;
    };
    auto r = run_cm_pair(on_vfab0(tcp("-b", kVfabIp)), tcp("-s", kVfabIp), 180s);
    expect_both_ok(r);
    EXPECT_NE(r.client.out.find("custom"), std::string::npos) << r.client.summary();
    r = run_cm_pair(tcp("-b", kRxeIp), on_vfab0(tcp("-s", kRxeIp)), 180s);
    expect_both_ok(r);
    EXPECT_NE(r.client.out.find("custom"), std::string::npos) << r.client.summary();
}

TEST_F(RdmacmDropin, AConnectionNobodyListensForIsRejected) {
    // The kernel's CM answers a REQ for a port nobody listens on with REJ 8 (invalid service ID).
    const Outcome c = run_program(on_vfab0(rping_client(kRxeIp, "1", "64")), 120s);
    EXPECT_NE(c.rc, 0) << c.summary();
    EXPECT_NE((c.out + c.err).find("RDMA_CM_EVENT_REJECTED, error 8"), std::string::npos) << c.summary();
}

}  // namespace
}  // namespace vfab::lab
