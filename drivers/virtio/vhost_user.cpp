// The vhost-user front-end (QEMU docs/interop/vhost-user.rst). Messages are a 12-byte header
// and a payload in native byte order over a UNIX stream socket, file descriptors in SCM_RIGHTS
// ancillary data.
#include "vfab/drivers/virtio/vhost_user.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>

namespace vfab::virtio {

using vhost_user::Request;
using namespace vhost_user;   // feature and limit constants

namespace {

// Header: request, flags (version in bits 0-1, reply bit 2, need_reply bit 3), payload size.
struct Header { uint32_t request, flags, size; };
static_assert(sizeof(Header) == 12);
constexpr uint32_t kVersion = 0x1, kVersionMask = 0x3, kReplyFlag = 1u << 2, kNeedReplyFlag = 1u << 3;
constexpr uint64_t kVringNoFd = 1u << 8;   // KICK/CALL/ERR payload: bits 0-7 index, bit 8 no fd

// "Memory regions description": the count, padding, then the regions.
struct WireRegion { uint64_t guest_addr, size, user_addr, mmap_offset; };
struct WireMemTable { uint32_t nregions, padding; WireRegion regions[kMaxMemRegions]; };
static_assert(sizeof(WireRegion) == 32 && sizeof(WireMemTable) == 8 + 8 * 32);

// struct vhost_vring_state and struct vhost_vring_addr of linux/vhost_types.h (which C++
// cannot include: its virtio_ring.h converts from void*).
struct VringState { uint32_t index, num; };
struct VringAddr { uint32_t index, flags; uint64_t desc_user_addr, used_user_addr, avail_user_addr, log_guest_addr; };
static_assert(sizeof(VringState) == 8 && sizeof(VringAddr) == 40 && offsetof(VringAddr, used_user_addr) == 16);

// "Virtio device config space": offset, size, flags, then `size` bytes.
constexpr uint32_t kMaxConfig = 256;
struct WireConfig { uint32_t offset, size, flags; uint8_t data[kMaxConfig]; };
constexpr size_t kMaxPayload = sizeof(WireConfig);   // the largest message either way

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left <= 0 ? 0 : static_cast<int>(left);
}

std::string hex(uint64_t v) { return str_cat("0x", std::hex, v); }

std::string feature_names(uint64_t bits) {
    std::string out;
    for (unsigned b = 0; b < 64; ++b) {
        if (!(bits & (1ull << b))) continue;
        if (!out.empty()) out += ", ";
        static const char* const kNamed[] = {"VIRTIO_F_VERSION_1", "VIRTIO_F_ACCESS_PLATFORM", "VIRTIO_F_RING_PACKED"};
        out += b >= 32 && b <= 34 ? kNamed[b - 32] : str_cat("bit ", b);
    }
    return out;
}

// Closes any descriptors a message brought along (none of our replies should carry any).
void close_passed_fds(msghdr& msg) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        int fds[kMaxMemRegions];
        size_t n = std::min((c->cmsg_len - CMSG_LEN(0)) / sizeof(int), kMaxMemRegions);
        std::memcpy(fds, CMSG_DATA(c), n * sizeof(int));
        for (size_t i = 0; i < n; ++i) ::close(fds[i]);
    }
}

}  // namespace

// --- connecting ---------------------------------------------------------------------------

VhostUserFrontend::VhostUserFrontend(vfio::UniqueFd sock, std::string path, const VhostUserOptions& opts)
    : mu_(std::make_unique<std::recursive_mutex>()), sock_(std::move(sock)), path_(std::move(path)), opts_(opts),
      vrings_(kMaxVrings) {}

VhostUserFrontend::~VhostUserFrontend() = default;

