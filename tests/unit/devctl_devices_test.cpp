// vfio-devctl list/show data on a fake sysfs tree: what is listed, the JSON, group viability,
// the IOMMU backend choice.
#include <gtest/gtest.h>

#include <algorithm>

#include "devctl_devices.hpp"
#include "devctl_fake_host.hpp"
#include "devctl_render.hpp"
#include "vfab/drivers/e1000e.hpp"
#include "vfab/drivers/igb.hpp"
#include "vfab/drivers/igbvf.hpp"
#include "vfab/drivers/virtio_net.hpp"
#include "vfab_drivers.hpp"

namespace vfab::devctl::testing {
namespace {

class Devices : public FakeHost {
protected:
    void SetUp() override {
        FakeHost::SetUp();
        add_device("0000:00:02.0", "0x8086", "0x10d3", "0x020000", "vfio-pci", 1, "0");
        add_device("0000:00:03.0", "0x8086", "0x10d3", "0x020000", "e1000e", 2);
        add_interface("0000:00:03.0", "vfabfake0", "0x1003");
        add_device("0000:00:04.0", "0x1af4", "0x1041", "0x020000", "", 3);
        add_device("0000:00:1f.0", "0x8086", "0xa30e", "0x060100", "lpc_ich", 7);
        add_device("0000:00:1f.3", "0x8086", "0xa348", "0x040300", "snd_hda_intel", 7);
        add_device("0000:00:1f.6", "0x8086", "0x10d3", "0x020000", "vfio-pci", 7);
        add_device("0000:00:1c.0", "0x8086", "0xa338", "0x060400", "pcieport", 7);
    }

