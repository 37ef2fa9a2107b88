// vfio-devctl's command line on a fake host (--root): exit status, one-line errors, JSON.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>

#include "devctl_cli.hpp"
#include "devctl_fake_host.hpp"

namespace vfab::devctl::testing {
namespace {

class Cli : public FakeHost {
protected:
    void SetUp() override {
        FakeHost::SetUp();
        add_device("0000:00:02.0", "0x8086", "0x10d3", "0x020000", "vfio-pci", 1);
        add_device("0000:00:1f.3", "0x8086", "0xa348", "0x040300", "snd_hda_intel", 7);
    }

    int run(std::vector<std::string> args) {
        args.insert(args.begin(), "vfio-devctl");
        args.push_back("--root=" + root_.string());
        args.push_back("--pci-ids=" + (root_ / "pci.ids").string());
        std::vector<const char*> argv;
        for (const std::string& a : args) argv.push_back(a.c_str());
        out_.str("");
        err_.str("");
        return run_cli(static_cast<int>(argv.size()), argv.data(), out_, err_);
    }
    static int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

    std::ostringstream out_, err_;
};

TEST_F(Cli, MalformedAddressIsOneLineAndNonZero) {
    EXPECT_EQ(run({"show", "0000:00:2.0"}), 1);
    EXPECT_EQ(lines(err_.str()), 1) << err_.str();
    EXPECT_TRUE(err_.str().starts_with("vfio-devctl: '0000:00:2.0' is not a PCI address")) << err_.str();
    EXPECT_TRUE(out_.str().empty());
}

TEST_F(Cli, AbsentDeviceIsOneLineAndNonZero) {
    for (const char* cmd : {"show", "bind", "unbind", "restore"}) {
        EXPECT_EQ(run({cmd, "0000:00:09.0"}), 1) << cmd;
        EXPECT_EQ(err_.str(), "vfio-devctl: no PCI device 0000:00:09.0: check the address with `lspci -D` or "
                              "`vfio-devctl list`\n") << cmd;
    }
}

TEST_F(Cli, UsageErrorsExitTwoWithOneLine) {
    EXPECT_EQ(run({}), 2);
    EXPECT_EQ(lines(err_.str()), 1) << err_.str();
    EXPECT_EQ(run({"frobnicate"}), 2);
    EXPECT_EQ(lines(err_.str()), 1) << err_.str();
    EXPECT_EQ(run({"show"}), 2);
    EXPECT_NE(err_.str().find("BDF"), std::string::npos) << err_.str();
}

TEST_F(Cli, HelpExitsZero) {
    EXPECT_EQ(run({"--help"}), 0);
    EXPECT_NE(out_.str().find("bind"), std::string::npos);
    EXPECT_EQ(out_.str().find("--root"), std::string::npos) << "test-only options stay hidden";
}

TEST_F(Cli, ListJsonParses) {
    ASSERT_EQ(run({"list", "--json"}), 0) << err_.str();
    auto j = nlohmann::json::parse(out_.str(), nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << out_.str();
    ASSERT_EQ(j.size(), 1u);
    EXPECT_EQ(j[0]["bdf"], "0000:00:02.0");
    ASSERT_EQ(run({"list", "--all", "--json"}), 0);
    EXPECT_EQ(nlohmann::json::parse(out_.str()).size(), 2u);
}

TEST_F(Cli, ShowWithoutVfioNodes) {
    ASSERT_EQ(run({"show", "00:1f.3", "--json"}), 0) << err_.str();
    auto j = nlohmann::json::parse(out_.str(), nullptr, false);
    ASSERT_FALSE(j.is_discarded());
    EXPECT_EQ(j["device"], "Cannon Lake PCH cAVS");
    EXPECT_EQ(j["iommu_backend"]["name"], "none");
    EXPECT_TRUE(j["vfio"].is_null());
    ASSERT_EQ(run({"show", "0000:00:1f.3"}), 0);
    EXPECT_NE(out_.str().find("IOMMU backend: none"), std::string::npos) << out_.str();
}

TEST_F(Cli, CheckExitStatusFollowsBlockers) {
    add_char_device("dev/vfio/vfio", 0666);
    add_char_device("dev/vfio/1");
    int healthy = run({"check"});
    EXPECT_NE(out_.str().find("[ok]"), std::string::npos) << out_.str();
    fs::remove_all(root_ / "sys/class/iommu/dmar0");
    EXPECT_EQ(run({"check", "--json"}), 1);
    auto j = nlohmann::json::parse(out_.str(), nullptr, false);
    ASSERT_FALSE(j.is_discarded());
    EXPECT_FALSE(j["ok"].get<bool>());
    EXPECT_FALSE(j["iommu"]["on"].get<bool>());
    // Healthy unless this process's own memlock limit is low and it lacks CAP_IPC_LOCK.
    if (healthy != 0) {
        EXPECT_NE(out_.str().find("memlock"), std::string::npos);
    }
}

TEST_F(Cli, HugepagesBadSizeIsOneLine) {
    EXPECT_EQ(run({"hugepages", "--reserve", "4", "--size", "3X"}), 1);
    EXPECT_EQ(err_.str(), "vfio-devctl: '3X' is not a page size: use 2M or 1G\n");
    EXPECT_EQ(run({"hugepages", "--json"}), 0);
    EXPECT_EQ(nlohmann::json::parse(out_.str()).size(), 3u);
}

}  // namespace
}  // namespace vfab::devctl::testing
