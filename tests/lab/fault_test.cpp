// The fault suite (docs/reliability.md): what a user's machine does to a vfab program — kill -9
// at any moment, the device removed or reset under traffic, the kernel's driver taking the
// device between two runs, a memlock limit too low, unprivileged users — done to a shipped
// program, bench/lab_bench (every driver through one loop that watches the device's events),
// in the lab guest. After each case nothing may be left behind (leak_check.hpp: pinned pages,
// hugepages, open VFIO/iommufd files) and the device must work for the next program.
#include <gtest/gtest.h>
#include <grp.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <thread>

#include "caps.hpp"
#include "kernel_nic.hpp"
#include "lab_env.hpp"
#include "leak_check.hpp"
#include "pci_removal.hpp"
#include "port.hpp"
#include "spawn.hpp"
#include "vfab/drivers/igb.hpp"
#include "vfab/drivers/virtio_net.hpp"

namespace vfab::lab {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A driver's two wired lab ports (bench/lab_bench's defaults for it).
struct Wired {
    const char* driver;
    const char* tx;
    const char* rx;
};
constexpr Wired kE1000e{"e1000e", "0000:00:02.0", "0000:00:03.0"};
constexpr Wired kVirtio{"virtio-net", "0000:00:04.0", "0000:00:06.0"};
constexpr Wired kIgb{"igb", "0000:00:05.0", "0000:00:0a.0"};
constexpr Wired kDrivers[] = {kE1000e, kVirtio, kIgb};

// A program the lab copied beside this test (scripts/lab --extra).
std::string beside_me(const char* name) { return (fs::read_symlink("/proc/self/exe").parent_path() / name).string(); }
std::string bench() { return beside_me("lab_bench"); }
std::string devctl() { return beside_me("vfio-devctl"); }

std::vector<std::string> pps(const Wired& w, const char* seconds) {
    return {bench(), "pps", "--driver", w.driver, "--seconds", seconds};
}

// The run failed with exit status 1 and exactly one line of its own: that line in `line`.
::testing::AssertionResult one_line_failure(const Outcome& r, std::string& line) {
    const auto lines = own_lines(r.err);
    if (r.rc != 1 || lines.size() != 1)
        return ::testing::AssertionFailure() << "expected exit status 1 and one line: " << r.summary();
    line = lines[0];
    return ::testing::AssertionSuccess();
}

class Faults : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_TRUE(in_lab()) << "run this through scripts/lab";
        ASSERT_TRUE(fs::exists(bench())) << "the lab must copy bench/lab_bench beside this test (scripts/lab --extra)";
        if (!iommu_on()) ::setenv("VFAB_IOMMU_BACKEND", "noiommu", 1);
        base_ = SystemState::settled();
        ASSERT_TRUE(base_.holders.empty()) << "a VFIO file is open before the case: " << base_.holders.front();
    }
    void TearDown() override { ::unsetenv("VFAB_IOMMU_BACKEND"); }

    // Nothing left behind since SetUp, and `w`'s ports carry a short run again.
    void expect_clean_and_usable(const Wired& w, const std::string& after) {
        EXPECT_EQ(wait_until_back(base_), "") << "after " << after;
        Outcome r = run_program(pps(w, "0.5"), 60s);
        EXPECT_EQ(r.rc, 0) << w.driver << " after " << after << ": " << r.summary();
        EXPECT_EQ(wait_until_back(base_), "") << "after the run that followed " << after;
    }

    SystemState base_;
};

