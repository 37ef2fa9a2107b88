// The RoCEv2 invariant CRC (IB spec Annex A17.3.3 with Vol. 1 7.8.1): a CRC-32 (the Ethernet
// polynomial, reflected) over a dummy 8-byte LRH of ones, the IP, UDP and BTH headers with
// their variant fields masked to ones, then the rest of the packet through the pad. It is the
// last 4 bytes of the UDP payload, least significant byte first.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vfab::rdma {

// A running CRC-32 (reflected 0xEDB88320, the register kept uninverted between calls).
struct Crc32 {
    uint32_t reg = 0xFFFFFFFFu;
    // Feeds `n` bytes from `p`, by the process's Crc32Method (runs of 64 bytes and more folded
    // with PCLMULQDQ under clmul, the rest by tables). No allocation, no system call.
    void update(const uint8_t* p, size_t n) noexcept;
    // The CRC of the bytes fed so far (the register inverted); update() may continue after it.
    uint32_t value() const noexcept { return ~reg; }
};

// How every Crc32 of the process runs: slicing-by-8 tables, or folding runs of 64 bytes and
// more with carry-less multiplication (PCLMULQDQ). An RDMA port sets it when it is created
// (PortConfig::crc32); tables until then.
enum class Crc32Method : uint8_t {
    automatic,   // the faster on this machine: timed once (~0.1 ms); tables under an emulator
    tables,
    clmul,       // where the CPU has PCLMULQDQ, else tables
};
// Sets the method; returns the one in effect (never automatic).
Crc32Method use_crc32_method(Crc32Method m) noexcept;
// The method in effect: tables until use_crc32_method() (or a port's creation) sets one;
// never automatic.
Crc32Method crc32_method() noexcept;

// Starts the ICRC of an IPv4 RoCEv2 packet: `ipv4` points at its IP header (20 bytes, no
// options), followed by UDP and the BTH. Feed the bytes after the BTH with update().
Crc32 icrc_begin_ipv4(const uint8_t* ipv4) noexcept;

// The ICRC of the IPv4 packet at `ipv4` whose bytes up to the ICRC number `len`
// (IP header through the pad). The 8 bytes before `ipv4` must be readable (the packet's
// Ethernet header: the folding reads its masked headers as three blocks from there).
uint32_t icrc_ipv4(const uint8_t* ipv4, size_t len) noexcept;

// Writes / reads an ICRC at `p` in its wire order (least significant byte first).
inline void store_icrc(uint8_t* p, uint32_t crc) noexcept {
    p[0] = uint8_t(crc); p[1] = uint8_t(crc >> 8); p[2] = uint8_t(crc >> 16); p[3] = uint8_t(crc >> 24);
}
// Reads the ICRC at `p` (least significant byte first), as store_icrc() writes it.
inline uint32_t load_icrc(const uint8_t* p) noexcept {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

}  // namespace vfab::rdma
