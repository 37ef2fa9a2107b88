#include "vfab/vfio/sys.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace vfab::vfio {
namespace {

class RealSys final : public Sys {
public:
    int open(const char* path, int flags) override { return ::open(path, flags | O_CLOEXEC); }
    int close(int fd) override { return ::close(fd); }
    int ioctl(int fd, unsigned long request, void* arg) override { return ::ioctl(fd, request, arg); }
    void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) override {
        return ::mmap(addr, len, prot, flags, fd, off);
    }
    int munmap(void* addr, size_t len) override { return ::munmap(addr, len); }
    ssize_t pread(int fd, void* buf, size_t len, off_t off) override { return ::pread(fd, buf, len, off); }
    ssize_t pwrite(int fd, const void* buf, size_t len, off_t off) override {
        return ::pwrite(fd, buf, len, off);
    }
    int eventfd(unsigned initval, int flags) override { return ::eventfd(initval, flags | EFD_CLOEXEC); }
};

}  // namespace

Sys& Sys::real() {
    static RealSys sys;
    return sys;
}

}  // namespace vfab::vfio