// kill -9 at moments spread over a run — before the device is open, during set-up, under
// traffic — 24 times per IOMMU backend this boot offers, over the three drivers in turn: the
// first 8 in equal slices of the first 120 ms (the program opens its devices about 60 ms in,
// then resets and sets them up), the other 16 in equal slices of the rest of the first 1.5 s,
// each at a random point in its slice (50 purely random kills per backend took two minutes
// per boot, and most landed under traffic).
TEST_F(Faults, KillNineAnywhereLeavesNothingBehind) {
    constexpr int kKills = 24, kEarly = 8, kEarlyMs = 120, kSpanMs = 1500;   // the run is 2 s
    std::mt19937 rng(20261126);
    // The i-th kill's moment: a random point in its slice.
    auto moment = [&](int i) {
        const int from = i < kEarly ? i * kEarlyMs / kEarly : kEarlyMs + (i - kEarly) * (kSpanMs - kEarlyMs) / (kKills - kEarly);
        const int width = i < kEarly ? kEarlyMs / kEarly : (kSpanMs - kEarlyMs) / (kKills - kEarly);
        return from + std::uniform_int_distribution<int>(0, width - 1)(rng);
    };
    for (vfio::IommuBackend b : backends()) {
        ::setenv("VFAB_IOMMU_BACKEND", vfio::to_string(b), 1);
        int before_open = 0, holding = 0, ended = 0;
        for (int i = 0; i < kKills; ++i) {
            const Wired& w = kDrivers[i % std::size(kDrivers)];
            const int ms = moment(i);
            Child prog(pps(w, "2"));
            ASSERT_TRUE(prog.started());
            std::this_thread::sleep_for(std::chrono::milliseconds(ms));
            (holds_vfio(prog.pid()) ? holding : before_open)++;
            ::kill(prog.pid(), SIGKILL);
            Outcome r = prog.wait(10s);
            if (r.rc != 128 + SIGKILL) {   // it had ended by itself: it must have succeeded
                ++ended;
                EXPECT_EQ(r.rc, 0) << w.driver << " " << r.summary();
            }
            const std::string left = wait_until_back(base_);
            ASSERT_EQ(left, "") << vfio::to_string(b) << ": kill -9 of lab_bench " << w.driver << " after " << ms << " ms";
        }
        std::printf("%s: %d kills: %d before the device was open, %d holding it (set-up or traffic), %d runs had ended\n",
                    vfio::to_string(b), kKills, before_open, holding, ended);
        EXPECT_GE(holding, kKills / 2) << "most kills must land while the program holds the device";
        EXPECT_GE(before_open, 1) << "the first kills must land before the program opens the device";
        for (const Wired& w : kDrivers) expect_clean_and_usable(w, std::string("the kills on ") + vfio::to_string(b));
    }
}

// Waits until `prog` holds a VFIO file, then for 1.5 s of its traffic.
void wait_for_traffic(Child& prog) {
    ASSERT_TRUE(wait_until_open(prog)) << "the program did not open its ports within 10 s";
    std::this_thread::sleep_for(1500ms);
}

// Removal of the receiving port under traffic, for each driver: the one line, exit 1, the
// removal finishes as soon as the program closes; rescan, back to vfio-pci, and it works.
TEST_F(Faults, RemovalUnderTrafficThenRescanForEachDriver) {
    for (const Wired& w : kDrivers) {
        SCOPED_TRACE(w.driver);
        Child prog(pps(w, "120"));
        ASSERT_TRUE(prog.started());
        wait_for_traffic(prog);
        const auto [r, removal_s] = remove_while_running(prog, w.rx, 120s);
        give_back_to_vfio(w.rx);   // first: whatever failed, the tests that follow need the device
        std::printf("%s: the removal of %s finished %.3f s after it was asked for\n", w.driver, w.rx, removal_s);
        std::string line;
        ASSERT_TRUE(one_line_failure(r, line));
        EXPECT_EQ(line, std::string("lab_bench: ") + w.rx + ": the device is being removed (the kernel asked for it back): "
                                                             "stopping and closing it");
        EXPECT_GE(removal_s, 0.0);
        EXPECT_LT(removal_s, 20.0) << "far less than the run's 120 s: the program let go when it saw the event";
        ASSERT_EQ(driver_of(w.rx), "vfio-pci");
        expect_clean_and_usable(w, "the removal and rescan");
    }
}

