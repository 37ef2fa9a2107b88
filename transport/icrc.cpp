// CRC-32 and the RoCEv2 ICRC's masking of the variant header fields (Annex A17.3.3). Runs of
// 16 bytes and more are folded with carry-less multiplication (PCLMULQDQ), 64 bytes a step
// while they last, where the CPU has it and it is the faster (use_crc32_method); otherwise
// slicing-by-8 (eight 256-entry tables built at compile time). An ICRC folds its masked
// headers and the rest of its packet in one pass.
#include "vfab/rdma/icrc.hpp"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>

#include "engine.hpp"
#include "headers.hpp"
#include "vfab/rdma/wire.hpp"

namespace vfab::rdma {
namespace {

constexpr uint32_t kPoly = 0xEDB88320u;

using Tables = std::array<std::array<uint32_t, 256>, 8>;
constexpr Tables make_tables() {
    Tables t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (c & 1 ? kPoly : 0);
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
        for (size_t s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    return t;
}
constexpr Tables kTables = make_tables();

uint32_t update_tables(uint32_t c, const uint8_t* p, size_t n) noexcept {
    while (n >= 8) {
        uint32_t lo, hi;
        std::memcpy(&lo, p, 4);
        std::memcpy(&hi, p + 4, 4);
        lo ^= c;   // little-endian host (x86-64)
        c = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^
            kTables[4][lo >> 24] ^ kTables[3][hi & 0xFF] ^ kTables[2][(hi >> 8) & 0xFF] ^
            kTables[1][(hi >> 16) & 0xFF] ^ kTables[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
    return c;
}

// Folding constants of the bit-reflected polynomial: reflect32(x^e mod P) << 1 for the e each
// names, and Barrett's mu = reflect33(x^64 / P) and P itself reflected (33 bits).
constexpr long long kX1056 = 0x1e88ef372, kX992 = 0x14a7fe880;  // fold 1024 bits: low, high qword
constexpr long long kX544 = 0x154442bd4, kX480 = 0x1c6e41596;   // fold 512 bits
constexpr long long kX160 = 0x1751997d0, kX96 = 0x0ccaa009e;    // fold 128 bits: low, high qword
constexpr long long kX64 = 0x163cd6124;
constexpr long long kMu = 0x1f7011641, kPoly33 = 0x1db710641;

// The folding functions are written once, inlined into an SSE and an AVX copy (VEX encoding:
// three operands, no register copies; 31 -> 19 instructions per 64 bytes), the AVX one taken
// where the CPU has it.
#define VFAB_CLMUL __attribute__((target("pclmul,sse4.1,ssse3"), always_inline))

VFAB_CLMUL inline __m128i load(const uint8_t* q) noexcept { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)); }

// The lane x folded forward: its low qword times k's low one, its high qword times k's high
// one, plus the lane that comes next.
VFAB_CLMUL inline __m128i fold(__m128i x, __m128i k, __m128i next) noexcept {
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

// PSHUFB masks for a last block of r < 16 bytes: at kShuffle + r, the lane shifted up by 16 - r
// bytes (its first r bytes become its last); at kShuffle + 16 + r, shifted down by r bytes.
alignas(16) constexpr uint8_t kShuffle[48] = {
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80};

// The CRC register after the bytes folded into x (the last 16 of them, not yet reduced) and
// the n bytes at p (any n; when n is not a multiple of 16, the 16 bytes before p + n must be
// readable): eight 128-bit lanes folded forward 1024 bits per 128 bytes while 128 remain, then
// four, one lane 16 bytes a step, a last partial block folded with the lane before it, then reduced from 128
// to 32 bits (Barrett).
VFAB_CLMUL inline uint32_t finish_folded(__m128i x, const uint8_t* p, size_t n) noexcept {
    const __m128i k128 = _mm_set_epi64x(kX96, kX160);
    const __m128i k512 = _mm_set_epi64x(kX480, kX544);
    if (n >= 128) {   // eight lanes, 1024 bits a step; then folded into four
        __m128i x0 = fold(x, k128, load(p)), x1 = load(p + 16), x2 = load(p + 32), x3 = load(p + 48);
        __m128i x4 = load(p + 64), x5 = load(p + 80), x6 = load(p + 96), x7 = load(p + 112);
        p += 128;
        n -= 128;
        const __m128i k1024 = _mm_set_epi64x(kX992, kX1056);
        for (; n >= 128; p += 128, n -= 128) {
            x0 = fold(x0, k1024, load(p));
            x1 = fold(x1, k1024, load(p + 16));
            x2 = fold(x2, k1024, load(p + 32));
            x3 = fold(x3, k1024, load(p + 48));
            x4 = fold(x4, k1024, load(p + 64));
            x5 = fold(x5, k1024, load(p + 80));
            x6 = fold(x6, k1024, load(p + 96));
            x7 = fold(x7, k1024, load(p + 112));
        }
        x0 = fold(x0, k512, x4);
        x1 = fold(x1, k512, x5);
        x2 = fold(x2, k512, x6);
        x3 = fold(x3, k512, x7);
        if (n >= 64) {
            x0 = fold(x0, k512, load(p));
            x1 = fold(x1, k512, load(p + 16));
            x2 = fold(x2, k512, load(p + 32));
            x3 = fold(x3, k512, load(p + 48));
            p += 64;
            n -= 64;
        }
        x = fold(fold(fold(x0, k128, x1), k128, x2), k128, x3);
    } else if (n >= 64) {
        __m128i x0 = fold(x, k128, load(p)), x1 = load(p + 16), x2 = load(p + 32), x3 = load(p + 48);
        x = fold(fold(fold(x0, k128, x1), k128, x2), k128, x3);
        p += 64;
        n -= 64;
    }
    for (; n >= 16; p += 16, n -= 16) x = fold(x, k128, load(p));
    if (n) {   // the lane and the n bytes: its first n bytes one block, its rest and the n the next
        const __m128i up = load(kShuffle + n), down = load(kShuffle + 16 + n);
        const __m128i next = _mm_blendv_epi8(load(p + n - 16), _mm_shuffle_epi8(x, down), up);
        x = fold(_mm_shuffle_epi8(x, up), k128, next);
    }

    // 128 -> 64 bits: the low qword times x^96 into the high one; then the low 32 bits times x^64.
    const __m128i low32 = _mm_set_epi32(0, -1, 0, -1);
    x = _mm_xor_si128(_mm_srli_si128(x, 8), _mm_clmulepi64_si128(x, k128, 0x10));
    x = _mm_xor_si128(_mm_srli_si128(x, 4), _mm_clmulepi64_si128(_mm_and_si128(x, low32), _mm_set_epi64x(0, kX64), 0x00));
    // Barrett: q = (low 32 bits) * mu, keep 32 bits, times P; the remainder is in bits 32-63.
    const __m128i barrett = _mm_set_epi64x(kMu, kPoly33);
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x, low32), barrett, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), barrett, 0x00);
    return uint32_t(_mm_extract_epi32(_mm_xor_si128(x, t), 1));
}

// The CRC register after the n >= 16 bytes at p, from register c.
VFAB_CLMUL inline uint32_t update_folded_body(uint32_t c, const uint8_t* p, size_t n) noexcept {
    return finish_folded(_mm_xor_si128(load(p), _mm_cvtsi32_si128(int(c))), p + 16, n - 16);
}

// The ICRC's 48 header bytes (A17.3.3): a dummy LRH of ones, then the IP, UDP and BTH headers
// with the fields a router may change masked with ones. As three blocks over the frame from 8
// bytes before its IP header, these are OR-ed in: the LRH, IPv4 TOS; TTL, header checksum;
// UDP checksum, the BTH's FECN/BECN byte.
alignas(16) constexpr uint8_t kIcrcMask[48] = {
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0xFF, 0, 0, 0, 0, 0, 0,
    0xFF, 0, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0xFF, 0xFF, 0, 0, 0, 0, 0xFF, 0, 0, 0, 0, 0, 0, 0};
static_assert(8 + offsetof(hdr::Ipv4, tos) == 9 && 8 + offsetof(hdr::Ipv4, ttl) == 16 &&
              8 + offsetof(hdr::Ipv4, checksum) == 18 && 8 + sizeof(hdr::Ipv4) + offsetof(hdr::Udp, checksum) == 34 &&
              8 + sizeof(hdr::Ipv4) + sizeof(hdr::Udp) + offsetof(hdr::Bth, fecn_becn_resv) == 40);

// The ICRC's register over the packet whose IP header is at ipv4 (the 8 bytes before it
// readable: its Ethernet header) and whose n bytes after the BTH follow.
VFAB_CLMUL inline uint32_t icrc_folded_body(const uint8_t* ipv4, size_t n) noexcept {
    const __m128i k128 = _mm_set_epi64x(kX96, kX160);
    const uint8_t* h = ipv4 - 8;
    __m128i x = _mm_or_si128(load(h), load(kIcrcMask));
    x = _mm_xor_si128(x, _mm_cvtsi32_si128(-1));   // the register starts at ones
    x = fold(x, k128, _mm_or_si128(load(h + 16), load(kIcrcMask + 16)));
    x = fold(x, k128, _mm_or_si128(load(h + 32), load(kIcrcMask + 32)));
    return finish_folded(x, h + 48, n);
}
#undef VFAB_CLMUL

#define VFAB_SSE __attribute__((target("pclmul,sse4.1,ssse3")))
#define VFAB_AVX __attribute__((target("avx,pclmul,sse4.1,ssse3")))
VFAB_SSE uint32_t update_folded_sse(uint32_t c, const uint8_t* p, size_t n) noexcept { return update_folded_body(c, p, n); }
VFAB_AVX uint32_t update_folded_avx(uint32_t c, const uint8_t* p, size_t n) noexcept { return update_folded_body(c, p, n); }
// An ICRC by folding: `len` bytes from the IP header through the pad.
constexpr size_t kIcrcHeaders = wire::kIpv4Header + wire::kUdpHeader + wire::kBth;
VFAB_SSE uint32_t icrc_by_sse(const uint8_t* ipv4, size_t len) noexcept { return ~icrc_folded_body(ipv4, len - kIcrcHeaders); }
VFAB_AVX uint32_t icrc_by_avx(const uint8_t* ipv4, size_t len) noexcept { return ~icrc_folded_body(ipv4, len - kIcrcHeaders); }
#undef VFAB_SSE
#undef VFAB_AVX

// The copies this CPU runs, chosen once (constant-initialised to the SSE ones: no constructor).
std::atomic<bool> g_avx{false};
uint32_t update_folded(uint32_t c, const uint8_t* p, size_t n) noexcept {
    return g_avx.load(std::memory_order_relaxed) ? update_folded_avx(c, p, n) : update_folded_sse(c, p, n);
}

// The process's method (Crc32Method), tables until use_crc32_method() says otherwise. Constant-
// initialised: no constructor runs.
std::atomic<uint8_t> g_method{uint8_t(Crc32Method::tables)};
std::atomic<uint8_t> g_calibrated{uint8_t(Crc32Method::automatic)};   // automatic: not yet

// QEMU's TCG, which says so in the hypervisor leaf of CPUID (0x40000000: "TCGTCGTCGTCG").
bool under_tcg() noexcept {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 31))) return false;   // no hypervisor
    __cpuid(0x40000000, a, b, c, d);
    char vendor[12];
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &c, 4);
    std::memcpy(vendor + 8, &d, 4);
    return std::memcmp(vendor, "TCGTCGTCGTCG", 12) == 0;
}