    const DeviceInfo* find(const std::vector<DeviceInfo>& all, const char* bdf) {
        for (const DeviceInfo& d : all)
            if (d.addr.to_string() == bdf) return &d;
        return nullptr;
    }
};

TEST_F(Devices, ListShowsNetworkAndVfioDevicesOnly) {
    auto list = list_devices(ctx_, false);
    ASSERT_TRUE(list.ok()) << list.error().message;
    std::vector<std::string> bdfs;
    for (const DeviceInfo& d : *list) bdfs.push_back(d.addr.to_string());
    EXPECT_EQ(bdfs, (std::vector<std::string>{"0000:00:02.0", "0000:00:03.0", "0000:00:04.0", "0000:00:1f.6"}));
    auto all = list_devices(ctx_, true);
    ASSERT_TRUE(all.ok());
    EXPECT_EQ(all->size(), 7u);
}

TEST_F(Devices, DescribesDriverGroupNodeNamesAndInterfaces) {
    auto list = list_devices(ctx_, true);
    ASSERT_TRUE(list.ok());
    const DeviceInfo* nic = find(*list, "0000:00:03.0");
    ASSERT_NE(nic, nullptr);
    EXPECT_EQ(nic->vendor_name, "Intel Corporation");
    EXPECT_EQ(nic->device_name, "82574L Gigabit Network Connection");
    EXPECT_EQ(nic->driver, "e1000e");
    EXPECT_EQ(nic->iommu_group, 2u);
    EXPECT_TRUE(nic->group_others.empty());
    EXPECT_EQ(nic->vfab_driver, "e1000e");
    ASSERT_EQ(nic->interfaces.size(), 1u);
    EXPECT_EQ(nic->interfaces[0].name, "vfabfake0");
    EXPECT_TRUE(nic->interfaces[0].up);
    EXPECT_EQ(find(*list, "0000:00:02.0")->numa_node, 0);
    const DeviceInfo* lpc = find(*list, "0000:00:1f.0");
    EXPECT_TRUE(lpc->device_name.empty()) << "a348 is in the fake pci.ids, a30e is not";
    EXPECT_TRUE(lpc->vfab_driver.empty());
}

TEST_F(Devices, JsonCarriesEveryField) {
    auto list = list_devices(ctx_, false);
    ASSERT_TRUE(list.ok());
    nlohmann::json j = device_json(*find(*list, "0000:00:1f.6"));
    EXPECT_EQ(j["bdf"], "0000:00:1f.6");
    EXPECT_EQ(j["id"], "8086:10d3");
    EXPECT_EQ(j["class"], "020000");
    EXPECT_EQ(j["vendor"], "Intel Corporation");
    EXPECT_EQ(j["driver"], "vfio-pci");
    EXPECT_EQ(j["iommu_group"], 7);
    EXPECT_EQ(j["group_members"].size(), 3u);
    EXPECT_EQ(j["group_members"][0]["bdf"], "0000:00:1c.0");
    EXPECT_EQ(j["group_members"][0]["driver"], "pcieport");
    EXPECT_FALSE(j["group_viable"].get<bool>());
    EXPECT_TRUE(j["numa_node"].is_null());
    EXPECT_EQ(j["vfab_driver"], "e1000e");
    nlohmann::json v = device_json(*find(*list, "0000:00:04.0"));
    EXPECT_TRUE(v["driver"].is_null());
    EXPECT_EQ(v["vfab_driver"], "virtio-net");
}

TEST_F(Devices, TableListsGroupMatesUnderTheDevice) {
    auto list = list_devices(ctx_, false);
    ASSERT_TRUE(list.ok());
    std::ostringstream out;
    print_device_table(out, *list);
    std::string text = out.str();
    EXPECT_NE(text.find("0000:00:03.0  8086:10d3  e1000e"), std::string::npos) << text;
    EXPECT_NE(text.find("[vfabfake0 up]"), std::string::npos) << text;
    EXPECT_NE(text.find("group 7 also holds 0000:00:1c.0 (pcieport), 0000:00:1f.0 (lpc_ich)"), std::string::npos)
        << text;
}

TEST_F(Devices, GroupViability) {
    EXPECT_TRUE(group_friendly(std::nullopt));
    EXPECT_TRUE(group_friendly("vfio-pci"));
    EXPECT_TRUE(group_friendly("mlx5-vfio-pci"));
    EXPECT_TRUE(group_friendly("pci-stub"));
    EXPECT_TRUE(group_friendly("pcieport"));
    EXPECT_FALSE(group_friendly("e1000e"));
    EXPECT_FALSE(group_friendly("-vfio-pci"));

    auto list = list_devices(ctx_, false);
    ASSERT_TRUE(list.ok());
    const DeviceInfo* shared = find(*list, "0000:00:1f.6");
    EXPECT_FALSE(group_viable(*shared));
    EXPECT_EQ(group_blockers(*shared),
              (std::vector<std::string>{"0000:00:1f.0 (lpc_ich)", "0000:00:1f.3 (snd_hda_intel)"}));
    EXPECT_TRUE(group_viable(*find(*list, "0000:00:02.0")));
}

TEST_F(Devices, BadAndAbsentAddressesSayWhatToDo) {
    auto bad = existing_device(ctx_, "00:1g.0");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("is not a PCI address: use the form 0000:03:00.1"), std::string::npos);
    auto absent = existing_device(ctx_, "0000:00:09.0");
    ASSERT_FALSE(absent.ok());
    EXPECT_EQ(absent.error().code, ENODEV);
    EXPECT_NE(absent.error().message.find("vfio-devctl list"), std::string::npos);
    auto short_form = existing_device(ctx_, "00:02.0");
    ASSERT_TRUE(short_form.ok());
    EXPECT_EQ(short_form->to_string(), "0000:00:02.0");
}

TEST_F(Devices, BackendFollowsTheNodesThatExist) {
    auto db = PciDatabase::open(ctx_.paths);
    ASSERT_TRUE(db.ok()) << db.error().message;
    auto info = describe(ctx_, *db, *PciAddress::parse("0000:00:03.0"));
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(choose_backend(ctx_, *info).name, "none");   // on e1000e

    info = describe(ctx_, *db, *PciAddress::parse("0000:00:02.0"));
    if (!add_char_device("dev/vfio/1")) GTEST_SKIP() << "no mknod here";
    EXPECT_EQ(choose_backend(ctx_, *info).name, "legacy");
    info->vfio_cdev = "vfio0";
    ASSERT_TRUE(add_char_device("dev/vfio/devices/vfio0"));
    EXPECT_EQ(choose_backend(ctx_, *info).name, "legacy") << "no /dev/iommu yet";
    ASSERT_TRUE(add_char_device("dev/iommu"));
    EXPECT_EQ(choose_backend(ctx_, *info).name, "iommufd");
    fs::remove(root_ / "dev/vfio/1");
    ASSERT_TRUE(add_char_device("dev/vfio/noiommu-1"));
    EXPECT_EQ(choose_backend(ctx_, *info).name, "noiommu");
}

TEST_F(Devices, OddSysfsIsAnErrorNotAnExit) {
    // libpci would exit() on this entry; PciDatabase reports it instead.
    fs::create_directories(root_ / "sys/bus/pci/devices/not-a-bdf");
    auto list = list_devices(ctx_, false);
    ASSERT_FALSE(list.ok());
    EXPECT_NE(list.error().message.find("unexpected entry 'not-a-bdf'"), std::string::npos) << list.error().message;
    fs::remove_all(root_ / "sys/bus/pci");
    auto none = list_devices(ctx_, false);
    ASSERT_FALSE(none.ok());
    EXPECT_NE(none.error().message.find("no PCI bus in sysfs"), std::string::npos) << none.error().message;
}

// One table of IDs per driver: the registry's record points at the driver's own table (the one
// its open() checks), and vfio-devctl names each of its IDs with that driver — so the three
// cannot disagree.
TEST(VfabDrivers, DevctlTheRegistryAndTheDriversShareOneTable) {
    const std::pair<std::string_view, std::span<const PciId>> drivers[] = {
        {"e1000e", e1000e::kPciIds}, {"virtio-net", virtio_net::kPciIds}, {"igb", igb::kPciIds}, {"igbvf", igbvf::kPciIds}};
    const auto builtin = provider::builtin_providers();
    ASSERT_EQ(builtin.size(), std::size(drivers));
    for (const auto& [name, ids] : drivers) {
        SCOPED_TRACE(name);
        auto rec = std::find_if(builtin.begin(), builtin.end(), [&](const provider::Record& r) { return r.name == name; });
        ASSERT_NE(rec, builtin.end());
        EXPECT_EQ(rec->ids, ids.data()) << "the record lists the driver's own table";
        EXPECT_EQ(rec->num_ids, ids.size());
        for (const PciId& id : ids) EXPECT_EQ(vfab_driver_for(id.vendor, id.device), name) << std::hex << id.device;
    }
    EXPECT_EQ(vfab_driver_for(0x8086, 0x10f6), "e1000e");
    EXPECT_EQ(vfab_driver_for(0x8086, 0x1520), "igbvf");
    EXPECT_TRUE(vfab_driver_for(0x1af4, 0x1000).empty()) << "transitional virtio-net: the driver refuses it";
    EXPECT_TRUE(vfab_driver_for(0x1234, 0x11e8).empty());
}

}  // namespace
}  // namespace vfab::devctl::testing
