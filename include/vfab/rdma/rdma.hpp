// RDMA in user space: reliable connected (RC), unreliable connected (UC) and unreliable datagram
// (UD) queue pairs speaking RoCEv2, over a raw-packet queue pair of any vfab device (docs/rdma.md).
//
//   auto dev = vfab::Device::open("0000:03:00.0");                  // any provider
//   auto port = rdma::Port::create(**dev, {.ipv4 = 0x0a4d0001});     // 10.77.0.1, vfab's own
//   rdma::Cq* cq = *(*port)->create_cq(256);
//   rdma::Qp* qp = *(*port)->create_qp({.qp_type = rdma::QpType::rc, .send_cq = cq, .recv_cq = cq});
//   auto mr = (*port)->pd().register_memory(buf, len, Access::local_write | Access::remote_write);
//   qp->modify(init, mask); qp->modify(rtr, mask); qp->modify(rts, mask);    // as ibv_modify_qp
//   qp->post_send(wrs);  ...  int n = cq->poll(wc);
//
// Progress: the protocol (sending, acknowledging, retransmitting, answering ARP and the peer's
// reads, writes and atomics) runs inside the application's own calls — post_send, post_recv,
// Cq::poll, Port::progress — never on a thread the application did not start. A sleeping
// application waits on a CQ's channel_fd(), which also wakes for received frames and for the
// next retransmission deadline. A passive target (its memory used by a peer while it posts and
// polls nothing) calls Port::progress() from its event loop, or starts the opt-in progress
// thread on a core it names (start_progress_thread).
//
// Frames to the port's own address (a queue pair connected to another of the same port) never
// reach the device: they are handed to the receive side within the port's progress, as an RDMA
// NIC's loopback does.
//
// Remote accesses are checked against the device's memory-registration table (rkey, bounds,
// rights, atomic alignment); a violation is NAKed and nothing is written.
//
// Objects belong to the port: destroy() releases one early (an address handle at a later
// create_ah, once no WR still to be sent names it); the rest go with the port. Each
// QP and CQ is used by one thread at a time; with the progress thread running, every call
// takes the port's lock.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "vfab/dma/protection_domain.hpp"
#include "vfab/rdma/device.hpp"
#include "vfab/rdma/icrc.hpp"
#include "vfab/rdma/link.hpp"
#include "vfab/rdma/verbs.hpp"
#include "vfab/result.hpp"
#include "vfab/vfab.hpp"

