// rsockets: making, connecting, accepting, closing and the options (rsocket.hpp; the data path
// is rsocket_io.cpp). Stream sockets over IPv4; datagram rsockets and riomap are not carried:
// they fail (ENOTSUP / ENOSYS), and librspreload then uses a kernel socket.
#include "rsocket.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "cma.hpp"

namespace vfab::rdmacm::rs {

namespace {
std::mutex table_mu;
std::unordered_map<int, Socket*>& table() {
    static auto* t = new std::unordered_map<int, Socket*>;   // never freed: sockets outlive statics
    return *t;
}

Socket* add(rdma_cm_id* id) {
    auto* s = new Socket;
    s->id = id;
    s->fd = id->channel->fd;
    id->context = s;
    std::lock_guard g(table_mu);
    table()[s->fd] = s;
    return s;
}

int fail_with(int e) {
    errno = e;
    return -1;
}

uint32_t clamp_qp(uint32_t v, uint32_t dev_max) { return std::clamp(v, kQpMin, std::min(dev_max, kQpMax)); }

// The QP, the CQ and the buffers; every receive posted (zero-length: the data comes by WRITE).
int make_endpoint(Socket& s) {
    ibv_device_attr da{};
    if (ibv_query_device(s.id->verbs, &da) == 0) {
        s.sq_size = clamp_qp(s.sq_size, uint32_t(da.max_qp_wr));
        s.rq_size = clamp_qp(s.rq_size, uint32_t(da.max_qp_wr));
    }
    s.channel = ibv_create_comp_channel(s.id->verbs);
    if (!s.channel) return -1;
    s.cq = ibv_create_cq(s.id->verbs, int(s.sq_size + s.rq_size), &s, s.channel, 0);
    if (!s.cq) return -1;
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = s.cq;
    qa.qp_type = IBV_QPT_RC;
    qa.sq_sig_all = 1;
    qa.cap = {s.sq_size, s.rq_size, 2, 1, s.sq_inline};
    if (rdma_create_qp(s.id, nullptr, &qa)) return -1;
    s.sq_inline = qa.cap.max_inline_data;
    const size_t rlen = 64 + s.rbuf_size;   // the target SGL (32 bytes), then the receive buffer
    s.rmem = static_cast<uint8_t*>(std::aligned_alloc(4096, (rlen + 4095) & ~size_t(4095)));
    s.sbuf = static_cast<uint8_t*>(std::aligned_alloc(4096, (s.sbuf_size + 4095) & ~size_t(4095)));
    if (!s.rmem || !s.sbuf) return fail_with(ENOMEM);
    std::memset(s.rmem, 0, 64);
    s.target_sgl = reinterpret_cast<Sge*>(s.rmem);
    s.rbuf = s.rmem + 64;
    s.rmr = ibv_reg_mr(s.id->pd, s.rmem, rlen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    s.smr = ibv_reg_mr(s.id->pd, s.sbuf, s.sbuf_size, IBV_ACCESS_LOCAL_WRITE);
    if (!s.rmr || !s.smr) return -1;
    s.sqe_avail = s.sq_size - kCtrlSlots;
    s.sbuf_avail = s.sbuf_size;
    s.rbuf_free_offset = s.rbuf_avail = s.rbuf_size / 2;   // the second half: given with the first credits
    s.rseq_comp = uint16_t(s.rq_size / 2);
    s.rmsg.assign(s.rq_size + 1, 0);
    for (uint32_t i = 0; i < s.rq_size; ++i) {
        ibv_recv_wr w{};
        w.wr_id = kRecvWrId;
        ibv_recv_wr* bad = nullptr;
        if (int e = ibv_post_recv(s.id->qp, &w, &bad)) return fail_with(e);
    }
    return 0;
}

ConnData own_conn_data(const Socket& s) {
    ConnData d{};
    d.version = kVersion;
    d.flags = kFlagIomap | (__BYTE_ORDER == __BIG_ENDIAN ? kFlagNet : 0);
    d.credits = htobe16(uint16_t(s.rq_size));
    d.target_sgl = {htobe64(uint64_t(uintptr_t(s.target_sgl))), htobe32(s.rmr->rkey), htobe32(kSglEntries)};
    d.data_buf = {htobe64(uint64_t(uintptr_t(s.rbuf))), htobe32(s.rmr->rkey), htobe32(s.rbuf_size / 2)};
    return d;
}

// The peer's ConnData: where to write first, where to give space back, how many credits.
bool take_conn_data(Socket& s, const void* p, size_t len) {
    ConnData d;
    if (!p || len < sizeof d) return false;
    std::memcpy(&d, p, sizeof d);
    if (d.version != kVersion) return false;
    s.remote_sgl = {be64toh(d.target_sgl.addr), be32toh(d.target_sgl.key), be32toh(d.target_sgl.length)};
    if (s.remote_sgl.length == 0) return false;
    s.remote_sge = 1;
    s.swap_sgl = ((d.flags & kFlagNet) != 0) != (__BYTE_ORDER == __BIG_ENDIAN);
    s.target_sgl[0] = {be64toh(d.data_buf.addr), be32toh(d.data_buf.key), be32toh(d.data_buf.length)};
    s.target_sge = 0;
    s.sseq_comp = be16toh(d.credits);
    return true;
}

void free_endpoint(Socket& s) {
    if (s.id->qp) rdma_destroy_qp(s.id);
    if (s.smr) ibv_dereg_mr(s.smr);
    if (s.rmr) ibv_dereg_mr(s.rmr);
    if (s.cq) ibv_destroy_cq(s.cq);
    if (s.channel) ibv_destroy_comp_channel(s.channel);
    std::free(s.rmem);
    std::free(s.sbuf);
    s.smr = s.rmr = nullptr;
    s.cq = nullptr;
    s.channel = nullptr;
    s.rmem = s.sbuf = s.rbuf = nullptr;
}

rdma_conn_param conn_param(const ConnData& d) {
    rdma_conn_param p{};
    p.private_data = &d;
    p.private_data_len = sizeof d;
    p.flow_control = 1;
    p.retry_count = 7;
    p.rnr_retry_count = 7;   // control messages are not bound by credits: RNR retries for ever
    return p;
}

void connected(Socket& s) {
    s.state = State::connected;
    s.readable = s.writable = true;
}

socklen_t copy_addr(const sockaddr* from, sockaddr* to, socklen_t* len) {
    const socklen_t n = from->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    if (to && len) std::memcpy(to, from, std::min(*len, n));
    if (len) *len = n;
    return n;
}
}  // namespace

Socket* find(int fd) {
    std::lock_guard g(table_mu);
    auto it = table().find(fd);
    return it == table().end() ? nullptr : it->second;
}

}  // namespace vfab::rdmacm::rs

using namespace vfab::rdmacm;
using namespace vfab::rdmacm::rs;

extern "C" int rsocket(int domain, int type, int protocol) {
    const int kind = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (domain != AF_INET) return fail_with(EAFNOSUPPORT);   // IPv4: vfab's ports are
    if (kind != SOCK_STREAM || (protocol && protocol != IPPROTO_TCP)) return fail_with(ENOTSUP);
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP)) return -1;
    Socket* s = add(id);
    if (type & SOCK_NONBLOCK) s->fd_flags |= O_NONBLOCK;
    return s->fd;
}

