// Connection set-up over a TCP side channel, the way rdma-core's ibv_rc_pingpong and
// ibv_ud_pingpong do it, so that either side can be one of those unmodified tools:
//
//   client: connect, send "LLLL:QQQQQQ:PPPPPP:<32 hex digits of the GID>\0", read the server's,
//           send "done\0";
//   server: accept one connection, read the client's, connect its own QP (the callback), send
//           its own, read "done\0".
//
// The GID travels as its 16 bytes in hex, in order. ibv_srq_pingpong sends 256 such messages
// each way (one per queue pair it may have; the unused ones zero) before "done".
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "vfab/rdma/verbs.hpp"
#include "vfab/result.hpp"

namespace vfab::rdma {

struct Endpoint {
    uint16_t lid = 0;   // 0 on RoCE
    uint32_t qpn = 0;
    uint32_t psn = 0;
    Gid gid;
};

inline constexpr size_t kPingpongMessage = sizeof "0000:000000:000000:00000000000000000000000000000000";
inline constexpr uint16_t kPingpongPort = 18515;
inline constexpr size_t kSrqPingpongEndpoints = 256;   // ibv_srq_pingpong's MAX_QP
inline constexpr int kClientTimeoutMs = 30000;          // each step of the client's exchange
inline constexpr int kServerTimeoutMs = 60000;          // ... of the server's (a client may come late)

std::string format_endpoint(const Endpoint& e);                   // kPingpongMessage - 1 characters
// The endpoint in a message as format_endpoint() writes it, read up to its NUL or `len`
// bytes; EPROTO when it is not LID:QPN:PSN:GID in hex, the GID as 32 digits.
Result<Endpoint> parse_endpoint(const char* msg, size_t len);
std::string gid_to_string(const Gid& g);                          // as inet_ntop(AF_INET6) writes it

// What else an exchange watches while it waits on its peer (connecting, accepting, reading):
// when `fd` becomes readable (a device's event_fd(), say), `keep_going()` runs — it must read
// what made `fd` readable (next_event() until none) — and false ends the exchange at once with
// ECANCELED. So a device removal is not kept waiting by a peer that never comes.
struct ExchangeWatch {
    int fd = -1;                        // -1: nothing to watch
    std::function<bool()> keep_going;   // false: stop the exchange
};

// The client's side: the server's endpoint. `timeout_ms` bounds each step, connecting
// included (ETIMEDOUT); ECONNREFUSED when no server listens; ECANCELED when `watch` said stop.
Result<Endpoint> exchange_as_client(const std::string& host, uint16_t port, const Endpoint& mine,
                                    int timeout_ms = kClientTimeoutMs, const ExchangeWatch& watch = {});
// The server's side: waits for one client; `connect(peer)` runs before the server answers (as
// ibv_rc_pingpong moves its QP to RTR and RTS there); the client's endpoint.
Result<Endpoint> exchange_as_server(uint16_t port, const Endpoint& mine,
                                    const std::function<Result<void>(const Endpoint&)>& connect,
                                    int timeout_ms = kServerTimeoutMs, const ExchangeWatch& watch = {});

// The same with mine.size() endpoints each way (the peer sends as many).
Result<std::vector<Endpoint>> exchange_as_client(const std::string& host, uint16_t port, std::span<const Endpoint> mine,
                                                 int timeout_ms = kClientTimeoutMs, const ExchangeWatch& watch = {});
// The server's side of it: listens on `port` (any address, IPv4 or IPv6), reads mine.size()
// endpoints from one client, runs `connect` on them, sends its own; an error of `connect` is
// returned before ours are sent. ETIMEDOUT when no client comes or a step stalls within
// `timeout_ms`; EADDRINUSE (bind's errno) when the port is taken; ECANCELED when `watch` said
// stop.
Result<std::vector<Endpoint>> exchange_as_server(
    uint16_t port, std::span<const Endpoint> mine,
    const std::function<Result<void>(std::span<const Endpoint>)>& connect, int timeout_ms = kServerTimeoutMs,
    const ExchangeWatch& watch = {});

}  // namespace vfab::rdma
