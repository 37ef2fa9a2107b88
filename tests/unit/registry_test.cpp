// The provider registry and vfab::Device::open's choices, against a fake sysfs tree and test
// plugins (plugins/): matching by PCI ID, plugins before built-ins, the provider directory
// from options, environment and default, and every way a plugin or a device is refused —
// each error naming what is wrong and what to do.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "fake_sysfs.hpp"
#include "vfab/provider.hpp"
#include "vfab/vfab.hpp"

namespace vfab {
namespace {
namespace fs = std::filesystem;
using provider::find_provider;
using provider::list_providers;

const std::string kPlugins = VFAB_TEST_PROVIDERS;   // one directory per test plugin

struct TempDir {
    fs::path path;
    TempDir() {
        char tmpl[] = "/tmp/vfab-providers.XXXXXX";
        path = mkdtemp(tmpl);
    }
    ~TempDir() { fs::remove_all(path); }
};

class Registry : public ::testing::Test {
protected:
    void SetUp() override {
        unsetenv("VFAB_PROVIDER_DIR");
        sysfs.add_device("0000:00:02.0", "0x8086", "0x10d3", "vfio-pci", 2);
        sysfs.add_device("0000:00:03.0", "0x8086", "0x10d3", "e1000e", 3);
        sysfs.add_device("0000:00:04.0", "0x1234", "0xfa4e", "vfio-pci", 4);
        sysfs.add_device("0000:00:05.0", "0x1234", "0xfa4e", "", 5);
        sysfs.add_device("0000:00:06.0", "0xabcd", "0x0001", "vfio-pci", 6);
    }
    void TearDown() override { unsetenv("VFAB_PROVIDER_DIR"); }

    OpenOptions opts(const std::string& dir) const {
        OpenOptions o;
        o.provider_dir = dir;
        o.sysfs_root = sysfs.root();
        return o;
    }

    testing::FakeSysfsTree sysfs;
    TempDir empty;
};

TEST_F(Registry, BuiltInE1000eMatchesItsIds) {
    ASSERT_FALSE(provider::builtin_providers().empty());
    auto p = find_provider(0x8086, 0x10d3, opts(empty.path));
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_EQ(p->name, "e1000e");
    EXPECT_EQ(p->origin, "built in");
    EXPECT_TRUE(find_provider(0x8086, 0x10f6, opts(empty.path)).ok());
    auto by_name = find_provider("e1000e", opts(empty.path));
    ASSERT_TRUE(by_name.ok());
    EXPECT_EQ(by_name->record, p->record);
}

TEST_F(Registry, PluginIsFoundByItsId) {
    auto p = find_provider(0x1234, 0xfa4e, opts(kPlugins + "/fake"));
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_EQ(p->name, "fake");
    EXPECT_EQ(p->origin, kPlugins + "/fake/libvfab-fake.so");
    auto all = list_providers(opts(kPlugins + "/fake"));
    ASSERT_TRUE(all.ok());
    ASSERT_EQ(all->size(), 1 + provider::builtin_providers().size());   // plugins first, then the built-in ones
    EXPECT_EQ((*all)[0].name, "fake");
    EXPECT_EQ((*all)[1].name, "e1000e");
    EXPECT_EQ((*all)[2].name, "virtio-net");
}

TEST_F(Registry, PluginReplacesTheBuiltInProviderOfItsName) {
    auto all = list_providers(opts(kPlugins + "/override"));
    ASSERT_TRUE(all.ok()) << all.error().message;
    ASSERT_EQ(all->size(), provider::builtin_providers().size());   // e1000e replaced, not added
    EXPECT_EQ((*all)[0].origin, kPlugins + "/override/libvfab-e1000e.so");
    auto p = find_provider(0x8086, 0x10d3, opts(kPlugins + "/override"));
    ASSERT_TRUE(p.ok());
    EXPECT_NE(p->record, &provider::builtin_providers()[0]);
}

TEST_F(Registry, UnknownIdListsTheKnownProvidersAndTheDirectory) {
    auto p = find_provider(0xabcd, 0x0001, opts(empty.path));
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.error().code, ENODEV);
    const std::string& m = p.error().message;
    EXPECT_NE(m.find("abcd:0001"), std::string::npos) << m;
    EXPECT_NE(m.find("e1000e (8086:10d3 8086:10f6, built in)"), std::string::npos) << m;
    EXPECT_NE(m.find(empty.path.string() + " (none there)"), std::string::npos) << m;
    EXPECT_NE(m.find("vfio-devctl list"), std::string::npos) << m;

