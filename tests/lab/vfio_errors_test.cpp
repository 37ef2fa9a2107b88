// Bad input to the VFIO layer, through real VFIO: each case gives an error that names the
// device and says what to do, and leaves no fd, mapping or eventfd behind. Also: opening and
// closing a device 1000 times leaves the process as it was.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "caps.hpp"
#include "lab_env.hpp"
#include "vfab/vfio/device.hpp"

namespace vfab::lab {
namespace {
using namespace vfio;

size_t count_fds() {
    size_t n = 0;
    for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
    return n;
}

size_t count_mappings() {
    std::ifstream maps("/proc/self/maps");
    size_t n = 0;
    for (std::string line; std::getline(maps, line);) ++n;
    return n;
}

void expect_mentions(const Error& e, const std::string& what) {
    EXPECT_NE(e.message.find(what), std::string::npos) << "'" << e.message << "' should mention '" << what << "'";
}

Result<std::unique_ptr<Device>> open_with(const char* name, IommuBackend b) {
    DeviceOptions opts;
    opts.backend = b;
    return Device::open(address_of(name), opts);
}

// Checks that a test leaves the process's fds and mappings as it found them.
class VfioErrors : public ::testing::TestWithParam<IommuBackend> {
protected:
    void SetUp() override {
        fds_ = count_fds();
        maps_ = count_mappings();
    }
    void TearDown() override {
        EXPECT_EQ(count_fds(), fds_) << "file descriptors leaked";
        EXPECT_EQ(count_mappings(), maps_) << "mappings leaked";
    }
    size_t fds_ = 0, maps_ = 0;
};

TEST_P(VfioErrors, AbsentDevice) {
    DeviceOptions opts;
    opts.backend = GetParam();
    auto d = Device::open(*PciAddress::parse("0000:00:1e.0"), opts);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.error().code, ENODEV);
    expect_mentions(d.error(), "no PCI device 0000:00:1e.0");
}

TEST_P(VfioErrors, DeviceNotBoundToVfioPci) {
    const std::string bdf = "0000:00:05.0";
    {
        std::ofstream("/sys/bus/pci/drivers/vfio-pci/unbind") << bdf;
    }
    auto d = open_with("igb", GetParam());
    {   // give it back to vfio-pci (driver_override still says vfio-pci)
        std::ofstream("/sys/bus/pci/drivers_probe") << bdf;
    }
    ASSERT_FALSE(d.ok());
    expect_mentions(d.error(), bdf + " is not bound to any driver");
    expect_mentions(d.error(), "vfio-devctl bind " + bdf);
    auto again = open_with("igb", GetParam());
    EXPECT_TRUE(again.ok()) << again.error().message;
}

TEST_P(VfioErrors, DeviceAlreadyOpenInAnotherProcess) {
    int ready[2], done[2];
    ASSERT_EQ(pipe(ready), 0);
    ASSERT_EQ(pipe(done), 0);
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        close(done[1]);   // or the read below never sees the parent close its end
        close(ready[0]);
        auto d = open_with("edu", GetParam());
        char c = d.ok() ? 'y' : 'n';
        (void)!write(ready[1], &c, 1);
        (void)!read(done[0], &c, 1);   // hold the device until the parent is done
        _exit(0);
    }
    close(ready[1]);
    close(done[0]);
    char c = 0;
    ASSERT_EQ(read(ready[0], &c, 1), 1);
    ASSERT_EQ(c, 'y') << "the child could not open edu";
    auto d = open_with("edu", GetParam());
    close(done[1]);
    close(ready[0]);
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_FALSE(d.ok()) << "opened a device another process holds";
    EXPECT_EQ(d.error().code, EBUSY) << d.error().message;
    expect_mentions(d.error(), "0000:00:01.0");
    EXPECT_TRUE(d.error().message.find("busy") != std::string::npos ||
                d.error().message.find("already open") != std::string::npos) << d.error().message;
}

