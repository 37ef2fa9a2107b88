// Debian's HPC stack, as packaged, on vfab's drop-in libibverbs.so.1 across two machines
// (scripts/lab --pair --hpc; docs/hpc.md): UCX's tools, Open MPI 4.1 (pml ucx) and MPICH 4.0
// (ch4:ucx) running the project's own MPI program (mpi_check.c), and libfabric's verbs
// provider. This guest is hpc-a; hpc-b boots beside it on the same emulated link and runs what
// lab-rsh asks. On each, the igb pair (00:05.0, 00:0a.0) is vfab's, the e1000 (00:0c.0, eth0)
// the kernel's: the launchers' TCP and, for the figures, the kernel's rxe. No kernel RDMA
// module is loaded until the rxe tests at the end.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <thread>

#include "lab_env.hpp"
#include "rxe_peer.hpp"   // PairOutcome, expect_both_ok
#include "spawn.hpp"

namespace vfab::lab {
namespace {

using namespace std::chrono_literals;

// vfab's NICs: PCI address and port address, per machine. The address is the port's own,
// never a kernel interface's.
struct Nic {
    std::string bdf;
    std::string ip;
    std::string device() const { return bdf + "=" + ip; }
};
const Nic kA0{"0000:00:05.0", "10.90.1.1"}, kA1{"0000:00:0a.0", "10.90.1.2"};
const Nic kB0{"0000:00:05.0", "10.90.2.1"}, kB1{"0000:00:0a.0", "10.90.2.2"};
constexpr const char* kPeer = "hpc-b";
constexpr const char* kVfabRun = "/vfab/bin/vfab-run";
constexpr const char* kLabRsh = "/vfab/bin/lab-rsh";
constexpr const char* kLabSriov = "/vfab/bin/lab-sriov";

// Each machine's /etc/vfab/verbs.conf: a rank of a parallel job takes the NIC of its local
// rank (docs/verbs.md), so two ranks on one machine never open each other's NIC.
std::string verbs_conf(const Nic& n0, const Nic& n1) {
    return "# tests/lab/hpc_test.cpp\nlocal_rank_device " + n0.bdf + " " + n0.ip + "\nlocal_rank_device " + n1.bdf + " " + n1.ip +
           "\nquiet yes\n";
}

// UCX on one verbs device: rc_verbs, with ud_verbs for the wire-up; sockaddr connections
// (ucx_perftest's own side channel is TCP) over TCP.
std::vector<std::string> ucx_env(const char* device, std::vector<std::string> more = {}) {
    std::vector<std::string> e = {std::string("UCX_NET_DEVICES=") + device, "UCX_TLS=rc_v,self", "UCX_SOCKADDR_TLS_PRIORITY=tcp",
                                  "UCX_WARN_UNUSED_ENV_VARS=n"};
    e.insert(e.end(), more.begin(), more.end());
    return e;
}
const std::vector<std::string> kUcxOnVfab = ucx_env("vfab0:1");
// rxe's UD completions leave sl 0, which UCX 1.13 reads as "IPv6 header" and so drops every
// datagram it checks the destination GID of (fixed in later UCX): the check goes off for rxe.
const std::vector<std::string> kUcxOnRxe = ucx_env("rxe0:1", {"UCX_UD_VERBS_ETH_DGID_CHECK=n"});

// The words as one shell command line: each quoted unless plain.
std::string shell_line(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& a : v) {
        const bool plain = !a.empty() && a.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=,@%+-") == std::string::npos;
        std::string quoted = "'";
        for (char c : a) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
        s += (s.empty() ? "" : " ") + (plain ? a : quoted + "'");
    }
    return s;
}

// A command on hpc-b, through lab-rsh: a program and its arguments, or a shell command line.
std::vector<std::string> on_peer(const std::vector<std::string>& args) { return {kLabRsh, kPeer, shell_line(args)}; }
std::vector<std::string> on_peer_sh(const std::string& line) { return {kLabRsh, kPeer, line}; }
// `args` on hpc-b or here.
std::vector<std::string> on_machine(bool remote, const std::vector<std::string>& args) { return remote ? on_peer(args) : args; }

// `args` on vfab's `nic` (vfab-run) with UCX's settings `env`.
std::vector<std::string> ucx_on_vfab(const Nic& nic, std::vector<std::string> args) {
    std::vector<std::string> a = {"env"};
    a.insert(a.end(), kUcxOnVfab.begin(), kUcxOnVfab.end());
    for (const char* w : {kVfabRun, "--device"}) a.push_back(w);
    a.push_back(nic.device());
    a.push_back("--");
    a.insert(a.end(), args.begin(), args.end());
    return a;
}
std::vector<std::string> ucx_on_rxe(std::vector<std::string> args) {
    std::vector<std::string> a = {"env"};
    a.insert(a.end(), kUcxOnRxe.begin(), kUcxOnRxe.end());
    a.insert(a.end(), args.begin(), args.end());
    return a;
}

// A figure for docs/performance.md, on the console: "figure: WHAT KEY=VALUE...".
void figure(const std::string& what, const std::string& values) { std::cout << "figure: " << what << " " << values << std::endl; }

// ucx_perftest's last line: "Final: iterations p50 avg-latency overall-latency avg-MBps
// overall-MBps avg-msg/s overall-msg/s".
std::string perftest_final(const std::string& out) {
    static const std::regex final_line(R"(Final:\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+))");
    std::smatch m;
    if (!std::regex_search(out, m, final_line)) return {};
    return "iterations=" + m[1].str() + " latency_us=" + m[3].str() + " bandwidth_MBps=" + m[5].str() + " msg_per_s=" + m[7].str();
}

// A server, then its client, again while the server is not listening yet; all within `limit`.
PairOutcome run_pair(const std::vector<std::string>& server_args, const std::vector<std::string>& client_args,
                     std::chrono::milliseconds limit) {
    return run_until_listening(server_args, client_args, limit, {"Connection refused"}, 30);
}

// The ucx_perftest runs of each placement: UCP's tag matching, RMA and active messages.
struct PerfCase {
    const char* test;
    const char* size;
    const char* iterations;
};
constexpr PerfCase kPerfCases[] = {{"tag_lat", "8", "200"},      {"tag_bw", "65536", "40"},   {"ucp_put_lat", "8", "200"},
                                   {"ucp_put_bw", "65536", "40"}, {"ucp_get", "65536", "40"}, {"ucp_am_lat", "8", "200"},
                                   {"ucp_am_bw", "65536", "40"}};

std::vector<std::string> perftest(const PerfCase& c, const char* server_host) {
    std::vector<std::string> a = {"ucx_perftest"};
    if (server_host) a.push_back(server_host);
    for (const char* w : {"-t", c.test, "-s", c.size, "-n", c.iterations, "-w", "10"}) a.push_back(w);
    return a;
}

class Hpc : public ::testing::Test {
protected:
    // Each test (again): hpc-b may have been booted anew after an emulator flake.
    void SetUp() override {
        if (!in_lab()) GTEST_SKIP() << "needs the lab (scripts/lab)";
        if (std::getenv("VFAB_LAB_PAIR") == nullptr) GTEST_SKIP() << "needs two machines (scripts/lab --pair)";
        // hpc-b may still be booting: up to four minutes, lab-rsh retrying for 20 s each time.
        std::string err;
        for (int i = 0; i < 12; ++i)
            if ((err = set_local_rank_devices(kA0, kA1, kB0, kB1)).empty()) break;
        ASSERT_EQ(err, "");
        // vfab's tests run with no kernel RDMA module on either machine; the rxe tests come last.
        if (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()).find("Rxe") == std::string::npos) {
            ASSERT_FALSE(std::filesystem::exists("/sys/module/ib_core")) << "the kernel's RDMA core is loaded on hpc-a";
            const Outcome b = run_program(on_peer_sh("test ! -e /sys/module/ib_core"), 60s);
            ASSERT_EQ(b.rc, 0) << "the kernel's RDMA core is loaded on hpc-b: " << b.summary();
        }
    }