    auto n = find_provider("nope", opts(kPlugins + "/fake"));
    ASSERT_FALSE(n.ok());
    EXPECT_NE(n.error().message.find("no vfab provider named 'nope'"), std::string::npos);
    EXPECT_NE(n.error().message.find("fake (1234:fa4e, " + kPlugins + "/fake/libvfab-fake.so)"), std::string::npos)
        << n.error().message;
}

TEST_F(Registry, ProviderDirectoryFromOptionsEnvironmentOrInstall) {
    // Beside libvfab.so.1 (this test links it), wherever it lies.
    Dl_info lib{};
    ASSERT_NE(dladdr(reinterpret_cast<void*>(&provider::list_providers), &lib), 0);
    EXPECT_EQ(provider::provider_dir({}), (fs::path(lib.dli_fname).parent_path() / "vfab/providers").string());
    EXPECT_NE(std::string(provider::kDefaultProviderDir).find("/vfab/providers"), std::string::npos);
    setenv("VFAB_PROVIDER_DIR", (kPlugins + "/fake").c_str(), 1);
    EXPECT_EQ(provider::provider_dir({}), kPlugins + "/fake");
    OpenOptions o;
    o.sysfs_root = sysfs.root();
    auto p = find_provider(0x1234, 0xfa4e, o);
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_EQ(p->name, "fake");
    EXPECT_EQ(provider::provider_dir(opts(empty.path)), empty.path);   // options win
}

TEST_F(Registry, AnExplicitDirectoryMustExist) {
    auto p = list_providers(opts("/nonexistent/vfab"));
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.error().message.find("provider directory /nonexistent/vfab does not exist"), std::string::npos)
        << p.error().message;
    setenv("VFAB_PROVIDER_DIR", "/nonexistent/env", 1);
    auto e = list_providers({});
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().message.find("/nonexistent/env (VFAB_PROVIDER_DIR)"), std::string::npos) << e.error().message;
}

// ---- plugins that are refused ----------------------------------------------------------------

std::string plugin_error(const std::string& path) {
    auto r = provider::load_plugin(path);
    return r.ok() ? std::string("loaded") : r.error().message;
}

TEST(Plugin, WithoutEntryPointIsRefusedByName) {
    const std::string path = kPlugins + "/noentry/libvfab-noentry.so";
    std::string m = plugin_error(path);
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("has no entry point vfab_provider_entry_v1"), std::string::npos) << m;
    EXPECT_NE(m.find("VFAB_PROVIDER_PLUGIN"), std::string::npos) << m;
}

TEST(Plugin, OfAnotherAbiVersionIsRefused) {
    const std::string path = kPlugins + "/badabi/libvfab-badabi.so";
    std::string m = plugin_error(path);
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find(str_cat("provider ABI version ", provider::kAbiVersion + 1, ", this libvfab has version ",
                             provider::kAbiVersion)),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("rebuild the plugin"), std::string::npos) << m;
}

TEST(Plugin, FromOtherHeadersIsRefused) {
    std::string m = plugin_error(kPlugins + "/badlayout/libvfab-badlayout.so");
    EXPECT_NE(m.find("built from other vfab headers"), std::string::npos) << m;
}

// Compiled with libstdc++'s old std::string: every size of vfab's own types may agree, and
// still each std::string in an Error or a DeviceAttr would be read wrongly.
TEST(Plugin, BuiltForAnotherCxxLibraryAbiIsRefused) {
    std::string m = plugin_error(kPlugins + "/oldstring/libvfab-oldstring.so");
    EXPECT_NE(m.find("built for another C++ library ABI"), std::string::npos) << m;
    EXPECT_NE(m.find("_GLIBCXX_USE_CXX11_ABI=0"), std::string::npos) << m;
}

TEST(Plugin, WhoseRecordIsNotNamedLikeItsFileIsRefused) {
    std::string m = plugin_error(kPlugins + "/misnamed/libvfab-misnamed.so");
    EXPECT_NE(m.find("registers provider 'other', so it must be named libvfab-other.so"), std::string::npos) << m;
}

TEST(Plugin, ThatIsNotASharedObjectIsRefused) {
    TempDir dir;
    const std::string path = (dir.path / "libvfab-junk.so").string();
    std::ofstream(path) << "not an ELF file\n";
    std::string m = plugin_error(path);
    EXPECT_NE(m.find("provider plugin " + path + ": cannot be loaded"), std::string::npos) << m;
    EXPECT_NE(m.find("remove it or rebuild it"), std::string::npos) << m;
    EXPECT_EQ(plugin_error((dir.path / "libvfab-absent.so").string()).find("cannot be loaded") != std::string::npos, true);
}

TEST(Plugin, ABrokenPluginInTheDirectoryFailsTheOpen) {
    testing::FakeSysfsTree sysfs;
    sysfs.add_device("0000:00:02.0", "0x8086", "0x10d3", "vfio-pci", 2);
    OpenOptions o;
    o.provider_dir = kPlugins + "/badabi";
    o.sysfs_root = sysfs.root();
    auto d = Device::open("0000:00:02.0", o);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.error().code, ELIBBAD);
    EXPECT_NE(d.error().message.find("0000:00:02.0 (8086:10d3): provider plugin " + kPlugins + "/badabi/libvfab-badabi.so"),
              std::string::npos)
        << d.error().message;
}

