// A file descriptor that closes itself (through the Sys that opened it).
#pragma once

#include <utility>

#include "vfab/vfio/sys.hpp"

namespace vfab::vfio {

class UniqueFd {
public:
    UniqueFd() = default;
    // Owns `fd` (-1: none) and will close it through `sys`, which must outlive it.
    UniqueFd(int fd, Sys& sys) : fd_(fd), sys_(&sys) {}
    // Takes `o`'s fd; `o` is left empty.
    UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)), sys_(o.sys_) {}
    // Closes this fd, if any, and takes `o`'s; `o` is left empty.
    UniqueFd& operator=(UniqueFd&& o) noexcept {
        if (this != &o) {
            reset();
            fd_ = std::exchange(o.fd_, -1);
            sys_ = o.sys_;
        }
        return *this;
    }
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;
    ~UniqueFd() { reset(); }

    // The fd (-1 when empty); it stays owned here.
    int get() const { return fd_; }
    // Whether it holds an fd.
    bool valid() const { return fd_ >= 0; }
    // Whether it holds an fd, as valid().
    explicit operator bool() const { return valid(); }
    // Gives the fd up without closing it (the caller closes it now); -1 when empty.
    int release() { return std::exchange(fd_, -1); }
    // Closes the fd through its Sys, if there is one, and leaves this empty.
    void reset() {
        if (fd_ >= 0) sys_->close(fd_);
        fd_ = -1;
    }

private:
    int fd_ = -1;
    Sys* sys_ = nullptr;
};

}  // namespace vfab::vfio