// The faster of the two on this CPU, over 4 KiB, best of eight tries each (interleaved, so that
// a busy moment does not favour one). Native CPUs fold ~3x faster. Under QEMU's TCG folding
// computes faster too, timed alone, but the RDMA transport over an emulated NIC then moves
// 2.5x less (lab: write bandwidth 0.37-0.40 Gb/s folding, 0.91-1.06 with tables, the same
// boot): tables there.
Crc32Method calibrate() noexcept {
    if (under_tcg()) return Crc32Method::tables;
    uint8_t buf[4096];
    for (size_t i = 0; i < sizeof buf; ++i) buf[i] = uint8_t(i * 131 + 7);
    uint64_t best_tables = ~0ull, best_folded = ~0ull;
    volatile uint32_t sink = 0;
    for (int i = 0; i < 8; ++i) {
        const uint64_t t0 = detail::now_ns();
        sink = sink + update_tables(~0u, buf, sizeof buf);
        const uint64_t t1 = detail::now_ns();
        sink = sink + update_folded(~0u, buf, sizeof buf);
        const uint64_t t2 = detail::now_ns();
        best_tables = std::min(best_tables, t1 - t0);
        best_folded = std::min(best_folded, t2 - t1);
    }
    return best_folded < best_tables ? Crc32Method::clmul : Crc32Method::tables;
}

}  // namespace