    // Both machines' verbs.conf: local rank 0 takes a0 (b0 on hpc-b), local rank 1 a1 (b1).
    // Empty on success, else what failed.
    static std::string set_local_rank_devices(const Nic& a0, const Nic& a1, const Nic& b0, const Nic& b1) {
        std::ofstream(conf_dir() + "/verbs.conf") << verbs_conf(a0, a1);
        const Outcome b = run_program(
            on_peer_sh("mkdir -p /etc/vfab && printf '" + escape_newlines(verbs_conf(b0, b1)) + "' > /etc/vfab/verbs.conf"), 60s);
        return b.rc == 0 ? std::string() : "hpc-b does not answer lab-rsh: " + b.summary();
    }
    static std::string conf_dir() {
        std::filesystem::create_directories("/etc/vfab");
        return "/etc/vfab";
    }
    static std::string escape_newlines(const std::string& s) {
        std::string r;
        for (char c : s) r += c == '\n' ? std::string("\\n") : std::string(1, c);
        return r;
    }
};

// ---- UCX ---------------------------------------------------------------------------------------

TEST_F(Hpc, UcxInfoListsVfabWithTheVerbsTransports) {
    const Outcome r = run_program(ucx_on_vfab(kA0, {"ucx_info", "-d"}), 120s);
    ASSERT_EQ(r.rc, 0) << r.summary();
    EXPECT_NE(r.out.find("Memory domain: vfab0"), std::string::npos) << r.summary();
    EXPECT_NE(r.out.find("Transport: rc_verbs"), std::string::npos) << r.summary();
    EXPECT_NE(r.out.find("Transport: ud_verbs"), std::string::npos) << r.summary();
    EXPECT_NE(r.out.find("Device: vfab0:1"), std::string::npos) << r.summary();
    // The device's atomics (atomic_cap HCA): UCX offers them on rc_verbs.
    EXPECT_NE(r.out.find("atomic_add: 64 bit"), std::string::npos) << r.summary();
}