// The other benchmarks (bench/): each removal ends the run at once with one line naming the
// device and exit status 1.
TEST_F(Faults, BenchProgramsLetARemovedDeviceGo) {
    struct Case {
        std::vector<std::string> args;
        Wired ports;
        const char* removed;
    };
    const Case cases[] = {
        {{beside_me("e1000e_pps"), "60"}, kE1000e, kE1000e.rx},
        {{beside_me("virtio_net_pps"), "60"}, kVirtio, kVirtio.rx},
        {{beside_me("igb_pps"), "--seconds", "60", "--threads", "1"}, kIgb, kIgb.tx},   // igb_pps receives on 05.0
        {{beside_me("rdma_bench"), "local", "write_bw", "--nics", std::string(kE1000e.tx) + "," + kE1000e.rx, "-n", "100000000",
          "--timeout", "120"},
         kE1000e, kE1000e.rx},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.args[0]);
        ASSERT_TRUE(fs::exists(c.args[0])) << "the lab must copy it beside this test";
        if (!iommu_on() && c.args[0].ends_with("rdma_bench")) {
            std::printf("rdma_bench: its buffers are malloc'ed, which no-IOMMU mode cannot map: not run here\n");
            continue;
        }
        Child prog(c.args);
        ASSERT_TRUE(prog.started());
        wait_for_traffic(prog);
        const auto [r, removal_s] = remove_while_running(prog, c.removed, 120s);
        give_back_to_vfio(c.removed);   // first: whatever failed, the tests that follow need the device
        std::printf("%s: removal of %s finished %.3f s after it was asked for\n", fs::path(c.args[0]).filename().c_str(),
                    c.removed, removal_s);
        std::string line;
        ASSERT_TRUE(one_line_failure(r, line));
        EXPECT_NE(line.find(std::string(c.removed) + ": the device is being removed"), std::string::npos) << line;
        ASSERT_EQ(driver_of(c.removed), "vfio-pci");
        expect_clean_and_usable(c.ports, "the removal");
    }
}

// A function-level reset through sysfs under traffic, where the kernel has a reset method for
// the device: the program learns that its device was reset behind its back, stops, exits 1.
TEST_F(Faults, ResetBehindTheProgramsBack) {
    for (const Wired& w : kDrivers) {
        SCOPED_TRACE(w.driver);
        const std::string reset = std::string("/sys/bus/pci/devices/") + w.rx + "/reset";
        std::string methods;
        std::getline(std::ifstream(std::string("/sys/bus/pci/devices/") + w.rx + "/reset_method"), methods);
        if (!fs::exists(reset)) {
            std::printf("%s: the kernel has no reset method for %s: nothing to test\n", w.driver, w.rx);
            continue;
        }
        Child prog(pps(w, "60"));
        ASSERT_TRUE(prog.started());
        wait_for_traffic(prog);
        { std::ofstream(reset) << 1; }
        Outcome r = prog.wait(90s);
        const auto lines = own_lines(r.err);
        std::printf("%s: reset of %s (methods: %s): exit %d, %s\n", w.driver, w.rx, methods.c_str(), r.rc,
                    lines.empty() ? "no line" : lines[0].c_str());
        if (r.rc == 0) {
            // The device did not lose its set-up (the emulated 82574L's reset leaves it running).
            EXPECT_TRUE(lines.empty()) << r.summary();
        } else {
            EXPECT_EQ(r.rc, 1) << r.summary();
            ASSERT_EQ(lines.size(), 1u) << r.summary();
            EXPECT_EQ(lines[0], std::string("lab_bench: ") + w.rx + ": the device stopped working (reset behind our back): "
                                                                     "closing it");
        }
        expect_clean_and_usable(w, "the reset");
    }
}

// The kernel's e1000e driver takes the port between two runs: the next run says where the
// device is and what to do, touches nothing; the kernel's driver makes an interface of the
// device vfab used; given back to vfio-pci, the run after works.
TEST_F(Faults, KernelDriverTakesTheDeviceBetweenRuns) {
    ASSERT_EQ(run_program(pps(kE1000e, "0.5")).rc, 0);
    {
        KernelNic kernel(kE1000e.rx);
        ASSERT_EQ(kernel.take("e1000e"), "");   // and its network interface appeared
        Outcome r = run_program(pps(kE1000e, "0.5"));
        std::string line;
        ASSERT_TRUE(one_line_failure(r, line));
        std::printf("the kernel's e1000e has %s: %s\n", kE1000e.rx, line.c_str());
        EXPECT_NE(line.find(std::string(kE1000e.rx) + " is bound to e1000e"), std::string::npos) << line;
        EXPECT_NE(line.find("vfio-devctl bind"), std::string::npos) << line;
        EXPECT_EQ(driver_of(kE1000e.rx), "e1000e") << "a refused open changes nothing";
        EXPECT_EQ(wait_until_back(base_), "");
    }   // back to vfio-pci
    ASSERT_EQ(driver_of(kE1000e.rx), "vfio-pci");
    expect_clean_and_usable(kE1000e, "the kernel's driver had the device");
}

