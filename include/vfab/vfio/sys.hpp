// The system calls the VFIO layer makes, behind one seam so that unit tests can replace the
// kernel with a fake (error paths, capability chains, leak checks). Setup paths only: the
// fast path touches mapped BARs and DMA memory directly and never goes through here.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace vfab::vfio {

class Sys {
public:
    virtual ~Sys() = default;
    virtual int open(const char* path, int flags) = 0;
    virtual int close(int fd) = 0;
    virtual int ioctl(int fd, unsigned long request, void* arg) = 0;
    virtual void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) = 0;
    virtual int munmap(void* addr, size_t len) = 0;
    virtual ssize_t pread(int fd, void* buf, size_t len, off_t off) = 0;
    virtual ssize_t pwrite(int fd, const void* buf, size_t len, off_t off) = 0;
    virtual int eventfd(unsigned initval, int flags) = 0;

    // The real kernel; what everything uses unless told otherwise.
    static Sys& real();
};

}  // namespace vfab::vfio
