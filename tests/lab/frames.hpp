// Test frames for the NIC lab tests: a sequence number and a pattern derived from it, so the
// receiver can check content, length and order of every frame.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace vfab::lab {

inline constexpr uint16_t kTestEthertype = 0x88b5;   // IEEE 802 local experimental
inline constexpr uint32_t kMinFrame = 60;
inline constexpr uint32_t kMaxFrame = 1514;

// Frame sizes cycle through 60..1514 in a scattered order.
inline uint32_t frame_size(uint32_t seq) { return kMinFrame + (seq * 7919u) % (kMaxFrame - kMinFrame + 1); }

inline uint8_t pattern(uint32_t seq, uint32_t i) { return uint8_t(seq * 31u + i * 7u + (i >> 8)); }

inline void build_frame(uint8_t* f, uint32_t len, const uint8_t* dst, const uint8_t* src, uint32_t seq) {
    std::memcpy(f, dst, 6);
    std::memcpy(f + 6, src, 6);
    f[12] = kTestEthertype >> 8;
    f[13] = kTestEthertype & 0xff;
    std::memcpy(f + 14, &seq, 4);
    std::memcpy(f + 18, &len, 4);
    for (uint32_t i = 22; i < len; ++i) f[i] = pattern(seq, i);
}

// Empty when `f` (of `len` bytes as received) is frame `seq`; else what is wrong.
inline std::string check_frame(const uint8_t* f, uint32_t len, uint32_t seq) {
    uint32_t got_seq, got_len;
    std::memcpy(&got_seq, f + 14, 4);
    std::memcpy(&got_len, f + 18, 4);
    if (got_seq != seq) return "frame " + std::to_string(got_seq) + " arrived where " + std::to_string(seq) + " was due";
    if (got_len != len || len != frame_size(seq))
        return "frame " + std::to_string(seq) + ": " + std::to_string(len) + " bytes, expected " + std::to_string(frame_size(seq));
    for (uint32_t i = 22; i < len; ++i)
        if (f[i] != pattern(seq, i)) return "frame " + std::to_string(seq) + ": byte " + std::to_string(i) + " differs";
    return {};
}

// Page-aligned user memory (not an arena), as an application would malloc it.
struct UserBuffer {
    uint8_t* data = nullptr;
    size_t size = 0;
    explicit UserBuffer(size_t n)
        : data(static_cast<uint8_t*>(std::aligned_alloc(4096, (n + 4095) & ~size_t(4095)))), size(n) {
        std::memset(data, 0, n);
    }
    ~UserBuffer() { std::free(data); }
    UserBuffer(const UserBuffer&) = delete;
    UserBuffer& operator=(const UserBuffer&) = delete;
    uint64_t addr(size_t off = 0) const { return reinterpret_cast<uint64_t>(data + off); }
};

}  // namespace vfab::lab
