// Debian's unmodified rdma_cm programs (rdmacm-utils) on vfab's drop-in librdmacm.so.1 and
// libibverbs.so.1 (docs/cm.md): vfab's connection manager in MADs on its port's QP1, against
// the kernel's rdma_cm on rxe both ways, and against itself. vfab drives 0000:00:02.0 as
// 10.77.0.1; the kernel's rxe has 0000:00:03.0 as 10.77.0.2 (RxePeer, which loads the kernel's
// CM modules too). vfab <-> vfab: the igb pair 00:05.0 / 00:0a.0, each in a process of its own.
#include <gtest/gtest.h>

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
// refuses the REQ: REJECTED, reason 8), up to `tries` times.
PairOutcome run_cm_pair(const std::vector<std::string>& server_args, const std::vector<std::string>& client_args,
                        std::chrono::milliseconds limit, int tries = 20) {
    PairOutcome r;
    Child server(server_args);
    for (int i = 0; i < tries; ++i) {
        std::this_thread::sleep_for(1s);
        r.client = run_program(client_args, limit);
        if (r.client.rc == 0 || (r.client.out + r.client.err).find("REJECTED") == std::string::npos) break;
    }
    r.server = server.wait(limit);
    return r;
}

void expect_both_ok(const PairOutcome& r) {
    EXPECT_EQ(r.server.rc, 0) << "server: " << r.server.summary() << "\nclient: " << r.client.summary();
    EXPECT_EQ(r.client.rc, 0) << "client: " << r.client.summary() << "\nserver: " << r.server.summary();
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

class RdmacmVfab : public ::testing::Test {
protected:
    void SetUp() override {
        if (!in_lab()) GTEST_SKIP() << "needs the lab (scripts/lab)";
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

TEST_F(RdmacmDropin, AConnectionNobodyListensForIsRejected) {
    // The kernel's CM answers a REQ for a port nobody listens on with REJ 8 (invalid service ID).
    const Outcome c = run_program(on_vfab0(rping_client(kRxeIp, "1", "64")), 120s);
    EXPECT_NE(c.rc, 0) << c.summary();
    EXPECT_NE((c.out + c.err).find("RDMA_CM_EVENT_REJECTED, error 8"), std::string::npos) << c.summary();
}

}  // namespace
}  // namespace vfab::lab
