// The numbers a port gives its RC, UC, UD and XRC queue pairs (IB spec Vol. 1 10.2.4: QP0 and
// QP1 are the management QPs; 0xFFFFFF is the multicast QPN). A number is its table slot in the
// low bits and a tag above them; the tag advances with every queue pair made and starts at a
// random value for each port. A slot used again, in the same process or in the next process on
// the same NIC, thus gets a number its last user did not have, and packets still in flight for
// an old connection (a retransmission, a DREQ's peer that has not heard yet) are dropped by the
// demux instead of reaching the new queue pair. Private to transport/.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <random>

namespace vfab::rdma::detail {

inline constexpr uint32_t kMinQpn = 0x100;        // below: QP0, QP1 and numbers kept free
inline constexpr uint32_t kQpnLimit = 0x800000;   // from here on: raw-packet QPs (raw_packet.hpp)

class QpNumbers {
public:
    explicit QpNumbers(uint32_t max_qp)
        : slot_bits_(uint32_t(std::countr_zero(std::bit_ceil(max_qp)))),
          min_tag_(std::max<uint32_t>(1, kMinQpn >> slot_bits_)),
          tags_((kQpnLimit >> slot_bits_) - min_tag_),
          next_(std::random_device{}() % tags_) {}

    // A new number for `slot` (below max_qp).
    uint32_t next(uint32_t slot) noexcept {
        const uint32_t tag = min_tag_ + next_;
        next_ = (next_ + 1) % tags_;
        return tag << slot_bits_ | slot;
    }
    // The slot a number belongs to, or UINT32_MAX for no slot of this port.
    uint32_t slot_of(uint32_t qpn) const noexcept {
        if (qpn < kMinQpn || qpn >= kQpnLimit) return UINT32_MAX;
        return qpn & ((1u << slot_bits_) - 1);
    }

private:
    uint32_t slot_bits_, min_tag_, tags_, next_;
};

}  // namespace vfab::rdma::detail
