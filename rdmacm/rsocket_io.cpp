// rsockets' data path (rsocket.hpp): completions, credits, rsend / rrecv and their variants,
// rpoll / rselect. Progress is the caller's: each call polls the socket's CQ (vfab's verbs
// library runs the port), and a blocking one sleeps on the CQ's completion channel.
#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "rsocket.hpp"

namespace vfab::rdmacm::rs {

namespace {
int fail_with(int e) {
    errno = e;
    return -1;
}

Sge owner_order(const Sge& e, bool swap) {
    if (!swap) return e;
    return {__builtin_bswap64(e.addr), __builtin_bswap32(e.key), __builtin_bswap32(e.length)};
}

// A write with immediate `imm` of `sges` (none: zero-length) to the peer's (addr, rkey).
int post_write(Socket& s, uint64_t wr_id, uint32_t imm, ibv_sge* sges, int n, uint64_t addr, uint32_t rkey, bool inl) {
    ibv_send_wr w{};
    w.wr_id = wr_id;
    w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    w.imm_data = htobe32(imm);
    w.sg_list = sges;
    w.num_sge = n;
    w.send_flags = inl ? IBV_SEND_INLINE : 0;
    w.wr.rdma.remote_addr = addr;
    w.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(s.id->qp, &w, &bad);
}

void on_completion(Socket& s, const ibv_wc& wc) {
    if (wc.wr_id == kRecvWrId) {
        if (wc.status != IBV_WC_SUCCESS) return;   // flushed
        const uint32_t m = be32toh(wc.imm_data);
        switch (op_of(m)) {
        case kOpSgl: s.sseq_comp = uint16_t(data_of(m)); break;   // the peer's new limit (absolute)
        case kOpIomapSgl:
        case kOpWrite: break;
        case kOpCtrl:
            if (data_of(m) == kCtrlDisconnect) s.state = State::disconnected;
            else if (data_of(m) == kCtrlShutdown) {
                if (s.writable) s.readable = false;
                else s.state = State::disconnected;
            }
            break;
        default:   // data: where it landed follows from the order
            s.rmsg[s.rmsg_tail] = data_of(m);
            s.rmsg_tail = (s.rmsg_tail + 1) % uint32_t(s.rmsg.size());
            break;
        }
        if (s.state == State::connected) {   // the receive again (a peer that disconnected sends no more)
            ibv_recv_wr w{};
            w.wr_id = kRecvWrId;
            ibv_recv_wr* bad = nullptr;
            (void)ibv_post_recv(s.id->qp, &w, &bad);
        }
        return;
    }
    const uint32_t m = uint32_t(wc.wr_id);
    if (op_of(m) == kOpSgl || op_of(m) == kOpCtrl) {
        ++s.ctrl_max_seqno;
        if (op_of(m) == kOpCtrl && data_of(m) == kCtrlDisconnect && wc.status == IBV_WC_SUCCESS) s.state = State::disconnected;
    } else {
        ++s.sqe_avail;
        s.sbuf_avail += data_of(m);
    }
    if (wc.status != IBV_WC_SUCCESS && s.state == State::connected) {
        s.state = State::error;
        s.err = EIO;
    }
}

// Copies up to `len` bytes of the messages received into `buf` (none consumed with MSG_PEEK).
size_t copy_out(Socket& s, uint8_t* buf, size_t len, bool peek) {
    size_t done = 0;
    uint32_t head = s.rmsg_head, offset = s.rbuf_offset;
    uint32_t first_left = s.rmsg[head];
    while (done < len && head != s.rmsg_tail) {
        const uint32_t n = uint32_t(std::min<size_t>(len - done, first_left));
        const uint32_t to_end = std::min(n, s.rbuf_size - offset);
        std::memcpy(buf + done, s.rbuf + offset, to_end);
        std::memcpy(buf + done + to_end, s.rbuf, n - to_end);
        done += n;
        offset = (offset + n) % s.rbuf_size;
        first_left -= n;
        if (!peek) {
            s.rbuf_avail += n;
            s.rmsg[head] = first_left;
        }
        if (first_left == 0) {
            head = (head + 1) % uint32_t(s.rmsg.size());
            first_left = s.rmsg[head];
            if (!peek) ++s.rseq_no;
        }
    }
    if (!peek) {
        s.rmsg_head = head;
        s.rbuf_offset = offset;
    }
    return done;
}
}  // namespace

int poll_cq(Socket& s) {
    ibv_wc wc[16];
    int total = 0;
    for (int n; (n = ibv_poll_cq(s.cq, 16, wc)) > 0; total += n)
        for (int i = 0; i < n; ++i) on_completion(s, wc[i]);
    give_credits(s);
    return total;
}

int wait_cq(Socket& s) {
    if (ibv_req_notify_cq(s.cq, 0)) return -1;
    if (poll_cq(s)) return 0;   // came while arming
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    if (ibv_get_cq_event(s.channel, &cq, &ctx)) return -1;
    ibv_ack_cq_events(cq, 1);
    return 0;
}

// Space and credits back to the peer once half the receive buffer is free or half the credits
// are used (a control slot permitting): the free half written into its target SGL, or only the
// credits when no half is free.
void give_credits(Socket& s) {
    const uint32_t half = s.rbuf_size / 2;
    if (s.state != State::connected || s.ctrl_seqno == s.ctrl_max_seqno) return;
    if (!(s.rbuf_avail >= half || int16_t(uint16_t(s.rseq_no - s.rseq_comp)) >= 0)) return;
    ++s.ctrl_seqno;
    s.rseq_comp = uint16_t(s.rseq_no + s.rq_size / 2);
    const uint32_t m = message(kOpSgl, uint32_t(s.rseq_no) + s.rq_size);
    if (s.rbuf_avail >= half) {
        Sge e = owner_order({uint64_t(uintptr_t(s.rbuf + s.rbuf_free_offset)), s.rmr->rkey, half}, s.swap_sgl);
        ibv_sge sge{uint64_t(uintptr_t(&e)), sizeof e, 0};
        (void)post_write(s, m, m, &sge, 1, s.remote_sgl.addr + uint64_t(s.remote_sge) * sizeof(Sge), s.remote_sgl.key, true);
        s.rbuf_avail -= half;
        s.rbuf_free_offset = (s.rbuf_free_offset + half) % s.rbuf_size;
        s.remote_sge = (s.remote_sge + 1) % s.remote_sgl.length;
    } else {
        (void)post_write(s, m, m, nullptr, 0, s.remote_sgl.addr, s.remote_sgl.key, false);
    }
}

bool can_send(const Socket& s) {
    const volatile Sge& t = s.target_sgl[s.target_sge];
    return s.sqe_avail > 0 && s.sbuf_avail >= kSendLowWater && s.sseq_no != s.sseq_comp && t.length != 0;
}

bool rmsg_empty(const Socket& s) { return s.rmsg_head == s.rmsg_tail; }

int send_ctrl(Socket& s, uint32_t ctrl) {
    ++s.ctrl_seqno;
    const uint32_t m = message(kOpCtrl, ctrl);
    return post_write(s, m, m, nullptr, 0, s.remote_sgl.addr, s.remote_sgl.key, false);
}

namespace {
// One data message of `len` bytes (fitting the current target entry and the send buffer).
int write_data(Socket& s, const uint8_t* src, uint32_t len) {
    volatile Sge& t = s.target_sgl[s.target_sge];
    const uint64_t addr = t.addr;
    const uint32_t rkey = t.key;
    // The entry moves on before the write: once it is used up the peer may write it again.
    t.addr = addr + len;
    t.length = t.length - len;
    if (t.length == 0) s.target_sge = (s.target_sge + 1) % kSglEntries;
    ++s.sseq_no;
    --s.sqe_avail;
    s.sbuf_avail -= len;
    ibv_sge sge[2];
    int n = 1;
    bool inl = len <= s.sq_inline;
    if (inl) {
        sge[0] = {uint64_t(uintptr_t(src)), len, 0};
    } else {   // through the send buffer, a ring
        const uint32_t first = std::min(len, s.sbuf_size - s.sbuf_head);
        std::memcpy(s.sbuf + s.sbuf_head, src, first);
        sge[0] = {uint64_t(uintptr_t(s.sbuf + s.sbuf_head)), first, s.smr->lkey};
        if (len > first) {
            std::memcpy(s.sbuf, src + first, len - first);
            sge[1] = {uint64_t(uintptr_t(s.sbuf)), len - first, s.smr->lkey};
            n = 2;
        }
        s.sbuf_head = (s.sbuf_head + len) % s.sbuf_size;
    }
    const uint32_t m = message(kOpData, len);
    return post_write(s, m, m, sge, n, addr, rkey, inl);
}

// Progress until `ready()` or the socket can do no more; -1 with EAGAIN when it would block.
template <class Ready>
int wait_until(Socket& s, bool nonblock, Ready ready) {
    while (!ready()) {
        if (poll_cq(s)) continue;
        if (s.state != State::connected) return 0;
        if (nonblock) return fail_with(EAGAIN);
        if (wait_cq(s)) return -1;
    }
    return 0;
}
}  // namespace

}  // namespace vfab::rdmacm::rs

