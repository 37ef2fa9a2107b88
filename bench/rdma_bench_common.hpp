// What bench/rdma_bench.cpp (vfab's RDMA transport) and bench/rdma_bench_verbs.cpp (the
// system's libibverbs, on the kernel's rxe in the lab) share: the options, the TCP side channel,
// and the measurement loops, written once over an endpoint type so that vfab <-> vfab,
// vfab <-> rxe and rxe <-> rxe are measured by the same code.
//
// An endpoint E (one RC queue pair, its CQ and one registered buffer) provides:
//   Info info()                                   its QPN, PSN, GID, the buffer's rkey, address, length
//                                                 (made in INIT: receives may be posted)
//   std::string connect(const Info& peer)         RTR -> RTS towards the peer ("" on success)
//   uint8_t* buf()
//   bool post(Op, wr_id, local_off, len, remote_addr, rkey, signaled, add)
//   bool post_recv(wr_id, local_off, len)
//   bool register_cycle(len)                      registers the first len bytes of its buffer for
//                                                 remote writes and revokes them again (reg_rate)
//   int poll(Cqe* out, int n)                     completions (vfab: runs its port's progress)
//   void progress()                               vfab: its port's progress; verbs: nothing
//   static constexpr bool kBusyProgress           true when nothing happens unless progress() runs
//   void idle(int fd)                             (kBusyProgress only) sleeps until a frame, a
//                                                 deadline or `fd` wakes it, then runs progress
//   void start_answering() / stop_answering()     vfab: the port's progress thread answers ARP
//                                                 while the side channel is in use; verbs: nothing
//   std::string extra()                           more key=value fields for the result line
//
// The side channel (TCP; 127.0.0.1 in the lab) carries one line each way:
//   client: "rdma_bench1 mode=M size=S iters=N window=W signal=K warmup=U add=A qpn=.. psn=.. gid=.. rkey=.. addr=.. len=.."
//   server: "rdma_bench1 qpn=.. psn=.. gid=.. rkey=.. addr=.. len=.."   (its QP ready, receives posted)
// then the client's "done" and the server's "bye counter=C" (the 8 bytes at its buffer's start:
// what the atomics added up to) when the run is over.
//
// Modes (the client is the initiator; what the server does in brackets):
//   write_bw     N WRITEs of S bytes to the same remote bytes, at most W outstanding, a
//                completion every K (and for the last); bandwidth from the first post to the
//                last completion [passive: its port runs]
//   read_lat     one READ of S bytes at a time, post to completion [passive]
//   send_lat     ping-pong of S-byte SENDs; each side answers a receive with a send
//   write_lat    ping-pong of S-byte WRITEs, each side polling the last byte of its buffer for
//                the peer's (as perftest's ib_write_lat)
//   atomic_rate  N FETCH_ADDs of A on one 8-byte word, at most W outstanding [passive]
//   reg_rate     N registrations of S bytes and their revocation, one after the other: vfab a
//                REG_MR and a LOCAL_INV work request, verbs ibv_reg_mr and ibv_dereg_mr [passive]
// Latencies: send_lat and write_lat report half the round trip, read_lat the whole READ (as
// perftest does); median and p99 by nearest rank over every sample after the warm-up.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace rdma_bench {

using Clock = std::chrono::steady_clock;

enum class Op { write, read, send, fetch_add };

struct Cqe {
    uint64_t wr_id = 0;
    bool ok = true;
    bool recv = false;
    std::string status;   // when !ok
};

struct Info {
    uint32_t qpn = 0, psn = 0, rkey = 0, len = 0;
    uint8_t gid[16] = {};
    uint64_t addr = 0;
};

struct Params {
    std::string mode = "write_bw";
    uint32_t size = 65536;
    uint64_t iters = 1000;
    uint32_t window = 32;
    uint32_t signal = 1;
    uint64_t warmup = 16;
    uint64_t add = 1;
    double timeout_s = 60;    // a run that does not finish by then fails (not part of the exchange)
};

inline bool valid_mode(const std::string& m) {
    return m == "write_bw" || m == "read_lat" || m == "send_lat" || m == "write_lat" || m == "atomic_rate" ||
           m == "reg_rate";
}

// The buffer each side registers: room for a message to send and one to receive.
inline uint32_t buffer_bytes(const Params& p) {
    const uint64_t b = 2 * uint64_t(std::max<uint32_t>(p.size, 64));
    return uint32_t((b + 4095) / 4096 * 4096);
}

