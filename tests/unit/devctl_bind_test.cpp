// vfio-devctl bind/unbind on a fake host: the refusals (checked before any change), the
// rollback when the kernel does not take the device, the record of the original driver,
// and hugepage reservations.
#include <gtest/gtest.h>

#include "devctl_bind.hpp"
#include "devctl_driver_ops.hpp"
#include "devctl_fake_host.hpp"
#include "devctl_hugepages.hpp"

namespace vfab::devctl::testing {
namespace {

class Bind : public FakeHost {
protected:
    void SetUp() override {
        FakeHost::SetUp();
        add_device("0000:00:02.0", "0x8086", "0x10d3", "0x020000", "vfio-pci", 1);
        add_device("0000:00:03.0", "0x8086", "0x10d3", "0x020000", "e1000e", 2);
        add_interface("0000:00:03.0", "vfabfake0", "0x1002");   // down, no address
        fs::create_directories(root_ / "dev");
    }
    PciAddress addr(const char* s) { return *PciAddress::parse(s); }
    std::string override_of(const char* bdf) { return read(root_ / "sys/bus/pci/devices" / bdf / "driver_override"); }
};

TEST_F(Bind, RefusesAnInterfaceThatIsUpUnlessForced) {
    add_interface("0000:00:03.0", "vfabfake0", "0x1003");
    auto r = bind(ctx_, {{addr("0000:00:03.0")}, {}, {}, false, false});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, EBUSY);
    EXPECT_NE(r.error().message.find("backs network interface vfabfake0, which is up"), std::string::npos)
        << r.error().message;
    EXPECT_NE(r.error().message.find("ip link set vfabfake0 down"), std::string::npos);
    EXPECT_NE(r.error().message.find("--force"), std::string::npos);
    EXPECT_EQ(override_of("0000:00:03.0"), "(null)") << "nothing may change before the checks pass";
}

TEST_F(Bind, RefusesASharedGroupAndOffersWholeGroup) {
    add_device("0000:00:03.1", "0x8086", "0x10d3", "0x020000", "snd_hda_intel", 2);
    auto r = bind(ctx_, {{addr("0000:00:03.0")}, {}, {}, false, false});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("shares IOMMU group 2 with 0000:00:03.1 (snd_hda_intel)"), std::string::npos)
        << r.error().message;
    EXPECT_NE(r.error().message.find("--whole-group"), std::string::npos);
}

TEST_F(Bind, RefusesWithoutIommuGroupUnlessNoIommuMode) {
    add_device("0000:00:05.0", "0x8086", "0x10d3", "0x020000", "e1000e", -1);
    auto r = bind(ctx_, {{addr("0000:00:05.0")}, {}, {}, false, false});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("has no IOMMU group"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("intel_iommu=on"), std::string::npos);
    EXPECT_NE(r.error().message.find("enable_unsafe_noiommu_mode"), std::string::npos);
}

TEST_F(Bind, UnknownUserIsRefusedFirst) {
    auto r = bind(ctx_, {{addr("0000:00:03.0")}, std::string("no-such-user-xyz"), {}, false, false});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("no user 'no-such-user-xyz'"), std::string::npos);
}

TEST_F(Bind, LoadsVfioPciWithModprobeAndExplainsFailure) {
    fs::remove_all(root_ / "sys/bus/pci/drivers/vfio-pci");
    auto r = bind(ctx_, {{addr("0000:00:03.0")}, {}, {}, false, false});
    ASSERT_FALSE(r.ok());
    ASSERT_EQ(commands_.size(), 1u);
    EXPECT_EQ(commands_[0], (std::vector<std::string>{"modprobe", "vfio-pci"}));
    EXPECT_NE(r.error().message.find("vfio-pci is not loaded and `modprobe vfio-pci` failed (modprobe: FATAL"),
              std::string::npos) << r.error().message;
}

// The fake kernel never moves a device: the bind steps are written, the device stays on
// e1000e, and bind must put it back and say so.
TEST_F(Bind, FailedBindRestoresTheOriginalDriverAndSaysSo) {
    auto r = bind(ctx_, {{addr("0000:00:03.0")}, {}, {}, false, false});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("is on e1000e, not on vfio-pci"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("0000:00:03.0 was put back on e1000e"), std::string::npos) << r.error().message;
    EXPECT_EQ(read(root_ / "sys/bus/pci/drivers/e1000e/unbind"), "0000:00:03.0");
    EXPECT_EQ(read(root_ / "sys/bus/pci/drivers_probe"), "0000:00:03.0");
    EXPECT_EQ(override_of("0000:00:03.0"), "") << "cleared again by the rollback";
    EXPECT_FALSE(read_record(ctx_, addr("0000:00:03.0"))) << "no stale record after a rollback";
}

TEST_F(Bind, AlreadyOnVfioIsDone) {
    auto r = bind(ctx_, {{addr("0000:00:02.0")}, {}, {}, false, false});
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->size(), 2u);
    EXPECT_EQ((*r)[0], "0000:00:02.0: already on vfio-pci (IOMMU group 1)");
    EXPECT_NE((*r)[1].find("/infiniband: made, empty"), std::string::npos) << (*r)[1];
}

