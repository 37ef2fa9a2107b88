// Debian's unmodified ibverbs programs on vfab's drop-in libibverbs.so.1 (docs/verbs.md), with
// no kernel RDMA on vfab's side: vfab drives 0000:00:02.0 through VFIO as 10.77.0.1 (vfab0);
// the kernel's rxe has 0000:00:03.0 as 10.77.0.2 (rxe0, RxePeer). The programs on vfab run with
// vfab-run, the ones on rxe with the system's libibverbs: both are the same Debian binaries.
#include <grp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "leak_check.hpp"
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

// ---- vfab <-> vfab, and what a program meets around it (no kernel RDMA anywhere) ----------------
// The igb pair (00:05.0 and 00:0a.0, on QEMU's hub 2) as vfab0 and vfab1. These run before the
// rxe tests below, so that the kernel's RDMA modules are not loaded yet.

constexpr const char* kPairDevices = "0000:00:05.0=10.78.0.1,0000:00:0a.0=10.78.0.2";

std::vector<std::string> on_vfab_pair(std::vector<std::string> args) {
    std::vector<std::string> a = {"/vfab/bin/vfab-run", "--device", kPairDevices, "--"};
    a.insert(a.end(), args.begin(), args.end());
    return a;
}

bool kernel_rdma_loaded() {
    for (const char* m : {"ib_core", "ib_uverbs", "rdma_rxe"})
        if (module_loaded(m)) return true;
    return false;
}

class VerbsVfab : public ::testing::Test {
protected:
    void SetUp() override {
        if (!in_lab()) GTEST_SKIP() << "needs the lab (scripts/lab)";
        const auto lo = set_link_up("lo", true);   // the tools' TCP side channel
        ASSERT_TRUE(lo) << std::strerror(errno);
        lo_was_up_ = *lo;
    }
    void TearDown() override {
        if (!lo_was_up_) (void)set_link_up("lo", false);
    }
    bool lo_was_up_ = true;
};

TEST_F(VerbsVfab, PingpongsLeaveNoKernelRdmaLoaded) {
    const bool before = kernel_rdma_loaded();
    for (const char* size : {"1", "4096", "20000"}) {
        SCOPED_TRACE(size);
        expect_pair(run_server_client(on_vfab_pair({"ibv_rc_pingpong", "-d", "vfab0", "-g", "0", "-n", "100", "-s", size}),
                                      on_vfab_pair({"ibv_rc_pingpong", "-d", "vfab1", "-g", "0", "-n", "100", "-s", size, "127.0.0.1"}),
                                      120s),
                    "100 iters in");
    }
    expect_pair(run_server_client(on_vfab_pair({"ibv_rc_pingpong", "-d", "vfab0", "-g", "0", "-n", "100", "-e"}),
                                  on_vfab_pair({"ibv_rc_pingpong", "-d", "vfab1", "-g", "0", "-n", "100", "-e", "127.0.0.1"}), 120s),
                "100 iters in");
    expect_pair(run_server_client(on_vfab_pair({"ibv_uc_pingpong", "-d", "vfab0", "-g", "0", "-n", "100", "-s", "4096"}),
                                  on_vfab_pair({"ibv_uc_pingpong", "-d", "vfab1", "-g", "0", "-n", "100", "-s", "4096", "127.0.0.1"}),
                                  120s),
                "100 iters in");
    expect_pair(run_server_client(on_vfab_pair({"ibv_ud_pingpong", "-d", "vfab0", "-g", "0", "-n", "100", "-s", "1000"}),
                                  on_vfab_pair({"ibv_ud_pingpong", "-d", "vfab1", "-g", "0", "-n", "100", "-s", "1000", "127.0.0.1"}),
                                  120s),
                "100 iters in");
    expect_pair(run_server_client(on_vfab_pair({"ibv_srq_pingpong", "-d", "vfab0", "-g", "0", "-n", "200"}),
                                  on_vfab_pair({"ibv_srq_pingpong", "-d", "vfab1", "-g", "0", "-n", "200", "127.0.0.1"}), 120s),
                "200 iters in");
    const Outcome info = run_program(on_vfab_pair({"ibv_devinfo", "-d", "vfab1"}), 60s);
    EXPECT_EQ(info.rc, 0) << info.summary();
    if (!before) EXPECT_FALSE(kernel_rdma_loaded()) << "a kernel RDMA module was loaded while only vfab ran";
    else GTEST_LOG_(INFO) << "the kernel's RDMA modules were loaded before this test: not checked";
}

