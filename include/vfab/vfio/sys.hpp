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
    // open(2) (the real one adds O_CLOEXEC). Every call here keeps its system call's contract,
    // the result or -1 (MAP_FAILED for mmap) with errno set, and a fake must keep it too.
    virtual int open(const char* path, int flags) = 0;
    // close(2).
    virtual int close(int fd) = 0;
    // ioctl(2).
    virtual int ioctl(int fd, unsigned long request, void* arg) = 0;
    // mmap(2): MAP_FAILED with errno set on failure.
    virtual void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) = 0;
    // munmap(2).
    virtual int munmap(void* addr, size_t len) = 0;
    // pread(2).
    virtual ssize_t pread(int fd, void* buf, size_t len, off_t off) = 0;
    // pwrite(2).
    virtual ssize_t pwrite(int fd, const void* buf, size_t len, off_t off) = 0;
    // eventfd(2); the real one adds EFD_CLOEXEC.
    virtual int eventfd(unsigned initval, int flags) = 0;

    // The real kernel; what everything uses unless told otherwise.
    static Sys& real();
};

}  // namespace vfab::vfio
