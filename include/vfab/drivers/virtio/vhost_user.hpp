// Virtio over vhost-user: the front-end side of the vhost-user protocol (QEMU
// docs/interop/vhost-user.rst), so that the virtio-net driver's virtqueues can be served by a
// back-end process on the same host (DPDK's vhost PMD, a software switch) with no VM.
//
//   auto fe = vfab::virtio::VhostUserFrontend::connect("/run/vhost.sock");
//   auto features = fe->negotiate(wanted);                    // virtio features both sides keep
//   auto mem = vfab::dma::DmaMemory::allocate(4 << 20);
//   vfab::virtio::MemRegion region = vfab::virtio::mem_region(*mem);   // IOVA = VA
//   fe->set_mem_table({&region, 1});
//   fe->start_vring({.index = 0, .size = 256, .desc = d, .avail = a, .used = u});
//   ...
//   fe->kick(1);                                              // the doorbell: an eventfd write
//
// Addresses, as the protocol defines them:
//   - the memory table maps "guest addresses" (what descriptors carry: the driver's IOVAs) and
//     "user addresses" (this process's pointers) to an fd the back-end mmap()s;
//   - ring addresses (SET_VRING_ADDR) are user addresses: this process's pointers. (They are
//     IOVAs only with VIRTIO_F_ACCESS_PLATFORM, which this front-end never negotiates.)
//   - every address a descriptor holds must fall inside a region's guest range.
// The simplest choice is IOVA = VA (mem_region(DmaMemory)): descriptors then hold pointers.
//
// Kick, call and error notifications are eventfds this front-end creates and owns. A back-end
// that goes away (exits or closes the socket; DPDK's closes it when it refuses a message sent
// without REPLY_ACK), stalls past the reply timeout or answers out of step turns the front-end
// dead: every later call fails with an error saying so, alive() is false, and socket_fd()
// polls with POLLHUP/POLLRDHUP — put it in your epoll set to learn of it without a call.
// Nothing raises SIGPIPE. A message refused through REPLY_ACK fails that call only.
//
// Control-path calls are thread-safe. kick() is the fast path: one write(2), no lock.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vfab/dma/dma_arena.hpp"
#include "vfab/dma/dma_memory.hpp"
#include "vfab/iova.hpp"
#include "vfab/result.hpp"
#include "vfab/vfio/unique_fd.hpp"