TEST_F(VerbsVfab, XsrqPingpong) {
    expect_pair(run_server_client(on_vfab_pair({"ibv_xsrq_pingpong", "-d", "vfab0", "-g", "0", "-n", "100"}),
                                  on_vfab_pair({"ibv_xsrq_pingpong", "-d", "vfab1", "-g", "0", "-n", "100", "127.0.0.1"}), 120s),
                "success");
}

// dlopen'ed as UCX does, two contexts of one device in one process, two of its queue pairs
// connected to each other (loopback), rdma-core's errnos for bad input, asynchronous events on
// the context that owns their object, and ibv_create_ah waiting for ARP: to vfab1, and to an
// address no one has (EHOSTUNREACH after ARP's attempts).
TEST_F(VerbsVfab, DlopenLoopbackAndBadInput) {
    const Outcome r = run_program(on_vfab_pair({"/vfab/bin/verbs_dlopen_probe", "vfab0", "vfab1"}), 60s);
    EXPECT_EQ(r.rc, 0) << r.summary();
    EXPECT_NE(r.out.find("loopback ok"), std::string::npos) << r.summary();
    EXPECT_NE(r.out.find("errors ok"), std::string::npos) << r.summary();
    EXPECT_NE(r.out.find("open_qp ok"), std::string::npos) << r.summary();
    EXPECT_NE(r.out.find("events ok"), std::string::npos) << r.summary();
    EXPECT_NE(r.out.find("ah ok"), std::string::npos) << r.summary();
}

// A user who may open no VFIO group sees no device, and the tools say so as on a machine with
// no RDMA device.
TEST_F(VerbsVfab, NoDeviceForAUserWithoutVfioAccess) {
    const Outcome r = run_program(on_vfab_pair({"ibv_devinfo"}), 60s, [] {
        return ::setgroups(0, nullptr) == 0 && ::setgid(65534) == 0 && ::setuid(65534) == 0;
    });
    EXPECT_NE(r.rc, 0) << r.summary();
    EXPECT_NE(r.err.find("No IB devices found"), std::string::npos) << r.summary();
}

// A device another process holds: one clear line on stderr, and the holder unharmed.
TEST_F(VerbsVfab, ADeviceAnotherProcessHoldsIsRefusedClearly) {
    Child server(on_vfab_pair({"ibv_rc_pingpong", "-d", "vfab0", "-g", "0", "-n", "50"}));
    ASSERT_TRUE(wait_for([] { return tcp_listening(kPingpongPort); }, 30s)) << server.wait(0ms).summary();
    const Outcome busy = run_program(on_vfab_pair({"ibv_devinfo", "-d", "vfab0"}), 60s);
    EXPECT_NE(busy.rc, 0) << busy.summary();
    EXPECT_NE(busy.err.find("vfab verbs: vfab0:"), std::string::npos) << busy.summary();
    EXPECT_NE(busy.err.find("busy"), std::string::npos) << busy.summary();
    EXPECT_EQ(own_lines(busy.err).size(), 2u) << "vfab's line and the tool's own: " << busy.summary();
    const Outcome client = run_program(on_vfab_pair({"ibv_rc_pingpong", "-d", "vfab1", "-g", "0", "-n", "50", "127.0.0.1"}), 60s);
    const Outcome held = server.wait(60s);
    EXPECT_EQ(client.rc, 0) << client.summary();
    EXPECT_EQ(held.rc, 0) << held.summary();
}

// perftest's raw Ethernet tools between vfab0 and vfab1 (the lab's rxe has no raw-packet queue
// pairs): IBV_QPT_RAW_PACKET queue pairs, frames steered to them by ibv_create_flow (the
// destination MAC), both directions in the latency test.
TEST_F(VerbsVfab, RawEthernetPerftest) {
    for (const char* tool : {"raw_ethernet_bw", "raw_ethernet_lat"}) {
        SCOPED_TRACE(tool);
        const bool bw = std::string(tool) == "raw_ethernet_bw";
        // No TCP side channel: the server takes frames once its flow exists, a few hundred ms
        // after it opened the device; the client starts 3 s after that. The bandwidth client
        // sends more frames than the server counts, so early ones lost would not matter.
        Child server(on_vfab_pair({tool, "-d", "vfab0", "-B", "52:54:00:00:00:05", "-E", "52:54:00:00:00:0a", "--server", "-F",
                                   "-n", "1000"}));
        ASSERT_TRUE(wait_for([&] { return holds_vfio(server.pid()); }, 60s)) << server.wait(0ms).summary();
        std::this_thread::sleep_for(3s);
        PairOutcome r;
        r.client = run_program(on_vfab_pair({tool, "-d", "vfab1", "-B", "52:54:00:00:00:0a", "-E", "52:54:00:00:00:05",
                                             "--client", "-F", "-n", bw ? "3000" : "1000"}),
                               150s);
        r.server = server.wait(150s);
        expect_pair(r, "#bytes");
    }
}

