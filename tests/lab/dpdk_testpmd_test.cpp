// DPDK's e1000 PMD on the lab's two e1000e NICs, as the reference vfab's own driver is
// measured against: /vfab/bin/dpdk-pps (scripts/lab.d/dpdk-pps.sh, copied in by
// scripts/lab --dpdk) runs Debian's dpdk-testpmd, txonly on NIC0 and rxonly on NIC1, and
// prints the packets per second each NIC counted.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "lab_env.hpp"

extern char** environ;

namespace vfab::lab {
namespace {
namespace fs = std::filesystem;

constexpr int kSeconds = 3;

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

// dpdk-pps beside this binary (/vfab/bin in the guest), or $VFAB_DPDK_PPS.
std::string dpdk_pps() {
    if (const char* t = std::getenv("VFAB_DPDK_PPS")) return t;
    return (fs::read_symlink("/proc/self/exe").parent_path() / "dpdk-pps").string();
}

struct PpsRun {
    int rc = -1;
    std::string out, err;
};

PpsRun run_dpdk_pps(int seconds) {
    std::string tool = dpdk_pps(), secs = std::to_string(seconds);
    std::vector<char*> argv = {tool.data(), secs.data(), nullptr};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/tmp/dpdk-pps.out", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, "/tmp/dpdk-pps.err", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    PpsRun r;
    pid_t pid;
    if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) == 0) {
        int status = 0;
        waitpid(pid, &status, 0);
        r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    posix_spawn_file_actions_destroy(&fa);
    r.out = slurp("/tmp/dpdk-pps.out");
    r.err = slurp("/tmp/dpdk-pps.err");
    return r;
}

// "HugePages_Total" / "HugePages_Free" from /proc/meminfo.
long meminfo(const std::string& key) {
    std::ifstream in("/proc/meminfo");
    std::string name;
    long value = -1;
    while (in >> name) {
        if (name == key + ":") {
            in >> value;
            return value;
        }
        in.ignore(1 << 10, '\n');
    }
    return -1;
}

struct Figures {
    long tx_pps = 0, rx_pps = 0, tx_packets = 0, rx_packets = 0, rx_missed = 0;
    double seconds = 0;
};

// The line "dpdk-e1000 tx_pps=N rx_pps=N seconds=S tx_packets=N rx_packets=N rx_missed=N".
std::optional<Figures> parse(const std::string& out) {
    const size_t at = out.find("dpdk-e1000 tx_pps=");
    if (at == std::string::npos) return std::nullopt;
    Figures f;
    const int n = std::sscanf(out.c_str() + at,
                              "dpdk-e1000 tx_pps=%ld rx_pps=%ld seconds=%lf tx_packets=%ld rx_packets=%ld rx_missed=%ld",
                              &f.tx_pps, &f.rx_pps, &f.seconds, &f.tx_packets, &f.rx_packets, &f.rx_missed);
    if (n != 6) return std::nullopt;
    return f;
}

class DpdkTestpmd : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_TRUE(in_lab()) << "run this through scripts/lab --dpdk";
        struct stat st;
        ASSERT_EQ(stat(dpdk_pps().c_str(), &st), 0)
            << dpdk_pps() << " missing: boot the lab with scripts/lab --dpdk";
    }
};

TEST_F(DpdkTestpmd, E1000PmdSendsFromNic0AndNic1ReceivesIt) {
    const long huge_free = meminfo("HugePages_Free");
    ASSERT_GT(huge_free, 0) << "the guest has no free hugepages";

    PpsRun r = run_dpdk_pps(kSeconds);
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
    std::optional<Figures> f = parse(r.out);
    ASSERT_TRUE(f) << "no result line from dpdk-pps:\n" << r.out << r.err;
    std::cout << r.out;   // the figures, in the lab's console log
    RecordProperty("tx_pps", std::to_string(f->tx_pps));
    RecordProperty("rx_pps", std::to_string(f->rx_pps));

    EXPECT_GE(f->seconds, kSeconds - 0.5);
    EXPECT_LT(f->seconds, kSeconds + 5.0);
    // Both NICs counted traffic; NIC1 never more than NIC0 sent (the hub may drop, not add).
    EXPECT_GT(f->tx_packets, 0);
    EXPECT_GT(f->rx_packets, 0);
    EXPECT_LE(f->rx_packets, f->tx_packets + 64) << "NIC1 counted more than NIC0 sent";
    // Under TCG the PMD moves a few 100 kpps; far below that means it is not polling.
    EXPECT_GT(f->rx_pps, 10'000);

    // --in-memory: DPDK gives its hugepages back, so vfab can run in the same boot after it.
    EXPECT_EQ(meminfo("HugePages_Free"), huge_free) << "DPDK left hugepages behind";
    for (const char* bdf : {"0000:00:02.0", "0000:00:03.0"}) {
        std::error_code ec;
        fs::path drv = fs::read_symlink(fs::path("/sys/bus/pci/devices") / bdf / "driver", ec);
        EXPECT_EQ(drv.filename().string(), "vfio-pci") << bdf;
    }
}

}  // namespace
}  // namespace vfab::lab