namespace {
// The dummy LRH of ones and the IP, UDP and BTH headers with the fields a router may change
// masked with ones (A17.3.3): 48 bytes, three blocks for the folding.
void masked_headers(const uint8_t* ipv4, uint8_t (&masked)[8 + kIcrcHeaders]) noexcept {
    std::memset(masked, 0xFF, 8);
    uint8_t* h = masked + 8;
    std::memcpy(h, ipv4, kIcrcHeaders);
    auto& ip = *hdr::at<hdr::Ipv4>(h);
    ip.tos = 0xFF;   // DSCP, ECN
    ip.ttl = 0xFF;
    ip.checksum.set(0xFFFF);
    hdr::at<hdr::Udp>(h + sizeof(hdr::Ipv4))->checksum.set(0xFFFF);
    hdr::at<hdr::Bth>(h + sizeof(hdr::Ipv4) + sizeof(hdr::Udp))->fecn_becn_resv = 0xFF;
}
static_assert(8 + kIcrcHeaders == 48);

uint32_t icrc_by_tables(const uint8_t* ipv4, size_t len) noexcept {
    alignas(16) uint8_t masked[8 + kIcrcHeaders];
    masked_headers(ipv4, masked);
    Crc32 c;
    c.update(masked, sizeof masked);
    c.update(ipv4 + kIcrcHeaders, len - kIcrcHeaders);
    return c.value();
}

// How icrc_ipv4() computes, set with the method (use_crc32_method): constant-initialised.
using IcrcFn = uint32_t (*)(const uint8_t*, size_t) noexcept;
std::atomic<IcrcFn> g_icrc{icrc_by_tables};
}  // namespace