Result<VhostUserFrontend> VhostUserFrontend::connect(std::string_view path, const VhostUserOptions& opts) {
    sockaddr_un addr{};
    if (path.empty() || path.size() >= sizeof addr.sun_path)
        return Error{ENAMETOOLONG, str_cat("vhost-user socket path '", path, "' is ",
                                           path.empty() ? "empty" : "too long for a UNIX socket",
                                           " — use a path of 1 to ", sizeof addr.sun_path - 1, " bytes")};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    auto deadline = Clock::now() + std::chrono::milliseconds(opts.connect_timeout_ms);
    for (;;) {
        int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) return Error::from_errno(errno, "socket(AF_UNIX) for vhost-user");
        vfio::UniqueFd sock(fd, vfio::Sys::real());
        if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0)
            return VhostUserFrontend(std::move(sock), std::string(path), opts);
        int err = errno;
        bool nobody = err == ENOENT || err == ECONNREFUSED;
        if ((nobody || err == EAGAIN || err == EINTR) && Clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            continue;
        }
        std::string waited = opts.connect_timeout_ms > 0 ? str_cat(", waited ", opts.connect_timeout_ms, " ms") : "";
        if (nobody)
            return Error{err, str_cat("no vhost-user backend at ", path, " (", std::strerror(err), waited,
                                      ") — start one, e.g. dpdk-testpmd --vdev net_vhost0,iface=", path)};
        if (err == EAGAIN)
            return Error{err, str_cat("the vhost-user backend at ", path, " accepts no connection (its listen queue is "
                                      "full", waited, ") — is it stuck? Restart it")};
        if (err == EACCES || err == EPERM)
            return Error::from_errno(err, str_cat("connecting to the vhost-user socket ", path),
                                     "run as the socket's owner, or give this user write permission on it");
        return Error::from_errno(err, str_cat("connecting to the vhost-user socket ", path));
    }
}

Result<VhostUserFrontend> VhostUserFrontend::adopt(vfio::UniqueFd socket, std::string name,
                                                   const VhostUserOptions& opts) {
    if (!socket) return Error{EBADF, str_cat("vhost-user: no socket given for ", name)};
    int flags = ::fcntl(socket.get(), F_GETFL);
    if (flags < 0 || ::fcntl(socket.get(), F_SETFL, flags | O_NONBLOCK) < 0)
        return Error::from_errno(errno, str_cat("vhost-user socket of ", name, ": fcntl(O_NONBLOCK)"));
    return VhostUserFrontend(std::move(socket), std::move(name), opts);
}

// --- the transport ------------------------------------------------------------------------

Error VhostUserFrontend::die(int code, std::string message) {
    if (!dead_) {
        dead_ = true;
        failure_ = Error{code, message};
        // The spec's answer to a failed exchange: close the connection. Shutting it down keeps
        // the fd valid for whoever polls it, and they see the hang-up.
        ::shutdown(sock_.get(), SHUT_RDWR);
    }
    return Error{code, std::move(message)};
}

Result<void> VhostUserFrontend::check_usable(Request req) const {
    if (!dead_) return {};
    return Error{failure_.code, str_cat("cannot send ", request_name(req), ": the vhost-user connection is down (",
                                        failure_.message, ")")};
}

Result<void> VhostUserFrontend::send_msg(Request req, const void* payload, uint32_t size, std::span<const int> fds,
                                         bool need_reply) {
    if (auto r = check_usable(req); !r) return r;
    if (size > kMaxPayload || fds.size() > kMaxMemRegions)
        return Error{EINVAL, str_cat(request_name(req), ": message too large (", size, " bytes, ", fds.size(),
                                     " fds)")};
    uint8_t buf[sizeof(Header) + kMaxPayload];
    Header h{static_cast<uint32_t>(req), kVersion | (need_reply ? kNeedReplyFlag : 0), size};
    std::memcpy(buf, &h, sizeof h);
    if (size) std::memcpy(buf + sizeof h, payload, size);
    size_t len = sizeof h + size, done = 0;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxMemRegions)] = {};
    auto deadline = Clock::now() + std::chrono::milliseconds(opts_.reply_timeout_ms);
    while (done < len) {
        iovec iov{buf + done, len - done};
        msghdr msg{};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        if (done == 0 && !fds.empty()) {   // the descriptors ride on the first byte
            msg.msg_control = control;
            msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
            cmsghdr* c = CMSG_FIRSTHDR(&msg);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
            std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
        }
        ssize_t n = ::sendmsg(sock_.get(), &msg, MSG_NOSIGNAL);   // never SIGPIPE
        int err = n > 0 ? 0 : n == 0 ? EPIPE : errno;
        done += n > 0 ? static_cast<size_t>(n) : 0;
        if (err == 0 || err == EINTR) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) {
            pollfd p{sock_.get(), POLLOUT, 0};
            if (::poll(&p, 1, ms_left(deadline)) == 0)
                return die(ETIMEDOUT, str_cat("the vhost-user backend at ", path_, " takes no more messages (",
                                              request_name(req), " not sent within ", opts_.reply_timeout_ms,
                                              " ms) — it is stuck; restart it and reconnect"));
            continue;
        }
        if (err == EPIPE || err == ECONNRESET || err == ENOTCONN)
            return die(err, str_cat("the vhost-user backend at ", path_, " is gone (sending ", request_name(req), ": ",
                                    std::strerror(err), ") — it exited or closed the connection; restart it and "
                                    "reconnect"));
        return die(err, str_cat("sending ", request_name(req), " to the vhost-user backend at ", path_, ": ",
                                std::strerror(err)));
    }
    return {};
}

