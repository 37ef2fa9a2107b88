// Debian's unmodified ibverbs programs on vfab's drop-in libibverbs.so.1 (docs/verbs.md), with
// no kernel RDMA on vfab's side: vfab drives 0000:00:02.0 through VFIO as 10.77.0.1 (vfab0);
// the kernel's rxe has 0000:00:03.0 as 10.77.0.2 (rxe0, RxePeer). The programs on vfab run with
// vfab-run, the ones on rxe with the system's libibverbs: both are the same Debian binaries.
#include <gtest/gtest.h>

#include <filesystem>

#include "rxe_suite.hpp"

namespace vfab::lab {
namespace {

using namespace std::chrono_literals;

constexpr const char* kVfabNic = "0000:00:02.0";
constexpr const char* kVfabIp = "10.77.0.1";

// vfab-run in the guest: the drop-in library (copied beside it into /vfab/bin) first on the
// library path, vfab0 = 00:02.0 with its address.
std::vector<std::string> on_vfab(std::vector<std::string> args) {
    std::vector<std::string> a = {"/vfab/bin/vfab-run", "--device", std::string(kVfabNic) + "=" + kVfabIp, "--"};
    a.insert(a.end(), args.begin(), args.end());
    return a;
}

class VerbsDropin : public RxeSuite {
protected:
    static void expect_pair(const PairOutcome& r, const std::string& line) {
        EXPECT_EQ(r.server.rc, 0) << "server: " << r.server.summary();
        EXPECT_EQ(r.client.rc, 0) << "client: " << r.client.summary();
        EXPECT_NE(r.server.out.find(line), std::string::npos) << r.server.summary();
        EXPECT_NE(r.client.out.find(line), std::string::npos) << r.client.summary();
    }
};

TEST_F(VerbsDropin, DevicesAreListedAndDescribed) {
    const Outcome list = run_program(on_vfab({"ibv_devices"}), 60s);
    ASSERT_EQ(list.rc, 0) << list.summary();
    EXPECT_NE(list.out.find("vfab0"), std::string::npos) << list.summary();
    EXPECT_EQ(list.out.find("rxe0"), std::string::npos) << "the kernel's device seen through vfab's library:\n" << list.summary();

    const Outcome info = run_program(on_vfab({"ibv_devinfo", "-v", "-d", "vfab0"}), 60s);
    ASSERT_EQ(info.rc, 0) << info.summary();
    std::printf("%s\n%s\n", list.summary().c_str(), info.summary().c_str());
    for (const char* want : {"PORT_ACTIVE", "Ethernet", "::ffff:10.77.0.1", "RoCE v2", "active_mtu:\t\t1024"})
        EXPECT_NE(info.out.find(want), std::string::npos) << want << "\n" << info.summary();
}

TEST_F(VerbsDropin, RcPingpongWithRxeBothRoles) {
    for (const char* size : {"1", "4096", "20000"}) {
        SCOPED_TRACE(size);
        auto r = run_server_client(on_vfab({"ibv_rc_pingpong", "-d", "vfab0", "-g", "0", "-n", "100", "-s", size}),
                                   {"ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-n", "100", "-s", size, "127.0.0.1"}, 120s);
        expect_pair(r, "100 iters in");
        std::printf("%s\n%s\n", r.server.summary().c_str(), r.client.summary().c_str());
        r = run_server_client({"ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-n", "100", "-s", size},
                              on_vfab({"ibv_rc_pingpong", "-d", "vfab0", "-g", "0", "-n", "100", "-s", size, "127.0.0.1"}), 120s);
        expect_pair(r, "100 iters in");
    }
}

TEST_F(VerbsDropin, RcPingpongWithEventsWithRxe) {
    auto r = run_server_client(on_vfab({"ibv_rc_pingpong", "-d", "vfab0", "-g", "0", "-n", "100", "-e"}),
                               {"ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-n", "100", "-e", "127.0.0.1"}, 120s);
    expect_pair(r, "100 iters in");
}

TEST_F(VerbsDropin, UdPingpongWithRxeBothRoles) {
    auto r = run_server_client(on_vfab({"ibv_ud_pingpong", "-d", "vfab0", "-g", "0", "-n", "100", "-s", "1000"}),
                               {"ibv_ud_pingpong", "-d", "rxe0", "-g", "1", "-n", "100", "-s", "1000", "127.0.0.1"}, 120s);
    expect_pair(r, "100 iters in");
    r = run_server_client({"ibv_ud_pingpong", "-d", "rxe0", "-g", "1", "-n", "100", "-s", "1000"},
                          on_vfab({"ibv_ud_pingpong", "-d", "vfab0", "-g", "0", "-n", "100", "-s", "1000", "127.0.0.1"}), 120s);
    expect_pair(r, "100 iters in");
}

TEST_F(VerbsDropin, SrqPingpongWithRxeBothRoles) {
    auto r = run_server_client(on_vfab({"ibv_srq_pingpong", "-d", "vfab0", "-g", "0", "-n", "200"}),
                               {"ibv_srq_pingpong", "-d", "rxe0", "-g", "1", "-n", "200", "127.0.0.1"}, 120s);
    expect_pair(r, "200 iters in");
    r = run_server_client({"ibv_srq_pingpong", "-d", "rxe0", "-g", "1", "-n", "200"},
                          on_vfab({"ibv_srq_pingpong", "-d", "vfab0", "-g", "0", "-n", "200", "127.0.0.1"}), 120s);
    expect_pair(r, "200 iters in");
}

// ---- perftest 4.5 ---------------------------------------------------------------------------------

struct Perf {
    const char* tool;
    std::vector<std::string> args;
};

class VerbsPerftest : public VerbsDropin, public ::testing::WithParamInterface<Perf> {};

// One run each way: vfab as server with rxe as client, then the reverse. perftest's TCP side
// channel is port 18515; -x names the GID (vfab's 0, rxe's 1); few iterations (TCG).
TEST_P(VerbsPerftest, WithRxeBothRoles) {
    const Perf& p = GetParam();
    auto cmd = [&](const char* dev, const char* gid, bool client) {
        std::vector<std::string> a = {p.tool, "-d", dev, "-x", gid, "-F"};
        a.insert(a.end(), p.args.begin(), p.args.end());
        if (client) a.push_back("127.0.0.1");
        return a;
    };
    auto r = run_server_client(on_vfab(cmd("vfab0", "0", false)), cmd("rxe0", "1", true), 180s);
    EXPECT_EQ(r.server.rc, 0) << "vfab server: " << r.server.summary() << "\nrxe client: " << r.client.summary();
    EXPECT_EQ(r.client.rc, 0) << "rxe client: " << r.client.summary() << "\nvfab server: " << r.server.summary();
    std::printf("%s\n", r.client.out.c_str());
    r = run_server_client(cmd("rxe0", "1", false), on_vfab(cmd("vfab0", "0", true)), 180s);
    EXPECT_EQ(r.server.rc, 0) << "rxe server: " << r.server.summary() << "\nvfab client: " << r.client.summary();
    EXPECT_EQ(r.client.rc, 0) << "vfab client: " << r.client.summary() << "\nrxe server: " << r.server.summary();
    std::printf("%s\n", r.client.out.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Perftest, VerbsPerftest,
    ::testing::Values(Perf{"ib_write_bw", {"-n", "200"}}, Perf{"ib_write_bw", {"-n", "200", "--use_old_post_send"}},
                      Perf{"ib_write_lat", {"-n", "200"}}, Perf{"ib_read_bw", {"-n", "200"}},
                      Perf{"ib_read_lat", {"-n", "200"}}, Perf{"ib_send_bw", {"-n", "200"}},
                      Perf{"ib_send_lat", {"-n", "200"}}, Perf{"ib_send_bw", {"-n", "200", "-c", "UD"}},
                      Perf{"ib_send_lat", {"-n", "200", "-c", "UD"}}, Perf{"ib_atomic_bw", {"-n", "200"}},
                      Perf{"ib_atomic_lat", {"-n", "200"}}, Perf{"ib_read_lat", {"-n", "200", "--use_old_post_send"}}));

}  // namespace
}  // namespace vfab::lab