// rdma-core's ibv_asyncwatch hears the port go down and up when QEMU takes vfab0's link (igb
// 00:05.0, QEMU's p4) down and up: IBV_EVENT_PORT_ERR, then IBV_EVENT_PORT_ACTIVE.
TEST_F(VerbsVfab, AsyncwatchHearsTheLinkGoDownAndUp) {
    Child watch(on_vfab_pair({"ibv_asyncwatch", "-d", "vfab0"}));
    auto heard = [&](const char* what) {
        return wait_for([&] { return watch.output_so_far().find(what) != std::string::npos; }, 30s);
    };
    ASSERT_TRUE(heard("async event FD")) << watch.wait(0ms).summary();
    ask_set_link("p4", false);
    const bool down = heard("IBV_EVENT_PORT_ERR");
    ask_set_link("p4", true);
    const bool up = heard("IBV_EVENT_PORT_ACTIVE");
    ::kill(watch.pid(), SIGTERM);
    const Outcome r = watch.wait(10s);
    EXPECT_TRUE(down) << r.summary();
    EXPECT_TRUE(up) << r.summary();
    EXPECT_NE(r.out.find("event_type IBV_EVENT_PORT_ERR (10), port 1"), std::string::npos) << r.summary();
}

// kill -9 of either end of an ib_write_bw run under traffic: the kernel takes back what the
// process held (pinned pages, hugepages, VFIO files: the fault suite's checks), the other end
// is ended, and both devices carry a run again.
TEST_F(VerbsVfab, AProgramKilledMidTransferLeavesNothingBehind) {
    const SystemState base = SystemState::settled();
    ASSERT_TRUE(base.holders.empty()) << "a VFIO file is open before the case: " << base.holders.front();
    for (bool kill_client : {true, false}) {
        SCOPED_TRACE(kill_client ? "client killed" : "server killed");
        Child server(on_vfab_pair({"ib_write_bw", "-d", "vfab0", "-x", "0", "-F", "-D", "20"}));
        ASSERT_TRUE(wait_for([] { return tcp_listening(18515); }, 30s)) << server.wait(0ms).summary();
        Child client(on_vfab_pair({"ib_write_bw", "-d", "vfab1", "-x", "0", "-F", "-D", "20", "127.0.0.1"}));
        ASSERT_TRUE(wait_for([&] { return holds_vfio(client.pid()) && holds_vfio(server.pid()); }, 30s));
        std::this_thread::sleep_for(2s);   // under traffic
        ::kill((kill_client ? client : server).pid(), SIGKILL);
        const Outcome killed = (kill_client ? client : server).wait(10s);
        EXPECT_EQ(killed.rc, 128 + SIGKILL) << killed.summary();
        // The other end waits for a peer that is gone (perftest has no timeout): ended too.
        ::kill((kill_client ? server : client).pid(), SIGKILL);
        (void)(kill_client ? server : client).wait(10s);
        EXPECT_EQ(wait_until_back(base), "");
    }
    expect_pair(run_server_client(on_vfab_pair({"ibv_rc_pingpong", "-d", "vfab0", "-g", "0", "-n", "50"}),
                                  on_vfab_pair({"ibv_rc_pingpong", "-d", "vfab1", "-g", "0", "-n", "50", "127.0.0.1"}), 60s),
                "50 iters in");
    EXPECT_EQ(wait_until_back(base), "");
}

// ---- against the kernel's rxe ----------------------------------------------------------------------

class VerbsDropin : public RxeSuite {};

TEST_F(VerbsDropin, DevicesAreListedAndDescribed) {
    const Outcome list = run_program(on_vfab({"ibv_devices"}), 60s);
    ASSERT_EQ(list.rc, 0) << list.summary();
    EXPECT_NE(list.out.find("vfab0"), std::string::npos) << list.summary();
    EXPECT_EQ(list.out.find("rxe0"), std::string::npos) << "the kernel's device seen through vfab's library:\n" << list.summary();

    const Outcome info = run_program(on_vfab({"ibv_devinfo", "-v", "-d", "vfab0"}), 60s);
    ASSERT_EQ(info.rc, 0) << info.summary();
    for (const char* want : {"PORT_ACTIVE", "Ethernet", "::ffff:10.77.0.1", "RoCE v2", "active_mtu:\t\t1024"})
        EXPECT_NE(info.out.find(want), std::string::npos) << want << "\n" << info.summary();
}