TEST_F(Hpc, UcxPerftestBetweenTwoNicsOfOneMachine) {
    for (const PerfCase& c : kPerfCases) {
        SCOPED_TRACE(c.test);
        const PairOutcome r = run_pair(ucx_on_vfab(kA0, perftest(c, nullptr)), ucx_on_vfab(kA1, perftest(c, "127.0.0.1")), 240s);
        expect_both_ok(r);
        const std::string f = perftest_final(r.client.out);
        EXPECT_FALSE(f.empty()) << r.client.summary();
        figure(std::string("ucx_perftest ") + c.test + " size=" + c.size + " vfab one-machine", f);
    }
}

TEST_F(Hpc, UcxPerftestAcrossTheTwoMachines) {
    for (const PerfCase& c : kPerfCases) {
        SCOPED_TRACE(c.test);
        const PairOutcome r = run_pair(on_peer(ucx_on_vfab(kB0, perftest(c, nullptr))), ucx_on_vfab(kA0, perftest(c, kPeer)), 240s);
        expect_both_ok(r);
        const std::string f = perftest_final(r.client.out);
        EXPECT_FALSE(f.empty()) << r.client.summary();
        figure(std::string("ucx_perftest ") + c.test + " size=" + c.size + " vfab two-machines", f);
    }
}

// ---- MPI ---------------------------------------------------------------------------------------

// The two machines for a job of 2 ranks (one each) or 4 (two each), as both MPIs write it.
std::string hosts(int ranks) { return ranks > 2 ? "hpc-a:2,hpc-b:2" : "hpc-a,hpc-b"; }

// Open MPI's mpirun (orterun) over the two machines: ranks placed round the hosts, orted started
// on hpc-b by lab-rsh, pml ucx on vfab. btl openib and libfabric's components stay out: they
// would open every verbs device of the machine in every rank.
std::vector<std::string> openmpi_run(int ranks, const std::vector<std::string>& ucx_env, bool on_vfab,
                                     const std::vector<std::string>& program_args) {
    std::vector<std::string> a = {"orterun", "--allow-run-as-root", "-np", std::to_string(ranks), "--host",
                                  hosts(ranks), "--mca", "plm_rsh_agent", kLabRsh,
                                  "--mca", "pml", "ucx", "--mca", "pml_ucx_devices", "any", "--mca", "btl", "self,vader",
                                  "--mca", "mtl", "^ofi", "--mca", "osc", "ucx", "--mca", "oob_tcp_if_include", "eth0",
                                  "--bind-to", "none"};
    for (const std::string& e : ucx_env) {
        a.push_back("-x");
        a.push_back(e);
    }
    if (on_vfab)
        for (const char* w : {kVfabRun, "--"}) a.push_back(w);
    a.push_back("/vfab/bin/mpi_check_openmpi");
    a.insert(a.end(), program_args.begin(), program_args.end());
    return a;
}