extern "C" int rbind(int fd, const sockaddr* addr, socklen_t) {
    Socket* s = find(fd);
    if (!s) return fail_with(ENOTSOCK);
    if (s->state != State::init) return fail_with(EINVAL);
    if (rdma_bind_addr(s->id, const_cast<sockaddr*>(addr))) return -1;
    s->state = State::bound;
    return 0;
}

extern "C" int rlisten(int fd, int backlog) {
    Socket* s = find(fd);
    if (!s) return fail_with(ENOTSOCK);
    if (s->state != State::bound && s->state != State::init) return fail_with(EINVAL);
    if (rdma_listen(s->id, backlog)) return -1;
    s->state = State::listening;
    return 0;
}

extern "C" int raccept(int fd, sockaddr* addr, socklen_t* addrlen) {
    Socket* l = find(fd);
    if (!l) return fail_with(ENOTSOCK);
    if (l->state != State::listening) return fail_with(EINVAL);
    for (;;) {
        if (l->fd_flags & O_NONBLOCK) {
            std::lock_guard g(cma().mu);
            if (Id::of(l->id)->requests.empty()) return fail_with(EAGAIN);
        }
        rdma_cm_id* id = nullptr;
        if (rdma_get_request(l->id, &id)) return -1;
        Socket* s = add(id);
        s->sq_size = l->sq_size;
        s->rq_size = l->rq_size;
        s->sq_inline = l->sq_inline;
        s->sbuf_size = l->sbuf_size;
        s->rbuf_size = l->rbuf_size;
        const vfab::cm::Req& req = Id::of(id)->req;
        if (make_endpoint(*s) || !take_conn_data(*s, req.private_data.data() + vfab::cm::kCmaHeader, vfab::cm::kReqPrivate - vfab::cm::kCmaHeader)) {
            rdma_reject(id, nullptr, 0);
            rclose(s->fd);
            continue;   // as the kernel's: a request that cannot be served is refused, the next one waited for
        }
        const ConnData mine = own_conn_data(*s);
        rdma_conn_param p = conn_param(mine);
        if (rdma_accept(id, &p)) {
            rclose(s->fd);
            continue;
        }
        connected(*s);
        copy_addr(rdma_get_peer_addr(id), addr, addrlen);
        return s->fd;
    }
}

