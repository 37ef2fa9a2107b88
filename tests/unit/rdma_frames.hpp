// Frames written by hand for the RDMA transport's tests (a peer played frame by frame, the
// fuzzers): A's frames toward B on RdmaPair's fake wire, and the checksums a mutated frame
// needs to reach the transport past its ICRC check.
#pragma once

#include <cstring>
#include <vector>

#include "../../transport/packet.hpp"
#include "rdma_fake_link.hpp"
#include "vfab/rdma/icrc.hpp"

namespace vfab::rdma::test {

using vfab::test::kIpA;
using vfab::test::kIpB;
using vfab::test::kMacA;
using vfab::test::kMacB;

// `h` (its addresses made A's and B's) with the `len` bytes at `payload`, as A would send it.
inline std::vector<uint8_t> frame_a_to_b(PacketHeader h, const uint8_t* payload, uint32_t len) {
    h.dst_mac = kMacB;
    h.src_mac = kMacA;
    h.src_ip = kIpA;
    h.dst_ip = kIpB;
    std::vector<uint8_t> f(wire::kEthHeader + 128 + len + 8);
    if (len) std::memcpy(write_headers(f.data(), h, len), payload, len);
    else write_headers(f.data(), h, 0);
    f.resize(finish_frame(f.data(), len));
    return f;
}

// The IPv4 header checksum and the ICRC right for what the headers say, where the frame holds
// them (a frame cut short keeps what it has).
inline void fix_checksums(std::vector<uint8_t>& f) {
    using namespace wire;
    if (f.size() < kEthHeader + kIpv4Header) return;
    uint8_t* ip = f.data() + kEthHeader;
    store16(ip + 10, 0);
    store16(ip + 10, ipv4_checksum(ip));
    const uint32_t ip_len = load16(ip + 2);
    if (ip_len >= kIpv4Header + kUdpHeader + kBth + kIcrc && kEthHeader + ip_len <= f.size())
        store_icrc(ip + ip_len - kIcrc, icrc_ipv4(ip, ip_len - kIcrc));
}

}  // namespace vfab::rdma::test
