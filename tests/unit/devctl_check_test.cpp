// vfio-devctl check on a fake host: what it finds and the fixes it names.
#include <gtest/gtest.h>

#include "devctl_check.hpp"
#include "devctl_fake_host.hpp"
#include "devctl_render.hpp"

namespace vfab::devctl::testing {
namespace {

class Check : public FakeHost {
protected:
    void SetUp() override {
        FakeHost::SetUp();
        add_device("0000:00:02.0", "0x8086", "0x10d3", "0x020000", "vfio-pci", 1, "0");
        add_char_device("dev/vfio/vfio", 0666);
        add_char_device("dev/vfio/1", 0600);
        proc_.memlock = 64ull << 30;
        proc_.uid = 0;
    }

    const Finding* first(const CheckReport& r, const std::string& topic) {
        for (const Finding& f : r.findings)
            if (f.topic == topic) return &f;
        return nullptr;
    }

    ProcessFacts proc_;
};

TEST_F(Check, HealthyHostPasses) {
    CheckReport r = check_host(ctx_, proc_);
    EXPECT_FALSE(r.blocked()) << dump(check_json(r));
    const Finding* iommu = first(r, "iommu");
    ASSERT_NE(iommu, nullptr);
    EXPECT_EQ(iommu->severity, Severity::ok);
    EXPECT_NE(iommu->message.find("IOMMU on: dmar0"), std::string::npos) << iommu->message;
    EXPECT_NE(iommu->message.find("DMA-FQ"), std::string::npos) << iommu->message;
    EXPECT_NE(iommu->message.find("intel_iommu=on"), std::string::npos) << iommu->message;
    EXPECT_TRUE(r.iommu.on);
    EXPECT_EQ(first(r, "vfio-pci")->severity, Severity::ok);
    EXPECT_EQ(first(r, "hugepages")->severity, Severity::ok);
    EXPECT_EQ(first(r, "memlock")->severity, Severity::ok);
}

TEST_F(Check, IommuOffBlocksAndSaysHowToTurnItOn) {
    fs::remove_all(root_ / "sys/class/iommu/dmar0");
    write(root_ / "proc/cmdline", "console=ttyS0 intel_iommu=off");
    CheckReport r = check_host(ctx_, proc_);
    EXPECT_TRUE(r.blocked());
    EXPECT_FALSE(r.iommu.on);
    const Finding* f = first(r, "iommu");
    EXPECT_EQ(f->severity, Severity::error);
    EXPECT_NE(f->message.find("intel_iommu=off"), std::string::npos) << f->message;
    EXPECT_NE(f->fix.find("intel_iommu=on"), std::string::npos) << f->fix;
    EXPECT_NE(f->fix.find("update-grub"), std::string::npos) << f->fix;
}

TEST_F(Check, AmdHostGetsAmdFix) {
    fs::remove_all(root_ / "sys/class/iommu/dmar0");
    write(root_ / "proc/cmdline", "console=ttyS0");
    write(root_ / "proc/cpuinfo", "vendor_id\t: AuthenticAMD");
    CheckReport r = check_host(ctx_, proc_);
    EXPECT_NE(first(r, "iommu")->fix.find("amd_iommu=on"), std::string::npos);
}

TEST_F(Check, FirmwareTableBeatsTheCpuVendor) {
    fs::remove_all(root_ / "sys/class/iommu/dmar0");
    write(root_ / "proc/cmdline", "console=ttyS0");
    write(root_ / "proc/cpuinfo", "vendor_id\t: AuthenticAMD");   // QEMU's TCG "max" CPU says so
    write(root_ / "sys/firmware/acpi/tables/DMAR", "");
    EXPECT_NE(first(check_host(ctx_, proc_), "iommu")->fix.find("intel_iommu=on"), std::string::npos);
    fs::remove(root_ / "sys/firmware/acpi/tables/DMAR");
    write(root_ / "proc/cmdline", "console=ttyS0 intel_iommu=off");
    EXPECT_NE(first(check_host(ctx_, proc_), "iommu")->fix.find("intel_iommu=on"), std::string::npos);
}

TEST_F(Check, NoIommuModeIsAWarningNotABlocker) {
    fs::remove_all(root_ / "sys/class/iommu/dmar0");
    write(root_ / "sys/module/vfio/parameters/enable_unsafe_noiommu_mode", "Y");
    CheckReport r = check_host(ctx_, proc_);
    const Finding* f = first(r, "iommu");
    EXPECT_EQ(f->severity, Severity::warning);
    EXPECT_NE(f->message.find("no-IOMMU"), std::string::npos);
    EXPECT_TRUE(r.iommu.noiommu_mode);
    EXPECT_FALSE(r.blocked()) << dump(check_json(r));
}

TEST_F(Check, VfioPciNotLoadedButAvailable) {
    fs::remove_all(root_ / "sys/bus/pci/drivers/vfio-pci");
    write(root_ / "lib/modules/6.1.0-test/modules.dep",
          "kernel/drivers/vfio/pci/vfio-pci.ko: kernel/drivers/vfio/vfio.ko\nkernel/drivers/vfio/vfio.ko:");
    CheckReport r = check_host(ctx_, proc_);
    const Finding* f = first(r, "vfio-pci");
    EXPECT_EQ(f->severity, Severity::warning);
    EXPECT_EQ(f->fix, "modprobe vfio-pci && echo vfio-pci > /etc/modules-load.d/vfab.conf");
    fs::remove(root_ / "lib/modules/6.1.0-test/modules.dep");
    r = check_host(ctx_, proc_);
    EXPECT_EQ(first(r, "vfio-pci")->severity, Severity::error);
}

TEST_F(Check, MemlockBlocksOnlyWithoutCapIpcLock) {
    proc_.memlock = 8 << 20;
    proc_.uid = 1000;
    CheckReport r = check_host(ctx_, proc_);
    const Finding* f = first(r, "memlock");
    EXPECT_EQ(f->severity, Severity::error);
    EXPECT_NE(f->message.find("8 MiB"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("256 MiB"), std::string::npos) << f->message;
    EXPECT_NE(f->fix.find("memlock unlimited"), std::string::npos);
    proc_.cap_ipc_lock = true;
    EXPECT_EQ(first(check_host(ctx_, proc_), "memlock")->severity, Severity::info);
}

TEST_F(Check, NoHugepagesIsAWarningWithTheReserveCommand) {
    hugepages("sys/kernel/mm/hugepages", 2048, 0, 0);
    CheckReport r = check_host(ctx_, proc_);
    const Finding* f = first(r, "hugepages");
    EXPECT_EQ(f->severity, Severity::warning);
    EXPECT_EQ(f->fix, "vfio-devctl hugepages --reserve 128 --size 2M");
}

TEST_F(Check, DeviceNodeWithoutHugepagesIsNamed) {
    fs::remove_all(root_ / "sys/devices/system/node/node0");
    hugepages("sys/devices/system/node/node1/hugepages", 2048, 64, 64);
    CheckReport r = check_host(ctx_, proc_);
    bool named = false;
    for (const Finding& f : r.findings) named = named || f.fix.ends_with("--node 0");
    EXPECT_TRUE(named) << dump(check_json(r));
}

TEST_F(Check, NonViableGroupBlocksWithWholeGroupFix) {
    add_device("0000:00:1f.3", "0x8086", "0xa348", "0x040300", "snd_hda_intel", 1);
    CheckReport r = check_host(ctx_, proc_);
    EXPECT_TRUE(r.blocked());
    bool found = false;
    for (const Finding& f : r.findings)
        if (f.topic == "device" && f.severity == Severity::error) {
            found = true;
            EXPECT_NE(f.message.find("0000:00:1f.3 (snd_hda_intel)"), std::string::npos) << f.message;
            EXPECT_EQ(f.fix, "vfio-devctl bind --whole-group 0000:00:02.0");
        }
    EXPECT_TRUE(found) << dump(check_json(r));
}

TEST_F(Check, PermissionsForAnotherUser) {
    if (!fs::exists(root_ / "dev/vfio/1")) GTEST_SKIP() << "no mknod here";
    proc_.uid = 4321;
    proc_.gids = {4321};
    CheckReport r = check_host(ctx_, proc_);
    const Finding* f = first(r, "permissions");
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->severity, Severity::warning);
    EXPECT_NE(f->message.find("cannot open /dev/vfio/1"), std::string::npos) << f->message;
    EXPECT_EQ(f->message.find("cannot open /dev/vfio/vfio"), std::string::npos) << "it is 0666";
    EXPECT_NE(f->fix.find("--user 4321"), std::string::npos) << f->fix;
}

TEST_F(Check, NothingOnVfioIsAWarning) {
    fs::remove(root_ / "sys/devices/pci0000:00/0000:00:02.0/driver");
    CheckReport r = check_host(ctx_, proc_);
    bool warned = false;
    for (const Finding& f : r.findings)
        warned = warned || (f.topic == "device" && f.message.starts_with("no device is bound to vfio-pci"));
    EXPECT_TRUE(warned);
}

TEST_F(Check, JsonShape) {
    nlohmann::json j = check_json(check_host(ctx_, proc_));
    EXPECT_TRUE(j["ok"].get<bool>());
    EXPECT_TRUE(j["iommu"]["on"].get<bool>());
    EXPECT_EQ(j["iommu"]["units"][0], "dmar0");
    EXPECT_EQ(j["iommu"]["kernel_parameters"][0], "intel_iommu=on");
    EXPECT_EQ(j["hugepages"][0]["page_size"], 2u << 20);
    EXPECT_EQ(j["hugepages"][0]["total"], 64);
    ASSERT_FALSE(j["findings"].empty());
    EXPECT_TRUE(j["findings"][0].contains("severity"));
    EXPECT_TRUE(j["findings"][0].contains("fix"));
}

}  // namespace
}  // namespace vfab::devctl::testing