using namespace vfab::rdmacm::rs;

extern "C" ssize_t rsend(int fd, const void* buf, size_t len, int flags) {
    Socket* s = find(fd);
    if (!s) return fail_with(ENOTSOCK);
    if (s->state == State::error) return fail_with(s->err ? s->err : EIO);
    if (s->state != State::connected) return fail_with(s->state == State::disconnected ? ECONNRESET : ENOTCONN);
    if (!s->writable) return fail_with(EPIPE);
    const auto* src = static_cast<const uint8_t*>(buf);
    size_t done = 0;
    uint32_t chunk = kFirstChunk;
    while (done < len) {
        if (!can_send(*s)) {
            const int r = wait_until(*s, nonblocking(*s, flags), [&] { return can_send(*s); });
            if (r || !can_send(*s)) {
                if (done) break;
                return r ? -1 : fail_with(ECONNRESET);
            }
        }
        const size_t left = len - done;
        size_t n = left;
        if (chunk < left) {
            n = chunk;
            if (chunk < kMaxChunk) chunk <<= 1;
        }
        n = std::min<size_t>({n, s->sbuf_avail, s->target_sgl[s->target_sge].length});
        if (int e = write_data(*s, src + done, uint32_t(n))) {
            if (done) break;
            return fail_with(e);
        }
        done += n;
    }
    return ssize_t(done);
}