namespace vfab::rdma {

struct PortConfig {
    uint32_t ipv4 = 0;            // vfab's own IPv4 address (host order); never a kernel interface's
    uint32_t rx_buffers = 256;    // receive buffers on the raw queue pair
    uint32_t tx_buffers = 256;    // frames in flight on the raw queue pair
    uint32_t max_qp = 256;
    uint32_t arp_timeout_ms = 500;   // per ARP request; a peer is given up after arp_attempts
    uint32_t arp_attempts = 4;
    uint8_t ttl = 64;
    // How ICRCs are computed, for the whole process (icrc.hpp): automatic times folding with
    // PCLMULQDQ against tables once and keeps the faster (an emulator may fold slower).
    Crc32Method crc32 = Crc32Method::automatic;
};

// Counters of one port.
struct PortStats {
    uint64_t rx_frames = 0;        // every frame the raw queue pair received
    uint64_t rx_roce = 0;          // RoCEv2 packets accepted
    uint64_t rx_dropped = 0;       // RoCEv2 packets dropped: malformed, bad ICRC, unknown QP, ...
    uint64_t rx_icrc_errors = 0;
    uint64_t rx_other = 0;         // neither ARP nor RoCEv2 for this port's address
    uint64_t rx_raw = 0;           // frames copied into the raw queue's receives (raw_queue())
    uint64_t rx_raw_missed = 0;    // frames for the raw queue that found no receive posted
    uint64_t tx_frames = 0;
    uint64_t retransmits = 0;      // packets sent again (timeout, NAK, RNR)
    uint64_t naks_sent = 0;
    uint64_t arp_requests = 0;     // sent
    uint64_t arp_replies = 0;      // sent
    uint64_t async_events_lost = 0;
    uint64_t thread_sleeps = 0;    // the progress thread's sleeps until a frame, a deadline or a call
    uint64_t thread_naps = 0;      // its short naps while the program polls (no interrupt armed)
};

class Cq {
public:
    // Runs the port's progress, then returns up to out.size() completions (-ENODEV once destroyed).
    virtual int poll(std::span<Wc> out) noexcept = 0;
    // Requests one notification on channel_fd() for the next completion (solicited_only: the
    // next solicited receive or error), as ibv_req_notify_cq.
    virtual Result<void> arm(bool solicited_only = false) = 0;
    // Readable after arm() when a completion may be waiting, when a frame arrived, or when a
    // retransmission deadline passed: the caller then calls take_events() and poll().
    virtual int channel_fd() const noexcept = 0;
    // Clears the channel, runs progress; the number of completion notifications since the last call.
    virtual uint64_t take_events() noexcept = 0;
    // A function called (with `ctx`) each time an armed CQ notifies, besides channel_fd()
    // becoming readable: from whichever thread runs the port's progress, under the port's lock,
    // so it must be short and must not call into the port. A verbs library's completion
    // channels hang on it. nullptr removes it.
    virtual void set_notify_hook(void (*hook)(void* ctx), void* ctx) noexcept = 0;
    // Completions lost because the queue was full (ibv's CQ overrun): size a CQ for every WR
    // that can complete on it; a non-zero count means the application missed completions.
    virtual uint64_t overruns() const noexcept = 0;
    // An overrun raises AsyncEventType::cq_error once and puts the CQ's queue pairs in error
    // (IB spec 11.4.2.1: the completions are lost); with `on`, completions beyond the room are
    // dropped and counted only (ibv's IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN).
    virtual void set_ignore_overrun(bool on) noexcept = 0;
    // ibv_resize_cq: room for `cqe` completions (1 to 2^20, rounded up to a power of 2), the ones
    // waiting kept in order; the room it has now. EINVAL: out of range, or fewer than wait.
    virtual Result<uint32_t> resize(uint32_t cqe) = 0;
    // EBUSY while a queue pair uses it.
    virtual Result<void> destroy() = 0;
    Cq(const Cq&) = delete;
    Cq& operator=(const Cq&) = delete;

protected:
    Cq() = default;
    virtual ~Cq() = default;
};

// A shared receive queue (ibv_srq, IB spec 10.2.9): receive WRs that any queue pair made with
// it takes, oldest first, when a SEND (or a WRITE with immediate) arrives; an RC peer finding it
// empty is told to wait (RNR NAK) as with a queue pair's own receive queue. Its completions go
// to the CQ of the queue pair that took the WR (Wc::qp_num says which).
class Srq {
public:
    // ibv_post_srq_recv: the keys are checked now; a bad one, more SGEs than max_sge or a full
    // queue fail that WR (EINVAL, EINVAL, ENOMEM) and post nothing from it on.
    virtual PostResult post_recv(std::span<const RecvWr> wrs) noexcept = 0;
    // ibv_modify_srq: srq_attr_max_wr makes the queue deeper (it never shrinks: EINVAL);
    // srq_attr_limit arms the limit: when a queue pair takes a WR and fewer than srq_limit stay
    // posted, the port raises AsyncEventType::srq_limit_reached once and the limit goes back to 0.
    virtual Result<void> modify(const SrqAttr& attr, uint32_t mask) = 0;
    // ibv_query_srq: its depth (max_wr), SGEs per WR and the armed limit (0: not armed, as
    // after the limit event fired).
    virtual SrqAttr query() const = 0;
    // ibv_get_srq_num: the number an XRC sender names (RdmaSendWr::remote_srqn) to reach it.
    virtual uint32_t srq_num() const noexcept = 0;
    // EBUSY while a queue pair uses it. Its posted WRs are dropped, as ibv_destroy_srq.
    virtual Result<void> destroy() = 0;
    Srq(const Srq&) = delete;
    Srq& operator=(const Srq&) = delete;

protected:
    Srq() = default;
    virtual ~Srq() = default;
};

// An XRC domain (ibv_xrcd, docs/rdma-xrc.md): the XRC SRQs and XRC receive queue pairs that
// belong together — a message to an XRC receive QP may land only in an XRC SRQ of its domain.
class XrcDomain {
public:
    // EBUSY while an XRC SRQ or queue pair uses it.
    virtual Result<void> destroy() = 0;
    XrcDomain(const XrcDomain&) = delete;
    XrcDomain& operator=(const XrcDomain&) = delete;

protected:
    XrcDomain() = default;
    virtual ~XrcDomain() = default;
};

struct RdmaQpInitAttr {
    QpType qp_type = QpType::rc;
    Cq* send_cq = nullptr;
    Cq* recv_cq = nullptr;
    Srq* srq = nullptr;       // receives from this SRQ; cap.max_recv_wr and max_recv_sge are then unused
    XrcDomain* xrcd = nullptr;   // xrc_recv: its domain (it has no CQs or queues of its own)
    RdmaQpCaps cap = {};
    bool sq_sig_all = false;
    uint32_t create_flags = 0;   // RdmaQpCreateFlags
};

class Qp {
public:
    // ibv_modify_qp: the attributes `mask` names (QpAttrMask), with the state transitions and
    // required attributes of IB spec 11.2.5 (table 91); an error says what is missing.
    virtual Result<void> modify(const QpAttr& attr, uint32_t mask) = 0;
    // ibv_query_qp: the attributes modify() set so far, with the current state in qp_state.
    virtual QpAttr query() const = 0;
    // ibv_post_send; packets start leaving within the call. EINVAL: a WR its type or state
    // (before RTS) cannot take, too many SGEs or inline bytes, UD without a live AH; ENOMEM: the
    // send queue is full; ENODEV: destroyed. A bad lkey fails the WR in its completion
    // (LOC_PROT_ERR) and the QP with it. Non-inline buffers are in use until the WR completes.
    virtual PostResult post_send(std::span<const RdmaSendWr> wrs) noexcept = 0;
    // ibv_post_recv: EINVAL in RESET, with an SRQ or XRC (post to the SRQ), or more SGEs than
    // max_recv_sge; ENOMEM: the queue is full; ENODEV: destroyed. A bad lkey fails the WR in its
    // completion (LOC_PROT_ERR) and the QP with it.
    virtual PostResult post_recv(std::span<const RecvWr> wrs) noexcept = 0;
    // Its QP number: what the peer sets as dest_qp_num (RC, UC) or remote_qpn (UD).
    virtual uint32_t qp_num() const noexcept = 0;
    // The type it was created with (RdmaQpInitAttr::qp_type).
    virtual QpType type() const noexcept = 0;
    // The current state: modify() moves it; a failed WR or exhausted retries move it to error.
    virtual RdmaQpState state() const noexcept = 0;
    // ibv_bind_mw: binds the type 1 window `mw_key` as `info` says, through this queue pair's
    // send queue (a BIND_MW completion when signalled); the window's new key (next_key(mw_key)).
    // Type 2B windows are bound by a BIND_MW work request instead.
    virtual Result<uint32_t> bind_mw(uint32_t mw_key, const MwBindInfo& info, uint64_t wr_id, uint32_t send_flags) = 0;
    // ibv_attach_mcast / ibv_detach_mcast: a UD queue pair receives the datagrams sent to the
    // multicast group `gid` (IPv4-mapped, ::ffff:224.0.0.0/4) with QPN 0xFFFFFF — from the wire
    // and from this port's own queue pairs (unless it was made with
    // qp_create_block_self_mcast_lb and sent them itself). The port asks its device to pass the
    // group's frames up. `lid` is unused on RoCE. docs/rdma-multicast.md.
    virtual Result<void> attach_mcast(const Gid& gid, uint16_t lid) = 0;
    // Leaves the group; the device stops passing it up once no queue pair of the port is in
    // it. EINVAL: not an IPv4-mapped multicast GID, or not in that group; ENODEV: destroyed.
    virtual Result<void> detach_mcast(const Gid& gid, uint16_t lid) = 0;
    // Outstanding WRs are dropped, as ibv_destroy_qp; its multicast groups are left.
    virtual Result<void> destroy() = 0;
    Qp(const Qp&) = delete;
    Qp& operator=(const Qp&) = delete;

protected:
    Qp() = default;
    virtual ~Qp() = default;
};

// Which received frames a raw-packet queue pair gets (struct ibv_flow_attr and its specs, as
// the transport matches them; docs/rdma-raw-packet.md). A field takes part where its mask has
// bits: (field of the frame & mask) == (value & mask). Multi-byte values in host order.
struct FlowRule {
    enum class Kind : uint8_t {
        normal,        // the matching rule of the lowest priority number takes the frame
        all_default,   // unicast frames no normal rule took
        mc_default,    // multicast and broadcast frames no normal rule took
        sniffer,       // a copy of every received frame, RoCE included; the others still steer
    } kind = Kind::normal;
    uint16_t priority = 0;
    uint8_t dst_mac[6] = {}, dst_mac_mask[6] = {};
    uint8_t src_mac[6] = {}, src_mac_mask[6] = {};
    uint16_t ether_type = 0, ether_type_mask = 0;   // the inner one behind an 802.1Q tag
    uint16_t vlan_tag = 0, vlan_tag_mask = 0;       // the TCI; a mask on an untagged frame fails
    uint32_t src_ip = 0, src_ip_mask = 0, dst_ip = 0, dst_ip_mask = 0;   // IPv4: the frame must be IPv4
    uint8_t ip_proto = 0, ip_proto_mask = 0;        // 6 for TCP, 17 for UDP
    uint16_t src_port = 0, src_port_mask = 0, dst_port = 0, dst_port_mask = 0;   // TCP or UDP
};

// A flow (ibv_flow): a rule steering frames to one raw-packet queue pair.
class Flow {
public:
    // ibv_destroy_flow: frames stop coming through it. ENODEV when already destroyed.
    virtual Result<void> destroy() = 0;
    Flow(const Flow&) = delete;
    Flow& operator=(const Flow&) = delete;

protected:
    Flow() = default;
    virtual ~Flow() = default;
};

// An asynchronous event (struct ibv_async_event): what happened and to which object.
struct AsyncEvent {
    AsyncEventType type = AsyncEventType::srq_limit_reached;
    Qp* qp = nullptr;     // the qp_* events and comm_est
    Srq* srq = nullptr;   // srq_limit_reached
    Cq* cq = nullptr;     // cq_error
};                        // port_active, port_error: the port's own (no object)

// A UD destination (ibv_create_ah): ARP for its MAC starts when it is made, and it keeps the MAC
// once known (following the peer when it announces a new one).
class AddressHandle {
public:
    // The attributes it was created with.
    virtual const AhAttr& attr() const noexcept = 0;
    // ibv_destroy_ah: WRs already posted still go; the port frees it at a later create_ah once
    // no WR still to be sent names it, so, as after ibv_destroy_ah, it is not to be used again
    // (until then, post_send naming it fails with EINVAL and destroy() with ENODEV).
    virtual Result<void> destroy() = 0;
    // The destination's MAC, resolved as a RoCE device's ibv_create_ah resolves it before it
    // returns (Port::create_ah starts ARP; the handle keeps the MAC once known): waits until
    // ARP answered (ok), gave up (EHOSTUNREACH: PortConfig::arp_attempts requests unanswered,
    // arp_timeout_ms apart; the port then answers EHOSTUNREACH for that address for up to a
    // second) or `limit_ms` passed (ETIMEDOUT), running progress() itself when no progress
    // thread runs. Multicast groups and the port's own address need no ARP. The peer answers
    // ARP only while its port progresses: a peer program without the progress thread that
    // makes no call for that long is not found. Without the wait, a UD send naming a handle
    // still resolving waits in its send queue and its buffer is read when it leaves, as verbs
    // allows; programs that reuse a send buffer before its completion — UCX's UD connection
    // set-up does (docs/hpc.md) — need it.
    virtual Result<void> wait_resolved(uint32_t limit_ms) = 0;
    AddressHandle(const AddressHandle&) = delete;
    AddressHandle& operator=(const AddressHandle&) = delete;

protected:
    AddressHandle() = default;
    virtual ~AddressHandle() = default;
};

// How the opt-in progress thread runs (Port::start_progress_thread).
struct ProgressThreadOptions {
    int cpu = -1;   // the CPU it is pinned to; -1: not pinned
    // It busy-polls while there is work; after this many microseconds without any it sleeps
    // until a frame arrives (the device's receive interrupt), a deadline is due or a call of
    // the application gives it work — unless the application made 16 calls or more in that
    // time (it busy-polls, running the progress itself): then the thread naps 1 ms and looks
    // again, without arming the interrupt, until the application stops calling or arms a CQ.
    // 0: it never sleeps (a core spent on the lowest latency).
    uint32_t sleep_after_us = 0;
};

class Port {
public:
    // An RDMA port over `dev` (which must outlive it): one raw queue pair of the device (the
    // port's own), receive and send buffers in the device's protection domain, answering ARP
    // for cfg.ipv4. Frames that are neither ARP nor RoCEv2 for this address are counted and
    // dropped.
    static Result<std::unique_ptr<Port>> create(vfab::Device& dev, const PortConfig& cfg);
    // The same over any raw link (link.hpp); create_port() below makes one for a direct device.
    static Result<std::unique_ptr<Port>> create(std::unique_ptr<RawLink> link, const PortConfig& cfg);
    virtual ~Port() = default;