Result<void> VhostUserFrontend::recv_reply(Request req, void* payload, uint32_t size) {
    auto deadline = Clock::now() + std::chrono::milliseconds(opts_.reply_timeout_ms);
    // Reads exactly `len` bytes, however the back-end splits them.
    auto read_exact = [&](void* to, size_t len) -> Result<void> {
        auto* p = static_cast<uint8_t*>(to);
        while (len > 0) {
            pollfd pfd{sock_.get(), POLLIN, 0};
            int pr = ::poll(&pfd, 1, ms_left(deadline));
            if (pr < 0 && errno == EINTR) continue;
            if (pr < 0) return die(errno, str_cat("poll on the vhost-user socket ", path_, ": ", std::strerror(errno)));
            if (pr == 0)
                return die(ETIMEDOUT, str_cat("the vhost-user backend at ", path_, " did not answer ",
                                              request_name(req), " within ", opts_.reply_timeout_ms,
                                              " ms — it is stuck or does not know the message; see its log"));
            iovec iov{p, len};
            alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxMemRegions)];
            msghdr msg{};
            msg.msg_iov = &iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control;
            msg.msg_controllen = sizeof control;
            ssize_t n = ::recvmsg(sock_.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
            if (n > 0) close_passed_fds(msg);
            if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
            if (n == 0 || (n < 0 && errno == ECONNRESET))
                return die(ECONNRESET, str_cat("the vhost-user backend at ", path_, " closed the connection "
                                               "(waiting for its reply to ", request_name(req),
                                               ") — it exited or refused the request; see its log"));
            if (n < 0)
                return die(errno, str_cat("receiving the reply to ", request_name(req), " from ", path_, ": ",
                                          std::strerror(errno)));
            p += n;
            len -= static_cast<size_t>(n);
        }
        return {};
    };
    Header h{};
    if (auto r = read_exact(&h, sizeof h); !r) return r;
    if (h.request != static_cast<uint32_t>(req) || (h.flags & kVersionMask) != kVersion || !(h.flags & kReplyFlag))
        return die(EPROTO, str_cat("the vhost-user backend at ", path_, " answered ", request_name(req),
                                   " with request ", h.request, ", flags ", hex(h.flags),
                                   " (not a version-1 reply to it) — the protocol is out of step; reconnect"));
    if (h.size == 0 && req == Request::get_config)   // the back-end's way of saying "error"
        return Error{EIO, str_cat("the vhost-user backend at ", path_, " could not read its configuration space "
                                  "(empty GET_CONFIG reply)")};
    if (h.size != size)
        return die(EPROTO, str_cat("the vhost-user backend at ", path_, " answered ", request_name(req), " with ",
                                   h.size, " payload bytes, expected ", size, " — the protocol is out of step"));
    return read_exact(payload, size);
}

Result<void> VhostUserFrontend::call(Request req, const void* payload, uint32_t size, void* reply,
                                     uint32_t reply_size) {
    if (auto r = send_msg(req, payload, size, {}, false); !r) return r;
    return recv_reply(req, reply, reply_size);
}

// A message with no reply of its own. With REPLY_ACK it asks for one (0: done); without,
// it follows up with GET_FEATURES, as QEMU does, so that a back-end refusing the message
// (DPDK then closes the connection) fails this call and not some later one.
Result<void> VhostUserFrontend::command(Request req, const void* payload, uint32_t size, std::span<const int> fds) {
    bool ack = reply_ack();
    if (auto r = send_msg(req, payload, size, fds, ack); !r) return r;
    uint64_t status = 0;
    auto r = ack ? recv_reply(req, &status, sizeof status) : call(Request::get_features, nullptr, 0, &status, 8);
    if (!r) return ack ? r : Error{r.error().code, str_cat(r.error().message, " (after ", request_name(req), ")")};
    if (!ack) return {};
    if (status != 0)
        return Error{EIO, str_cat("the vhost-user backend at ", path_, " refused ", request_name(req), " (status ",
                                  status, ") — see its log for why")};
    return {};
}