// MPICH's mpiexec (hydra) with its rsh launcher; every rank's traffic through the network
// module (UCX), also between ranks of one machine.
std::vector<std::string> mpich_run(int ranks, const std::vector<std::string>& ucx_env, bool on_vfab,
                                   const std::vector<std::string>& program_args) {
    std::vector<std::string> a = {"mpiexec.hydra", "-launcher", "rsh", "-launcher-exec", kLabRsh, "-iface", "eth0",
                                  "-hosts", hosts(ranks), "-n", std::to_string(ranks),
                                  "-genv", "MPIR_CVAR_NOLOCAL", "1"};
    for (const std::string& e : ucx_env) {
        const size_t eq = e.find('=');
        for (const std::string& w : {std::string("-genv"), e.substr(0, eq), e.substr(eq + 1)}) a.push_back(w);
    }
    if (on_vfab)
        for (const char* w : {kVfabRun, "--"}) a.push_back(w);
    a.push_back("/vfab/bin/mpi_check_mpich");
    a.insert(a.end(), program_args.begin(), program_args.end());
    return a;
}

const std::vector<std::string> kCheckArgs = {"--sizes", "65536", "--iters", "50"};

// Every rank ran where it should and every check passed; the ping-pong lines as figures.
void expect_mpi_check(const Outcome& r, int ranks, const std::string& label) {
    ASSERT_EQ(r.rc, 0) << r.summary();
    EXPECT_NE(r.out.find("mpi_check: all checks passed"), std::string::npos) << r.summary();
    EXPECT_NE(r.out.find("host=hpc-a"), std::string::npos) << r.summary();
    EXPECT_NE(r.out.find("host=hpc-b"), std::string::npos) << r.summary();
    EXPECT_NE(r.out.find("mpi_check ranks=" + std::to_string(ranks)), std::string::npos) << r.summary();
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);)
        if (line.rfind("pingpong ", 0) == 0) figure(label, line);
}

TEST_F(Hpc, OpenMpiTwoRanksAcrossTheMachines) {
    const Outcome r = run_program(openmpi_run(2, kUcxOnVfab, true, kCheckArgs), 600s);
    expect_mpi_check(r, 2, "openmpi np=2 vfab");
}

TEST_F(Hpc, OpenMpiFourRanksEachOnItsOwnNic) {
    const Outcome r = run_program(openmpi_run(4, kUcxOnVfab, true, kCheckArgs), 900s);
    expect_mpi_check(r, 4, "openmpi np=4 vfab");
}

TEST_F(Hpc, MpichTwoRanksAcrossTheMachines) {
    const Outcome r = run_program(mpich_run(2, kUcxOnVfab, true, kCheckArgs), 600s);
    expect_mpi_check(r, 2, "mpich np=2 vfab");
}

// MPICH connects every pair of ranks at once, over UCX's UD wire-up: a send's buffer must be
// read before the peer's crossing connection request is seen (docs/hpc.md, "UCX's UD
// wire-up"), which ibv_create_ah's ARP resolution gives.
TEST_F(Hpc, MpichFourRanksEachOnItsOwnNic) {
    const Outcome r = run_program(mpich_run(4, kUcxOnVfab, true, kCheckArgs), 900s);
    expect_mpi_check(r, 4, "mpich np=4 vfab");
}

// A shell loop running `action` for every process of an MPI or UCX job on its machine, found by
// /proc/PID/comm (the guest has no pgrep): $d is its /proc directory, $c its name.
std::string for_each_job_process(const std::string& action) {
    return "for d in /proc/[0-9]*; do read -r c 2>/dev/null < $d/comm || continue; "
           "case $c in mpi_check_*|orted|hydra_pmi_proxy|ucx_perftest) " + action + " ;; esac; done";
}

// No process of the job is left on either machine, and the NIC of local rank 0, where each
// machine's rank ran, opens again.
void expect_nothing_left() {
    const std::string probe = "for i in $(seq 1 30); do left=''; " + for_each_job_process("left=\"$left ${d#/proc/}:$c\"") +
                              "; [ -z \"$left\" ] && exit 0; sleep 1; done; echo \"left:$left\"; exit 1";
    for (const bool remote : {false, true}) {
        SCOPED_TRACE(remote ? "hpc-b" : "hpc-a");
        const Outcome gone = run_program(on_machine(remote, {"sh", "-c", probe}), 60s);
        EXPECT_EQ(gone.rc, 0) << "processes left: " << gone.summary();
        const Nic& nic = remote ? kB0 : kA0;
        const std::vector<std::string> open = {kVfabRun, "--device", nic.device(), "--", "ibv_devinfo"};
        const Outcome again = run_program(on_machine(remote, open), 120s);
        EXPECT_EQ(again.rc, 0) << "the NIC of the killed rank does not open again: " << again.summary();
        EXPECT_NE(again.out.find("PORT_ACTIVE"), std::string::npos) << again.summary();
    }
}

