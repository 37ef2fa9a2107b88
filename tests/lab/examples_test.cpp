// The examples (examples/pktgen, examples/pingpong), the real binaries, in the lab guest on the
// two wired e1000e NICs: their counts, their JSON, their error messages. The lab copies them
// into /vfab/bin beside this test (scripts/lab --extra).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <sstream>
#include <thread>

#include "lab_env.hpp"
#include "leak_check.hpp"
#include "pci_removal.hpp"
#include "spawn.hpp"

namespace vfab::lab {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

constexpr const char* kNic0 = "0000:00:02.0";
constexpr const char* kNic1 = "0000:00:03.0";

std::string example(const char* name) { return (fs::read_symlink("/proc/self/exe").parent_path() / name).string(); }

Outcome run(std::vector<std::string> args, std::chrono::milliseconds limit = 120s) {
    Outcome r = run_program(std::move(args), limit);
    std::printf("%s%s", r.out.c_str(), r.err.c_str());
    return r;
}

json parse_json(const Outcome& r) { return json::parse(r.out, nullptr, false); }

class Examples : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_TRUE(in_lab()) << "run this through scripts/lab";
        // Without an IOMMU vfab opens a device only when asked to (DMA is not isolated); the
        // examples take the backend from the environment, as every vfab application does.
        if (!iommu_on()) ::setenv("VFAB_IOMMU_BACKEND", "noiommu", 1);
        for (const char* x : {"pktgen", "pingpong", "rc_pingpong"})
            ASSERT_TRUE(fs::exists(example(x))) << example(x) << " is missing: the lab must copy it into the guest "
                                                << "(scripts/lab --extra build/<preset>/examples/" << x << ")";
    }
};

void expect_clean_rx(const json& rx, uint64_t count) {
    EXPECT_EQ(rx["frames"], count) << rx.dump();
    EXPECT_EQ(rx["lost"], 0) << rx.dump();
    EXPECT_EQ(rx["bad"], 0) << rx.dump();
    EXPECT_EQ(rx["out_of_order"], 0) << rx.dump();
    EXPECT_EQ(rx["missed"], 0) << rx.dump();
    EXPECT_GT(rx["pps"].get<double>(), 0) << rx.dump();
}

TEST_F(Examples, PktgenBusyPollSendsAndCountsEveryFrame) {
    Outcome r = run({example("pktgen"), "--tx", kNic0, "--rx", kNic1, "--count", "20000", "--size", "60", "--json"});
    ASSERT_EQ(r.rc, 0) << r.summary();
    json j = parse_json(r);
    ASSERT_TRUE(j.is_object()) << r.out;
    EXPECT_EQ(j["mode"], "poll");
    EXPECT_EQ(j["tx"]["device"], kNic0);
    EXPECT_EQ(j["tx"]["frames"], 20000);
    EXPECT_EQ(j["tx"]["bytes"], 20000 * 60);
    EXPECT_EQ(j["tx"]["errors"], 0);
    EXPECT_EQ(j["rx"]["device"], kNic1);
    expect_clean_rx(j["rx"], 20000);
    EXPECT_TRUE(j["ok"].get<bool>());
}

TEST_F(Examples, PktgenInterruptModeWithChecksumOffloadAndFullFrames) {
    Outcome r = run({example("pktgen"), "--tx", kNic0, "--rx", kNic1, "--count", "3000", "--size", "1514", "--interrupt",
                     "--offload", "--json"});
    ASSERT_EQ(r.rc, 0) << r.summary();
    json j = parse_json(r);
    ASSERT_TRUE(j.is_object()) << r.out;
    EXPECT_EQ(j["mode"], "interrupt");
    EXPECT_EQ(j["tx"]["frames"], 3000);
    EXPECT_TRUE(j["tx"]["offload"].get<bool>());
    expect_clean_rx(j["rx"], 3000);   // "bad" counts frames whose checksums are wrong
}