Result<void> VhostUserFrontend::need_protocol(Request req, unsigned bit) const {
    if (protocol_features_ & (1ull << bit)) return {};
    return Error{ENOTSUP, str_cat(request_name(req), ": the protocol feature (bit ", bit, ") it needs was not "
                                  "negotiated with the vhost-user backend at ", path_,
                                  " — the backend does not offer it, or VhostUserOptions::protocol_features left "
                                  "it out")};
}

Result<void> VhostUserFrontend::check_index(Request req, uint32_t index) const {
    if (index < kMaxVrings) return {};
    return Error{EINVAL, str_cat(request_name(req), ": vring index ", index, " is out of range (0..", kMaxVrings - 1,
                                 ")")};
}

// --- the messages -------------------------------------------------------------------------

Result<uint64_t> VhostUserFrontend::get_features() {
    std::lock_guard lock(*mu_);
    uint64_t f = 0;
    if (auto r = call(Request::get_features, nullptr, 0, &f, sizeof f); !r) return r.take_error();
    backend_features_ = f;
    return f;
}

Result<void> VhostUserFrontend::set_features(uint64_t features) {
    std::lock_guard lock(*mu_);
    if (auto r = command(Request::set_features, &features, sizeof features); !r) return r;
    acked_features_ = features;
    features_ = features & ~kFeatureProtocolFeatures;
    return {};
}

Result<uint64_t> VhostUserFrontend::get_protocol_features() {
    std::lock_guard lock(*mu_);
    if (!(backend_features_ & kFeatureProtocolFeatures))
        return Error{ENOTSUP, str_cat("the vhost-user backend at ", path_, " has no protocol features (feature bit 30 "
                                      "not offered, or GET_FEATURES not asked yet)")};
    uint64_t f = 0;
    if (auto r = call(Request::get_protocol_features, nullptr, 0, &f, sizeof f); !r) return r.take_error();
    return f;
}

Result<void> VhostUserFrontend::set_protocol_features(uint64_t features) {
    std::lock_guard lock(*mu_);
    if (auto r = command(Request::set_protocol_features, &features, sizeof features); !r) return r;
    protocol_features_ = features;   // REPLY_ACK applies from the next message on
    return {};
}

Result<void> VhostUserFrontend::set_owner() {
    std::lock_guard lock(*mu_);
    return command(Request::set_owner, nullptr, 0);
}

Result<uint32_t> VhostUserFrontend::get_queue_num() {
    std::lock_guard lock(*mu_);
    if (auto r = need_protocol(Request::get_queue_num, kProtocolMq); !r) return r.take_error();
    uint64_t n = 0;
    if (auto r = call(Request::get_queue_num, nullptr, 0, &n, sizeof n); !r) return r.take_error();
    queue_num_ = static_cast<uint32_t>(n);
    return queue_num_;
}

Result<uint64_t> VhostUserFrontend::negotiate(uint64_t wanted, uint64_t required) {
    std::lock_guard lock(*mu_);
    auto offered = get_features();
    if (!offered) return offered.take_error();
    if (uint64_t missing = required & ~*offered) {
        bool v1 = missing & kFeatureVersion1;
        return Error{ENOTSUP, str_cat("the vhost-user backend at ", path_, " does not offer ", feature_names(missing),
                                      " (it offers ", hex(*offered), ") — ",
                                      v1 ? "vfab drives virtio 1.x devices only: use a backend that offers "
                                           "VIRTIO_F_VERSION_1 (DPDK's vhost PMD, QEMU's vhost-user backends)"
                                         : "use a backend that offers them, or require less")};
    }
    protocol_features_ = 0;
    queue_num_ = 0;
    if (*offered & kFeatureProtocolFeatures) {
        auto pf = get_protocol_features();
        if (!pf) return pf.take_error();
        if (auto r = set_protocol_features(*pf & opts_.protocol_features); !r) return r.take_error();
        if (protocol_features_ & (1ull << kProtocolMq)) {
            if (auto q = get_queue_num(); !q) return q.take_error();
        }
    }
    if (auto r = set_owner(); !r) return r.take_error();
    // ACCESS_PLATFORM would make ring and descriptor addresses IOVAs served through an IOTLB
    // this front-end does not implement.
    uint64_t negotiated = (wanted | required) & *offered & ~(kFeatureAccessPlatform | kFeatureProtocolFeatures);
    if (auto r = set_features(negotiated | (*offered & kFeatureProtocolFeatures)); !r) return r.take_error();
    return negotiated;
}