extern "C" ssize_t rrecv(int fd, void* buf, size_t len, int flags) {
    Socket* s = find(fd);
    if (!s) return fail_with(ENOTSOCK);
    if (s->state == State::listening || s->state == State::init || s->state == State::bound) return fail_with(ENOTCONN);
    auto* dst = static_cast<uint8_t*>(buf);
    size_t done = 0;
    do {
        if (rmsg_empty(*s)) {
            if (s->state == State::connected && s->readable) {
                const int r = wait_until(*s, nonblocking(*s, flags), [&] { return !rmsg_empty(*s) || !s->readable; });
                if (r) return done ? ssize_t(done) : -1;
            }
            if (rmsg_empty(*s)) {
                if (s->state == State::error && !done) return fail_with(s->err ? s->err : EIO);
                break;   // the end: nothing more comes
            }
        }
        done += copy_out(*s, dst + done, len - done, flags & MSG_PEEK);
    } while ((flags & MSG_WAITALL) && done < len && !(flags & MSG_PEEK));
    if (s->state == State::connected) give_credits(*s);
    return ssize_t(done);
}

extern "C" ssize_t rread(int fd, void* buf, size_t n) { return rrecv(fd, buf, n, 0); }
extern "C" ssize_t rwrite(int fd, const void* buf, size_t n) { return rsend(fd, buf, n, 0); }

extern "C" ssize_t rrecvfrom(int fd, void* buf, size_t n, int flags, sockaddr* from, socklen_t* len) {
    const ssize_t r = rrecv(fd, buf, n, flags);
    if (r >= 0 && from && len) (void)rgetpeername(fd, from, len);
    return r;
}

extern "C" ssize_t rsendto(int fd, const void* buf, size_t n, int flags, const sockaddr*, socklen_t) {
    return rsend(fd, buf, n, flags);   // a connected stream: the address is its peer
}

extern "C" ssize_t rreadv(int fd, const iovec* iov, int count) {
    ssize_t total = 0;
    for (int i = 0; i < count; ++i) {
        const ssize_t r = rrecv(fd, iov[i].iov_base, iov[i].iov_len, i ? MSG_DONTWAIT : 0);
        if (r < 0) return total ? total : r;
        total += r;
        if (size_t(r) < iov[i].iov_len) break;
    }
    return total;
}

extern "C" ssize_t rwritev(int fd, const iovec* iov, int count) {
    ssize_t total = 0;
    for (int i = 0; i < count; ++i) {
        const ssize_t r = rsend(fd, iov[i].iov_base, iov[i].iov_len, 0);
        if (r < 0) return total ? total : r;
        total += r;
        if (size_t(r) < iov[i].iov_len) break;
    }
    return total;
}

