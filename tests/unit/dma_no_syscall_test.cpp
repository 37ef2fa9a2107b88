// "Registering memory inside an arena makes no system call" (docs/dma.md), proven: a child
// process registers and deregisters arena memory under a seccomp filter that kills it on any
// system call but exit. The control case registers memory outside any arena (which pins and
// maps it) under the same filter and must be killed — so the filter does catch system calls.
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstddef>
#include <cstdlib>

#include "vfab/dma/protection_domain.hpp"

namespace vfab {
namespace {

// An IOMMU that only records (the child needs no device), except that mapping makes one system
// call, as a real IOMMU context's VFIO_IOMMU_MAP_DMA / IOMMU_IOAS_MAP ioctl does.
class PlainSpace final : public vfio::AddressSpace {
public:
    PlainSpace() {
        info_.page_sizes = 4096 | (2u << 20);
        info_.iova_ranges = {{0x1000, (uint64_t{1} << 47) - 1}};
    }
    const vfio::IommuInfo& info() const override { return info_; }
    bool translates() const override { return true; }
    Result<Iova> map_dma(void*, size_t len, Iova iova, unsigned, vfio::MemoryFile) override {
        (void)syscall(SYS_getppid);
        mappings_[iova.value] = len;
        return iova;
    }
    Result<void> unmap_dma(Iova iova, size_t) override {
        mappings_.erase(iova.value);
        return {};
    }
    const std::map<uint64_t, size_t>& mappings() const override { return mappings_; }
    const char* device_memory_refusal() const override { return "none"; }
    const char* dmabuf_refusal() const override { return "none"; }

private:
    vfio::IommuInfo info_;
    std::map<uint64_t, size_t> mappings_;
};

// From here on any system call but exit_group kills the process with SIGSYS. Under
// AddressSanitizer its allocator may map memory for a new chunk, so mmap/munmap/madvise stay
// allowed there; the release build's run allows nothing else.
bool forbid_system_calls() {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_exit_group, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
#if defined(__SANITIZE_ADDRESS__)
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mmap, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_munmap, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_madvise, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
#endif
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    struct sock_fprog prog = {static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

enum class Where { in_arena, outside };

// In a child: set up a domain and an arena, warm up (the first registrations may grow the
// table's storage), then register and deregister `rounds` times under the filter. The child's
// exit status: 0 done, 10 set-up failed, 11 a registration failed; SIGSYS: a system call.
int register_in_child(Where where, int rounds) {
    const pid_t pid = fork();
    if (pid == 0) {
        auto pd = dma::ProtectionDomain::create(std::make_shared<PlainSpace>());
        if (!pd) _exit(10);
        auto arena = (*pd)->create_arena(1 << 20, {dma::PageSize::k4, -1});
        if (!arena) _exit(10);
        void* outside = std::aligned_alloc(4096, 1 << 16);
        auto round = [&](int i) {
            uint8_t* p = where == Where::in_arena ? (*arena)->data() + (i % 64) * 4096 : static_cast<uint8_t*>(outside);
            auto mr = (*pd)->register_memory(p, 4096, dma::Access::local_write);
            return mr.ok() && (*pd)->deregister(*mr).ok();
        };
        for (int i = 0; i < 256; ++i)
            if (where == Where::in_arena && !round(i)) _exit(11);
        if (!forbid_system_calls()) _exit(10);
        for (int i = 0; i < rounds; ++i)
            if (!round(i)) _exit(11);
        syscall(SYS_exit_group, 0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
    return status;
}

TEST(RegisterInArena, MakesNoSystemCall) {
    const int status = register_in_child(Where::in_arena, 10000);
    ASSERT_FALSE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS)
        << "registering arena memory made a system call (the child was killed by the seccomp filter)";
    ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
    EXPECT_EQ(WEXITSTATUS(status), 0) << "10: set-up failed, 11: a registration failed";
}

// The control: memory outside any arena is mapped into the IOMMU (here: one system call), so
// the filter must stop it — otherwise the test above could not fail.
TEST(RegisterInArena, TheFilterCatchesTheRegistrationThatDoesMakeSystemCalls) {
    const int status = register_in_child(Where::outside, 1);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) << "status " << status;
}

}  // namespace
}  // namespace vfab