Result<void> VhostUserFrontend::set_mem_table(std::span<const MemRegion> regions) {
    std::lock_guard lock(*mu_);
    if (regions.empty() || regions.size() > kMaxMemRegions)
        return Error{EINVAL, str_cat("vhost-user memory table: ", regions.size(), " regions; the protocol takes 1 to ",
                                     kMaxMemRegions, " — put the DMA buffers in fewer, larger allocations")};
    WireMemTable t{};
    int fds[kMaxMemRegions];
    for (size_t i = 0; i < regions.size(); ++i) {
        const MemRegion& m = regions[i];
        if (m.fd < 0 || m.size == 0 || m.guest_addr + m.size < m.guest_addr || m.user_addr + m.size < m.user_addr)
            return Error{EINVAL, str_cat("vhost-user memory region ", i, " (fd ", m.fd, ", size ", m.size,
                                         ") is invalid — it needs the memory's fd and a non-zero size that does not "
                                         "wrap around")};
        for (size_t j = 0; j < i; ++j) {
            const MemRegion& o = regions[j];
            if ((m.guest_addr < o.guest_addr + o.size && o.guest_addr < m.guest_addr + m.size) ||
                (m.user_addr < o.user_addr + o.size && o.user_addr < m.user_addr + m.size))
                return Error{EINVAL, str_cat("vhost-user memory regions ", j, " and ", i, " overlap (guest ",
                                             hex(o.guest_addr), "/", hex(m.guest_addr), ", user ", hex(o.user_addr),
                                             "/", hex(m.user_addr), ") — give each memory its own address range")};
        }
        t.regions[i] = WireRegion{m.guest_addr, m.size, m.user_addr, m.mmap_offset};
        fds[i] = m.fd;
    }
    t.nregions = static_cast<uint32_t>(regions.size());
    auto size = static_cast<uint32_t>(offsetof(WireMemTable, regions) + regions.size() * sizeof(WireRegion));
    if (auto r = command(Request::set_mem_table, &t, size, {fds, regions.size()}); !r) return r;
    regions_.assign(regions.begin(), regions.end());
    return {};
}

Result<void> VhostUserFrontend::set_vring_num(uint32_t index, uint32_t size) {
    std::lock_guard lock(*mu_);
    if (auto r = check_index(Request::set_vring_num, index); !r) return r;
    bool packed = features_ & kFeatureRingPacked;
    if (size == 0 || size > 32768 || (!packed && (size & (size - 1))))
        return Error{EINVAL, str_cat("vring ", index, ": size ", size, " — a virtqueue has 1 to 32768 entries",
                                     packed ? "" : ", a power of 2")};
    VringState s{index, size};
    if (auto r = command(Request::set_vring_num, &s, sizeof s); !r) return r;
    vrings_[index].size = size;
    return {};
}

bool VhostUserFrontend::in_table(uint64_t user_addr, uint64_t len) const {
    for (const MemRegion& m : regions_)
        if (user_addr >= m.user_addr && len <= m.size && user_addr - m.user_addr <= m.size - len) return true;
    return false;
}

