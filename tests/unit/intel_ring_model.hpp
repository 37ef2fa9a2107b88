// Rings in plain memory for the Intel drivers' fast-path models (e1000e_harness.hpp,
// igb_harness.hpp), sized as create_qp sizes them (intel::size_rings); IOVA = VA.
#pragma once

#include <cstdlib>
#include <cstring>

#include "../../drivers/intel/queue_rings.hpp"

namespace vfab::intel {

// Fills v's rings and sizes; `mem` receives the memory (std::free it). tx_entries (a power of
// 2) overrides the transmit ring, for tests of a full ring.
template <class Traits>
void model_rings(RingView<Traits>& v, uint8_t*& mem, uint32_t send_depth, uint32_t recv_depth, uint32_t max_send_sge,
                 uint32_t tx_entries = 0) {
    size_rings(QpCaps{send_depth, recv_depth, max_send_sge, 1}, v);
    if (tx_entries) v.tx_entries = tx_entries;
    const size_t bytes = ring_bytes(v);
    // aligned_alloc wants a size that is a multiple of the alignment
    mem = static_cast<uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) & ~size_t(4095)));
    std::memset(mem, 0, bytes);
    place_rings(mem, v);
}

}  // namespace vfab::intel
