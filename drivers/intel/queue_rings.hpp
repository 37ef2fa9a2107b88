// The control path of the Intel queue core (private to the e1000e, igb and igbvf drivers):
// create_qp's checks of what a queue pair asks for, and its descriptor rings in DMA memory
// near the device, sized as the fast path needs them (intel::QueuePairCore, RingView).
#pragma once

#include <algorithm>
#include <bit>
#include <memory>
#include <string_view>

#include "vfab/dma/dma_arena.hpp"
#include "vfab/drivers/intel/queue_pair.hpp"
#include "vfab/pci_address.hpp"
#include "vfab/result.hpp"

namespace vfab::intel {

inline constexpr uint32_t kMinRing = 8;   // RDLEN/TDLEN are multiples of 128 bytes
inline constexpr uint32_t kMaxTxRing = 1u << 15;

inline uint32_t ring_entries(uint32_t entries) { return std::bit_ceil(std::max(entries, kMinRing)); }

// `chip` names the device in the message ("the 82574L").
inline Result<void> check_caps(const QpCaps& want, std::string_view chip, uint32_t recv_buffer) {
    if (want.max_send_wr == 0 || want.max_send_wr > kMaxQueueDepth || want.max_recv_wr == 0 ||
        want.max_recv_wr > kMaxQueueDepth)
        return Error{EINVAL, str_cat("create_qp: max_send_wr and max_recv_wr must be 1 to ", kMaxQueueDepth)};
    if (want.max_send_sge > kMaxSendSge || want.max_recv_sge > 1)
        return Error{EINVAL, str_cat("create_qp: ", chip, " takes up to ", kMaxSendSge,
                                     " SGEs per send and 1 per receive (one buffer of ", recv_buffer, " bytes per frame)")};
    return {};
}

// Sizes v's rings for what a queue pair asks: a slot per send WR, a transmit descriptor per
// SGE and a context descriptor per WR at most, a receive descriptor per WR and one left empty
// (head == tail means idle).
template <class Traits>
void size_rings(const QpCaps& want, RingView<Traits>& v) {
    v.send_depth = ring_entries(want.max_send_wr);
    v.max_send_sge = std::max(want.max_send_sge, 1u);
    v.tx_entries = std::min(ring_entries(v.send_depth * (v.max_send_sge + 1) + 1), kMaxTxRing);
    v.rx_entries = ring_entries(want.max_recv_wr + 1);
}

// The bytes v's rings take, and their places in memory of that size (receive ring first).
template <class Traits>
size_t ring_bytes(const RingView<Traits>& v) {
    return size_t(v.rx_entries) * sizeof(typename Traits::RxDesc) + size_t(v.tx_entries) * sizeof(typename Traits::TxDesc);
}
template <class Traits>
void place_rings(uint8_t* mem, RingView<Traits>& v) {
    v.rx = reinterpret_cast<typename Traits::RxDesc*>(mem);
    v.tx = reinterpret_cast<typename Traits::TxDesc*>(mem + size_t(v.rx_entries) * sizeof(typename Traits::RxDesc));
}

// Fills v's rings and sizes (size_rings) in DMA memory near the device. The caller keeps the
// arena in the queue pair for as long as it runs.
template <class Traits>
Result<dma::DmaArena> allocate_rings(const std::shared_ptr<vfio::AddressSpace>& space, const PciAddress& where,
                                     const QpCaps& want, RingView<Traits>& v) {
    size_rings(want, v);
    auto rings = dma::DmaArena::create(space, ring_bytes(v), dma::near_device(where));
    if (!rings) return Error{rings.error().code, str_cat("create_qp: descriptor rings: ", rings.error().message)};
    place_rings(rings->data(), v);
    return std::move(*rings);
}

}  // namespace vfab::intel