extern "C" ssize_t rrecvmsg(int fd, msghdr* msg, int flags) {
    if (!msg) return fail_with(EINVAL);
    return flags ? rrecv(fd, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len, flags) : rreadv(fd, msg->msg_iov, int(msg->msg_iovlen));
}

extern "C" ssize_t rsendmsg(int fd, const msghdr* msg, int) {
    if (!msg) return fail_with(EINVAL);
    return rwritev(fd, msg->msg_iov, int(msg->msg_iovlen));
}

namespace {
// What poll(2) would say of an rsocket now (its completions taken first).
short rsocket_events(Socket& s, short want) {
    short ev = 0;
    switch (s.state) {
    case State::listening: {
        pollfd p{s.fd, POLLIN, 0};   // its channel counts the requests waiting
        if (::poll(&p, 1, 0) > 0) ev |= POLLIN;
        break;
    }
    case State::connected:
    case State::disconnected:
    case State::error:
        if (s.cq) (void)poll_cq(s);
        if (!rmsg_empty(s) || !s.readable || s.state != State::connected) ev |= POLLIN;
        if (s.state == State::connected && s.writable && can_send(s)) ev |= POLLOUT;
        if (s.state == State::disconnected) ev |= POLLHUP;
        if (s.state == State::error) ev |= POLLERR;
        break;
    case State::connect_error: ev = POLLIN | POLLOUT | POLLERR; break;
    default: break;
    }
    return short(ev & (want | POLLHUP | POLLERR));
}
}  // namespace

// Each rsocket is checked, the other fds polled; then, while nothing is ready, a sleep in
// poll(2) on the rsockets' completion channels (armed) and the other fds, 10 ms at a time.
extern "C" int rpoll(pollfd* fds, nfds_t nfds, int timeout) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout < 0 ? 0 : timeout);
    std::vector<pollfd> real(nfds);
    for (;;) {
        int ready = 0;
        for (nfds_t i = 0; i < nfds; ++i) {
            fds[i].revents = 0;
            if (Socket* s = find(fds[i].fd)) {
                fds[i].revents = rsocket_events(*s, fds[i].events);
            } else {
                pollfd p{fds[i].fd, fds[i].events, 0};
                if (::poll(&p, 1, 0) > 0) fds[i].revents = p.revents;
            }
            ready += fds[i].revents != 0;
        }
        if (ready || timeout == 0) return ready;
        if (timeout > 0 && std::chrono::steady_clock::now() >= end) return 0;
        for (nfds_t i = 0; i < nfds; ++i) {
            real[i] = {fds[i].fd, fds[i].events, 0};
            if (Socket* s = find(fds[i].fd); s && s->state == State::connected && s->cq) {
                (void)ibv_req_notify_cq(s->cq, 0);
                real[i] = {s->channel->fd, POLLIN, 0};
            }
        }
        if (::poll(real.data(), nfds, 10) < 0 && errno != EINTR) return -1;
        for (nfds_t i = 0; i < nfds; ++i) {   // the completion events that woke it, taken
            Socket* s = find(fds[i].fd);
            if (!s || !s->channel || real[i].fd != s->channel->fd || !(real[i].revents & POLLIN)) continue;
            ibv_cq* cq = nullptr;
            void* ctx = nullptr;
            if (ibv_get_cq_event(s->channel, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
        }
    }
}

extern "C" int rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds, timeval* timeout) {
    std::vector<pollfd> p;
    for (int fd = 0; fd < nfds; ++fd) {
        short ev = 0;
        if (readfds && FD_ISSET(fd, readfds)) ev |= POLLIN;
        if (writefds && FD_ISSET(fd, writefds)) ev |= POLLOUT;
        if (exceptfds && FD_ISSET(fd, exceptfds)) ev |= POLLERR;
        if (ev) p.push_back({fd, ev, 0});
    }
    const int ms = timeout ? int(timeout->tv_sec * 1000 + timeout->tv_usec / 1000) : -1;
    const int r = rpoll(p.data(), p.size(), ms);
    if (r < 0) return r;
    int n = 0;
    if (readfds) FD_ZERO(readfds);
    if (writefds) FD_ZERO(writefds);
    if (exceptfds) FD_ZERO(exceptfds);
    for (const pollfd& q : p) {
        if (readfds && (q.revents & (POLLIN | POLLHUP))) FD_SET(q.fd, readfds), ++n;
        if (writefds && (q.revents & POLLOUT)) FD_SET(q.fd, writefds), ++n;
        if (exceptfds && (q.revents & POLLERR)) FD_SET(q.fd, exceptfds), ++n;
    }
    return n;
}
