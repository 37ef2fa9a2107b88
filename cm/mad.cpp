// The RDMA IP CM Service's private-data header (Annex A11; see mad.hpp).
#include "mad.hpp"

namespace vfab::cm {

namespace {
void put_ipv4(std::array<uint8_t, 16>& a, uint32_t ip) noexcept {
    a.fill(0);
    a[12] = uint8_t(ip >> 24);
    a[13] = uint8_t(ip >> 16);
    a[14] = uint8_t(ip >> 8);
    a[15] = uint8_t(ip);
}
uint32_t ipv4_of(const std::array<uint8_t, 16>& a) noexcept {
    return uint32_t(a[12]) << 24 | uint32_t(a[13]) << 16 | uint32_t(a[14]) << 8 | a[15];
}
}  // namespace

CmaHeader CmaHeader::ipv4(uint32_t src_ip, uint16_t src_port, uint32_t dst_ip) noexcept {
    CmaHeader h;
    h.ip_version = 4;
    h.src_port = src_port;
    put_ipv4(h.src, src_ip);
    put_ipv4(h.dst, dst_ip);
    return h;
}

uint32_t CmaHeader::src_ipv4() const noexcept { return ipv4_of(src); }
uint32_t CmaHeader::dst_ipv4() const noexcept { return ipv4_of(dst); }

void write_cma_header(uint8_t* p, const CmaHeader& h) noexcept {
    p[0] = kCmaVersion;
    p[1] = uint8_t(h.ip_version << 4);
    p[2] = uint8_t(h.src_port >> 8);
    p[3] = uint8_t(h.src_port);
    std::memcpy(p + 4, h.src.data(), 16);
    std::memcpy(p + 20, h.dst.data(), 16);
}

bool read_cma_header(const uint8_t* p, CmaHeader& out) noexcept {
    const uint8_t version = p[1] >> 4;
    if (p[0] != kCmaVersion || (version != 4 && version != 6)) return false;
    out.ip_version = version;
    out.src_port = uint16_t(p[2] << 8 | p[3]);
    std::memcpy(out.src.data(), p + 4, 16);
    std::memcpy(out.dst.data(), p + 20, 16);
    return true;
}

}  // namespace vfab::cm