// Below what a run pins (two ports' rings and buffers, about 4.5 MiB): one line naming the
// limit and the fix, nothing pinned, nothing left open.
TEST_F(Faults, MemlockTooLowIsOneClearLine) {
    if (!iommu_on()) GTEST_SKIP() << "no-IOMMU mode pins with mlock; the message is checked with the IOMMU on";
    for (const Wired& w : kDrivers) {
        SCOPED_TRACE(w.driver);
        Outcome r = run_program(pps(w, "0.5"), 60s, [] {
            rlimit rl{64 << 10, 64 << 10};
            return drop_ipc_lock() && ::setrlimit(RLIMIT_MEMLOCK, &rl) == 0;
        });
        std::string line;
        ASSERT_TRUE(one_line_failure(r, line));
        std::printf("%s under a 64 KiB memlock limit: %s\n", w.driver, line.c_str());
        EXPECT_NE(line.find("RLIMIT_MEMLOCK is 65536 bytes"), std::string::npos) << line;
        EXPECT_NE(line.find("ulimit -l"), std::string::npos) << line;
        EXPECT_EQ(wait_until_back(base_), "");
    }
    expect_clean_and_usable(kE1000e, "the refused runs");
}

// `vfio-devctl bind --user U`: U runs the program with the memlock limit the system gives
// every process (8 MiB); another user V gets a permission error naming the file and the fix,
// and U's device is untouched.
TEST_F(Faults, UnprivilegedUserRunsAndAnotherIsRefused) {
    if (!iommu_on()) GTEST_SKIP() << "no-IOMMU mode needs CAP_SYS_RAWIO: root only";
    if (backends().front() != vfio::IommuBackend::legacy) GTEST_SKIP();
    ::setenv("VFAB_IOMMU_BACKEND", "legacy", 1);   // iommufd also needs /dev/iommu, root's by default
    constexpr uid_t kU = 1000, kV = 1001;
    Outcome b = run_program({devctl(), "bind", kE1000e.tx, kE1000e.rx, "--user", std::to_string(kU)});
    ASSERT_EQ(b.rc, 0) << b.summary();
    auto as = [](uid_t uid) {
        return [uid] {
            rlimit rl{8u << 20, 8u << 20};   // as the kernel sets it for every process
            return ::setrlimit(RLIMIT_MEMLOCK, &rl) == 0 && ::setgroups(0, nullptr) == 0 && ::setgid(uid) == 0 &&
                   ::setuid(uid) == 0;
        };
    };
    Outcome u = run_program(pps(kE1000e, "0.5"), 60s, as(kU));
    EXPECT_EQ(u.rc, 0) << "as user " << kU << ": " << u.summary();
    Outcome v = run_program(pps(kE1000e, "0.5"), 60s, as(kV));
    std::string line;
    ASSERT_TRUE(one_line_failure(v, line)) << "as user " << kV;
    std::printf("as user %u: %s\n", unsigned(kV), line.c_str());
    EXPECT_NE(line.find("/dev/vfio/"), std::string::npos) << line;
    EXPECT_NE(line.find("permission"), std::string::npos) << line;
    EXPECT_EQ(wait_until_back(base_), "");
    Outcome again = run_program(pps(kE1000e, "0.5"), 60s, as(kU));
    EXPECT_EQ(again.rc, 0) << "user " << kU << " after the refusal: " << again.summary();
    if (flavor() == "iommufd") {
        // The VFIO cdevs are U's, /dev/iommu is root's: the automatic choice takes the legacy
        // container, and iommufd asked for by name says what it misses, touching nothing.
        ::unsetenv("VFAB_IOMMU_BACKEND");
        Outcome autom = run_program(pps(kE1000e, "0.5"), 60s, as(kU));
        EXPECT_EQ(autom.rc, 0) << "as user " << kU << ", the backend chosen by vfab: " << autom.summary();
        ::setenv("VFAB_IOMMU_BACKEND", "iommufd", 1);
        Outcome fd = run_program(pps(kE1000e, "0.5"), 60s, as(kU));
        ::setenv("VFAB_IOMMU_BACKEND", "legacy", 1);
        ASSERT_TRUE(one_line_failure(fd, line)) << "as user " << kU << " with iommufd";
        std::printf("as user %u with iommufd: %s\n", unsigned(kU), line.c_str());
        EXPECT_NE(line.find("/dev/iommu"), std::string::npos) << line;
        EXPECT_NE(line.find("VFAB_IOMMU_BACKEND=legacy"), std::string::npos) << line;
        EXPECT_EQ(wait_until_back(base_), "");
    }
    // Back to root's, for the tests that follow.
    Outcome back = run_program({devctl(), "bind", kE1000e.tx, kE1000e.rx, "--user", "0", "--group", "0"});
    EXPECT_EQ(back.rc, 0) << back.summary();
    for (const char* bdf : {kE1000e.tx, kE1000e.rx}) {
        const std::string group = fs::read_symlink(std::string("/sys/bus/pci/devices/") + bdf + "/iommu_group").filename();
        ::chmod(("/dev/vfio/" + group).c_str(), 0600);
    }
}

