// The transport's limits, checked where objects are made and reported by Port::query_device().
#pragma once

#include <cstdint>

namespace vfab::rdma::detail {

inline constexpr uint32_t kMaxQpWr = 16384;       // send and receive WRs of a queue pair
inline constexpr uint32_t kMaxSge = 32;           // SGEs of a send or receive WR
inline constexpr uint32_t kMaxInline = 4096;      // inline bytes of a send WR
inline constexpr uint32_t kMaxCqe = 1u << 20;     // completions a CQ holds
inline constexpr uint32_t kMaxCq = 65536;         // CQs of a port
inline constexpr uint32_t kMaxSrq = 65536;        // SRQs of a port
inline constexpr uint32_t kMaxSrqWr = 16384;
inline constexpr uint32_t kMaxSrqSge = 32;
inline constexpr uint32_t kMaxAh = 65536;         // address handles of a port
// READs/atomics outstanding, and answered at once: rxe's limit, which programs written on rxe
// ask for (perftest sets the peer's outstanding reads, 128 on rxe, as its own max_rd_atomic).
inline constexpr uint32_t kMaxRdAtomic = 128;
inline constexpr uint32_t kMaxMcastGroups = 64;    // multicast groups a port has queue pairs in
inline constexpr uint32_t kMaxMcastQpAttach = 64;  // queue pairs in one group
inline constexpr uint32_t kMaxDmaLength = 1u << 31;   // a RETH's DMA length at most (IB spec 9.4.3; ibv max_msg_sz)
// The port reads its link at most this often for port events (Port::check_link), when a
// multiple of kLinkCheckRuns runs of its progress or a sleeping progress thread's wake-up
// passes by: a link change is reported within about this long plus 200 ms.
inline constexpr uint64_t kLinkCheckNs = 100'000'000;
inline constexpr uint32_t kLinkCheckRuns = 1024;

}  // namespace vfab::rdma::detail
