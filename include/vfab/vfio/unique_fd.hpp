// A file descriptor that closes itself (through the Sys that opened it).
#pragma once

#include <utility>

#include "vfab/vfio/sys.hpp"

namespace vfab::vfio {

class UniqueFd {
public:
    UniqueFd() = default;
    UniqueFd(int fd, Sys& sys) : fd_(fd), sys_(&sys) {}
    UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)), sys_(o.sys_) {}
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

    int get() const { return fd_; }
    bool valid() const { return fd_ >= 0; }
    explicit operator bool() const { return valid(); }
    int release() { return std::exchange(fd_, -1); }
    void reset() {
        if (fd_ >= 0) sys_->close(fd_);
        fd_ = -1;
    }

private:
    int fd_ = -1;
    Sys* sys_ = nullptr;
};

}  // namespace vfab::vfio