namespace vfab::virtio {

namespace vhost_user {

// Front-end message types (vhost-user.rst, "Front-end message types").
enum class Request : uint32_t {
    get_features = 1,
    set_features = 2,
    set_owner = 3,
    reset_owner = 4,
    set_mem_table = 5,
    set_vring_num = 8,
    set_vring_addr = 9,
    set_vring_base = 10,
    get_vring_base = 11,
    set_vring_kick = 12,
    set_vring_call = 13,
    set_vring_err = 14,
    get_protocol_features = 15,
    set_protocol_features = 16,
    get_queue_num = 17,
    set_vring_enable = 18,
    get_config = 24,
    reset_device = 34,
    set_status = 39,
    get_status = 40,
};
// "VHOST_USER_SET_MEM_TABLE" style names, for messages.
constexpr const char* request_name(Request r) {
    switch (r) {
        case Request::get_features: return "VHOST_USER_GET_FEATURES";
        case Request::set_features: return "VHOST_USER_SET_FEATURES";
        case Request::set_owner: return "VHOST_USER_SET_OWNER";
        case Request::reset_owner: return "VHOST_USER_RESET_OWNER";
        case Request::set_mem_table: return "VHOST_USER_SET_MEM_TABLE";
        case Request::set_vring_num: return "VHOST_USER_SET_VRING_NUM";
        case Request::set_vring_addr: return "VHOST_USER_SET_VRING_ADDR";
        case Request::set_vring_base: return "VHOST_USER_SET_VRING_BASE";
        case Request::get_vring_base: return "VHOST_USER_GET_VRING_BASE";
        case Request::set_vring_kick: return "VHOST_USER_SET_VRING_KICK";
        case Request::set_vring_call: return "VHOST_USER_SET_VRING_CALL";
        case Request::set_vring_err: return "VHOST_USER_SET_VRING_ERR";
        case Request::get_protocol_features: return "VHOST_USER_GET_PROTOCOL_FEATURES";
        case Request::set_protocol_features: return "VHOST_USER_SET_PROTOCOL_FEATURES";
        case Request::get_queue_num: return "VHOST_USER_GET_QUEUE_NUM";
        case Request::set_vring_enable: return "VHOST_USER_SET_VRING_ENABLE";
        case Request::get_config: return "VHOST_USER_GET_CONFIG";
        case Request::reset_device: return "VHOST_USER_RESET_DEVICE";
        case Request::set_status: return "VHOST_USER_SET_STATUS";
        case Request::get_status: return "VHOST_USER_GET_STATUS";
    }
    return "VHOST_USER_(unknown)";
}

// Protocol feature bits (GET/SET_PROTOCOL_FEATURES).
inline constexpr unsigned kProtocolMq = 0;
inline constexpr unsigned kProtocolReplyAck = 3;
inline constexpr unsigned kProtocolMtu = 4;
inline constexpr unsigned kProtocolBackendReq = 5;
inline constexpr unsigned kProtocolConfig = 9;
inline constexpr unsigned kProtocolResetDevice = 13;
inline constexpr unsigned kProtocolStatus = 16;

// Virtio feature bit 30 (unused by virtio): the back-end speaks protocol features.
inline constexpr uint64_t kFeatureProtocolFeatures = 1ull << 30;
// The virtio feature bits this transport itself looks at (VIRTIO 1.2 §6).
inline constexpr uint64_t kFeatureEventIdx = 1ull << 29;        // VIRTIO_RING_F_EVENT_IDX
inline constexpr uint64_t kFeatureVersion1 = 1ull << 32;        // VIRTIO_F_VERSION_1
inline constexpr uint64_t kFeatureAccessPlatform = 1ull << 33;  // VIRTIO_F_ACCESS_PLATFORM
inline constexpr uint64_t kFeatureRingPacked = 1ull << 34;      // VIRTIO_F_RING_PACKED

inline constexpr uint32_t kMaxVrings = 256;    // the vring index is 8 bits in KICK/CALL/ERR
inline constexpr size_t kMaxMemRegions = 8;    // VHOST_MEMORY_MAX_NREGIONS

}  // namespace vhost_user

struct VhostUserOptions {
    // How long connect() keeps retrying while nothing listens yet (ENOENT, ECONNREFUSED):
    // handy right after starting a back-end. 0: one attempt.
    int connect_timeout_ms = 1000;
    // How long to wait for each reply before declaring the back-end stuck.
    int reply_timeout_ms = 5000;
    // Protocol features to take when the back-end offers them. REPLY_ACK makes every message
    // acknowledged (errors land on the call that caused them); MQ allows GET_QUEUE_NUM.
    // STATUS is off by default: with it, DPDK waits for set_status(DRIVER_OK).
    uint64_t protocol_features = (1ull << vhost_user::kProtocolMq) | (1ull << vhost_user::kProtocolReplyAck) |
                                 (1ull << vhost_user::kProtocolConfig) |
                                 (1ull << vhost_user::kProtocolResetDevice);
};

// One entry of the memory table: `size` bytes of the file `fd` from `mmap_offset`, mapped in
// this process at `user_addr`, reached by descriptors at `guest_addr`. The fd is not owned:
// it must stay open until set_mem_table() returns (the back-end gets its own copy).
struct MemRegion {
    int fd = -1;
    uint64_t guest_addr = 0;
    uint64_t user_addr = 0;
    uint64_t size = 0;
    uint64_t mmap_offset = 0;
};
// All of `mem`, with descriptors using `guest_addr` for its first byte.
inline MemRegion mem_region(const dma::DmaMemory& mem, Iova guest_addr) {
    return MemRegion{mem.fd(), guest_addr.value, reinterpret_cast<uintptr_t>(mem.data()), mem.size(), 0};
}
// All of `mem` with IOVA = VA: descriptors carry this process's pointers.
inline MemRegion mem_region(const dma::DmaMemory& mem) {
    return mem_region(mem, Iova(reinterpret_cast<uintptr_t>(mem.data())));
}
// An arena's memory at the arena's IOVA: the same addresses the device uses over VFIO.
inline MemRegion mem_region(const dma::DmaArena& arena) { return mem_region(arena.memory(), arena.iova()); }

// Whether a vring gets an eventfd for a notification, or none (the other side polls:
// "invalid FD" flag, bit 8 of the message).
enum class Notify { eventfd, none };

// One virtqueue, for start_vring(). Ring pointers are this process's addresses inside the
// memory table (desc: descriptor table; avail: driver area; used: device area).
struct VringConfig {
    uint32_t index = 0;
    uint32_t size = 0;            // entries; a power of 2 for split rings
    const void* desc = nullptr;
    const void* avail = nullptr;
    const void* used = nullptr;
    uint32_t base = 0;            // the next available index the back-end reads (0: new ring)
    Notify kick = Notify::eventfd;
    Notify call = Notify::eventfd;
    bool error_fd = false;        // also give the back-end an error eventfd
    int call_fd = -1;             // with call = eventfd: this eventfd (not owned) instead of a new one
};

class VhostUserFrontend {
public:
    // Connects to the back-end listening on the UNIX socket `path`.
    static Result<VhostUserFrontend> connect(std::string_view path, const VhostUserOptions& opts = {});
    // Uses an already connected stream socket (e.g. one end of a socketpair); `name` names the
    // back-end in messages.
    static Result<VhostUserFrontend> adopt(vfio::UniqueFd socket, std::string name, const VhostUserOptions& opts = {});

