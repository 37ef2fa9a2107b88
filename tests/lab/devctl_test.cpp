// vfio-devctl, the real binary, in the lab guest: real sysfs, real vfio-pci. The lab copies
// the tool into /vfab/bin beside this test (scripts/lab --extra).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lab_env.hpp"
#include "vfab/provider.hpp"

extern char** environ;

namespace vfab::lab {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kNic = "0000:00:03.0";   // the second e1000e: the one bind/unbind moves

struct Outcome {
    int rc = -1;
    std::string out, err;
};

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

// The tool beside this binary (/vfab/bin in the guest), or $VFAB_DEVCTL.
std::string tool() {
    if (const char* t = std::getenv("VFAB_DEVCTL")) return t;
    return (fs::read_symlink("/proc/self/exe").parent_path() / "vfio-devctl").string();
}

// Runs the tool with `args`, its stdout and stderr captured separately.
Outcome devctl(std::vector<std::string> args) {
    args.insert(args.begin(), tool());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/tmp/devctl.out", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, "/tmp/devctl.err", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    Outcome r;
    if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) == 0) {
        int status = 0;
        waitpid(pid, &status, 0);
        r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    posix_spawn_file_actions_destroy(&fa);
    r.out = slurp("/tmp/devctl.out");
    r.err = slurp("/tmp/devctl.err");
    return r;
}

std::string driver_of(const std::string& bdf) {
    std::error_code ec;
    auto link = fs::read_symlink("/sys/bus/pci/devices/" + bdf + "/driver", ec);
    return ec ? "(none)" : link.filename().string();
}

std::string trimmed(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

std::string override_of(const std::string& bdf) { return trimmed(slurp("/sys/bus/pci/devices/" + bdf + "/driver_override")); }

// The device's first network interface; empty when it has none.
std::string interface_of(const std::string& bdf) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/sys/bus/pci/devices/" + bdf + "/net", ec))
        return e.path().filename().string();
    return "";
}

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

class Devctl : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_TRUE(in_lab()) << "run this through scripts/lab";
        ASSERT_TRUE(fs::exists(tool())) << tool() << " is missing: the lab must copy the tool into the guest "
                                        << "(scripts/lab --extra build/<preset>/tools/vfio-devctl)";
    }
};

TEST_F(Devctl, ListShowsTheLabDevicesWithTheirGroups) {
    Outcome r = devctl({"list", "--json"});
    ASSERT_EQ(r.rc, 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_array()) << r.out;
    for (const LabDevice& d : devices()) {
        SCOPED_TRACE(d.name);
        auto it = std::find_if(j.begin(), j.end(), [&](const json& e) { return e["bdf"] == d.bdf; });
        ASSERT_NE(it, j.end()) << r.out;
        char id[16];
        std::snprintf(id, sizeof id, "%04x:%04x", d.vendor, d.device);
        EXPECT_EQ((*it)["id"], id);
        EXPECT_EQ((*it)["driver"], "vfio-pci");
        ASSERT_TRUE((*it)["iommu_group"].is_number()) << it->dump();
        EXPECT_TRUE((*it)["group_members"].empty()) << "each lab device is alone in its group";
        EXPECT_TRUE((*it)["group_viable"].get<bool>());
        // Exactly the driver vfab::Device::open picks (the provider registry, each driver's own
        // ID table): "e1000e-1" is vfab's "e1000e", "virtio-net-1" its "virtio-net"; edu and
        // ivshmem have none.
        const std::string name = d.name;
        const auto provider = provider::find_provider(d.vendor, d.device);
        if (name == "edu" || name == "ivshmem") {
            EXPECT_FALSE(provider);
            EXPECT_TRUE((*it)["vfab_driver"].is_null());
        } else {
            ASSERT_TRUE(provider) << provider.error().message;
            EXPECT_EQ((*it)["vfab_driver"], provider->name);
            EXPECT_TRUE(name.starts_with(provider->name)) << provider->name;
        }
    }
    auto e1000e = std::find_if(j.begin(), j.end(), [](const json& e) { return e["bdf"] == "0000:00:02.0"; });
    EXPECT_EQ((*e1000e)["vendor"], "Intel Corporation") << "pci.ids is in the guest";
    EXPECT_EQ((*e1000e)["device"], "82574L Gigabit Network Connection");

    Outcome table = devctl({"list"});
    ASSERT_EQ(table.rc, 0) << table.err;
    for (const LabDevice& d : devices()) EXPECT_NE(table.out.find(std::string(d.bdf) + "  "), std::string::npos) << table.out;
    std::cout << table.out;
}