TEST_F(Hpc, AKilledRankEndsTheOpenMpiJobAndLeavesNothing) {
    const Outcome r = run_program(openmpi_run(2, kUcxOnVfab, true, {"--fail-rank", "1", "--fail-after", "5"}), 300s);
    EXPECT_NE(r.rc, 0) << r.summary();
    EXPECT_FALSE(r.timed_out) << r.summary();
    EXPECT_NE((r.out + r.err).find("signal 9"), std::string::npos) << r.summary();
    expect_nothing_left();
}

TEST_F(Hpc, AKilledRankEndsTheMpichJobAndLeavesNothing) {
    const Outcome r = run_program(mpich_run(2, kUcxOnVfab, true, {"--fail-rank", "1", "--fail-after", "5"}), 300s);
    EXPECT_NE(r.rc, 0) << r.summary();
    EXPECT_FALSE(r.timed_out) << r.summary();
    expect_nothing_left();
}

// ---- Several processes on one NIC (docs/hpc.md: a VF per rank) --------------------------------

// On each machine the kernel's igb keeps 00:0a.0 and makes two VFs for vfio-pci (lab-sriov):
// VF r of hpc-a is vfab's port 10.90.1.(3+r), of hpc-b 10.90.2.(3+r). Undone on both machines
// when it goes, whatever happened.
class TwoVfsPerMachine {
public:
    TwoVfsPerMachine() = default;
    TwoVfsPerMachine(const TwoVfsPerMachine&) = delete;
    TwoVfsPerMachine& operator=(const TwoVfsPerMachine&) = delete;
    ~TwoVfsPerMachine() {
        for (const bool remote : {false, true}) {
            // A rank left by a failed job would still hold its VF, and taking a VF away from
            // vfio-pci while it is open blocks: end such processes first.
            (void)run_program(on_machine(remote, {"sh", "-c", for_each_job_process("kill -9 ${d#/proc/}") + "; exit 0"}), 60s);
            const Outcome r = run_program(on_machine(remote, {kLabSriov, "down"}), 120s);
            if (r.rc != 0) ADD_FAILURE() << (remote ? "hpc-b" : "hpc-a") << ": lab-sriov down: " << r.summary();
        }
    }
    // Empty on success, else what failed.
    std::string make() {
        for (const bool remote : {false, true}) {
            const Outcome r = run_program(on_machine(remote, {kLabSriov, "up", "2"}), 120s);
            std::vector<Nic>& vfs = remote ? b : a;
            std::istringstream lines(r.out);
            for (std::string bdf; std::getline(lines, bdf);)
                if (!bdf.empty()) vfs.push_back({bdf, std::string(remote ? "10.90.2." : "10.90.1.") + std::to_string(3 + vfs.size())});
            if (r.rc != 0 || vfs.size() != 2)
                return std::string(remote ? "hpc-b" : "hpc-a") + ": lab-sriov up 2: " + r.summary();
        }
        return {};
    }
    std::vector<Nic> a, b;
};

// Two processes of one machine, each on its own VF of the same NIC: the VFs' traffic turns in
// the NIC's own switch (igb's VM-to-VM loopback).
TEST_F(Hpc, UcxPerftestBetweenTwoVfsOfOneNic) {
    TwoVfsPerMachine vfs;
    ASSERT_EQ(vfs.make(), "");
    for (const PerfCase& c : {kPerfCases[0], kPerfCases[1]}) {
        SCOPED_TRACE(c.test);
        const PairOutcome r =
            run_pair(ucx_on_vfab(vfs.a[0], perftest(c, nullptr)), ucx_on_vfab(vfs.a[1], perftest(c, "127.0.0.1")), 240s);
        expect_both_ok(r);
        const std::string f = perftest_final(r.client.out);
        EXPECT_FALSE(f.empty()) << r.client.summary();
        figure(std::string("ucx_perftest ") + c.test + " size=" + c.size + " vfab two VFs of one NIC", f);
    }
}