TEST_F(Examples, PktgenTextOutput) {
    Outcome r = run({example("pktgen"), "--tx", kNic1, "--rx", kNic0, "--count", "500", "--size", "128"});
    ASSERT_EQ(r.rc, 0) << r.summary();
    EXPECT_NE(r.out.find(std::string("tx ") + kNic1 + ": 500 frames, 64000 bytes in "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(std::string("rx ") + kNic0 + ": 500 frames, 64000 bytes in "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("lost 0, out of order 0, bad 0"), std::string::npos) << r.out;
}

// One port per process: a counter started first, then a generator aimed at its MAC.
TEST_F(Examples, PktgenGeneratorAndCounterAsTwoProcesses) {
    Child counter({example("pktgen"), "--rx", kNic1, "--count", "400", "--timeout", "20"});
    ASSERT_TRUE(counter.started());
    ASSERT_TRUE([&] {
        for (int i = 0; i < 500; ++i, std::this_thread::sleep_for(20ms))
            if (counter.output_so_far().find("pktgen: (none) -> ") != std::string::npos) return true;
        return false;
    }()) << "the counter did not get ready within 10 s";
    Outcome tx = run({example("pktgen"), "--tx", kNic0, "--count", "400", "--size", "200", "--dst-mac", "52:54:00:00:00:02",
                      "--json"});
    EXPECT_EQ(tx.rc, 0) << tx.summary();
    Outcome rx = counter.wait(30s);
    std::printf("%s%s", rx.out.c_str(), rx.err.c_str());
    ASSERT_EQ(rx.rc, 0) << rx.summary();
    EXPECT_NE(rx.out.find(std::string("rx ") + kNic1 + ": 400 frames, 80000 bytes"), std::string::npos) << rx.out;
    EXPECT_NE(rx.out.find("lost 0, out of order 0, bad 0"), std::string::npos) << rx.out;
}

void expect_rtts(const json& j, int count) {
    EXPECT_EQ(j["completed"], count) << j.dump();
    EXPECT_EQ(j["lost"], 0) << j.dump();
    const json& rtt = j["rtt_us"];
    EXPECT_GT(rtt["min"].get<double>(), 0) << rtt.dump();
    EXPECT_LE(rtt["min"].get<double>(), rtt["median"].get<double>()) << rtt.dump();
    EXPECT_LE(rtt["median"].get<double>(), rtt["p99"].get<double>()) << rtt.dump();
    EXPECT_LE(rtt["p99"].get<double>(), rtt["max"].get<double>()) << rtt.dump();
    EXPECT_EQ(j["pong"]["answered"], count) << j.dump();
}

TEST_F(Examples, PingpongBusyPoll) {
    Outcome r = run({example("pingpong"), "--ping", kNic0, "--pong", kNic1, "--count", "300", "--json"});
    ASSERT_EQ(r.rc, 0) << r.summary();
    json j = parse_json(r);
    ASSERT_TRUE(j.is_object()) << r.out;
    EXPECT_EQ(j["mode"], "poll");
    expect_rtts(j, 300);
}

TEST_F(Examples, PingpongInterruptModeAndText) {
    Outcome r = run({example("pingpong"), "--ping", kNic1, "--pong", kNic0, "--count", "50", "--size", "200", "--interrupt"});
    ASSERT_EQ(r.rc, 0) << r.summary();
    EXPECT_NE(r.out.find(std::string("pingpong: ") + kNic1 + " -> " + kNic0 + ", 50 of 50 round trips of 200 bytes (interrupt mode)"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("rtt: min "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("; lost 0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" woken by the channel, "), std::string::npos) << r.out;
}

// Every failure is one line on stderr, prefixed with the program's name, naming the device
// and what is wrong; exit 2 for a usage error, 1 for anything else.
TEST_F(Examples, ErrorsAreOneClearLine) {
    struct Case {
        std::vector<std::string> args;
        int rc;
        const char* says;
    };
    const Case cases[] = {
        {{"pktgen", "--tx", "0000:00:1e.0"}, 1, "0000:00:1e.0"},
        {{"pktgen", "--tx", "zz:00.0"}, 1, "'zz:00.0' is not a PCI address"},
        {{"pktgen", "--rx", "0000:00:01.0"}, 1, "0000:00:01.0"},   // edu: not an 82574L
        {{"pktgen", "--tx", kNic0, "--rx", kNic0}, 2, "the same port"},
        {{"pktgen", "--count", "5"}, 2, "name a port"},
        {{"pktgen", "--tx", kNic0, "--size", "20"}, 2, "--size"},
        {{"pktgen", "--tx", kNic0, "--dst-mac", "nope"}, 2, "not a MAC address"},
        {{"pingpong", "--ping", "0000:00:1e.0"}, 1, "0000:00:1e.0"},
        {{"pingpong"}, 2, "name a port"},
        {{"pingpong", "--ping", kNic0, "--bogus"}, 2, "pingpong: "},
    };
    for (const Case& c : cases) {
        std::vector<std::string> args = c.args;
        args[0] = example(c.args[0].c_str());
        Outcome r = run(args, 30s);
        SCOPED_TRACE(c.args[0] + " " + c.args.back());
        EXPECT_EQ(r.rc, c.rc) << r.summary();
        // vfab's own warnings ("vfab: WARNING: no-IOMMU mode ...") are not the program's.
        std::string own;
        std::istringstream lines(r.err);
        for (std::string line; std::getline(lines, line);)
            if (!line.starts_with("vfab: ")) own += line + "\n";
        EXPECT_EQ(std::count(own.begin(), own.end(), '\n'), 1) << r.err;
        EXPECT_TRUE(own.starts_with(c.args[0] + ": ")) << r.err;
        EXPECT_NE(own.find(c.says), std::string::npos) << r.err;
    }
}


// A shipped program and a device the kernel takes away mid-run (docs/reliability.md): the
// program stops its traffic, says so in one line naming the device, exits 1, and its close lets
// the removal finish — without waiting for the run's end. The device is then given back to
// vfio-pci and works for the next program.
// `ready`: a line the program prints once traffic runs, or "" to wait until it holds the device.
// `says`: how its line begins ("pktgen: "; the RDMA pingpongs print rdma-core's way, bare).
void expect_removal_ends_the_run(std::vector<std::string> args, const std::string& ready, const char* name,
                                 const std::string& says) {
    Child prog(std::move(args));
    ASSERT_TRUE(prog.started());
    ASSERT_TRUE(ready.empty() ? wait_until_open(prog) : [&] {
        for (int i = 0; i < 500; ++i, std::this_thread::sleep_for(20ms))
            if (prog.output_so_far().find(ready) != std::string::npos) return true;
        return false;
    }()) << name << " did not start within 10 s";
    std::this_thread::sleep_for(1s);   // traffic running (or, for a program that prints nothing, its set-up done)
    const auto [r, removal_s] = remove_while_running(prog, kNic1, 60s);
    std::printf("%s: the removal of %s finished %.3f s after it was asked for\n", name, kNic1, removal_s);
    EXPECT_FALSE(r.timed_out) << r.summary();
    EXPECT_EQ(r.rc, 1) << r.summary();
    const auto own = own_lines(r.err);
    EXPECT_EQ(own.size(), 1u) << r.err;   // not ASSERT: the device must be given back below
    EXPECT_TRUE(!own.empty() && own[0].starts_with(says + kNic1 + ": the device is being removed")) << r.err;
    // Far less than the run's 60 s: the program let go as soon as it saw the event.
    EXPECT_GE(removal_s, 0.0);
    EXPECT_LT(removal_s, 20.0);
    give_back_to_vfio(kNic1);
    ASSERT_EQ(driver_of(kNic1), "vfio-pci");
    Outcome again = run({example("pktgen"), "--tx", kNic0, "--rx", kNic1, "--count", "200"});
    EXPECT_EQ(again.rc, 0) << "the device after its removal and rescan: " << again.summary();
}

TEST_F(Examples, PktgenLetsARemovedDeviceGo) {
    expect_removal_ends_the_run({example("pktgen"), "--tx", kNic0, "--rx", kNic1, "--seconds", "60"}, "pktgen: ", "pktgen",
                                "pktgen: ");
}

TEST_F(Examples, PktgenInInterruptModeLetsARemovedDeviceGo) {
    expect_removal_ends_the_run({example("pktgen"), "--tx", kNic0, "--rx", kNic1, "--seconds", "60", "--interrupt"},
                                "pktgen: ", "pktgen", "pktgen: ");
}

TEST_F(Examples, PingpongLetsARemovedDeviceGo) {
    expect_removal_ends_the_run({example("pingpong"), "--pong", kNic1, "--count", "100000000", "--timeout", "60"},
                                "", "pingpong", "pingpong: ");
}

// The RDMA pingpong as a server that no client comes to: it waits in the address exchange,
// watching its device meanwhile.
TEST_F(Examples, RcPingpongWaitingForItsPeerLetsARemovedDeviceGo) {
    expect_removal_ends_the_run({example("rc_pingpong"), "-d", kNic1, "--ip", "10.77.0.9"}, "", "rc_pingpong", "");
}

}  // namespace
}  // namespace vfab::lab
