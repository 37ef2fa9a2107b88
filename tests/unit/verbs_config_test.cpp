// Which devices the drop-in libibverbs lists for a process (verbs/config.cpp): the
// configuration file's, VFAB_VERBS_DEVICES alone when it is set, and one local-rank device per
// rank of a parallel job, so that ranks on one host never open each other's NICs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "verbs/objects.hpp"

namespace vfab::verbs {
namespace {

class VerbsConfigTest : public ::testing::Test {
protected:
    void SetUp() override {
        for (const char* v : kVars) ::unsetenv(v);
        path_ = ::testing::TempDir() + "vfab-verbs-" + std::to_string(::getpid()) + ".conf";
        lib_.config_path = path_;
        library().quiet = true;   // tell() speaks for the process's library
    }
    void TearDown() override {
        for (const char* v : kVars) ::unsetenv(v);
        std::remove(path_.c_str());
    }
    void write_file(const std::string& text) { std::ofstream(path_) << text; }
    std::vector<std::string> listed(bool& others) {
        std::vector<std::string> out;
        for (const DeviceConfig& d : configured_devices(lib_, others)) out.push_back(d.bdf);
        return out;
    }

    static constexpr const char* kVars[] = {"VFAB_VERBS_DEVICES", "VFAB_VERBS_LOCAL_RANK_DEVICES", "OMPI_COMM_WORLD_LOCAL_RANK",
                                            "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "PMIX_LOCAL_RANK", "SLURM_LOCALID"};
    Library lib_;
    std::string path_;
};

using Bdfs = std::vector<std::string>;

TEST_F(VerbsConfigTest, TheFilesDevicesThenEveryOtherNic) {
    write_file("device 0000:00:05.0 10.0.0.2 east\ndevice 00:04.0 10.0.0.1\n");
    bool others = false;
    EXPECT_EQ(listed(others), (Bdfs{"0000:00:05.0", "0000:00:04.0"}));
    EXPECT_TRUE(others);
}

TEST_F(VerbsConfigTest, TheEnvironmentsDevicesAndNoOthers) {
    write_file("device 0000:00:05.0 10.0.0.2\nquiet yes\n");
    ::setenv("VFAB_VERBS_DEVICES", "0000:00:04.0=10.0.0.1", 1);
    bool others = true;
    EXPECT_EQ(listed(others), (Bdfs{"0000:00:04.0"}));
    EXPECT_FALSE(others);
}

TEST_F(VerbsConfigTest, EachLocalRankTakesItsOwnDevice) {
    write_file("local_rank_device 0000:00:04.0 10.0.0.1\nlocal_rank_device 0000:00:05.0 10.0.0.2\ndevice 0000:00:06.0 10.0.0.3\n");
    const std::pair<const char*, const char*> launchers[] = {{"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"MPI_LOCALRANKID", "0"}, {"SLURM_LOCALID", "3"}};
    const Bdfs expected[] = {{"0000:00:05.0"}, {"0000:00:04.0"}, {"0000:00:05.0"}};   // rank mod 2
    for (size_t i = 0; i < std::size(launchers); ++i) {
        ::setenv(launchers[i].first, launchers[i].second, 1);
        bool others = true;
        EXPECT_EQ(listed(others), expected[i]) << launchers[i].first;
        EXPECT_FALSE(others);
        ::unsetenv(launchers[i].first);
    }
}

TEST_F(VerbsConfigTest, LocalRankDevicesFromTheEnvironmentReplaceTheFiles) {
    write_file("local_rank_device 0000:00:06.0 10.0.0.3\n");
    ::setenv("VFAB_VERBS_LOCAL_RANK_DEVICES", "0000:00:04.0=10.0.0.1,0000:00:05.0=10.0.0.2", 1);
    ::setenv("PMI_LOCAL_RANK", "3", 1);
    bool others = true;
    EXPECT_EQ(listed(others), (Bdfs{"0000:00:05.0"}));
    EXPECT_FALSE(others);
}

TEST_F(VerbsConfigTest, AnEmptyDeviceListIsNoList) {
    write_file("device 0000:00:06.0 10.0.0.3\n");
    ::setenv("VFAB_VERBS_DEVICES", "", 1);
    bool others = false;
    EXPECT_EQ(listed(others), (Bdfs{"0000:00:06.0"}));
    EXPECT_TRUE(others);
}

TEST_F(VerbsConfigTest, OutsideAParallelJobLocalRankDevicesAreNotUsed) {
    write_file("local_rank_device 0000:00:04.0 10.0.0.1\ndevice 0000:00:06.0 10.0.0.3\n");
    bool others = false;
    EXPECT_EQ(listed(others), (Bdfs{"0000:00:06.0"}));
    EXPECT_TRUE(others);
}

TEST_F(VerbsConfigTest, ABadEntryIsIgnoredAndTheRestKept) {
    write_file("device not-a-pci 10.0.0.1\ndevice 0000:00:04.0 nowhere\ndevice 0000:00:05.0 10.0.0.2\n");
    bool others = false;
    EXPECT_EQ(listed(others), (Bdfs{"0000:00:05.0"}));
}

}  // namespace
}  // namespace vfab::verbs