// One round trip of a frame between a driver's two ports, opened and closed in this process.
template <class D>
std::string round_trip(const Wired& w) {
    auto tx = examples::BasicPort<D>::open(w.tx, {.send_slots = 16, .recv_slots = 16});
    if (!tx) return tx.error().message;
    auto rx = examples::BasicPort<D>::open(w.rx, {.send_slots = 16, .recv_slots = 16});
    if (!rx) return rx.error().message;
    if (!rx->post_all_recv()) return "post_recv failed";
    uint8_t* f = tx->send_buffer(0);
    std::memset(f, 0, 64);
    std::memcpy(f, rx->mac().data(), 6);
    std::memcpy(f + 6, tx->mac().data(), 6);
    f[12] = 0x88, f[13] = 0xb5;
    if (!tx->send(0, f, 64)) return "post_send failed";
    Completion wc[16];
    for (const auto end = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < end;) {
        (void)tx->cq().poll(wc);
        const int n = rx->cq().poll(wc);
        for (int i = 0; i < n; ++i)
            if (wc[i].opcode == WcOpcode::recv && wc[i].status == WcStatus::success) return "";
    }
    return "the frame did not arrive within 5 s";
}

// The library in the test process itself: devices of each driver opened, used and closed
// again and again leave this process's fds, locked and pinned memory as they were, and no
// VFIO file open anywhere.
TEST_F(Faults, OpenUseCloseInOneProcessLeavesNothing) {
    auto rounds = [](int n) {
        for (int i = 0; i < n; ++i) {
            if (std::string e = round_trip<e1000e::Driver>(kE1000e); !e.empty()) return "e1000e: " + e;
            if (std::string e = round_trip<virtio_net::Driver>(kVirtio); !e.empty()) return "virtio-net: " + e;
            if (std::string e = round_trip<igb::Driver>(kIgb); !e.empty()) return "igb: " + e;
        }
        return std::string();
    };
    const ProcessState before = ProcessState::now();
    ASSERT_EQ(rounds(5), "");
    const ProcessState after = ProcessState::now();
    std::printf("this process before and after 5 rounds of 3 drivers: %zu fds, VmLck %lld kB, VmPin %lld kB -> %zu fds, "
                "VmLck %lld kB, VmPin %lld kB\n", before.fds, (long long)before.locked_kb, (long long)before.pinned_kb,
                after.fds, (long long)after.locked_kb, (long long)after.pinned_kb);
    EXPECT_EQ(before.differences(after), "");
    EXPECT_EQ(wait_until_back(base_), "");
}

}  // namespace
}  // namespace vfab::lab