// ---- the side channel ---------------------------------------------------------------------------

class Channel {
public:
    Channel() = default;
    explicit Channel(int fd) : fd_(fd) {}
    Channel(Channel&& o) noexcept : fd_(std::exchange(o.fd_, -1)), pending_(std::move(o.pending_)) {}
    Channel& operator=(Channel&& o) noexcept {
        std::swap(fd_, o.fd_);
        std::swap(pending_, o.pending_);
        return *this;
    }
    ~Channel() {
        if (fd_ >= 0) ::close(fd_);
    }
    bool ok() const { return fd_ >= 0; }
    int fd() const { return fd_; }
    bool send(const std::string& line) const {
        const std::string s = line + "\n";
        return ::write(fd_, s.data(), s.size()) == ssize_t(s.size());
    }
    // A line without its '\n'; false when the peer closed or `timeout_ms` passed (-1: none).
    bool recv(std::string& line, int timeout_ms = -1) {
        const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
        for (;;) {
            if (const size_t nl = pending_.find('\n'); nl != std::string::npos) {
                line = pending_.substr(0, nl);
                pending_.erase(0, nl + 1);
                return true;
            }
            int wait = -1;
            if (timeout_ms >= 0) {
                wait = int(std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count());
                if (wait < 0) return false;
            }
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, wait) <= 0) return false;
            char b[512];
            const ssize_t n = ::read(fd_, b, sizeof b);
            if (n <= 0) return false;
            pending_.append(b, size_t(n));
        }
    }
    // Is a line (or the peer's close) waiting? Never blocks.
    bool readable() const {
        if (pending_.find('\n') != std::string::npos) return true;
        pollfd p{fd_, POLLIN, 0};
        return ::poll(&p, 1, 0) > 0;
    }

private:
    int fd_ = -1;
    std::string pending_;
};

inline int listen_on(uint16_t port, std::string& err) {
    const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (s < 0 || ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(s, 1) != 0) {
        err = "listen on TCP port " + std::to_string(port) + ": " + std::strerror(errno);
        if (s >= 0) ::close(s);
        return -1;
    }
    return s;
}

inline Channel accept_one(int listener, int timeout_ms, std::string& err) {
    pollfd p{listener, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) {
        err = "no client within " + std::to_string(timeout_ms / 1000) + " s";
        return {};
    }
    const int c = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) err = std::string("accept: ") + std::strerror(errno);
    const int one = 1;
    if (c >= 0) ::setsockopt(c, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof one);
    return Channel(c);
}

// Connects to host:port, retrying for `timeout_ms` while nothing listens yet.
inline Channel connect_to(const std::string& host, uint16_t port, int timeout_ms, std::string& err) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
        err = "'" + host + "' is not an IPv4 address";
        return {};
    }
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s >= 0 && ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
            const int one = 1;
            ::setsockopt(s, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof one);
            return Channel(s);
        }
        err = "connect to " + host + ":" + std::to_string(port) + ": " + std::strerror(errno);
        if (s >= 0) ::close(s);
        if (Clock::now() > end) return {};
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

inline std::string hex_gid(const uint8_t* g) {
    char b[33];
    for (int i = 0; i < 16; ++i) std::snprintf(b + 2 * i, 3, "%02x", g[i]);
    return b;
}

inline std::string format_info(const Info& i) {
    char b[200];
    std::snprintf(b, sizeof b, "qpn=%x psn=%x gid=%s rkey=%x addr=%" PRIx64 " len=%x", i.qpn, i.psn, hex_gid(i.gid).c_str(),
                  i.rkey, i.addr, i.len);
    return b;
}

inline std::map<std::string, std::string> fields(const std::string& line) {
    std::map<std::string, std::string> f;
    std::istringstream in(line);
    std::string w;
    while (in >> w)
        if (const size_t eq = w.find('='); eq != std::string::npos) f[w.substr(0, eq)] = w.substr(eq + 1);
    return f;
}

inline bool parse_info(const std::map<std::string, std::string>& f, Info& i) {
    try {
        i.qpn = uint32_t(std::stoul(f.at("qpn"), nullptr, 16));
        i.psn = uint32_t(std::stoul(f.at("psn"), nullptr, 16));
        i.rkey = uint32_t(std::stoul(f.at("rkey"), nullptr, 16));
        i.addr = std::stoull(f.at("addr"), nullptr, 16);
        i.len = uint32_t(std::stoul(f.at("len"), nullptr, 16));
        const std::string& g = f.at("gid");
        if (g.size() != 32) return false;
        for (int k = 0; k < 16; ++k) i.gid[k] = uint8_t(std::stoul(g.substr(size_t(k) * 2, 2), nullptr, 16));
    } catch (const std::exception&) {
        return false;
    }
    return true;
}