Result<void> VhostUserFrontend::set_vring_addr(uint32_t index, const void* desc, const void* avail, const void* used) {
    std::lock_guard lock(*mu_);
    if (auto r = check_index(Request::set_vring_addr, index); !r) return r;
    if (regions_.empty())
        return Error{EINVAL, str_cat("vring ", index, ": set the memory table first — the backend finds the rings "
                                     "through it")};
    uint64_t n = vrings_[index].size;
    if (n == 0) return Error{EINVAL, str_cat("vring ", index, ": set its size (set_vring_num) before its addresses")};
    bool packed = features_ & kFeatureRingPacked;
    uint64_t event = (features_ & kFeatureEventIdx) ? 2 : 0;
    struct Part { const char* name; const void* p; uint64_t len, align; } parts[] = {
        {"descriptor table", desc, 16 * n, 16},
        {"driver area (avail ring)", avail, packed ? 4 : 4 + 2 * n + event, packed ? 4u : 2u},
        {"device area (used ring)", used, packed ? 4 : 4 + 8 * n + event, 4}};
    for (const Part& part : parts) {
        auto a = reinterpret_cast<uintptr_t>(part.p);
        if (a == 0 || a % part.align != 0)
            return Error{EINVAL, str_cat("vring ", index, ": the ", part.name, " address ", hex(a), " is ",
                                         a == 0 ? "null" : str_cat("not ", part.align, "-byte aligned"))};
        if (!in_table(a, part.len))
            return Error{EINVAL, str_cat("vring ", index, ": the ", part.name, " at ", hex(a), " (", part.len,
                                         " bytes) is not inside the memory table — allocate the rings in memory "
                                         "given to set_mem_table")};
    }
    VringAddr a{index, 0 /* no dirty logging */, reinterpret_cast<uintptr_t>(desc),
                reinterpret_cast<uintptr_t>(used), reinterpret_cast<uintptr_t>(avail), 0};
    return command(Request::set_vring_addr, &a, sizeof a);
}

Result<void> VhostUserFrontend::set_vring_base(uint32_t index, uint32_t base) {
    std::lock_guard lock(*mu_);
    if (auto r = check_index(Request::set_vring_base, index); !r) return r;
    VringState s{index, base};
    return command(Request::set_vring_base, &s, sizeof s);
}

Result<void> VhostUserFrontend::set_vring_fd(Request req, uint32_t index, Notify n, int external) {
    std::lock_guard lock(*mu_);
    if (auto r = check_index(req, index); !r) return r;
    Vring& v = vrings_[index];
    vfio::UniqueFd& slot = req == Request::set_vring_kick ? v.kick : req == Request::set_vring_call ? v.call : v.err;
    uint64_t u = index;
    int fd = -1;
    if (external >= 0) {
        fd = external;
    } else if (n == Notify::eventfd) {
        if (!slot) {
            int e = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
            if (e < 0) return Error::from_errno(errno, str_cat("eventfd for vring ", index), "out of file descriptors? "
                                                                                              "raise `ulimit -n`");
            slot = vfio::UniqueFd(e, vfio::Sys::real());
        }
        fd = slot.get();
    } else {
        u |= kVringNoFd;
    }
    if (auto r = command(req, &u, sizeof u, fd >= 0 ? std::span<const int>(&fd, 1) : std::span<const int>()); !r)
        return r;
    if (n == Notify::none || external >= 0) slot.reset();
    if (req == Request::set_vring_call) v.call_ext = external;
    return {};
}

Result<void> VhostUserFrontend::set_vring_kick(uint32_t index, Notify n) {
    return set_vring_fd(Request::set_vring_kick, index, n);
}
Result<void> VhostUserFrontend::set_vring_call(uint32_t index, Notify n) {
    return set_vring_fd(Request::set_vring_call, index, n);
}
Result<void> VhostUserFrontend::set_vring_call_fd(uint32_t index, int eventfd) {
    if (eventfd < 0) return Error{EBADF, str_cat("vring ", index, ": set_vring_call_fd needs an open eventfd")};
    return set_vring_fd(Request::set_vring_call, index, Notify::eventfd, eventfd);
}
Result<void> VhostUserFrontend::set_vring_err(uint32_t index, Notify n) {
    return set_vring_fd(Request::set_vring_err, index, n);
}

Result<void> VhostUserFrontend::set_vring_enable(uint32_t index, bool enable) {
    std::lock_guard lock(*mu_);
    if (auto r = check_index(Request::set_vring_enable, index); !r) return r;
    if (!(acked_features_ & kFeatureProtocolFeatures))
        return Error{ENOTSUP, str_cat("vring ", index, ": SET_VRING_ENABLE needs the protocol features (bit 30) "
                                      "negotiated; without them rings are enabled as soon as they start")};
    VringState s{index, enable ? 1u : 0u};
    return command(Request::set_vring_enable, &s, sizeof s);
}