// Two ranks per machine on one NIC: each rank takes the VF of its local rank.
TEST_F(Hpc, OpenMpiFourRanksTwoPerNicEachOnItsOwnVf) {
    TwoVfsPerMachine vfs;
    ASSERT_EQ(vfs.make(), "");
    ASSERT_EQ(set_local_rank_devices(vfs.a[0], vfs.a[1], vfs.b[0], vfs.b[1]), "");
    expect_mpi_check(run_program(openmpi_run(4, kUcxOnVfab, true, kCheckArgs), 900s), 4, "openmpi np=4 vfab VFs");
}

TEST_F(Hpc, MpichFourRanksTwoPerNicEachOnItsOwnVf) {
    TwoVfsPerMachine vfs;
    ASSERT_EQ(vfs.make(), "");
    ASSERT_EQ(set_local_rank_devices(vfs.a[0], vfs.a[1], vfs.b[0], vfs.b[1]), "");
    expect_mpi_check(run_program(mpich_run(4, kUcxOnVfab, true, kCheckArgs), 900s), 4, "mpich np=4 vfab VFs");
}

// ---- libfabric ---------------------------------------------------------------------------------

// libfabric's verbs provider offers connected endpoints (FI_EP_MSG, and ofi_rxm's RDM over them)
// only on a device whose address a kernel interface shows (getifaddrs). vfab's address is on
// no kernel interface, so each machine puts it on a dummy one, "vfabdN", and the kernel does
// not answer ARP for it on eth0 (arp_ignore 1): the NIC's own port answers (docs/hpc.md).
std::string vfab_addresses_on_dummies(const Nic& n0, const Nic& n1) {
    std::string sh = "modprobe dummy || exit 1; echo 1 > /proc/sys/net/ipv4/conf/all/arp_ignore; ";
    int i = 0;
    for (const Nic* n : {&n0, &n1}) {
        const std::string dev = "vfabd" + std::to_string(i++);
        sh += "[ -e /sys/class/net/" + dev + " ] || { /usr/sbin/ip link add " + dev + " type dummy && /usr/sbin/ip addr add " +
              n->ip + "/32 dev " + dev + " && /usr/sbin/ip link set " + dev + " up; } || exit 1; ";
    }
    return sh;
}

const std::vector<std::string> kFabricEnv = {"FI_PROVIDER=verbs", "FI_VERBS_IFACE=vfabd", "FI_VERBS_DGRAM_USE_NAME_SERVER=0"};

// fi_pingpong on vfab's `nic`: provider, endpoint type, domain; every message checked (-c);
// 50 of each size up to 1 MiB, or what `sizes` says.
const std::vector<std::string> kAllSizes = {"-I", "50"};
std::vector<std::string> pingpong_on_vfab(const Nic& nic, const char* prov, const char* ep, const char* domain, const char* server,
                                          const std::vector<std::string>& sizes = kAllSizes) {
    std::vector<std::string> a = {"env"};
    a.insert(a.end(), kFabricEnv.begin(), kFabricEnv.end());
    for (const std::string& w : {std::string(kVfabRun), std::string("--device"), nic.device(), std::string("--"),
                                 std::string("fi_pingpong"), std::string("-p"), std::string(prov), std::string("-e"),
                                 std::string(ep), std::string("-c")})
        a.push_back(w);
    a.insert(a.end(), sizes.begin(), sizes.end());
    if (domain) {
        a.push_back("-d");
        a.push_back(domain);
    }
    if (server) a.push_back(server);
    return a;
}

// fi_pingpong's table: the line of `size` ("4k 50 =50 400k 0.13s 3.06 1338.21 0.00": bytes,
// sent, acknowledged, total, time, MB/s, µs per transfer, Mxfers/s), or the last one.
std::string pingpong_row(const std::string& out, const std::string& size = "") {
    std::string last;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
        if (line.empty() || !std::isdigit(static_cast<unsigned char>(line[0]))) continue;
        last = line;
        if (!size.empty() && line.rfind(size + " ", 0) == 0) return line;
    }
    return size.empty() ? last : std::string();
}