inline std::string format_params(const Params& p) {
    return "mode=" + p.mode + " size=" + std::to_string(p.size) + " iters=" + std::to_string(p.iters) +
           " window=" + std::to_string(p.window) + " signal=" + std::to_string(p.signal) +
           " warmup=" + std::to_string(p.warmup) + " add=" + std::to_string(p.add);
}

inline bool parse_params(const std::map<std::string, std::string>& f, Params& p) {
    try {
        p.mode = f.at("mode");
        p.size = uint32_t(std::stoul(f.at("size")));
        p.iters = std::stoull(f.at("iters"));
        p.window = uint32_t(std::stoul(f.at("window")));
        p.signal = uint32_t(std::stoul(f.at("signal")));
        p.warmup = std::stoull(f.at("warmup"));
        p.add = std::stoull(f.at("add"));
    } catch (const std::exception&) {
        return false;
    }
    return valid_mode(p.mode);
}

// ---- statistics ----------------------------------------------------------------------------------

inline double percentile(const std::vector<double>& sorted, double q) {
    if (sorted.empty()) return 0;
    const auto i = size_t(std::ceil(q * double(sorted.size())));
    return sorted[std::clamp<size_t>(i, 1, sorted.size()) - 1];
}

inline std::string latency_fields(std::vector<double> us) {
    std::sort(us.begin(), us.end());
    double mean = 0;
    for (double v : us) mean += v / double(us.size());
    char b[200];
    std::snprintf(b, sizeof b, "median_us=%.2f p99_us=%.2f min_us=%.2f mean_us=%.2f max_us=%.2f",
                  percentile(us, 0.5), percentile(us, 0.99), us.empty() ? 0 : us.front(), mean,
                  us.empty() ? 0 : us.back());
    return b;
}

inline double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