extern "C" int rconnect(int fd, const sockaddr* addr, socklen_t) {
    Socket* s = find(fd);
    if (!s) return fail_with(ENOTSOCK);
    if (s->state == State::connected) return fail_with(EISCONN);
    if (s->state != State::init && s->state != State::bound) return fail_with(EINVAL);
    sockaddr* src = s->state == State::bound ? rdma_get_local_addr(s->id) : nullptr;
    int r = rdma_resolve_addr(s->id, src, const_cast<sockaddr*>(addr), 2000);
    if (!r) r = rdma_resolve_route(s->id, 2000);
    if (!r) r = make_endpoint(*s);
    if (r) {
        s->state = State::connect_error;
        s->err = errno;
        return -1;
    }
    const ConnData mine = own_conn_data(*s);
    rdma_conn_param p = conn_param(mine);
    if (rdma_connect(s->id, &p)) {   // waits for the REP (a synchronous id)
        s->state = State::connect_error;
        s->err = errno;
        return -1;
    }
    const rdma_cm_event* e = s->id->event;
    if (!e || !take_conn_data(*s, e->param.conn.private_data, e->param.conn.private_data_len)) {
        s->state = State::connect_error;
        return fail_with(s->err = ENOTSUP);   // not an rsocket at the other end
    }
    connected(*s);
    return 0;
}

extern "C" int rshutdown(int fd, int how) {
    Socket* s = find(fd);
    if (!s) return fail_with(ENOTSOCK);
    if (s->state != State::connected) return s->state == State::disconnected ? 0 : fail_with(ENOTCONN);
    uint32_t ctrl = kCtrlDisconnect;
    if (how == SHUT_RD) {
        s->readable = false;
        if (s->writable) return 0;
    } else if (how == SHUT_WR) {
        s->writable = false;
        if (s->readable) ctrl = kCtrlShutdown;
    } else {
        s->readable = s->writable = false;
    }
    // Blocking whatever the socket's flags: the message must have left.
    while (s->state == State::connected && s->ctrl_seqno == s->ctrl_max_seqno)
        if (!poll_cq(*s) && wait_cq(*s)) break;
    if (s->state == State::connected) (void)send_ctrl(*s, ctrl);
    auto all_sent = [&] { return (s->ctrl_max_seqno - s->ctrl_seqno) + s->sqe_avail == s->sq_size; };
    while (s->state == State::connected && !all_sent())
        if (!poll_cq(*s) && wait_cq(*s)) break;
    if (s->state != State::connected) rdma_disconnect(s->id);   // the QP to error: its receives flush
    return 0;
}

extern "C" int rclose(int fd) {
    Socket* s = find(fd);
    if (!s) return fail_with(EBADF);
    if (s->state == State::connected) rshutdown(fd, SHUT_RDWR);
    {
        std::lock_guard g(table_mu);
        table().erase(fd);
    }
    free_endpoint(*s);
    rdma_destroy_id(s->id);   // a DREQ if still connected at the CM
    delete s;
    return 0;
}

extern "C" int rgetpeername(int fd, sockaddr* addr, socklen_t* addrlen) {
    Socket* s = find(fd);
    if (!s) return fail_with(ENOTSOCK);
    if (s->state != State::connected && s->state != State::disconnected) return fail_with(ENOTCONN);
    copy_addr(rdma_get_peer_addr(s->id), addr, addrlen);
    return 0;
}

extern "C" int rgetsockname(int fd, sockaddr* addr, socklen_t* addrlen) {
    Socket* s = find(fd);
    if (!s) return fail_with(ENOTSOCK);
    copy_addr(rdma_get_local_addr(s->id), addr, addrlen);
    return 0;
}

namespace {
uint32_t opt_bit(int level, int name) {
    if (name < 0 || name > 15) return 0;
    return level == SOL_SOCKET ? 1u << name : level == IPPROTO_TCP ? 1u << (16 + name) : 0;
}
}  // namespace

