// What the transport's objects share: the clocks, numbering, and the kinds of work request.
// Private to transport/.
#pragma once

#include <time.h>

#include <algorithm>
#include <cstdint>

#include "vfab/rdma/rdma.hpp"

namespace vfab::rdma::detail {

uint64_t now_ns() noexcept;   // CLOCK_MONOTONIC

constexpr uint64_t ns_of(const timespec& t) noexcept { return uint64_t(t.tv_sec) * 1000000000u + uint64_t(t.tv_nsec); }
inline uint64_t clock_ns(clockid_t clock) noexcept {
    timespec t;
    clock_gettime(clock, &t);
    return ns_of(t);
}

// vendor_err of a WR that failed because its peer never answered ARP.
inline constexpr uint32_t kVendorErrArpUnresolved = 0x10001;
inline constexpr uint32_t kMaxAsyncEvents = 256;   // unread asynchronous events a port keeps
inline constexpr uint32_t kFirstSrqn = 0x10;       // SRQ numbers: kFirstSrqn + index in the port's list
inline constexpr uint32_t kAckReqInterval = 32; // AckReq at least every this many packets of a message
// Packets sent and not yet acknowledged, at most: a burst the peer's receive ring can take
// (rxe keeps 128 too). Without a bound a 1 MiB message overruns a NIC's ring at every try.
inline constexpr int32_t kMaxUnackedPsns = 128;

// WRs answered by the responder's data (READ responses, atomic ACKs), counted against
// max_rd_atomic and held back by a fence.
constexpr bool is_atomic_wr(WrOpcode op) noexcept {
    return op == WrOpcode::atomic_cmp_and_swp || op == WrOpcode::atomic_fetch_and_add ||
           op == WrOpcode::masked_atomic_cmp_and_swp || op == WrOpcode::masked_atomic_fetch_and_add;
}
constexpr bool is_read_or_atomic(WrOpcode op) noexcept { return op == WrOpcode::rdma_read || is_atomic_wr(op); }
// Memory-management WRs: they act on the MR table and send nothing (memory_ops.cpp).
constexpr bool is_memory_wr(WrOpcode op) noexcept {
    return op == WrOpcode::local_inv || op == WrOpcode::bind_mw || op == WrOpcode::reg_mr;
}

// Objects of a port's list not destroyed.
template <class List>
uint32_t live(const List& list) noexcept {
    uint32_t n = 0;
    for (auto& x : list) n += !x->destroyed;
    return n;
}
// Whether `x` is a live object of a port's list: a handle the application got from this port.
template <class List, class T>
bool owns(const List& list, const T* x) noexcept {
    return x && std::any_of(list.begin(), list.end(), [&](auto& o) { return o.get() == x && !o->destroyed; });
}

}  // namespace vfab::rdma::detail