Crc32Method use_crc32_method(Crc32Method m) noexcept {
    g_avx.store(__builtin_cpu_supports("avx"), std::memory_order_relaxed);
    if (!__builtin_cpu_supports("pclmul")) m = Crc32Method::tables;
    else if (m == Crc32Method::automatic) {
        m = Crc32Method(g_calibrated.load(std::memory_order_relaxed));
        if (m == Crc32Method::automatic) g_calibrated.store(uint8_t(m = calibrate()), std::memory_order_relaxed);
    }
    g_method.store(uint8_t(m), std::memory_order_relaxed);
    const bool avx = g_avx.load(std::memory_order_relaxed);
    g_icrc.store(m == Crc32Method::clmul ? (avx ? icrc_by_avx : icrc_by_sse) : icrc_by_tables, std::memory_order_relaxed);
    return m;
}

Crc32Method crc32_method() noexcept { return Crc32Method(g_method.load(std::memory_order_relaxed)); }

void Crc32::update(const uint8_t* p, size_t n) noexcept {
    if (n >= 16 && g_method.load(std::memory_order_relaxed) == uint8_t(Crc32Method::clmul)) reg = update_folded(reg, p, n);
    else reg = update_tables(reg, p, n);
}


Crc32 icrc_begin_ipv4(const uint8_t* ipv4) noexcept {
    alignas(16) uint8_t masked[8 + kIcrcHeaders];
    masked_headers(ipv4, masked);
    Crc32 c;
    c.update(masked, sizeof masked);
    return c;
}

uint32_t icrc_ipv4(const uint8_t* ipv4, size_t len) noexcept { return g_icrc.load(std::memory_order_relaxed)(ipv4, len); }

}  // namespace vfab::rdma