    // Move-only: the connection, its eventfds and state move; a moved-from front-end may only
    // be destroyed or assigned to (alive() is false, failure() says EBADF).
    VhostUserFrontend(VhostUserFrontend&&) noexcept = default;
    // Move-only, as above; the connection this one held closes.
    VhostUserFrontend& operator=(VhostUserFrontend&&) noexcept = default;
    VhostUserFrontend(const VhostUserFrontend&) = delete;
    VhostUserFrontend& operator=(const VhostUserFrontend&) = delete;
    ~VhostUserFrontend();

    // The handshake: GET_FEATURES; GET/SET_PROTOCOL_FEATURES and GET_QUEUE_NUM when offered;
    // SET_OWNER; SET_FEATURES with `wanted` & what the back-end offers. Fails, naming the
    // bits, when the back-end lacks one of `required`. Returns the negotiated virtio features
    // (never ACCESS_PLATFORM, never bit 30).
    Result<uint64_t> negotiate(uint64_t wanted, uint64_t required = vhost_user::kFeatureVersion1);

    // Sets up and starts one virtqueue: SET_VRING_NUM, SET_VRING_BASE, SET_VRING_ADDR,
    // SET_VRING_KICK, SET_VRING_CALL (, SET_VRING_ERR), then SET_VRING_ENABLE 1 when protocol
    // features were negotiated (rings start disabled then). Needs set_mem_table() first.
    Result<void> start_vring(const VringConfig& cfg);
    // Stops it: SET_VRING_ENABLE 0 (with protocol features), GET_VRING_BASE. Returns the next
    // available index the back-end would have read (give it to start_vring to resume).
    // DPDK's back-end stops the whole device on GET_VRING_BASE and afterwards serves only
    // vrings that were restarted: stop and start all vrings together.
    Result<uint32_t> stop_vring(uint32_t index);