struct FabricCase {
    const char* prov;
    const char* ep;
    const char* domain;
};
constexpr FabricCase kFabricCases[] = {{"verbs", "msg", "vfab0"}, {"verbs;ofi_rxm", "rdm", "vfab0"},
                                       {"verbs", "dgram", "vfab0-dgram"}, {"verbs;ofi_rxd", "rdm", "vfab0-dgram"}};

// A figure's label: "fi_pingpong PROVIDER ENDPOINT WHERE".
std::string pingpong_label(const FabricCase& c, const char* where) {
    return std::string("fi_pingpong ") + c.prov + " " + c.ep + " " + where;
}

TEST_F(Hpc, LibfabricListsVfabsEndpoints) {
    ASSERT_EQ(run_program({"sh", "-c", vfab_addresses_on_dummies(kA0, kA1)}, 60s).rc, 0);
    std::vector<std::string> a = {"env"};
    a.insert(a.end(), kFabricEnv.begin(), kFabricEnv.end());
    for (const std::string& w : {std::string(kVfabRun), std::string("--device"), kA0.device(), std::string("--"),
                                 std::string("fi_info"), std::string("-p"), std::string("verbs")})
        a.push_back(w);
    const Outcome r = run_program(a, 120s);
    ASSERT_EQ(r.rc, 0) << r.summary();
    for (const char* want : {"domain: vfab0\n", "type: FI_EP_MSG", "domain: vfab0-dgram", "type: FI_EP_DGRAM", "type: FI_EP_RDM"})
        EXPECT_TRUE(std::regex_search(r.out, std::regex(want))) << want << "\n" << r.summary();
}

TEST_F(Hpc, LibfabricPingpongBetweenTwoNicsOfOneMachine) {
    ASSERT_EQ(run_program({"sh", "-c", vfab_addresses_on_dummies(kA0, kA1)}, 60s).rc, 0);
    for (const FabricCase& c : kFabricCases) {
        SCOPED_TRACE(std::string(c.prov) + " " + c.ep);
        const PairOutcome r = run_pair(pingpong_on_vfab(kA0, c.prov, c.ep, c.domain, nullptr),
                                       pingpong_on_vfab(kA1, c.prov, c.ep, c.domain, "127.0.0.1"), 300s);
        expect_both_ok(r);
        figure(pingpong_label(c, "vfab one-machine"), pingpong_row(r.client.out));
    }
}

TEST_F(Hpc, LibfabricPingpongAcrossTheMachines) {
    ASSERT_EQ(run_program({"sh", "-c", vfab_addresses_on_dummies(kA0, kA1)}, 60s).rc, 0);
    const Outcome b = run_program(on_peer_sh(vfab_addresses_on_dummies(kB0, kB1)), 60s);
    ASSERT_EQ(b.rc, 0) << b.summary();
    for (const FabricCase& c : kFabricCases) {
        SCOPED_TRACE(std::string(c.prov) + " " + c.ep);
        const PairOutcome r = run_pair(on_peer(pingpong_on_vfab(kB0, c.prov, c.ep, c.domain, nullptr)),
                                       pingpong_on_vfab(kA0, c.prov, c.ep, c.domain, kPeer), 300s);
        expect_both_ok(r);
        figure(pingpong_label(c, "vfab two-machines"), pingpong_row(r.client.out));
        figure(pingpong_label(c, "vfab two-machines size=4k"), pingpong_row(r.client.out, "4k"));
    }
}

// ---- the same on the kernel's rxe, for the figures ----------------------------------------------

// rxe0 on each machine's eth0, with the kernel's rdma_cm (the kernel's modules from here on).
std::string rxe_up() {
    return "for m in crc32_generic ib_core ib_uverbs udp_tunnel ip6_udp_tunnel rdma_rxe ib_cm iw_cm rdma_cm rdma_ucm; do "
           "modprobe $m || exit 1; done; "
           "[ -e /sys/class/infiniband/rxe0 ] || /usr/bin/rdma link add rxe0 type rxe netdev eth0 || exit 1; "
           "for i in $(seq 1 100); do grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state && exit 0; sleep 0.2; done; exit 1";
}

void rxe_up_on_both_machines() {
    Outcome up = run_program({"sh", "-c", rxe_up()}, 120s);
    ASSERT_EQ(up.rc, 0) << up.summary();
    up = run_program(on_peer_sh(rxe_up()), 120s);
    ASSERT_EQ(up.rc, 0) << up.summary();
}

