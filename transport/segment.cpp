#include "segment.hpp"

#include <algorithm>
#include <cstring>

namespace vfab::rdma::detail {

void copy_to_segments_walk(const Segment* s, uint32_t n, uint32_t offset, const uint8_t* from, uint32_t len) noexcept {
    for (uint32_t i = 0; i < n && len; ++i) {
        if (offset >= s[i].len) {
            offset -= s[i].len;
            continue;
        }
        const uint32_t k = std::min(len, s[i].len - offset);
        if (s[i].map) dma::copy_to(*s[i].map, s[i].pos + offset, from, k);
        else std::memcpy(s[i].host + offset, from, k);
        from += k;
        len -= k;
        offset = 0;
    }
}

void copy_from_segments_walk(const Segment* s, uint32_t n, uint32_t offset, uint8_t* to, uint32_t len) noexcept {
    for (uint32_t i = 0; i < n && len; ++i) {
        if (offset >= s[i].len) {
            offset -= s[i].len;
            continue;
        }
        const uint32_t k = std::min(len, s[i].len - offset);
        if (s[i].map) dma::copy_from(*s[i].map, s[i].pos + offset, to, k);
        else std::memcpy(to, s[i].host + offset, k);
        to += k;
        len -= k;
        offset = 0;
    }
}

}  // namespace vfab::rdma::detail