    // The messages one by one.
    // GET_FEATURES: the virtio feature bits the back-end offers (bit 30 included).
    Result<uint64_t> get_features();
    // SET_FEATURES: `features` as given (bit 30 too, to use protocol features); features()
    // then holds them without bit 30. EIO when the back-end refuses them through REPLY_ACK.
    Result<void> set_features(uint64_t features);
    // GET_PROTOCOL_FEATURES: the kProtocol* bits the back-end offers. ENOTSUP unless the last
    // get_features() had bit 30 (kFeatureProtocolFeatures).
    Result<uint64_t> get_protocol_features();
    // SET_PROTOCOL_FEATURES: takes `features` (not checked against the offer); they show in
    // protocol_features(), and REPLY_ACK, when among them, applies from the next message on.
    Result<void> set_protocol_features(uint64_t features);
    // SET_OWNER: this connection becomes the back-end's owner (before the vring messages).
    Result<void> set_owner();
    Result<uint32_t> get_queue_num();   // queue pairs, for virtio-net back-ends (needs MQ)
    // Regions must not overlap (in guest or user addresses); at most 8.
    Result<void> set_mem_table(std::span<const MemRegion> regions);
    // SET_VRING_NUM: vring `index` (0 to 255) has `size` entries, 1 to 32768 and a power of 2
    // unless RING_PACKED was set with set_features(). EINVAL otherwise. Before set_vring_addr().
    Result<void> set_vring_num(uint32_t index, uint32_t size);
    // Checks each ring lies inside the memory table (the back-end would just leave the ring
    // unusable without a word) and is aligned.
    Result<void> set_vring_addr(uint32_t index, const void* desc, const void* avail, const void* used);
    // SET_VRING_BASE: the next available index the back-end reads on vring `index`. Packed
    // rings: bits 14:0 the index, bit 15 the wrap counter (a new packed ring: 0x8000).
    Result<void> set_vring_base(uint32_t index, uint32_t base);
    // SET_VRING_KICK: vring `index`'s kick eventfd (kick_fd()), made on first use and owned
    // here; Notify::none: none (the back-end polls the ring), and one held is closed.
    Result<void> set_vring_kick(uint32_t index, Notify n = Notify::eventfd);
    // SET_VRING_CALL: the eventfd the back-end signals used buffers on (call_fd()), made on
    // first use and owned here; Notify::none: no notifications (the driver polls).
    Result<void> set_vring_call(uint32_t index, Notify n = Notify::eventfd);
    // The back-end signals used buffers on `eventfd`, which the caller owns and keeps open
    // (several vrings may share one).
    Result<void> set_vring_call_fd(uint32_t index, int eventfd);
    // SET_VRING_ERR: an eventfd the back-end signals vring `index`'s errors on (err_fd()),
    // made on first use and owned here; Notify::none withdraws it.
    Result<void> set_vring_err(uint32_t index, Notify n = Notify::eventfd);
    // SET_VRING_ENABLE: the back-end starts (true) or stops processing vring `index`. ENOTSUP
    // unless bit 30 (protocol features) was in the last set_features().
    Result<void> set_vring_enable(uint32_t index, bool enable);
    // GET_VRING_BASE: stops vring `index`; returns the next available index the back-end would
    // read (packed: bit 15 the wrap counter), for set_vring_base(). EPROTO (the connection
    // then drops) when the reply names another vring.
    Result<uint32_t> get_vring_base(uint32_t index);
    // Device configuration space bytes (needs the CONFIG protocol feature).
    Result<std::vector<uint8_t>> get_config(uint32_t offset, uint32_t size);
    // Virtio device status (needs the STATUS protocol feature).
    Result<void> set_status(uint8_t status);
    // RESET_DEVICE when negotiated, else the deprecated RESET_OWNER. Vrings must be set up
    // anew, and features negotiated again.
    Result<void> reset();

