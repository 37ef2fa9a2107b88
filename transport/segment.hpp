// A piece of local memory a WR names, its key already checked: the CPU copies to and from it.
// Most are one run of memory (host); a range across the scattered blocks of a fast-registered
// MR (dma::BlockMap) is walked block by block.
#pragma once

#include <cstdint>
#include <cstring>

#include "vfab/dma/mr_table.hpp"

namespace vfab::rdma::detail {

struct Segment {
    uint8_t* host = nullptr;
    uint32_t len = 0;
    const dma::BlockMap* map = nullptr;   // set when the bytes do not follow each other,
    uint64_t pos = 0;                     // from this position in the map

    // The segment a translate_span() of `len` bytes gave (its status ok).
    static Segment of(const dma::Translation& t, uint32_t len) noexcept {
        if (t.run >= len) return {reinterpret_cast<uint8_t*>(t.host), len};
        return {nullptr, len, t.map, t.pos};
    }
};

// Copies between one segment (from byte `offset` of it) and a flat buffer: inline, for the
// responder's per-packet copies.
inline void copy_to(const Segment& s, uint32_t offset, const uint8_t* from, uint32_t len) noexcept {
    if (!s.map) [[likely]] std::memcpy(s.host + offset, from, len);
    else dma::copy_to(*s.map, s.pos + offset, from, len);
}
inline void copy_from(const Segment& s, uint32_t offset, uint8_t* to, uint32_t len) noexcept {
    if (!s.map) [[likely]] std::memcpy(to, s.host + offset, len);
    else dma::copy_from(*s.map, s.pos + offset, to, len);
}

// Copies between segments (at byte `offset` of their concatenation) and a flat buffer: one
// run of memory inline, the rest (several segments, scattered blocks) out of line.
void copy_to_segments_walk(const Segment* s, uint32_t n, uint32_t offset, const uint8_t* from, uint32_t len) noexcept;
void copy_from_segments_walk(const Segment* s, uint32_t n, uint32_t offset, uint8_t* to, uint32_t len) noexcept;
inline void copy_to_segments(const Segment* s, uint32_t n, uint32_t offset, const uint8_t* from, uint32_t len) noexcept {
    if (n == 1 && !s->map && len <= s->len && offset <= s->len - len) [[likely]]
        std::memcpy(s->host + offset, from, len);
    else
        copy_to_segments_walk(s, n, offset, from, len);
}
inline void copy_from_segments(const Segment* s, uint32_t n, uint32_t offset, uint8_t* to, uint32_t len) noexcept {
    if (n == 1 && !s->map && len <= s->len && offset <= s->len - len) [[likely]]
        std::memcpy(to, s->host + offset, len);
    else
        copy_from_segments_walk(s, n, offset, to, len);
}

}  // namespace vfab::rdma::detail