Result<uint32_t> VhostUserFrontend::get_vring_base(uint32_t index) {
    std::lock_guard lock(*mu_);
    if (auto r = check_index(Request::get_vring_base, index); !r) return r.take_error();
    VringState s{index, 0}, reply{};
    if (auto r = call(Request::get_vring_base, &s, sizeof s, &reply, sizeof reply); !r) return r.take_error();
    if (reply.index != index)
        return die(EPROTO, str_cat("the vhost-user backend at ", path_, " answered GET_VRING_BASE for vring ", index,
                                   " with vring ", reply.index, " — the protocol is out of step"));
    return reply.num;
}

Result<std::vector<uint8_t>> VhostUserFrontend::get_config(uint32_t offset, uint32_t size) {
    std::lock_guard lock(*mu_);
    if (auto r = need_protocol(Request::get_config, kProtocolConfig); !r) return r.take_error();
    if (size == 0 || size > kMaxConfig)
        return Error{EINVAL, str_cat("GET_CONFIG: size ", size, " — the protocol reads 1 to ", kMaxConfig, " bytes")};
    WireConfig c{offset, size, 0, {}};
    uint32_t len = static_cast<uint32_t>(offsetof(WireConfig, data)) + size;
    if (auto r = call(Request::get_config, &c, len, &c, len); !r) return r.take_error();
    return std::vector<uint8_t>(c.data, c.data + size);
}

Result<void> VhostUserFrontend::set_status(uint8_t status) {
    std::lock_guard lock(*mu_);
    if (auto r = need_protocol(Request::set_status, kProtocolStatus); !r) return r;
    uint64_t u = status;
    return command(Request::set_status, &u, sizeof u);
}

Result<void> VhostUserFrontend::reset() {
    std::lock_guard lock(*mu_);
    bool device = protocol_features_ & (1ull << kProtocolResetDevice);
    if (auto r = command(device ? Request::reset_device : Request::reset_owner, nullptr, 0); !r) return r;
    // What the back-end forgot (DPDK drops features, protocol features and the memory table).
    features_ = acked_features_ = protocol_features_ = 0;
    regions_.clear();
    for (Vring& v : vrings_) v.size = 0;
    return {};
}

// --- whole vrings -------------------------------------------------------------------------

Result<void> VhostUserFrontend::start_vring(const VringConfig& cfg) {
    std::lock_guard lock(*mu_);
    Result<void> r = set_vring_num(cfg.index, cfg.size);
    if (r) r = set_vring_base(cfg.index, cfg.base);
    if (r) r = set_vring_addr(cfg.index, cfg.desc, cfg.avail, cfg.used);
    if (r) r = set_vring_kick(cfg.index, cfg.kick);
    if (r) r = cfg.call == Notify::eventfd && cfg.call_fd >= 0 ? set_vring_call_fd(cfg.index, cfg.call_fd)
                                                               : set_vring_call(cfg.index, cfg.call);
    if (r && cfg.error_fd) r = set_vring_err(cfg.index);
    if (r && (acked_features_ & kFeatureProtocolFeatures)) r = set_vring_enable(cfg.index, true);
    return r;
}

Result<uint32_t> VhostUserFrontend::stop_vring(uint32_t index) {
    std::lock_guard lock(*mu_);
    if (acked_features_ & kFeatureProtocolFeatures) {
        if (auto r = set_vring_enable(index, false); !r) return r.take_error();
    }
    return get_vring_base(index);
}

// --- liveness -----------------------------------------------------------------------------

bool VhostUserFrontend::alive() {
    if (!mu_) return false;   // moved from
    std::lock_guard lock(*mu_);
    if (dead_) return false;
    pollfd p{sock_.get(), POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return true;
    bool gone = p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL);
    if (!gone && (p.revents & POLLIN)) {   // no request is pending: only end-of-file is expected
        char c;
        gone = ::recv(sock_.get(), &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    }
    if (gone)
        die(ECONNRESET, str_cat("the vhost-user backend at ", path_, " hung up — it exited or closed the connection; "
                                "restart it and reconnect"));
    return !gone;
}

Error VhostUserFrontend::failure() const {
    if (!mu_) return Error{EBADF, "vhost-user front-end moved from"};
    std::lock_guard lock(*mu_);
    return dead_ ? failure_ : Error{};
}

}  // namespace vfab::virtio