// RDMA programs (UCX) look for a device's file under /dev/infiniband; bind makes the
// directory once, empty, and says so.
TEST_F(Bind, MakesTheRdmaDeviceDirectoryOnce) {
    ASSERT_TRUE(bind(ctx_, {{addr("0000:00:02.0")}, {}, {}, false, false}).ok());
    EXPECT_TRUE(fs::is_directory(root_ / "dev/infiniband"));
    EXPECT_TRUE(fs::is_empty(root_ / "dev/infiniband"));
    auto again = bind(ctx_, {{addr("0000:00:02.0")}, {}, {}, false, false});
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ(again->size(), 1u);
}

TEST_F(Bind, RecordsRoundTrip) {
    EXPECT_FALSE(read_record(ctx_, addr("0000:00:03.0")));
    ASSERT_TRUE(write_record(ctx_, addr("0000:00:03.0"), std::string("e1000e")).ok());
    EXPECT_EQ(read_record(ctx_, addr("0000:00:03.0")), "e1000e");
    EXPECT_TRUE(fs::exists(root_ / "run/vfab/devctl/0000:00:03.0.driver"));
    ASSERT_TRUE(write_record(ctx_, addr("0000:00:03.0"), std::nullopt).ok());
    EXPECT_EQ(read_record(ctx_, addr("0000:00:03.0")), "");
    forget_record(ctx_, addr("0000:00:03.0"));
    EXPECT_FALSE(read_record(ctx_, addr("0000:00:03.0")));
}

TEST_F(Bind, UnbindOfADeviceNotOnVfioIsANoOp) {
    auto r = unbind(ctx_, {{addr("0000:00:03.0")}, {}, false});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ((*r)[0], "0000:00:03.0: not on vfio-pci (on e1000e), nothing to do");
}

TEST_F(Bind, UnbindRefusesADeviceInUse) {
    if (!add_char_device("dev/vfio/1")) GTEST_SKIP() << "no mknod here";
    fs::create_directories(root_ / "proc/4242/fd");
    write(root_ / "proc/4242/comm", "trader");
    fs::create_symlink(root_ / "dev/vfio/1", root_ / "proc/4242/fd/7");
    auto r = unbind(ctx_, {{addr("0000:00:02.0")}, std::string("e1000e"), false});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("is open in process 4242 (trader)"), std::string::npos) << r.error().message;
}

TEST_F(Bind, UnbindWritesTheStepsAndChecksTheResult) {
    ASSERT_TRUE(write_record(ctx_, addr("0000:00:02.0"), std::string("e1000e")).ok());
    auto r = unbind(ctx_, {{addr("0000:00:02.0")}, {}, false});
    ASSERT_FALSE(r.ok()) << "the fake kernel keeps it on vfio-pci";
    EXPECT_EQ(read(root_ / "sys/bus/pci/drivers/vfio-pci/unbind"), "0000:00:02.0");
    EXPECT_EQ(read(root_ / "sys/bus/pci/drivers/e1000e/bind"), "0000:00:02.0");
    EXPECT_NE(r.error().message.find("is on vfio-pci, not on e1000e"), std::string::npos) << r.error().message;
}

TEST(Hugepages, ParsesPageSizes) {
    EXPECT_EQ(*parse_page_size("2M"), 2048u);
    EXPECT_EQ(*parse_page_size("1G"), 1048576u);
    EXPECT_EQ(*parse_page_size("2048k"), 2048u);
    EXPECT_EQ(*parse_page_size("2MB"), 2048u);
    EXPECT_EQ(*parse_page_size("1GiB"), 1048576u);
    for (const char* bad : {"", "2", "M", "2X", "0M", "2Mx"}) EXPECT_FALSE(parse_page_size(bad).ok()) << bad;
}

TEST_F(Bind, ReservesHugepagesAndChecksWhatItGot) {
    auto r = reserve_hugepages(ctx_, 128, 2048, std::nullopt);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(read(root_ / "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"), "128");
    EXPECT_NE(r->find("reserved 128 x 2 MiB pages (256 MiB)"), std::string::npos) << *r;
    r = reserve_hugepages(ctx_, 8, 2048, 0);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(read(root_ / "sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"), "8");

    auto no_node = reserve_hugepages(ctx_, 8, 2048, 3);
    ASSERT_FALSE(no_node.ok());
    EXPECT_NE(no_node.error().message.find("no NUMA node 3: this machine has 1"), std::string::npos)
        << no_node.error().message;
    auto no_size = reserve_hugepages(ctx_, 8, 16384, std::nullopt);
    ASSERT_FALSE(no_size.ok());
    EXPECT_NE(no_size.error().message.find("sizes: 2 MiB, 1 GiB"), std::string::npos) << no_size.error().message;
}

TEST_F(Bind, HugepagePoolsPerSizeAndNode) {
    auto pools = hugepage_pools(ctx_.paths);
    ASSERT_EQ(pools.size(), 3u);
    EXPECT_EQ(pools[0].node, -1);
    EXPECT_EQ(pools[0].page_kb, 2048u);
    EXPECT_EQ(pools[0].total, 64u);
    EXPECT_EQ(pools[0].free, 60u);
    EXPECT_EQ(pools[1].page_kb, 1048576u);
    EXPECT_EQ(pools[2].node, 0);
}

}  // namespace
}  // namespace vfab::devctl::testing
