// The TCP side channel of rdma-core's pingpong examples (see exchange.hpp).
#include "vfab/rdma/exchange.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "vfab/vfio/unique_fd.hpp"

namespace vfab::rdma {
namespace {

vfio::UniqueFd owned(int fd) { return vfio::UniqueFd(fd, vfio::Sys::real()); }

// How long one step of the exchange may take, and what else to watch meanwhile.
struct Step {
    int timeout_ms;
    const ExchangeWatch& watch;
};

// Waits until `fd` is ready for `events`: ETIMEDOUT after the step's time, ECANCELED when the
// watch said stop. `what` names the step ("sending our address") in the error.
Result<void> wait_fd(int fd, short events, const Step& step, const char* what) {
    using Clock = std::chrono::steady_clock;
    const auto end = Clock::now() + std::chrono::milliseconds(step.timeout_ms);
    const bool watching = step.watch.fd >= 0 && step.watch.keep_going;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
        if (left <= 0) return Error{ETIMEDOUT, str_cat("side channel: ", what, " timed out")};
        pollfd p[2] = {{fd, events, 0}, {step.watch.fd, POLLIN, 0}};
        const int n = ::poll(p, watching ? 2 : 1, int(left));
        if (n < 0 && errno != EINTR) return Error::from_errno(errno, str_cat("side channel: ", what));
        if (n <= 0) continue;
        if (p[0].revents) return {};
        if (p[1].revents && !step.watch.keep_going())
            return Error{ECANCELED, str_cat("side channel: stopped while ", what)};
    }
}

Result<void> write_all(int fd, const void* buf, size_t len, const Step& step, const char* what) {
    const char* p = static_cast<const char*>(buf);
    while (len) {
        if (auto r = wait_fd(fd, POLLOUT, step, what); !r) return r;
        const ssize_t n = ::write(fd, p, len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) return Error::from_errno(errno, str_cat("side channel: ", what));
        p += n;
        len -= size_t(n);
    }
    return {};
}

Result<void> read_all(int fd, void* buf, size_t len, const Step& step, const char* what) {
    char* p = static_cast<char*>(buf);
    while (len) {
        if (auto r = wait_fd(fd, POLLIN, step, what); !r) return r;
        const ssize_t n = ::read(fd, p, len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n == 0) return Error{ECONNRESET, str_cat("side channel: the peer closed the connection while ", what)};
        if (n < 0) return Error::from_errno(errno, str_cat("side channel: ", what));
        p += n;
        len -= size_t(n);
    }
    return {};
}

// Connects a socket of `t`'s kind within the step's time: the socket, or the error.
Result<vfio::UniqueFd> connect_within(const addrinfo* t, const Step& step) {
    vfio::UniqueFd s = owned(::socket(t->ai_family, t->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, t->ai_protocol));
    if (!s) return Error::from_errno(errno, "side channel: socket");
    if (::connect(s.get(), t->ai_addr, t->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) return Error::from_errno(errno, "side channel: connect");
        if (auto r = wait_fd(s.get(), POLLOUT, step, "connecting"); !r) return r.take_error();
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) return Error::from_errno(err, "side channel: connect");
    }
    return s;
}

}  // namespace

std::string format_endpoint(const Endpoint& e) {
    char msg[kPingpongMessage];
    int n = std::snprintf(msg, sizeof msg, "%04x:%06x:%06x:", e.lid, e.qpn & 0xFFFFFF, e.psn & 0xFFFFFF);
    for (uint8_t b : e.gid.raw) n += std::snprintf(msg + n, sizeof msg - size_t(n), "%02x", b);
    return std::string(msg, size_t(n));
}

Result<Endpoint> parse_endpoint(const char* msg, size_t len) {
    std::string s(msg, strnlen(msg, len));
    Endpoint e;
    unsigned lid = 0, qpn = 0, psn = 0;
    char gid[33] = {};
    if (std::sscanf(s.c_str(), "%x:%x:%x:%32s", &lid, &qpn, &psn, gid) != 4 || std::strlen(gid) != 32)
        return Error{EPROTO, str_cat("side channel: '", s, "' is not LID:QPN:PSN:GID as the pingpong examples send it")};
    for (int i = 0; i < 16; ++i) {
        unsigned b = 0;
        if (std::sscanf(gid + 2 * i, "%2x", &b) != 1) return Error{EPROTO, str_cat("side channel: bad GID in '", s, "'")};
        e.gid.raw[i] = uint8_t(b);
    }
    e.lid = uint16_t(lid);
    e.qpn = qpn;
    e.psn = psn;
    return e;
}