// Reads one byte the peer writes into our memory (the kernel or, for vfab, our own progress).
inline uint8_t load_byte(const uint8_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

// ---- the measurement loops -----------------------------------------------------------------------

struct Outcome {
    std::string error;    // empty: success
    std::string fields;   // key=value figures
};

// Waits for one completion that is not a receive (or, with want_recv, one that is), taking
// the other kind as it comes; false on an error completion or at `deadline`.
template <class E>
bool wait_completion(E& e, bool want_recv, Clock::time_point deadline, std::string& err, uint64_t* wr_id = nullptr,
                     uint64_t* other = nullptr) {
    Cqe c[16];
    for (uint32_t spins = 0;; ++spins) {
        const int n = e.poll(c, 1);
        if (n < 0) {
            err = "poll failed";
            return false;
        }
        if (n == 1) {
            if (!c[0].ok) {
                err = "completion " + std::to_string(c[0].wr_id) + ": " + c[0].status;
                return false;
            }
            if (c[0].recv == want_recv) {
                if (wr_id) *wr_id = c[0].wr_id;
                return true;
            }
            if (other) ++*other;
            continue;
        }
        if ((spins & 1023) == 0 && Clock::now() > deadline) {
            err = "timed out waiting for a completion";
            return false;
        }
    }
}

template <class E>
Outcome client_write_bw(E& e, const Params& p, const Info& peer, Clock::time_point deadline) {
    Outcome o;
    auto run = [&](uint64_t n, uint32_t window, uint32_t signal) -> bool {
        uint64_t posted = 0, completed = 0;
        Cqe c[64];
        for (uint32_t spins = 0; completed < n; ++spins) {
            while (posted < n && posted - completed < window) {
                const bool sig = (posted + 1) % signal == 0 || posted + 1 == n;
                if (!e.post(Op::write, posted, 0, p.size, peer.addr + p.size, peer.rkey, sig, 0)) {
                    o.error = "post WRITE refused";
                    return false;
                }
                ++posted;
            }
            const int k = e.poll(c, 64);
            for (int i = 0; i < k; ++i) {
                if (!c[i].ok) {
                    o.error = "WRITE " + std::to_string(c[i].wr_id) + ": " + c[i].status;
                    return false;
                }
                completed = c[i].wr_id + 1;
            }
            if ((spins & 1023) == 0 && Clock::now() > deadline) {
                o.error = "timed out: " + std::to_string(completed) + " of " + std::to_string(n) + " WRITEs completed";
                return false;
            }
        }
        return true;
    };
    if (p.warmup && !run(p.warmup, 1, 1)) return o;
    const auto t0 = Clock::now();
    if (!run(p.iters, p.window, p.signal)) return o;
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const double bytes = double(p.iters) * p.size;
    char b[200];
    std::snprintf(b, sizeof b, "seconds=%.3f gbps=%.4f mbytes_per_s=%.2f msg_per_s=%.0f", s, bytes * 8 / s / 1e9,
                  bytes / s / 1e6, double(p.iters) / s);
    o.fields = b;
    return o;
}

template <class E>
Outcome client_atomic_rate(E& e, const Params& p, const Info& peer, Clock::time_point deadline) {
    Outcome o;
    const uint32_t window = std::min<uint32_t>(p.window, 16);   // the max_rd_atomic both sides set
    auto run = [&](uint64_t n, uint32_t w) -> bool {
        uint64_t posted = 0, completed = 0;
        Cqe c[64];
        for (uint32_t spins = 0; completed < n; ++spins) {
            while (posted < n && posted - completed < w) {
                // Each outstanding one returns the old value into its own 8 bytes.
                if (!e.post(Op::fetch_add, posted, (posted % 16) * 8, 8, peer.addr, peer.rkey, true, p.add)) {
                    o.error = "post FETCH_ADD refused";
                    return false;
                }
                ++posted;
            }
            const int k = e.poll(c, 64);
            for (int i = 0; i < k; ++i) {
                if (!c[i].ok) {
                    o.error = "FETCH_ADD " + std::to_string(c[i].wr_id) + ": " + c[i].status;
                    return false;
                }
                ++completed;
            }
            if ((spins & 1023) == 0 && Clock::now() > deadline) {
                o.error = "timed out: " + std::to_string(completed) + " of " + std::to_string(n) + " FETCH_ADDs completed";
                return false;
            }
        }
        return true;
    };
    if (p.warmup && !run(p.warmup, 1)) return o;
    const auto t0 = Clock::now();
    if (!run(p.iters, window)) return o;
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    char b[160];
    std::snprintf(b, sizeof b, "seconds=%.3f ops_per_s=%.0f us_per_op=%.2f window=%u", s, double(p.iters) / s,
                  s * 1e6 / double(p.iters), window);
    o.fields = b;
    return o;
}

template <class E>
Outcome client_reg_rate(E& e, const Params& p, Clock::time_point deadline) {
    Outcome o;
    auto run = [&](uint64_t n) -> bool {
        for (uint64_t i = 0; i < n; ++i) {
            if (!e.register_cycle(p.size)) {
                o.error = "registration " + std::to_string(i) + " failed";
                return false;
            }
            if ((i & 1023) == 0 && Clock::now() > deadline) {
                o.error = "timed out after " + std::to_string(i) + " registrations";
                return false;
            }
        }
        return true;
    };
    if (p.warmup && !run(p.warmup)) return o;
    const auto t0 = Clock::now();
    if (!run(p.iters)) return o;
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    char b[160];
    std::snprintf(b, sizeof b, "seconds=%.3f ops_per_s=%.0f us_per_op=%.2f", s, double(p.iters) / s,
                  s * 1e6 / double(p.iters));
    o.fields = b;
    return o;
}

template <class E>
Outcome client_read_lat(E& e, const Params& p, const Info& peer, Clock::time_point deadline) {
    Outcome o;
    std::vector<double> us;
    us.reserve(p.iters);
    for (uint64_t i = 0; i < p.warmup + p.iters; ++i) {
        const auto t = Clock::now();
        if (!e.post(Op::read, i, p.size, p.size, peer.addr, peer.rkey, true, 0)) {
            o.error = "post READ refused";
            return o;
        }
        if (!wait_completion(e, false, deadline, o.error)) return o;
        if (i >= p.warmup) us.push_back(us_since(t));
    }
    o.fields = latency_fields(us);
    return o;
}

// send_lat, both sides: `first` sends before it waits. Receives: `depth` posted ahead.
template <class E>
Outcome pingpong_send(E& e, const Params& p, bool first, Clock::time_point deadline, std::vector<double>* us) {
    Outcome o;
    const uint64_t total = p.warmup + p.iters;
    uint64_t sends_unreaped = 0;
    auto send = [&](uint64_t i) {
        const bool sig = (i + 1) % 16 == 0 || i + 1 == total;
        if (!e.post(Op::send, i, 0, p.size, 0, 0, sig, 0)) return false;
        sends_unreaped += sig;
        return true;
    };
    for (uint64_t i = 0; i < total; ++i) {
        const auto t = Clock::now();
        if (first && !send(i)) {
            o.error = "post SEND refused";
            return o;
        }
        uint64_t reaped = 0;
        if (!wait_completion(e, true, deadline, o.error, nullptr, &reaped)) return o;
        sends_unreaped -= std::min(sends_unreaped, reaped);
        if (!e.post_recv(i, p.size, p.size)) {
            o.error = "post_recv refused";
            return o;
        }
        if (!first && !send(i)) {
            o.error = "post SEND refused";
            return o;
        }
        if (first && i >= p.warmup && us) us->push_back(us_since(t) / 2);
    }
    // The last signalled sends: their completions say the peer has everything.
    while (sends_unreaped) {
        if (!wait_completion(e, false, deadline, o.error)) return o;
        --sends_unreaped;
    }
    return o;
}

// write_lat, both sides: each WRITE carries the iteration's marker in its last byte, into the
// peer's second half; each side waits for the marker in its own second half.
template <class E>
Outcome pingpong_write(E& e, const Params& p, const Info& peer, bool first, Clock::time_point deadline,
                       std::vector<double>* us) {
    Outcome o;
    const uint64_t total = p.warmup + p.iters;
    uint8_t* mine = e.buf();
    const uint8_t* watch = mine + p.size + p.size - 1;
    uint64_t sends_unreaped = 0;
    Cqe c[16];
    auto reap = [&] {
        const int n = e.poll(c, 16);
        for (int k = 0; k < n; ++k) {
            if (!c[k].ok) {
                o.error = "WRITE " + std::to_string(c[k].wr_id) + ": " + c[k].status;
                return false;
            }
            --sends_unreaped;
        }
        return true;
    };
    auto write = [&](uint64_t i) {
        mine[p.size - 1] = uint8_t(i + 1);
        const bool sig = (i + 1) % 16 == 0 || i + 1 == total;
        if (!e.post(Op::write, i, 0, p.size, peer.addr + p.size, peer.rkey, sig, 0)) {
            o.error = "post WRITE refused";
            return false;
        }
        sends_unreaped += sig;
        return true;
    };
    for (uint64_t i = 0; i < total; ++i) {
        const auto t = Clock::now();
        if (first && !write(i)) return o;
        const uint8_t want = uint8_t(i + 1);
        for (uint32_t spins = 0; load_byte(watch) != want; ++spins) {
            if ((spins & 15) == 0 && !reap()) return o;
            else e.progress();
            if ((spins & 1023) == 0 && Clock::now() > deadline) {
                o.error = "timed out waiting for WRITE " + std::to_string(i) + " of the peer";
                return o;
            }
        }
        if (!first && !write(i)) return o;
        if (first && i >= p.warmup && us) us->push_back(us_since(t) / 2);
    }
    while (sends_unreaped) {
        if (!reap()) return o;
        if (Clock::now() > deadline) {
            o.error = "timed out waiting for the last WRITE's completion";
            return o;
        }
    }
    return o;
}

// ---- the two roles -------------------------------------------------------------------------------

// What the atomics must have added up to on the target: "" when they did.
inline std::string check_counter(const Params& p, uint64_t got) {
    const uint64_t want = (p.warmup + p.iters) * p.add;
    return got == want ? std::string() : "the target's counter is " + std::to_string(got) + ", not " + std::to_string(want);
}

// The initiator's run of p.mode against `peer` (connected): the figures, or what failed.
template <class E>
Outcome run_initiator(E& e, const Params& p, const Info& peer) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(p.timeout_s * 1000));
    std::vector<double> us;
    Outcome o;
    if (p.mode == "write_bw") o = client_write_bw(e, p, peer, deadline);
    else if (p.mode == "atomic_rate") o = client_atomic_rate(e, p, peer, deadline);
    else if (p.mode == "reg_rate") o = client_reg_rate(e, p, deadline);
    else if (p.mode == "read_lat") o = client_read_lat(e, p, peer, deadline);
    else if (p.mode == "send_lat") o = pingpong_send(e, p, true, deadline, &us);
    else o = pingpong_write(e, p, peer, true, deadline, &us);
    if (o.error.empty() && (p.mode == "send_lat" || p.mode == "write_lat")) o.fields = latency_fields(us);
    return o;
}