TEST_F(Devctl, ShowNamesTheBackendAndWhatVfioReports) {
    Outcome r = devctl({"show", "0000:00:02.0", "--json"});
    ASSERT_EQ(r.rc, 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.out;
    std::string want = !iommu_on() ? "noiommu" : flavor() == "iommufd" ? "iommufd" : "legacy";
    EXPECT_EQ(j["iommu_backend"]["name"], want) << j["iommu_backend"].dump();
    ASSERT_TRUE(j["vfio"].is_object()) << r.out;
    ASSERT_FALSE(j["vfio"].contains("error")) << j["vfio"].dump();
    EXPECT_EQ(j["vfio"]["iommu"], want) << "show opens the device the way an application would";
    const json& bar0 = j["vfio"]["regions"][0];
    EXPECT_EQ(bar0["name"], "BAR0");
    EXPECT_EQ(bar0["size"], 128 * 1024) << "82574L: 128 KiB of registers";
    EXPECT_TRUE(bar0["mmap"].get<bool>());
    bool config = false, msix = false;
    for (const json& reg : j["vfio"]["regions"]) config = config || reg["name"] == "CONFIG";
    for (const json& irq : j["vfio"]["irqs"])
        if (irq["name"] == "MSIX") msix = irq["count"] == 5;
    EXPECT_TRUE(config) << j["vfio"].dump();
    EXPECT_TRUE(msix) << "e1000e has 5 MSI-X vectors: " << j["vfio"]["irqs"].dump();

    Outcome text = devctl({"show", "0000:00:02.0"});
    ASSERT_EQ(text.rc, 0) << text.err;
    EXPECT_NE(text.out.find("IOMMU backend: " + want), std::string::npos) << text.out;
    std::cout << text.out;
}

// 00:03.0 from vfio-pci to the kernel's e1000e and back, by every route, checked in sysfs.
TEST_F(Devctl, BindUnbindRestoreMoveTheNicBetweenDrivers) {
    ASSERT_EQ(driver_of(kNic), "vfio-pci");
    Outcome r = devctl({"unbind", kNic, "--driver", "e1000e"});   // loads e1000e on the debian kernel
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(driver_of(kNic), "e1000e");
    EXPECT_EQ(override_of(kNic), "(null)");
    std::string nif = interface_of(kNic);
    ASSERT_FALSE(nif.empty()) << "e1000e made no interface";

    r = devctl({"bind", kNic});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("e1000e -> vfio-pci"), std::string::npos) << r.out;
    EXPECT_EQ(driver_of(kNic), "vfio-pci");
    EXPECT_EQ(override_of(kNic), "vfio-pci");
    EXPECT_EQ(trimmed(slurp(std::string("/run/vfab/devctl/") + kNic + ".driver")), "e1000e");

    r = devctl({"restore", kNic});   // the recorded driver
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(driver_of(kNic), "e1000e");
    EXPECT_FALSE(fs::exists(std::string("/run/vfab/devctl/") + kNic + ".driver"));

    nif = interface_of(kNic);
    ASSERT_EQ(std::system(("ip link set " + nif + " up").c_str()), 0);
    r = devctl({"bind", kNic});
    EXPECT_EQ(r.rc, 1);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("backs network interface " + nif + ", which is up"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;
    EXPECT_EQ(driver_of(kNic), "e1000e") << "a refused bind changes nothing";

    r = devctl({"bind", kNic, "--force", "--user", "1000", "--group", "1000"});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(driver_of(kNic), "vfio-pci");   // where later tests expect it
    std::string group = fs::read_symlink(std::string("/sys/bus/pci/devices/") + kNic + "/iommu_group").filename();
    std::string node = iommu_on() ? "/dev/vfio/" + group : "/dev/vfio/noiommu-" + group;
    struct stat st;
    ASSERT_EQ(stat(node.c_str(), &st), 0) << node;
    EXPECT_EQ(st.st_uid, 1000u);
    EXPECT_EQ(st.st_gid, 1000u);
    EXPECT_EQ(st.st_mode & 0777, 0660u);
    ASSERT_EQ(chown(node.c_str(), 0, 0), 0);
    chmod(node.c_str(), 0600);
}

TEST_F(Devctl, CheckSeesTheIommuOrItsAbsence) {
    Outcome r = devctl({"check", "--json"});
    json j = json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.out << r.err;
    EXPECT_EQ(j["iommu"]["on"].get<bool>(), iommu_on()) << j["iommu"].dump();
    auto iommu = std::find_if(j["findings"].begin(), j["findings"].end(), [](const json& f) { return f["topic"] == "iommu"; });
    ASSERT_NE(iommu, j["findings"].end());
    if (iommu_on()) {
        EXPECT_EQ((*iommu)["severity"], "ok");
        EXPECT_NE((*iommu)["message"].get<std::string>().find("IOMMU on: dmar0"), std::string::npos) << iommu->dump();
    } else {
        EXPECT_EQ((*iommu)["severity"], "warning") << "no-IOMMU mode: vfab runs, unsafely";
        EXPECT_NE((*iommu)["message"].get<std::string>().find("IOMMU missing"), std::string::npos) << iommu->dump();
        EXPECT_TRUE(j["iommu"]["noiommu_mode"].get<bool>());
        EXPECT_NE((*iommu)["fix"].get<std::string>().find("intel_iommu=on"), std::string::npos);
    }
    EXPECT_EQ(r.rc, 0) << "nothing blocks vfab in the lab: " << r.out;
    EXPECT_TRUE(j["ok"].get<bool>());
    bool hugepages = false;
    for (const json& p : j["hugepages"]) hugepages = hugepages || (p["page_size"] == 2 << 20 && p["total"] == 64);
    EXPECT_TRUE(hugepages) << j["hugepages"].dump();

    Outcome text = devctl({"check"});
    EXPECT_EQ(text.rc, 0);
    EXPECT_NE(text.out.find(iommu_on() ? "IOMMU on" : "IOMMU missing"), std::string::npos) << text.out;
    std::cout << text.out;
}

TEST_F(Devctl, BadInputIsOneClearLineAndNonZero) {
    struct Case { std::vector<std::string> args; int rc; const char* says; };
    const Case cases[] = {
        {{"show", "0000:00:1f.7"}, 1, "no PCI device 0000:00:1f.7"},
        {{"bind", "zz:00.0"}, 1, "'zz:00.0' is not a PCI address"},
        {{"unbind", "0000:00:1e.0"}, 1, "no PCI device 0000:00:1e.0"},
        {{"show", "0000:00:02.0", "0000:00:03.0"}, 2, "vfio-devctl: "},
        {{"frobnicate"}, 2, "vfio-devctl: "},
        {{"hugepages", "--reserve", "8", "--size", "3M"}, 1, "no 3 MiB hugepages"},
    };
    for (const Case& c : cases) {
        Outcome r = devctl(c.args);
        SCOPED_TRACE(c.args[0] + " " + c.args.back());
        EXPECT_EQ(r.rc, c.rc) << r.err;
        EXPECT_EQ(lines(r.err), 1) << r.err;
        EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
        EXPECT_TRUE(r.err.starts_with("vfio-devctl: ")) << r.err;
    }
}

TEST_F(Devctl, HugepagesShowsTheGuestsReservation) {
    Outcome r = devctl({"hugepages", "--json"});
    ASSERT_EQ(r.rc, 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_array()) << r.out;
    EXPECT_EQ(j[0]["page_size"], 2 << 20);
    EXPECT_EQ(j[0]["total"], 64);
    r = devctl({"hugepages", "--reserve", "64", "--size", "2M"});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("reserved 64 x 2 MiB pages (128 MiB)"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace vfab::lab