extern "C" int rsetsockopt(int fd, int level, int name, const void* value, socklen_t len) {
    Socket* s = find(fd);
    if (!s) return fail_with(ENOTSOCK);
    if (!value || len < sizeof(int)) return fail_with(EINVAL);
    int v;
    std::memcpy(&v, value, sizeof v);
    const bool before = s->state == State::init || s->state == State::bound || s->state == State::listening;
    auto record = [&] {   // an option only remembered, for rgetsockopt
        s->opts = v ? s->opts | opt_bit(level, name) : s->opts & ~opt_bit(level, name);
        return 0;
    };
    if (level == SOL_SOCKET) {
        switch (name) {
        case SO_RCVBUF: if (before) s->rbuf_size = std::max(2u, uint32_t(v) * 2) & ~1u; return 0;
        case SO_SNDBUF: if (before) s->sbuf_size = uint32_t(v) * 2 < kSendLowWater ? 4096 : uint32_t(v) * 2; return 0;
        case SO_REUSEADDR:
        case SO_KEEPALIVE:   // accepted; no keepalive messages are sent
        case SO_LINGER:
        case SO_OOBINLINE:
            return record();
        default: return fail_with(ENOTSUP);
        }
    }
    if (level == IPPROTO_TCP) {
        switch (name) {
        case TCP_NODELAY:   // every write goes at once anyway
        case TCP_MAXSEG:
        case TCP_KEEPIDLE:
        case TCP_KEEPCNT:
        case TCP_KEEPINTVL:
            return record();
        default: return fail_with(ENOTSUP);
        }
    }
    if (level == SOL_RDMA) {
        if (!before) return fail_with(EINVAL);
        switch (name) {
        case RDMA_SQSIZE: s->sq_size = std::clamp(uint32_t(v), kQpMin, kQpMax); return 0;
        case RDMA_RQSIZE: s->rq_size = std::clamp(uint32_t(v), kQpMin, kQpMax); return 0;
        case RDMA_INLINE: s->sq_inline = std::min(uint32_t(v), kQpMax); return 0;
        case RDMA_IOMAPSIZE: return 0;   // no iomap: riomap is not offered
        default: return fail_with(ENOTSUP);
        }
    }
    return fail_with(ENOTSUP);
}

extern "C" int rgetsockopt(int fd, int level, int name, void* value, socklen_t* len) {
    Socket* s = find(fd);
    if (!s) return fail_with(ENOTSOCK);
    if (!value || !len || *len < sizeof(int)) return fail_with(EINVAL);
    int v = 0;
    if (level == SOL_SOCKET && name == SO_ERROR) {
        v = s->err;
        s->err = 0;
    } else if (level == SOL_SOCKET && name == SO_RCVBUF) {
        v = int(s->rbuf_size);
    } else if (level == SOL_SOCKET && name == SO_SNDBUF) {
        v = int(s->sbuf_size);
    } else if (level == IPPROTO_TCP && name == TCP_MAXSEG) {
        v = 2048;
    } else if (level == SOL_RDMA) {
        switch (name) {
        case RDMA_SQSIZE: v = int(s->sq_size); break;
        case RDMA_RQSIZE: v = int(s->rq_size); break;
        case RDMA_INLINE: v = int(s->sq_inline); break;
        case RDMA_IOMAPSIZE: v = 0; break;
        default: return fail_with(ENOTSUP);
        }
    } else if (opt_bit(level, name)) {
        v = (s->opts & opt_bit(level, name)) ? 1 : 0;
    } else {
        return fail_with(ENOTSUP);
    }
    std::memcpy(value, &v, sizeof v);
    *len = sizeof v;
    return 0;
}

extern "C" int rfcntl(int fd, int cmd, ...) {
    Socket* s = find(fd);
    if (!s) return fail_with(ENOTSOCK);
    if (cmd == F_GETFL) return s->fd_flags | O_RDWR;
    if (cmd != F_SETFL) return fail_with(ENOTSUP);
    va_list ap;
    va_start(ap, cmd);
    const long flags = va_arg(ap, long);
    va_end(ap);
    s->fd_flags = int(flags) & O_NONBLOCK;
    return 0;
}

// riomap: an rsocket's iomap table is empty (its ConnData says 0 entries), as Debian's default.
extern "C" off_t riomap(int, void*, size_t, int, int, off_t) { return fail_with(ENOSYS); }
extern "C" int riounmap(int, void*, size_t) { return fail_with(ENOSYS); }
extern "C" size_t riowrite(int, const void*, size_t, off_t, int) {
    errno = ENOSYS;
    return 0;
}