    virtual Gid gid() const noexcept = 0;              // ::ffff:<ipv4>; GID index 0 of the port
    virtual uint32_t active_mtu() const noexcept = 0;  // enum ibv_mtu: the largest path MTU the link carries
    virtual dma::ProtectionDomain& pd() = 0;           // the device's: keys of local and remote accesses
    // ibv_query_device: the limits, the verbs' capability flags and vfab's own (device.hpp).
    virtual DeviceCaps query_device() const = 0;

    // ibv_create_cq: room for `cqe` completions (1 to 2^20, rounded up to a power of 2).
    // EINVAL: cqe out of range; ENOSPC: the port has 65536 CQs; eventfd's or epoll's errno.
    virtual Result<Cq*> create_cq(uint32_t cqe) = 0;
    // ibv_create_qp: a queue pair in RESET. EINVAL: another type, CQs/SRQ/domain not of this
    // port or not as its type needs, unknown create_flags, caps out of range (WRs 1 to 16384,
    // SGEs 1 to 32, inline up to 4096 bytes); ENOSPC: PortConfig::max_qp queue pairs live.
    virtual Result<Qp*> create_qp(const RdmaQpInitAttr& attr) = 0;
    // The port's QP1 (GSI, IB spec 13.5.1): a UD queue pair numbered 1 whose datagrams carry the
    // well-known Q_Key 0x80010000 (its own, whatever modify gives), for management datagrams —
    // the connection manager's MADs (docs/cm.md). `attr` as create_qp's, qp_type UD. EBUSY: the
    // port has its QP1 already (destroy it first).
    virtual Result<Qp*> create_qp1(const RdmaQpInitAttr& attr) = 0;
    // ibv_create_flow: frames matching `rule` go to `qp`, a raw-packet queue pair of this port
    // (a raw-packet queue pair receives nothing until a flow names it). EINVAL: not such a
    // queue pair, a mask on a field the rule's kind cannot use; ENOSPC: 1024 flows live.
    virtual Result<Flow*> create_flow(Qp* qp, const FlowRule& rule) = 0;
    // ibv_create_ah, ARP for the destination started (AddressHandle::wait_resolved). EINVAL:
    // attr.dgid is not IPv4-mapped; ENOSPC: 65536 handles live.
    virtual Result<AddressHandle*> create_ah(const AhAttr& attr) = 0;
    // ibv_create_srq: attr.max_wr WRs (1 to 16384) of attr.max_sge SGEs (1 to 32), the limit armed
    // when attr.srq_limit is not 0.
    virtual Result<Srq*> create_srq(const SrqAttr& attr) = 0;
    // XRC (docs/rdma-xrc.md): a domain (ibv_open_xrcd), and an XRC SRQ in it whose receive
    // completions go to `cq` (ibv_create_srq_ex with IBV_SRQT_XRC).
    virtual Result<XrcDomain*> create_xrcd() = 0;
    // The XRC SRQ, with create_srq()'s limits and errors; EINVAL too when xrcd or cq is not
    // this port's. Messages reach it through an XRC receive queue pair of the same domain.
    virtual Result<Srq*> create_xrc_srq(const SrqAttr& attr, XrcDomain* xrcd, Cq* cq) = 0;