TEST(Plugin, OnlyLibvfabDashNameFilesAreConsidered) {
    TempDir dir;
    std::ofstream(dir.path / "libvfab.so") << "x";
    std::ofstream(dir.path / "libvfab-.so") << "x";
    std::ofstream(dir.path / "libvfab-x.so.1") << "x";
    std::ofstream(dir.path / "README") << "x";
    OpenOptions o;
    o.provider_dir = dir.path;
    auto all = list_providers(o);
    ASSERT_TRUE(all.ok()) << all.error().message;
    EXPECT_EQ(all->size(), provider::builtin_providers().size());
}

// ---- Device::open ----------------------------------------------------------------------------

TEST_F(Registry, OpenPicksThePluginForTheDevicesId) {
    OpenOptions o = opts(kPlugins + "/fake");
    o.promiscuous = true;
    o.backend = vfio::IommuBackend::iommufd;
    auto d = Device::open("00:04.0", o);
    ASSERT_TRUE(d.ok()) << d.error().message;
    EXPECT_EQ((*d)->attr().provider, "fake");
    EXPECT_EQ((*d)->attr().vendor_id, 0x1234);
    EXPECT_EQ((*d)->attr().address.to_string(), "0000:00:04.0");
    EXPECT_EQ((*d)->attr().name, "fake (backend iommufd, promiscuous 1)");   // the options reached it
}

// A plugin has its own copy of vfab's code; what it logs still reaches the handler the
// application installed in libvfab, filtered by that handler's level.
TEST_F(Registry, APluginsMessagesReachTheApplicationsLogHandler) {
    std::vector<std::pair<LogLevel, std::string>> got;
    const LogHandler keep = [](LogLevel l, const char* m, void* u) {
        static_cast<std::vector<std::pair<LogLevel, std::string>>*>(u)->emplace_back(l, m);
    };
    set_log_handler(keep, &got, LogLevel::info);
    auto d = Device::open("00:04.0", opts(kPlugins + "/fake"));
    ASSERT_TRUE(d.ok()) << d.error().message;
    set_log_handler(keep, &got, LogLevel::warning);   // the level is the host's to decide
    auto again = Device::open("00:04.0", opts(kPlugins + "/fake"));
    ASSERT_TRUE(again.ok()) << again.error().message;
    set_log_handler(nullptr);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].first, LogLevel::info);
    EXPECT_EQ(got[0].second, "fake provider opened 0000:00:04.0");
}

TEST_F(Registry, OpenWithANamedProviderIgnoresTheId) {
    OpenOptions o = opts(kPlugins + "/fake");
    o.provider = "fake";
    auto d = Device::open("0000:00:02.0", o);   // an 8086:10d3
    ASSERT_TRUE(d.ok()) << d.error().message;
    EXPECT_EQ((*d)->attr().provider, "fake");
    o.provider = "virtio-nope";
    auto n = Device::open("0000:00:02.0", o);
    ASSERT_FALSE(n.ok());
    EXPECT_NE(n.error().message.find("0000:00:02.0 (8086:10d3): no vfab provider named 'virtio-nope'"), std::string::npos)
        << n.error().message;
}

TEST_F(Registry, OpenRefusesDevicesNotBoundToVfioPci) {
    auto unbound = Device::open("0000:00:05.0", opts(kPlugins + "/fake"));
    ASSERT_FALSE(unbound.ok());
    EXPECT_EQ(unbound.error().message,
              "0000:00:05.0 (1234:fa4e, vfab provider fake) is not bound to any driver, not vfio-pci — run "
              "`sudo vfio-devctl bind 0000:00:05.0` first");
    auto kernel = Device::open("0000:00:03.0", opts(empty.path));
    ASSERT_FALSE(kernel.ok());
    EXPECT_EQ(kernel.error().code, EBUSY);
    EXPECT_NE(kernel.error().message.find("is bound to e1000e, not vfio-pci — run `sudo vfio-devctl bind 0000:00:03.0`"),
              std::string::npos)
        << kernel.error().message;
}

TEST_F(Registry, OpenExplainsUnknownDevicesAndAddresses) {
    auto unknown = Device::open("0000:00:06.0", opts(empty.path));
    ASSERT_FALSE(unknown.ok());
    EXPECT_NE(unknown.error().message.find("0000:00:06.0 (abcd:0001): no vfab provider for PCI ID abcd:0001"),
              std::string::npos)
        << unknown.error().message;
    auto absent = Device::open("0000:00:09.0", opts(empty.path));
    ASSERT_FALSE(absent.ok());
    EXPECT_NE(absent.error().message.find("no PCI device 0000:00:09.0"), std::string::npos) << absent.error().message;
    auto bad = Device::open("eth0", opts(empty.path));
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("'eth0' is not a PCI address"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace vfab