// ofi_rxm sizes its CQ for (rx + tx) × FI_UNIVERSE_SIZE (256) completions, past rxe's largest CQ
// (32767 entries: its fi_enable says EINVAL); 16 peers fit. Both sides of a pair get it.
constexpr const char* kSmallUniverse = "FI_UNIVERSE_SIZE=16";

// fi_pingpong on the kernel's rxe0 (the machine's eth0), every message checked; rxe takes over a
// second per 64 KiB message here (as much against itself, see ucp_put_bw): 4 KiB only.
std::vector<std::string> pingpong_on_rxe(const FabricCase& c, const char* server, const char* iterations) {
    std::vector<std::string> a = {"env", kSmallUniverse, "FI_PROVIDER=verbs", "FI_VERBS_IFACE=eth0", "fi_pingpong", "-p", c.prov,
                                  "-e", c.ep, "-c", "-d", "rxe0", "-S", "4096", "-I", iterations};
    if (server) a.push_back(server);
    return a;
}

TEST_F(Hpc, TheSameOnTheKernelsRxe) {
    ASSERT_NO_FATAL_FAILURE(rxe_up_on_both_machines());
    for (const PerfCase& c : kPerfCases) {
        SCOPED_TRACE(c.test);
        const PairOutcome r = run_pair(on_peer(ucx_on_rxe(perftest(c, nullptr))), ucx_on_rxe(perftest(c, kPeer)), 240s);
        expect_both_ok(r);
        figure(std::string("ucx_perftest ") + c.test + " size=" + c.size + " rxe two-machines", perftest_final(r.client.out));
    }
    expect_mpi_check(run_program(openmpi_run(2, kUcxOnRxe, false, kCheckArgs), 600s), 2, "openmpi np=2 rxe");
    expect_mpi_check(run_program(mpich_run(2, kUcxOnRxe, false, kCheckArgs), 600s), 2, "mpich np=2 rxe");
    // libfabric's MSG and RDM over rxm, 4 KiB, 50 times as vfab's 4 KiB row across the machines.
    for (const FabricCase& c : {kFabricCases[0], kFabricCases[1]}) {
        SCOPED_TRACE(std::string(c.prov) + " " + c.ep);
        const PairOutcome r = run_pair(on_peer(pingpong_on_rxe(c, nullptr, "50")), pingpong_on_rxe(c, kPeer, "50"), 300s);
        expect_both_ok(r);
        figure(pingpong_label(c, "rxe two-machines size=4k"), pingpong_row(r.client.out, "4k"));
    }
}

// libfabric's connected endpoints between vfab and the kernel's rxe, MSG and ofi_rxm's RDM over
// them: vfab on hpc-a, rxe0 on hpc-b's eth0, each side as server and as client, 4 KiB 20 times,
// ofi_rxm's universe small enough for rxe (kSmallUniverse) on both sides.
TEST_F(Hpc, LibfabricPingpongAgainstTheKernelsRxe) {
    ASSERT_NO_FATAL_FAILURE(rxe_up_on_both_machines());
    ASSERT_EQ(run_program({"sh", "-c", vfab_addresses_on_dummies(kA0, kA1)}, 60s).rc, 0);
    auto on_rxe = [](const FabricCase& c, const char* server) { return pingpong_on_rxe(c, server, "20"); };
    auto on_vfab = [](const FabricCase& c, const char* server) {
        std::vector<std::string> a = pingpong_on_vfab(kA0, c.prov, c.ep, c.domain, server, {"-S", "4096", "-I", "20"});
        a.insert(a.begin() + 1, kSmallUniverse);   // after "env"
        return a;
    };
    for (const FabricCase& c : {kFabricCases[0], kFabricCases[1]}) {
        SCOPED_TRACE(std::string(c.prov) + " " + c.ep);
        PairOutcome r = run_pair(on_peer(on_rxe(c, nullptr)), on_vfab(c, kPeer), 300s);
        expect_both_ok(r);
        figure(pingpong_label(c, "vfab client, rxe server"), pingpong_row(r.client.out));
        r = run_pair(on_vfab(c, nullptr), on_peer(on_rxe(c, "hpc-a")), 300s);
        expect_both_ok(r);
        figure(pingpong_label(c, "rxe client, vfab server"), pingpong_row(r.client.out));
    }
}

}  // namespace
}  // namespace vfab::lab