    // Asynchronous events (ibv_get_async_event): the progress of the application's calls raises
    // them; async_fd() is readable while one waits. The next event, false when none; events
    // beyond 256 unread ones are counted in PortStats::async_events_lost.
    virtual bool get_async_event(AsyncEvent& out) noexcept = 0;
    // An eventfd, readable while an event waits (poll it; get_async_event() drains it). The
    // port owns it.
    virtual int async_fd() const noexcept = 0;
    // What set_async_hook() calls for each event.
    using AsyncHook = void (*)(void* ctx, const AsyncEvent& e);
    // Instead of queuing them for get_async_event(), hand each event to `hook` (with `ctx`) as it
    // is raised: from whichever thread runs the progress, under the port's lock, so the hook
    // must be short and must not call into the port (a verbs library routes them to the
    // contexts that own the objects). nullptr: queue them again.
    virtual void set_async_hook(AsyncHook hook, void* ctx) noexcept = 0;

    // Runs the protocol once: received frames, due timers, frames waiting to be sent. The
    // amount of work done (0: nothing was waiting).
    virtual int progress() noexcept = 0;
    // The opt-in progress thread for passive targets: it runs progress() in a loop on `cpu`
    // (-1: no pinning) until stop_progress_thread() or the port goes.
    virtual Result<void> start_progress_thread(int cpu) = 0;
    // The same with its options (ProgressThreadOptions): pinning and sleeping when idle.
    virtual Result<void> start_progress_thread(const ProgressThreadOptions& opts) = 0;
    // Stops the progress thread and joins it (nothing when none runs); calls then no longer
    // take the port's lock, unless share_between_threads() said so.
    virtual void stop_progress_thread() = 0;
    // For a program that calls on the port's objects from several threads of its own (posting
    // from one, polling from another): every call takes the port's lock from now on, as while
    // the progress thread runs. Without it (and without the thread) nothing is locked, and
    // calls on one port from two threads at once corrupt its state. Call it before a second
    // thread uses the port.
    virtual void share_between_threads() noexcept = 0;

