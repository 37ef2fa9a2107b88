// Rings in plain memory for the Intel drivers' fast-path models (e1000e_harness.hpp,
// igb_harness.hpp), sized as intel::allocate_rings sizes them for create_qp; IOVA = VA.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>

#include "vfab/drivers/intel/queue_pair.hpp"

namespace vfab::intel {

// Fills v's rings and sizes; `mem` receives the memory (std::free it). tx_entries (a power of
// 2) overrides the transmit ring, for tests of a full ring.
template <class Traits>
void model_rings(RingView<Traits>& v, uint8_t*& mem, uint32_t send_depth, uint32_t recv_depth, uint32_t max_send_sge,
                 uint32_t tx_entries = 0) {
    v.send_depth = std::bit_ceil(std::max(send_depth, 8u));
    v.max_send_sge = max_send_sge;
    v.tx_entries = tx_entries ? tx_entries : std::bit_ceil(v.send_depth * (max_send_sge + 1) + 1);
    v.rx_entries = std::bit_ceil(std::max(recv_depth + 1, 8u));
    const size_t rx_bytes = size_t(v.rx_entries) * sizeof(typename Traits::RxDesc);
    const size_t bytes = rx_bytes + size_t(v.tx_entries) * sizeof(typename Traits::TxDesc);
    // aligned_alloc wants a size that is a multiple of the alignment
    mem = static_cast<uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) & ~size_t(4095)));
    std::memset(mem, 0, bytes);
    v.rx = reinterpret_cast<typename Traits::RxDesc*>(mem);
    v.tx = reinterpret_cast<typename Traits::TxDesc*>(mem + rx_bytes);
}

}  // namespace vfab::intel