    // Notification eventfds (-1 when not set up). Writing 8 bytes to kick_fd rings the
    // doorbell; call_fd becomes readable when the back-end signals used buffers.
    int kick_fd(uint32_t index) const { return index < vrings_.size() ? vrings_[index].kick.get() : -1; }
    // The eventfd the back-end signals vring `index`'s used buffers on: the one set_vring_call()
    // made, or the caller's from set_vring_call_fd(); -1 when none.
    int call_fd(uint32_t index) const {
        return index >= vrings_.size() ? -1 : vrings_[index].call ? vrings_[index].call.get() : vrings_[index].call_ext;
    }
    // Vring `index`'s error eventfd from set_vring_err(); -1 when none.
    int err_fd(uint32_t index) const { return index < vrings_.size() ? vrings_[index].err.get() : -1; }
    // The doorbell. False when the vring has no kick eventfd or the write failed.
    bool kick(uint32_t index) const noexcept {
        int fd = kick_fd(index);
        uint64_t one = 1;
        return fd >= 0 && ::write(fd, &one, sizeof one) == static_cast<ssize_t>(sizeof one);
    }

    // False once the back-end has gone (hang-up seen now or by an earlier call); checks the
    // socket without blocking.
    bool alive();
    // True when the back-end has hung up: the same check as !alive().
    bool poll_hangup() { return !alive(); }
    // The connection; POLLHUP/POLLRDHUP (EPOLLHUP/EPOLLRDHUP) there means the back-end is gone.
    int socket_fd() const { return sock_.get(); }
    // Why the front-end is dead (empty message while alive).
    Error failure() const;

    // The socket path given to connect(), or the name given to adopt(): how messages name it.
    const std::string& path() const { return path_; }
    // The virtio feature bits of the last get_features() (bit 30 included); 0 before.
    uint64_t backend_features() const { return backend_features_; }
    // The virtio features of the last set_features() without bit 30 (what negotiate()
    // returned); 0 before and after reset().
    uint64_t features() const { return features_; }
    // The kProtocol* bits of the last set_protocol_features(); 0 before and after reset().
    uint64_t protocol_features() const { return protocol_features_; }
    // Queue pairs the back-end serves, from the last get_queue_num(); 0 until known (MQ).
    uint32_t queue_num() const { return queue_num_; }   // 0 until known (MQ)

private:
    struct Vring {
        vfio::UniqueFd kick, call, err;
        int call_ext = -1;   // set_vring_call_fd: the caller's
        uint32_t size = 0;
    };
    VhostUserFrontend(vfio::UniqueFd sock, std::string path, const VhostUserOptions& opts);

    // The transport (.cpp); callers hold `mu_`.
    Result<void> send_msg(vhost_user::Request req, const void* payload, uint32_t size, std::span<const int> fds,
                          bool need_reply);
    Result<void> recv_reply(vhost_user::Request req, void* payload, uint32_t size);
    Result<void> call(vhost_user::Request req, const void* payload, uint32_t size, void* reply, uint32_t reply_size);
    Result<void> command(vhost_user::Request req, const void* payload, uint32_t size, std::span<const int> fds = {});
    Result<void> set_vring_fd(vhost_user::Request req, uint32_t index, Notify n, int external = -1);
    Result<void> check_usable(vhost_user::Request req) const;
    Result<void> need_protocol(vhost_user::Request req, unsigned bit) const;
    Result<void> check_index(vhost_user::Request req, uint32_t index) const;
    bool in_table(uint64_t user_addr, uint64_t len) const;
    Error die(int code, std::string message);
    bool reply_ack() const { return protocol_features_ & (1ull << vhost_user::kProtocolReplyAck); }

    std::unique_ptr<std::recursive_mutex> mu_;   // control calls nest (negotiate, start_vring)
    vfio::UniqueFd sock_;
    std::string path_;
    VhostUserOptions opts_;
    bool dead_ = false;
    Error failure_;
    uint64_t backend_features_ = 0;
    uint64_t features_ = 0;
    uint64_t acked_features_ = 0;   // the last SET_FEATURES, bit 30 included
    uint64_t protocol_features_ = 0;
    uint32_t queue_num_ = 0;
    std::vector<MemRegion> regions_;
    std::vector<Vring> vrings_;
};

}  // namespace vfab::virtio