    // A copy of the port's counters, cumulative since create().
    virtual PortStats stats() const = 0;

    // Raw Ethernet frames beside RDMA on the port's device queue (the same interfaces as a
    // provider's raw queue pair and CQ): frames that are not RoCEv2 for the port's address —
    // and every ARP frame — are copied into receives posted on `qp`; frames posted on `qp`
    // leave with the port's (one copy each way). Made on the first call (`depth` WRs each
    // way, at least 8), the same pair afterwards; it goes with the port. Without it those
    // frames are counted (rx_other) and dropped.
    struct RawQueue {
        vfab::QueuePair* qp = nullptr;
        vfab::CompletionQueue* cq = nullptr;
    };
    // The raw queue described above. EINVAL: on the first call, `depth` not 8 to 16384; later
    // calls return the same pair whatever `depth`. The port owns both.
    virtual Result<RawQueue> raw_queue(uint32_t depth = 256) = 0;

    // A test hook: received frames for which `drop(ctx, frame, len)` returns true are dropped
    // before the transport sees them (loss injection). nullptr removes it.
    using DropHook = bool (*)(void* ctx, const uint8_t* frame, uint32_t len);
    // Sets the receive hook (`ctx` passed back to it); its drops still count in rx_frames.
    // Not synchronised with the progress thread: set it before start_progress_thread().
    virtual void set_rx_drop_hook(DropHook drop, void* ctx) = 0;
    // The same for frames about to be sent (they are counted as sent and never leave).
    virtual void set_tx_drop_hook(DropHook drop, void* ctx) = 0;

    Port(const Port&) = delete;
    Port& operator=(const Port&) = delete;

protected:
    Port() = default;
};

// The direct form: a port over one driver's device of the direct API (e.g. e1000e::Device
// from vfab/drivers/e1000e.hpp, which must outlive it), without libvfab: the raw queue pair's
// post and poll are the driver's inline fast path, compiled here.
template <class Dev>
Result<std::unique_ptr<Port>> create_port(Dev& dev, const PortConfig& cfg) {
    return Port::create(std::make_unique<DeviceLink<Dev>>(dev), cfg);
}

}  // namespace vfab::rdma