TEST_P(VfioErrors, MemlockLimitTooLowForAMapping) {
    if (GetParam() == IommuBackend::noiommu) GTEST_SKIP() << "no-IOMMU mode pins with mlock; covered by the same message";
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {   // a child: dropping a capability cannot be undone
        auto fail = [](const std::string& why) { std::fprintf(stderr, "child: %s\n", why.c_str()); _exit(1); };
        if (!drop_ipc_lock()) fail("capset failed");
        rlimit rl{1 << 20, 1 << 20};
        if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0) fail("setrlimit failed");
        auto d = open_with("edu", GetParam());
        if (!d) fail(d.error().message);
        size_t len = 8 << 20;
        void* mem = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        auto m = (*d)->iommu().map_dma(mem, len, Iova(reinterpret_cast<uintptr_t>(mem)));
        if (m) fail("an 8 MiB mapping succeeded under a 1 MiB RLIMIT_MEMLOCK");
        std::fprintf(stderr, "child: got: %s\n", m.error().message.c_str());
        const std::string& msg = m.error().message;
        if (m.error().code != ENOMEM) fail("expected ENOMEM");
        if (msg.find("RLIMIT_MEMLOCK is 1048576 bytes") == std::string::npos) fail("limit not named");
        if (msg.find("needs 8388608 more bytes") == std::string::npos) fail("size not named");
        if (msg.find("ulimit -l") == std::string::npos) fail("no fix offered");
        if (!(*d)->iommu().mappings().empty()) fail("a failed mapping was recorded");
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_P(VfioErrors, IovaOutsideTheAllowedRanges) {
    if (GetParam() == IommuBackend::noiommu) GTEST_SKIP() << "no IOVAs without an IOMMU";
    auto d = open_with("edu", GetParam());
    ASSERT_TRUE(d.ok()) << d.error().message;
    void* mem = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    // 0xfee00000 is the x86 MSI window, reserved in every IOMMU domain.
    auto m = (*d)->iommu().map_dma(mem, 4096, Iova(0xfee00000));
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.error().code, ERANGE);
    expect_mentions(m.error(), "outside the IOMMU's usable ranges");
    auto unaligned = (*d)->iommu().map_dma(static_cast<char*>(mem) + 8, 4096, Iova(0x100000));
    ASSERT_FALSE(unaligned.ok());
    expect_mentions(unaligned.error(), "multiples of the page size");
    auto unknown = (*d)->iommu().unmap_dma(Iova(0x100000), 4096);
    ASSERT_FALSE(unknown.ok());
    expect_mentions(unknown.error(), "no DMA mapping");
    munmap(mem, 4096);
}

TEST_P(VfioErrors, NoIommuModeIsNeverChosenSilently) {
    if (GetParam() == IommuBackend::noiommu) {
        auto d = open_with("edu", IommuBackend::automatic);
        ASSERT_FALSE(d.ok());
        expect_mentions(d.error(), "no-IOMMU group");
        expect_mentions(d.error(), "VFAB_IOMMU_BACKEND=noiommu");
    } else {
        auto d = open_with("edu", IommuBackend::noiommu);
        ASSERT_FALSE(d.ok());
        expect_mentions(d.error(), "no-IOMMU mode is not enabled");
    }
}

TEST_P(VfioErrors, BackendFromTheEnvironment) {
    if (GetParam() == IommuBackend::noiommu) GTEST_SKIP();
    setenv("VFAB_IOMMU_BACKEND", to_string(GetParam()), 1);
    auto d = open_with("edu", IommuBackend::automatic);
    ASSERT_TRUE(d.ok()) << d.error().message;
    EXPECT_EQ((*d)->iommu().backend(), GetParam());
    d = Error{};   // close before the next open
    setenv("VFAB_IOMMU_BACKEND", "fastest", 1);
    auto bad = open_with("edu", IommuBackend::automatic);
    unsetenv("VFAB_IOMMU_BACKEND");
    ASSERT_FALSE(bad.ok());
    expect_mentions(bad.error(), "use auto, legacy, iommufd or noiommu");
}

// A leak per open (an fd, a mapping) shows as 200 of them; 1000 rounds took 20 s per backend
// and boot and found nothing more.
TEST_P(VfioErrors, OpenAndClose200TimesLeavesNothingBehind) {
    void* mem = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    size_t fds = count_fds(), maps = count_mappings();
    for (int i = 0; i < 200; ++i) {
        auto d = open_with("edu", GetParam());
        ASSERT_TRUE(d.ok()) << "iteration " << i << ": " << d.error().message;
        ASSERT_TRUE((*d)->region(0).ok());
        ASSERT_TRUE((*d)->enable_interrupts(IrqIndex::msi, 1).ok());
        // Left mapped on purpose: closing the device must unmap it.
        ASSERT_TRUE((*d)->iommu().map_dma(mem, 4096, Iova(0x100000)).ok());
    }
    EXPECT_EQ(count_fds(), fds);
    EXPECT_EQ(count_mappings(), maps);
    munmap(mem, 4096);
}

INSTANTIATE_TEST_SUITE_P(Backends, VfioErrors, ::testing::ValuesIn(backends()), BackendName());

TEST(VfioErrorsDebianKernel, IommufdRequestedWithoutIommufd) {
    if (flavor() != "debian") GTEST_SKIP() << "this kernel has iommufd";
    auto d = open_with("edu", IommuBackend::iommufd);
    ASSERT_FALSE(d.ok());
    expect_mentions(d.error(), "CONFIG_IOMMUFD");
    expect_mentions(d.error(), "VFAB_IOMMU_BACKEND=legacy");
}

}  // namespace
}  // namespace vfab::lab