std::string gid_to_string(const Gid& g) {
    char buf[INET6_ADDRSTRLEN];
    ::inet_ntop(AF_INET6, g.raw, buf, sizeof buf);
    return buf;
}

namespace {

Result<void> send_endpoints(int fd, std::span<const Endpoint> mine, const Step& step) {
    for (const Endpoint& e : mine) {
        const std::string msg = format_endpoint(e);
        if (auto r = write_all(fd, msg.c_str(), kPingpongMessage, step, "sending our address"); !r) return r;
    }
    return {};
}

Result<std::vector<Endpoint>> read_endpoints(int fd, size_t n, const Step& step, const char* whose) {
    std::vector<Endpoint> out;
    for (size_t i = 0; i < n; ++i) {
        char msg[kPingpongMessage];
        if (auto r = read_all(fd, msg, sizeof msg, step, whose); !r) return r.take_error();
        auto e = parse_endpoint(msg, sizeof msg);
        if (!e) return e.take_error();
        out.push_back(*e);
    }
    return out;
}

}  // namespace

Result<std::vector<Endpoint>> exchange_as_client(const std::string& host, uint16_t port, std::span<const Endpoint> mine,
                                                 int timeout_ms, const ExchangeWatch& watch) {
    const Step step{timeout_ms, watch};
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
        return Error{EHOSTUNREACH, str_cat("side channel: ", host, ": ", gai_strerror(rc))};
    vfio::UniqueFd s;
    Error last{ECONNREFUSED, ""};
    for (addrinfo* t = res; t && !s; t = t->ai_next) {
        auto c = connect_within(t, step);
        if (c) s = std::move(*c);
        else last = c.take_error();
    }
    ::freeaddrinfo(res);
    if (!s) {
        if (last.code == ECANCELED || last.code == ETIMEDOUT) return last;
        return Error{last.code, str_cat("side channel: cannot connect to ", host, ":", port, " — is the server running?")};
    }
    if (auto r = send_endpoints(s.get(), mine, step); !r) return r.take_error();
    auto peer = read_endpoints(s.get(), mine.size(), step, "waiting for the server's address");
    if (!peer) return peer;
    if (auto r = write_all(s.get(), "done", sizeof "done", step, "sending done"); !r) return r.take_error();
    return peer;
}

Result<std::vector<Endpoint>> exchange_as_server(uint16_t port, std::span<const Endpoint> mine,
                                                 const std::function<Result<void>(std::span<const Endpoint>)>& connect,
                                                 int timeout_ms, const ExchangeWatch& watch) {
    const Step step{timeout_ms, watch};
    vfio::UniqueFd ls = owned(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!ls) return Error::from_errno(errno, "side channel: socket");
    int one = 1, zero = 0;
    ::setsockopt(ls.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ::setsockopt(ls.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(port);
    a.sin6_addr = in6addr_any;
    if (::bind(ls.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
        return Error::from_errno(errno, str_cat("side channel: cannot listen on port ", port), "another server may be running");
    if (::listen(ls.get(), 1) != 0) return Error::from_errno(errno, str_cat("side channel: listen on port ", port));
    if (auto r = wait_fd(ls.get(), POLLIN, step, "waiting for a client"); !r) return r.take_error();
    vfio::UniqueFd s = owned(::accept4(ls.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!s) return Error::from_errno(errno, "side channel: accept");
    auto peer = read_endpoints(s.get(), mine.size(), step, "waiting for the client's address");
    if (!peer) return peer;
    if (auto r = connect(*peer); !r) return r.take_error();
    if (auto r = send_endpoints(s.get(), mine, step); !r) return r.take_error();
    char done[sizeof "done"];
    if (auto r = read_all(s.get(), done, sizeof done, step, "waiting for done"); !r) return r.take_error();
    return peer;
}

Result<Endpoint> exchange_as_client(const std::string& host, uint16_t port, const Endpoint& mine, int timeout_ms,
                                    const ExchangeWatch& watch) {
    auto peer = exchange_as_client(host, port, std::span(&mine, 1), timeout_ms, watch);
    if (!peer) return peer.take_error();
    return (*peer)[0];
}

Result<Endpoint> exchange_as_server(uint16_t port, const Endpoint& mine,
                                    const std::function<Result<void>(const Endpoint&)>& connect, int timeout_ms,
                                    const ExchangeWatch& watch) {
    auto peer = exchange_as_server(
        port, std::span(&mine, 1), [&](std::span<const Endpoint> p) { return connect(p[0]); }, timeout_ms, watch);
    if (!peer) return peer.take_error();
    return (*peer)[0];
}

}  // namespace vfab::rdma