TEST_F(VerbsDropin, RcPingpongWithRxeBothRoles) {
    for (const char* size : {"1", "4096", "20000"}) {
        SCOPED_TRACE(size);
        auto r = run_server_client(on_vfab({"ibv_rc_pingpong", "-d", "vfab0", "-g", "0", "-n", "100", "-s", size}),
                                   {"ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-n", "100", "-s", size, "127.0.0.1"}, 120s);
        expect_pair(r, "100 iters in");
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

TEST_F(VerbsDropin, UcPingpongWithRxeBothRoles) {
    for (const char* size : {"1", "4096"}) {
        SCOPED_TRACE(size);
        expect_pair(run_server_client(on_vfab({"ibv_uc_pingpong", "-d", "vfab0", "-g", "0", "-n", "100", "-s", size}),
                                      {"ibv_uc_pingpong", "-d", "rxe0", "-g", "1", "-n", "100", "-s", size, "127.0.0.1"}, 120s),
                    "100 iters in");
        expect_pair(run_server_client({"ibv_uc_pingpong", "-d", "rxe0", "-g", "1", "-n", "100", "-s", size},
                                      on_vfab({"ibv_uc_pingpong", "-d", "vfab0", "-g", "0", "-n", "100", "-s", size, "127.0.0.1"}), 120s),
                    "100 iters in");
    }
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

// Every perftest program, on its default path (ibv_wr_*) and with --use_old_post_send, UD for
// the send tests; few iterations (TCG).
const std::vector<Perf> kPerf = {
    {"ib_write_bw", {"-n", "200"}},  {"ib_write_bw", {"-n", "200", "--use_old_post_send"}},
    {"ib_write_lat", {"-n", "200"}}, {"ib_read_bw", {"-n", "200"}},
    {"ib_read_lat", {"-n", "200"}},  {"ib_read_lat", {"-n", "200", "--use_old_post_send"}},
    {"ib_send_bw", {"-n", "200"}},   {"ib_send_lat", {"-n", "200"}},
    {"ib_send_bw", {"-n", "200", "-c", "UD"}}, {"ib_send_lat", {"-n", "200", "-c", "UD"}},
    {"ib_atomic_bw", {"-n", "200"}}, {"ib_atomic_lat", {"-n", "200"}},
    {"ib_send_lat", {"-n", "200", "--use_old_post_send"}},
};

std::string perf_name(const ::testing::TestParamInfo<Perf>& i) {
    std::string n = std::string(i.param.tool).substr(3);
    for (const std::string& a : i.param.args)
        if (a == "UD" || a == "--use_old_post_send") n += a == "UD" ? "_ud" : "_old_post_send";
    return n;
}

// perftest's command line: its TCP side channel is port 18515; -x names the GID.
std::vector<std::string> perf_cmd(const Perf& p, const char* dev, const char* gid, bool client) {
    std::vector<std::string> a = {p.tool, "-d", dev, "-x", gid, "-F"};
    a.insert(a.end(), p.args.begin(), p.args.end());
    if (client) a.push_back("127.0.0.1");
    return a;
}

void expect_perf(const PairOutcome& r, const char* what) {
    EXPECT_EQ(r.server.rc, 0) << what << ": server: " << r.server.summary() << "\nclient: " << r.client.summary();
    EXPECT_EQ(r.client.rc, 0) << what << ": client: " << r.client.summary() << "\nserver: " << r.server.summary();
}

class VerbsPerftest : public VerbsDropin, public ::testing::WithParamInterface<Perf> {};

// vfab as server with rxe as client, then the reverse (vfab's GID 0, rxe's 1).
TEST_P(VerbsPerftest, WithRxeBothRoles) {
    const Perf& p = GetParam();
    expect_perf(run_server_client(on_vfab(perf_cmd(p, "vfab0", "0", false)), perf_cmd(p, "rxe0", "1", true), 180s), "vfab server");
    expect_perf(run_server_client(perf_cmd(p, "rxe0", "1", false), on_vfab(perf_cmd(p, "vfab0", "0", true)), 180s), "vfab client");
}

INSTANTIATE_TEST_SUITE_P(Perftest, VerbsPerftest, ::testing::ValuesIn(kPerf), perf_name);

class VerbsPerftestVfab : public VerbsVfab, public ::testing::WithParamInterface<Perf> {};

TEST_P(VerbsPerftestVfab, VfabToVfab) {
    const Perf& p = GetParam();
    expect_perf(run_server_client(on_vfab_pair(perf_cmd(p, "vfab0", "0", false)), on_vfab_pair(perf_cmd(p, "vfab1", "0", true)), 180s),
                "vfab <-> vfab");
}

INSTANTIATE_TEST_SUITE_P(Perftest, VerbsPerftestVfab, ::testing::ValuesIn(kPerf), perf_name);

}  // namespace
}  // namespace vfab::lab