// The client's side over a connected channel: exchange, connect, run, "done", "bye".
template <class E>
Outcome run_client(E& e, Channel& ch, const Params& p) {
    if (p.mode == "send_lat")
        for (uint32_t k = 0; k < 64; ++k)
            if (!e.post_recv(k, p.size, p.size)) return {"post_recv refused", ""};
    e.start_answering();
    if (!ch.send("rdma_bench1 " + format_params(p) + " " + format_info(e.info()))) return {"side channel: write failed", ""};
    std::string line;
    Info peer;
    if (!ch.recv(line, 60000)) return {"side channel: no answer from the server", ""};
    if (line.rfind("error ", 0) == 0) return {"server: " + line.substr(6), ""};
    if (!parse_info(fields(line), peer)) return {"side channel: cannot parse '" + line + "'", ""};
    if (const std::string err = e.connect(peer); !err.empty()) return {err, ""};
    e.stop_answering();
    Outcome o = run_initiator(e, p, peer);
    // The server ends when told; its counter checks the atomics.
    e.start_answering();
    if (!ch.send(o.error.empty() ? "done" : "failed")) {
        if (o.error.empty()) o.error = "side channel: write failed";
        return o;
    }
    if (!ch.recv(line, 30000)) {
        if (o.error.empty()) o.error = "side channel: the server did not say bye";
        return o;
    }
    e.stop_answering();
    if (o.error.empty() && p.mode == "atomic_rate") {
        const auto f = fields(line);
        o.error = check_counter(p, f.count("counter") ? std::stoull(f.at("counter")) : 0);
    }
    return o;
}

// The server's side: reads the client's line, runs `make` (which builds the endpoint for those
// parameters), connects, answers, serves the run until "done".
// `sleep`: a passive target whose endpoint has kBusyProgress sleeps between frames
// (E::idle(fd): on its CQ's channel and the side channel) instead of running progress in a loop.
template <class E, class Make>
Outcome run_server(Channel& ch, Make make, bool sleep = false) {
    std::string line;
    if (!ch.recv(line, 60000)) return {"side channel: no line from the client", ""};
    const auto f = fields(line);
    Params p;
    Info peer;
    if (line.rfind("rdma_bench1 ", 0) != 0 || !parse_params(f, p) || !parse_info(f, peer)) {
        (void)ch.send("error cannot parse '" + line + "'");
        return {"side channel: cannot parse '" + line + "'", ""};
    }
    std::string err;
    std::unique_ptr<E> e = make(p, err);
    if (!e) {
        (void)ch.send("error " + err);
        return {err, ""};
    }
    std::memset(e->buf(), 0, 8);   // the atomics' counter
    if (p.mode == "send_lat")
        for (uint32_t k = 0; k < 64; ++k)
            if (!e->post_recv(k, p.size, p.size)) return {"post_recv refused", ""};
    e->start_answering();
    if (const std::string c = e->connect(peer); !c.empty()) {
        (void)ch.send("error " + c);
        return {c, ""};
    }
    if (!ch.send("rdma_bench1 " + format_info(e->info()))) return {"side channel: write failed", ""};
    e->stop_answering();
    const auto deadline = Clock::now() + std::chrono::seconds(3600);   // the client's timeout ends the run
    Outcome o;
    if (p.mode == "send_lat") o = pingpong_send(*e, p, false, deadline, nullptr);
    else if (p.mode == "write_lat") o = pingpong_write(*e, p, peer, false, deadline, nullptr);
    // Passive, or done with its part: the port keeps answering until the client says so.
    if constexpr (E::kBusyProgress) {
        if (sleep) {
            while (!ch.readable()) e->idle(ch.fd());
        } else {
            for (uint32_t spins = 0;; ++spins) {
                e->progress();
                if ((spins & 255) == 0 && ch.readable()) break;
            }
        }
        (void)ch.recv(line, 1000);   // "done" or "failed"
    } else {
        (void)ch.recv(line, -1);
    }
    uint64_t counter;
    std::memcpy(&counter, e->buf(), 8);
    (void)ch.send("bye counter=" + std::to_string(counter));
    // Let our last acknowledgements leave before the queue pair goes.
    for (int k = 0; k < 2000; ++k) e->progress();
    o.fields = "server_mode=" + p.mode + " " + e->extra();
    return o;
}

}  // namespace rdma_bench
