// vfab's virtio-net driver (virtio 1.x), direct API: the same shape as the e1000e driver
// (Device, CompletionQueue, QueuePair; fast path inline, no virtual call), over split or
// packed virtqueues chosen by negotiation (DeviceOptions::ring overrides). One device class
// over two transports (drivers/virtio/transport.hpp): VFIO/PCI (Device::open) and vhost-user
// (Device::open_vhost_user: a back-end process serves the virtqueues, no VM), with one fast
// path: only the doorbell (MMIO store or kick eventfd) and the completion channel (MSI-X or
// call eventfd) differ.
//
// Every frame is a chain: a 12-byte virtio_net_hdr the driver owns (one per WR slot, in DMA
// memory) followed by the user's SGEs, translated through the MR table — zero copy both ways.
// With QpInitAttr::hdr_in_headroom the header sits in the kNetHdrSize bytes the application
// keeps free before each WR's first SGE (as DPDK uses the mbuf's headroom): a one-SGE frame is
// one descriptor. Completions are delivered in the order WRs were posted, whatever order the
// device uses.
#pragma once

#include <array>
#include <bit>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "vfab/pci_id.hpp"
#include "vfab/dma/dma_arena.hpp"
#include "vfab/dma/protection_domain.hpp"
#include "vfab/drivers/common/completion_queue.hpp"
#include "vfab/drivers/common/stat_counter.hpp"
#include "vfab/drivers/virtio/packed_queue.hpp"
#include "vfab/drivers/virtio/split_queue.hpp"
#include "vfab/drivers/virtio/virtio_spec.hpp"
#include "vfab/net/checksum.hpp"
#include "vfab/types.hpp"
#include "vfab/vfio/device_options.hpp"

namespace vfab::virtio {
class Transport;
}
namespace vfab::virtio_net {

// The devices this driver drives: modern virtio-net only (virtio 1.2 §4.1.2.1, 0x1040 + 1);
// transitional 0x1000 is refused. The one list: the driver's check, the provider registry and
// vfio-devctl read it.
inline constexpr PciId kPciIds[] = {{0x1af4, 0x1041}};
inline constexpr uint32_t kMaxSendSge = 8;
inline constexpr uint32_t kMaxRecvSge = 4;
inline constexpr uint32_t kEthHeader = 14;
inline constexpr uint32_t kHdrSlot = 16;              // bytes per virtio_net_hdr slot
// The virtio_net_hdr's size (§5.1.6, VERSION_1): the headroom QpInitAttr::hdr_in_headroom needs.
inline constexpr uint32_t kNetHdrSize = sizeof(virtio::NetHdr);

enum class RingFormat : uint8_t { automatic, split, packed };
const char* to_string(RingFormat f) noexcept;

struct DeviceOptions {
    vfio::DeviceOptions vfio;
    RingFormat ring = RingFormat::automatic;   // automatic: packed when the device offers it
    bool event_idx = true;                     // negotiate VIRTIO_F_EVENT_IDX when offered
    bool in_order = true;                      // negotiate VIRTIO_F_IN_ORDER when offered
    dma::PdOptions pd;
    // The MAC address of a device that has none of its own (VIRTIO_NET_F_MAC not offered, or
    // not carried: vhost-user back-ends such as DPDK's); default kDefaultVhostMac, a locally
    // administered address. Ignored when the device has one (virtio-net over PCI).
    std::optional<std::array<uint8_t, 6>> mac;
    // The largest frame is mtu + 14 bytes; receive buffers must hold as much (0: 1500). Up to
    // kMaxMtu: frames longer than 1514 bytes ("jumbo") for links and peers that carry them.
    uint32_t mtu = 0;
};
inline constexpr uint32_t kDefaultMtu = 1500;
inline constexpr uint32_t kMaxMtu = 9000;

inline constexpr std::array<uint8_t, 6> kDefaultVhostMac = {0x02, 0x76, 0x66, 0x61, 0x62, 0x01};
// Over vhost-user a completion queue that polls nothing this many times in a row checks
// whether the back-end hung up (one poll(2)), so that a busy-polling application sees its
// queues fail rather than wait forever.
inline constexpr uint32_t kHangupCheckPolls = 4096;

class Device;
class DeviceState;
class QueuePair;

class CompletionQueue final : public queue::CompletionQueueCore<QueuePair> {
public:
    // Up to out.size() completions, oldest first per queue; -ENODEV once destroyed. Over
    // vhost-user, an idle queue now and then checks that the back-end is still there.
    int poll(std::span<Completion> out) noexcept;
    // Requests one notification on channel_fd() for the next completion: turns on used-buffer
    // notifications of the virtqueues it polls (§2.7.7, §2.8.10). A completion already waiting,
    // or a queue pair out of the ready state, signals the channel at once. Not concurrently
    // with poll(). ENODEV when destroyed or of no device.
    Result<void> arm();
    // Reads and clears the channel, and turns the queues' notifications off until arm().
    uint64_t take_events() noexcept;
    // Frees its completion channel for another create_cq(). EBUSY while a queue pair uses it;
    // ENODEV when already destroyed or of no device. The object lives until the device closes
    // (poll() then returns -ENODEV).
    Result<void> destroy();
    // A completion queue of no device, for a queue pair over rings in plain memory (bench/'s
    // device model): poll() works; arm() and destroy() return ENODEV.
    CompletionQueue() = default;

private:
    friend class Device;
    friend class DeviceState;
    friend class QueuePair;
    friend struct queue::Control;
    CompletionQueue(Device& dev, uint32_t cqe, uint32_t vector, int efd, bool polls_for_gone)
        : CompletionQueueCore(cqe, vector, efd), dev_(&dev), polls_for_gone_(polls_for_gone) {}
    void check_gone() noexcept;   // vhost-user: has the back-end hung up?

    Device* dev_ = nullptr;
    bool polls_for_gone_ = false;   // the transport has no interrupt for removal
    uint32_t idle_polls_ = 0;
};

struct QpInitAttr {
    CompletionQueue* send_cq = nullptr;
    CompletionQueue* recv_cq = nullptr;
    QpCaps caps = {};
    bool sq_sig_all = false;
    // The application keeps the kNetHdrSize bytes before every WR's first SGE free, inside the
    // same memory region: the driver writes the virtio_net_hdr there for a send, the device
    // writes it there for a receive (which therefore needs LOCAL_WRITE on them too). A frame of
    // one SGE is then one descriptor instead of two (§2.7.4/§5.1.6: any layout, VERSION_1), the
    // queues hold twice the WRs and the back-end takes its fast paths. A WR whose headroom
    // lies outside its MR completes with local_protection_error.
    bool hdr_in_headroom = false;
};

// A queue pair's virtqueues and the memory of its virtio-net headers (one kHdrSlot per
// descriptor of each queue, at hdrs and, for the device, hdr_iova): built by create_qp in DMA
// memory and by bench/'s device model in plain memory (IOVA = VA). Q: virtio::SplitQueue or
// virtio::PackedQueue.
template <class Q>
struct QueueRings {
    Q rx, tx;
    uint8_t* rx_hdrs = nullptr;
    uint64_t rx_hdr_iova = 0;
    uint8_t* tx_hdrs = nullptr;
    uint64_t tx_hdr_iova = 0;
    virtio::Doorbell rx_bell = {}, tx_bell = {};
    const dma::MrTable* mrs = nullptr;
    QpCaps caps = {};
    bool hdr_in_headroom = false;   // QpInitAttr::hdr_in_headroom (then no hdrs are needed)
};

class QueuePair final {
public:
    // A queue pair of no device over virtqueues in memory the caller owns, completing on `cq`
    // (bench/'s device model); destroy() returns ENODEV.
    QueuePair(QueueRings<virtio::SplitQueue>&& rings, CompletionQueue& cq);
    // The same over packed virtqueues.
    QueuePair(QueueRings<virtio::PackedQueue>&& rings, CompletionQueue& cq);

    // Queues frames to send (see PostResult); a bad lkey completes with local_protection_error.
    // EINVAL also for a frame under 14 or over attr().mtu + 14 bytes, an empty SGE, send_ip_csum
    // without VIRTIO_NET_F_CSUM or TCP/UDP headers in the first SGE (it writes the IPv4 and
    // pseudo-header sums into the frame). Fast path: no allocation, no lock; one doorbell at
    // most, when the device asks (an MMIO store; over vhost-user a write(2)).
    PostResult post_send(std::span<const SendWr> wrs) noexcept {
        if (headroom_) return packed_ ? send_impl<true>(*ptx_, wrs) : send_impl<true>(*stx_, wrs);
        return packed_ ? send_impl<false>(*ptx_, wrs) : send_impl<false>(*stx_, wrs);
    }
    // Queues receive buffers, each for one whole frame (see PostResult): EINVAL under
    // attr().recv_buffer_size bytes or with an empty SGE; an lkey that is bad or lacks
    // LOCAL_WRITE completes with local_protection_error. The 12-byte virtio_net_hdr goes to
    // the driver's own memory, or before the first SGE (QpInitAttr::hdr_in_headroom). Fast
    // path, as post_send().
    PostResult post_recv(std::span<const RecvWr> wrs) noexcept {
        if (headroom_) return packed_ ? recv_impl<true>(*prx_, wrs) : recv_impl<true>(*srx_, wrs);
        return packed_ ? recv_impl<false>(*prx_, wrs) : recv_impl<false>(*srx_, wrs);
    }
    // ready; error after a removal, a fatal error or reset(), when the device returned a
    // buffer it was not given (its virtqueue broke), or when destroying another queue pair
    // restarted the device while this one had WRs outstanding (they flush: destroy it);
    // destroyed.
    QpState state() const noexcept { return state_.load(std::memory_order_relaxed); }
    // Its number in completions (Completion::qp_num): queue() + 1.
    uint32_t qp_num() const noexcept { return qp_num_; }   // queue() + 1
    // The queue pair's index on the device (receiveq = 2 * queue(), transmitq = that + 1);
    // RssConfig::table names queue pairs by it.
    uint32_t queue() const noexcept { return queue_; }
    // Frames and bytes of its successful completions, counted as poll() retires them (signaled
    // or not); readable from any thread.
    QpStats stats() const noexcept {
        return {tx_packets_.get(), tx_bytes_.get(), rx_packets_.get(), rx_bytes_.get()};
    }
    // What it was created with, rounded up: WRs each way are its virtqueue's size (a power of
    // 2) divided by the SGEs + 1 (a descriptor per SGE and one for the header; with
    // hdr_in_headroom by the SGEs).
    const QpCaps& caps() const noexcept { return caps_; }
    // split or packed: the format of its virtqueues.
    RingFormat ring_format() const noexcept { return packed_ ? RingFormat::packed : RingFormat::split; }
    // Whether the virtio_net_hdr goes into the application's headroom (QpInitAttr).
    bool hdr_in_headroom() const noexcept { return headroom_; }
    // Send WRs posted that poll() has not retired yet (signaled or not).
    uint32_t send_outstanding() const noexcept { return sq_.tail - sq_.head; }
    // Receive WRs posted that poll() has not retired yet.
    uint32_t recv_outstanding() const noexcept { return rq_.tail - rq_.head; }
    // Stops its virtqueues and frees them; outstanding WRs are dropped. Virtio cannot stop one
    // queue: the device restarts, and other queue pairs with WRs outstanding go to the error
    // state. ENODEV when already destroyed or of no device; the object lives until the device
    // closes.
    Result<void> destroy();

private:
    friend class Device;
    friend class DeviceState;
    friend class CompletionQueue;
    friend class queue::CompletionQueueCore<QueuePair>;
    // The three fields a post sets to constants are adjacent: one store.
    // status, done, flags and byte_len lie as a Completion's status, opcode, flags and byte_len
    // do: retire() copies the eight bytes as one word, the opcode put in done's place.
    struct Slot {
        uint64_t wr_id;
        WcStatus status;
        bool done;      // the device returned it (or it never went to the device)
        uint16_t flags; // completion flags
        uint32_t byte_len;
        // A send's flags (their low byte, sq_sig_all's send_signaled included): a success
        // completes with send_signaled. A receive has it always.
        uint8_t send_flags;
    };
    // WRs in posting order; slot i also owns header i in DMA memory. With IN_ORDER the WRs
    // from head to returned are done, waiting for a poll to retire them, and `unsent` of those
    // after it are too: WRs with a bad key, which never went to the device.
    struct WorkRing {
        std::vector<Slot> slots;
        uint32_t mask = 0, head = 0, tail = 0, returned = 0, unsent = 0;
        uint8_t* hdrs = nullptr;
        uint64_t hdr_iova = 0;
        Slot& at(uint32_t i) noexcept { return slots[i & mask]; }
    };
    // A post's positions, in registers while it queues WRs: a slot's or descriptor's store may
    // alias any member, and a packed ring's flags store orders every store before it, so WRs
    // queued on the members reload and store them each (begin_post(), end_post()). Only what
    // changes per WR: more spills at the post's start and costs batches of one.
    template <class Q>
    struct Posting {
        typename Q::AddCursor adds;
        uint32_t tail;
    };
    template <class Q>
    static Posting<Q> begin_post(Q& q, const WorkRing& ring) noexcept {
        return {q.begin_adds(), ring.tail};
    }
    template <class Q>
    static void end_post(Q& q, WorkRing& ring, const Posting<Q>& p) noexcept {
        q.end_adds(p.adds);
        ring.tail = p.tail;
    }
    QueuePair(Device& dev, const QpInitAttr& a, uint32_t queue)
        : dev_(&dev), send_cq_(a.send_cq), recv_cq_(a.recv_cq), qp_num_(queue + 1), queue_(queue) {}
    // Control path: takes the virtqueues, sizes the WR rings to them and points each at its headers.
    template <class Q>
    void attach_rings(QueueRings<Q>&& r);
    bool idle() const noexcept { return sq_.head == sq_.tail && rq_.head == rq_.tail; }
    struct Gathered {
        uint64_t total = 0;
        uint64_t hdr_host = 0;   // hdr_in_headroom: the CPU's address of the header
        bool zero_sge = false;
        bool bad_key = false;
    };
    // H: the header in the headroom (headroom_), a template argument so that the per-WR code
    // has no branch on it; post_send/post_recv pick the instance once per call.
    template <bool H>
    Gathered gather(const Sge* sgl, uint32_t n, bool device_writes, virtio::Buffer* out) const noexcept;
    template <bool H, class Q>
    void enqueue(Q& q, Posting<Q>& p, const WorkRing& ring, virtio::Buffer* bufs, uint32_t nsge, bool device_writes) noexcept;
    void complete_used(WorkRing& ring, uint32_t token, uint32_t len, bool recv) noexcept;
    // The virtqueue broke (the device returned a buffer it was not given): from the ready state
    // to the error state, so that the next poll flushes the WRs (the device needs a reset).
    [[gnu::cold, gnu::noinline]] void fail_broken() noexcept {
        QpState ready = QpState::ready;
        state_.compare_exchange_strong(ready, QpState::error, std::memory_order_relaxed);
    }
    static void set_received(Slot& s, uint32_t len) noexcept;
    static void set_flushed(Slot& s, bool recv) noexcept;
    template <class Q>
    static void publish(Q& q, const virtio::Doorbell& bell) noexcept;
    // Checked: whether the WR slots and descriptors may run out (else the caller made sure
    // they cannot: post_room()).
    template <bool H, bool Checked, class Q>
    int send_one(Q& q, Posting<Q>& p, const SendWr& wr, uint32_t nsge) noexcept;
    template <bool H, bool Checked, class Q>
    int recv_one(Q& q, Posting<Q>& p, const RecvWr& wr, uint32_t nsge) noexcept;
    // How many one-SGE WRs surely find a slot in `ring` and their descriptors in `q` (one, or
    // two with the header apart): a post queues that many without a check each, then looks
    // again (a bad key takes a slot and no descriptor; a WR of other than one SGE checks
    // itself).
    template <bool H, class Q>
    static uint32_t post_room(const Q& q, const WorkRing& ring) noexcept {
        return std::min(ring.mask + 1 - (ring.tail - ring.head), q.free_count() / (H ? 1 : 2));
    }
    // A WR of other than one SGE (or none), or any WR when post_room() found none: its checks
    // and send_one/recv_one for it, out of line so that the loop for the usual one-SGE WR
    // keeps its registers.
    template <bool H, class Q>
    int send_other(Q& q, const SendWr& wr) noexcept;
    template <bool H, class Q>
    int recv_other(Q& q, const RecvWr& wr) noexcept;
    template <bool H, class Q, class Wr, class One, class Other>
    PostResult post_loop(Q& q, WorkRing& ring, std::span<const Wr> wrs, One&& one, Other&& other) noexcept;
    template <bool H, class Q>
    PostResult send_impl(Q& q, std::span<const SendWr> wrs) noexcept;
    template <bool H, class Q>
    PostResult recv_impl(Q& q, std::span<const RecvWr> wrs) noexcept;
    template <bool Recv, class Q>
    [[gnu::noinline]] uint32_t poll_ring(Q& q, Completion* out, uint32_t max) noexcept;
    template <bool Recv, class Q>
    [[gnu::noinline]] uint32_t poll_in_order(Q& q, Completion* out, uint32_t max) noexcept;
    template <bool Recv, class Q>
    [[gnu::always_inline]] void take_returned(Q& q, WorkRing& ring, uint32_t limit) noexcept;
    template <bool Recv, class Q>
    [[gnu::noinline]] void take_returned_past_unsent(Q& q, WorkRing& ring, uint32_t limit) noexcept;
    template <bool Recv>
    [[gnu::noinline]] void flush_unreturned(WorkRing& ring) noexcept;
    [[gnu::always_inline]] void retire(const Slot& s, WcOpcode op, Completion* out, uint32_t& n) noexcept;
    [[gnu::always_inline]] void write_completion(const Slot& s, WcOpcode op, Completion& c) const noexcept;
    uint32_t poll_send(Completion* out, uint32_t max) noexcept;
    uint32_t poll_recv(Completion* out, uint32_t max) noexcept;
    bool send_ready() noexcept;
    bool recv_ready() noexcept;
    int seed_checksum(const SendWr& wr, virtio::NetHdr& hdr) noexcept;

    Device* dev_ = nullptr;
    CompletionQueue* send_cq_ = nullptr;
    CompletionQueue* recv_cq_ = nullptr;
    const dma::MrTable* mrs_ = nullptr;
    std::atomic<QpState> state_{QpState::ready};
    uint32_t qp_num_ = 1;
    uint32_t queue_ = 0;
    QpCaps caps_;
    uint8_t sig_all_ = 0;   // send_signaled when every send completes (sq_sig_all), else 0
    bool packed_ = false;
    bool headroom_ = false;   // QpInitAttr::hdr_in_headroom
    bool tx_csum_ = false;    // VIRTIO_NET_F_CSUM negotiated
    uint32_t max_frame_ = 1514;
    uint32_t min_recv_ = 1514;
    WorkRing sq_, rq_;
    std::optional<virtio::SplitQueue> stx_, srx_;
    std::optional<virtio::PackedQueue> ptx_, prx_;
    virtio::Doorbell tx_bell_, rx_bell_;
    std::optional<dma::DmaArena> mem_;
    // Software counters (virtio has no statistics registers): written by the QP's thread,
    // read by Device::stats() from any thread.
    queue::StatCounter tx_packets_, tx_bytes_, rx_packets_, rx_bytes_;
};

class Device {
public:
    // Opens the virtio-net function at `addr`, bound to vfio-pci, and negotiates its features
    // (§3.1.1). ENODEV: not 1af4:1041 (a transitional device included) or no virtio 1.x
    // capabilities; ENOTSUP: no VERSION_1 or ACCESS_PLATFORM (the IOMMU), fewer than 2 MSI-X
    // vectors, or RingFormat::packed not offered; EINVAL: an mtu outside 68 to kMaxMtu.
    static Result<std::unique_ptr<Device>> open(const PciAddress& addr, const DeviceOptions& opts = {});
    // The same driver over vhost-user: a back-end process (DPDK's vhost PMD, a software switch)
    // listening on the UNIX socket `socket_path` serves the virtqueues; no VM, no VFIO. Only
    // memory from pd().create_arena() can be registered (the back-end maps it through its
    // memfd). A back-end that hangs up puts the queue pair in the error state (next_event()
    // reports device_removal; event_fd() becomes readable). See docs/virtio.md.
    static Result<std::unique_ptr<Device>> open_vhost_user(std::string_view socket_path, const DeviceOptions& opts = {});
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    // What the device is and can do. max_qp: max_virtqueue_pairs with VIRTIO_NET_F_MQ, else 1;
    // max_cq: MSI-X vectors - 1 (over vhost-user 8); mac: the device's, else DeviceOptions::mac.
    const DeviceAttr& attr() const;
    // With VIRTIO_NET_F_STATUS the device's link status (a configuration read, §5.1.4); else up
    // until the device is gone. Speed 0: unknown.
    LinkState link() const;
    // Frames and bytes sent and received, from the queue pairs' software counters (destroyed
    // ones included); virtio has no other counters: the rest stay 0.
    DeviceStats stats();
    // Memory registration: keys for the SGEs of work requests. Over vhost-user only memory from
    // pd().create_arena() can be registered.
    dma::ProtectionDomain& pd();
    uint64_t features() const;   // negotiated
    // split or packed, as negotiated at open (never automatic).
    RingFormat ring_format() const;

    // A completion queue on a completion channel of its own (an MSI-X vector; over vhost-user a
    // call eventfd), owned by the device. `cqe` is a capacity hint: 1 to 65536, else EINVAL.
    // ENOSPC when attr().max_cq are in use.
    Result<CompletionQueue*> create_cq(uint32_t cqe);
    // Up to attr().max_qp queue pairs (VIRTIO_NET_F_MQ), each on its own receive and transmit
    // virtqueues, taking the lowest free queue index. A virtio device takes new queues only
    // while it is stopped: creating a queue pair restarts the device, so it is refused (EBUSY)
    // while another queue pair has work outstanding; create them all before posting. Destroying
    // one while others run restarts the device too: the others keep working, except that WRs
    // they had outstanding are flushed and they go to the error state.
    Result<QueuePair*> create_qp(const QpInitAttr& attr);
    // Receive-side scaling (VIRTIO_NET_F_RSS): flows are spread over the queue pairs the table
    // names (which must exist). Kept across device restarts. See RssConfig.
    Result<void> configure_rss(const RssConfig& cfg);
    // The driver does not negotiate VIRTIO_NET_F_CTRL_RX, so the device filters nothing: every
    // multicast frame arrives (§5.1.6.5.1). Checks the groups and returns.
    Result<void> set_multicast(std::span<const MacAddress> groups);

    // Readable when an event may be waiting (a configuration change, the kernel asking for the
    // device back, the vhost-user back-end hanging up): then call next_event().
    int event_fd() const;
    // The next event, without blocking: device_removal (once) when the device or back-end is
    // gone, device_fatal when it asks for a reset (DEVICE_NEEDS_RESET, §2.1.2), link_up or
    // link_down; EventType::none otherwise. The first two put the queue pairs in the error state.
    Event next_event();
    // Resets the device and negotiates the same features again (over vhost-user: stops the
    // vrings). Every queue pair goes to the error state: destroy and create them again.
    // ENODEV once the device is gone.
    Result<void> reset();

    vfio::Device& vfio();   // over VFIO/PCI only
    // Whether it was opened with open_vhost_user() (then vfio() must not be called).
    bool is_vhost_user() const;

private:
    friend class CompletionQueue;
    friend class QueuePair;
    friend class DeviceState;
    explicit Device(std::unique_ptr<DeviceState> s);

    std::unique_ptr<DeviceState> s_;   // the control path (drivers/virtio_net/device_state.hpp)
};

// ---- fast path -------------------------------------------------------------------------------

// Virtio offloads only the TCP/UDP checksum (§5.1.6.2): the driver computes the IPv4 header
// checksum itself and seeds the pseudo-header sum, then asks for the rest with NEEDS_CSUM.
inline int QueuePair::seed_checksum(const SendWr& wr, virtio::NetHdr& hdr) noexcept {
    const Sge& first = wr.sg_list[0];
    const dma::MrEntry* mr = mrs_->find(first.lkey);
    if (!mr || !tx_csum_) return EINVAL;
    auto* frame = reinterpret_cast<uint8_t*>(mr->zero_based() ? mr->addr + first.addr : first.addr);
    net::L4Offsets o;
    if (!net::parse_l4(frame, first.length, o)) return EINVAL;
    uint32_t l4_len;
    if (o.ipv4) {
        frame[o.l3 + 10] = frame[o.l3 + 11] = 0;
        net::store_be16(frame + o.l3 + 10, net::ipv4_header_checksum(frame + o.l3));
        l4_len = net::load_be16(frame + o.l3 + 2) - (o.l4 - o.l3);
    } else {
        l4_len = net::load_be16(frame + o.l3 + 4);
    }
    net::store_be16(frame + o.csum, net::pseudo_header_sum(frame, o, l4_len));
    hdr.flags = virtio::net_hdr::F_NEEDS_CSUM;
    hdr.csum_start = o.l4;
    hdr.csum_offset = uint16_t(o.csum - o.l4);
    return 0;
}

// A WR's SGEs translated through the MR table into virtqueue buffers (receive: the device
// writes them, which needs LOCAL_WRITE); a bad key is reported, not refused here. With the
// header in the headroom the first buffer starts kNetHdrSize bytes early, and those bytes must
// be in the MR as well.
template <bool H>
[[gnu::always_inline]] inline QueuePair::Gathered QueuePair::gather(const Sge* sgl, uint32_t n, bool device_writes,
                                             virtio::Buffer* out) const noexcept {
    Gathered g;
    const dma::Access need = device_writes ? dma::Access::local_write : dma::Access::none;
    const uint32_t room = H ? kNetHdrSize : 0;
    for (uint32_t s = 0; s < n; ++s) {
        const uint32_t before = s == 0 ? room : 0;
        g.total += sgl[s].length;
        g.zero_sge |= sgl[s].length == 0;
        const dma::LocalTranslation t =
            mrs_->translate_local(sgl[s].lkey, sgl[s].addr - before, uint64_t(sgl[s].length) + before, need);
        g.bad_key |= t.status != dma::MrStatus::ok;
        out[s] = {t.iova.value, sgl[s].length + before, device_writes};
        if (s == 0) g.hdr_host = t.host;
    }
    return g;
}

// The slot at p.tail is filled in: queue the chain (bufs[0] its header in the driver's memory,
// then bufs[1..nsge]; with the header in the headroom bufs[1..nsge] alone). The caller made
// sure the virtqueue has room.
template <bool H, class Q>
[[gnu::always_inline]] inline void QueuePair::enqueue(Q& q, Posting<Q>& p, const WorkRing& ring, virtio::Buffer* bufs,
                                                      uint32_t nsge, bool device_writes) noexcept {
    const uint32_t index = p.tail & ring.mask;
    std::span<const virtio::Buffer> chain(bufs + 1, nsge);
    if constexpr (!H) {
        bufs[0] = {ring.hdr_iova + size_t(index) * kHdrSlot, kNetHdrSize, device_writes};
        chain = {bufs, nsge + 1};
    }
    q.add(p.adds, chain, index);
    ++p.tail;
}

// One publish and at most one notification per batch (neither when nothing was added).
template <class Q>
inline void QueuePair::publish(Q& q, const virtio::Doorbell& bell) noexcept {
    q.publish();
    if (q.needs_notify()) bell.ring();
}

// One send WR of `nsge` SGEs (1 to caps().max_send_sge, checked by the caller); 0 or the
// error that stops the post. Always inlined: called with nsge 1, the compiler drops the loops.
template <bool H, bool Checked, class Q>
[[gnu::always_inline]] inline int QueuePair::send_one(Q& q, Posting<Q>& p, const SendWr& wr, uint32_t nsge) noexcept {
    virtio::Buffer bufs[kMaxSendSge + 1];
    const Gathered g = gather<H>(wr.sg_list, nsge, false, bufs + 1);
    // (One SGE of length 0 is shorter than an Ethernet header: no test of its own.)
    if ((nsge > 1 && g.zero_sge) || g.total < kEthHeader || g.total > max_frame_) [[unlikely]]
        return EINVAL;
    if (Checked && (p.tail - sq_.head > sq_.mask || (!g.bad_key && p.adds.free < nsge + (H ? 0 : 1)))) [[unlikely]]
        return ENOMEM;
    const auto flags = uint8_t(wr.flags | sig_all_);
    if (g.bad_key) [[unlikely]] {   // completes at once, in order; the device never sees it
        sq_.at(p.tail++) = {wr.wr_id, WcStatus::local_protection_error, true, 0, uint32_t(g.total), flags};
        ++sq_.unsent;
        return 0;
    }
    // The header before the chain is queued: a packed ring's chain is available to the device
    // as soon as add() returns. In the headroom it may be at any address the application chose.
    void* const hdr_at = H ? reinterpret_cast<void*>(g.hdr_host) : sq_.hdrs + size_t(p.tail & sq_.mask) * kHdrSlot;
    if (flags & send_ip_csum) [[unlikely]] {
        virtio::NetHdr hdr{};
        if (seed_checksum(wr, hdr) != 0) return EINVAL;
        std::memcpy(hdr_at, &hdr, sizeof hdr);
    } else {
        std::memset(hdr_at, 0, sizeof(virtio::NetHdr));
    }
    sq_.at(p.tail) = {wr.wr_id, WcStatus::success, false, 0, uint32_t(g.total), flags};
    enqueue<H>(q, p, sq_, bufs, nsge, false);
    return 0;
}

template <bool H, class Q>
[[gnu::noinline]] int QueuePair::send_other(Q& q, const SendWr& wr) noexcept {
    const uint32_t nsge = wr.num_sge;
    if (nsge == 0 || nsge > caps_.max_send_sge || !wr.sg_list) return EINVAL;
    Posting<Q> p = begin_post(q, sq_);
    const int err = send_one<H, true>(q, p, wr, nsge);
    end_post(q, sq_, p);
    return err;
}

template <bool H, class Q>
inline PostResult QueuePair::send_impl(Q& q, std::span<const SendWr> wrs) noexcept {
    if (const QpState st = state(); st != QpState::ready) [[unlikely]]
        return {st == QpState::destroyed ? ENODEV : EIO, 0};
    const PostResult r = post_loop<H>(
        q, sq_, wrs, [&](Posting<Q>& p, const SendWr& wr) { return send_one<H, false>(q, p, wr, 1); },
        [&](const SendWr& wr) { return send_other<H>(q, wr); });
    publish(q, tx_bell_);
    return r;
}

// One receive WR of `nsge` SGEs, as send_one().
template <bool H, bool Checked, class Q>
[[gnu::always_inline]] inline int QueuePair::recv_one(Q& q, Posting<Q>& p, const RecvWr& wr, uint32_t nsge) noexcept {
    virtio::Buffer bufs[kMaxRecvSge + 1];
    const Gathered g = gather<H>(wr.sg_list, nsge, true, bufs + 1);
    // Without GUEST_TSO/UFO or MRG_RXBUF, a buffer must hold a whole frame (§5.1.6.3.1); one
    // SGE of length 0 is shorter than that.
    if ((nsge > 1 && g.zero_sge) || g.total < min_recv_) [[unlikely]]
        return EINVAL;
    if (Checked && (p.tail - rq_.head > rq_.mask || (!g.bad_key && p.adds.free < nsge + (H ? 0 : 1)))) [[unlikely]]
        return ENOMEM;
    if (g.bad_key) [[unlikely]] {   // completes at once, in order, nothing received
        rq_.at(p.tail++) = {wr.wr_id, WcStatus::local_protection_error, true, 0, 0, send_signaled};
        ++rq_.unsent;
        return 0;
    }
    // byte_len: what the buffer holds, the length of a buffer an IN_ORDER batch used completely.
    rq_.at(p.tail) = {wr.wr_id, WcStatus::success, false, 0, uint32_t(g.total), send_signaled};
    enqueue<H>(q, p, rq_, bufs, nsge, true);
    return 0;
}

template <bool H, class Q>
[[gnu::noinline]] int QueuePair::recv_other(Q& q, const RecvWr& wr) noexcept {
    const uint32_t nsge = wr.num_sge;
    if (nsge == 0 || nsge > caps_.max_recv_sge || !wr.sg_list) return EINVAL;
    Posting<Q> p = begin_post(q, rq_);
    const int err = recv_one<H, true>(q, p, wr, nsge);
    end_post(q, rq_, p);
    return err;
}

template <bool H, class Q>
inline PostResult QueuePair::recv_impl(Q& q, std::span<const RecvWr> wrs) noexcept {
    if (const QpState st = state(); st != QpState::ready) [[unlikely]]
        return {st == QpState::destroyed ? ENODEV : EIO, 0};
    const PostResult r = post_loop<H>(
        q, rq_, wrs, [&](Posting<Q>& p, const RecvWr& wr) { return recv_one<H, false>(q, p, wr, 1); },
        [&](const RecvWr& wr) { return recv_other<H>(q, wr); });
    publish(q, rx_bell_);
    return r;
}

// The loop both posts share: as many one-SGE WRs as post_room() found room for through
// `one` (no room check each, the positions in registers), any other WR — and any WR when
// there is no room, since a bad key may still take a slot — through `other`, which checks
// itself (it may take more descriptors); then the room is looked at again.
template <bool H, class Q, class Wr, class One, class Other>
[[gnu::always_inline]] inline PostResult QueuePair::post_loop(Q& q, WorkRing& ring, std::span<const Wr> wrs, One&& one,
                                                             Other&& other) noexcept {
    const Wr* wr = wrs.data();
    const Wr* const end = wr + wrs.size();
    int err = 0;
    while (wr != end && err == 0) {
        const uint32_t room = std::min<size_t>(post_room<H>(q, ring), size_t(end - wr));
        if (room != 0) [[likely]] {
            const Wr* const stop = wr + room;
            Posting<Q> p = begin_post(q, ring);
            while (wr != stop && wr->num_sge == 1 && wr->sg_list && (err = one(p, *wr)) == 0) ++wr;
            end_post(q, ring, p);
            if (err != 0 || wr == stop) continue;
        }
        err = other(*wr);
        if (err == 0) ++wr;
    }
    return {err, uint32_t(wr - wrs.data())};
}

// A receive's length from the bytes the device wrote (capped at the buffer's): the header,
// then the frame. (The header's flags are not read: without VIRTIO_NET_F_GUEST_CSUM, which the
// driver does not negotiate, the device sets them to 0, §5.1.6.4.1.)
inline void QueuePair::set_received(Slot& s, uint32_t len) noexcept {
    if (len < kNetHdrSize) [[unlikely]] {
        s.status = WcStatus::general_error;
        s.byte_len = 0;
    } else {
        s.byte_len = len - kNetHdrSize;
    }
}

// A WR the device will not return (the error state): flushed, nothing received.
inline void QueuePair::set_flushed(Slot& s, bool recv) noexcept {
    s.status = WcStatus::wr_flush_error;
    if (recv) s.byte_len = 0;
}

// What the device returned for slot `token`: it is done.
inline void QueuePair::complete_used(WorkRing& ring, uint32_t token, uint32_t len, bool recv) noexcept {
    Slot& s = ring.slots[token];
    s.done = true;
    if (recv) set_received(s, len);
}

// The oldest WR leaves the ring: counted when it succeeded, a completion when signaled or failed.
inline void QueuePair::retire(const Slot& s, WcOpcode op, Completion* out, uint32_t& n) noexcept {
    const bool recv = op == WcOpcode::recv;
    if (s.status == WcStatus::success) [[likely]] {
        (recv ? rx_packets_ : tx_packets_).add(1);
        (recv ? rx_bytes_ : tx_bytes_).add(s.byte_len);
        if (!(s.send_flags & send_signaled)) return;
    }
    write_completion(s, op, out[n++]);
}

// Three word stores (a field-by-field write is seven, the compiler merging none of them).
inline void QueuePair::write_completion(const Slot& s, WcOpcode op, Completion& c) const noexcept {
    static_assert(std::endian::native == std::endian::little);
    static_assert(offsetof(Slot, status) == offsetof(Completion, status) && offsetof(Slot, done) == offsetof(Completion, opcode) &&
                  offsetof(Slot, flags) == offsetof(Completion, flags) &&
                  offsetof(Slot, byte_len) == offsetof(Completion, byte_len) && offsetof(Completion, byte_len) + 4 == 16 &&
                  offsetof(Completion, qp_num) == 16 && offsetof(Completion, reserved) == 20 && sizeof(Completion) == 24);
    uint64_t mid;
    std::memcpy(&mid, &s.status, sizeof mid);
    mid = (mid & ~uint64_t(0xff00)) | uint64_t(op) << 8;   // the opcode where the slot has done
    const uint64_t last = qp_num_;                           // qp_num, reserved 0
    c.wr_id = s.wr_id;
    std::memcpy(&c.status, &mid, sizeof mid);
    std::memcpy(&c.qp_num, &last, sizeof last);
}

// Completions in posting order, in one pass, from a device that may use buffers in any order:
// while the oldest WR is not done, the next used buffer is taken from the virtqueue — usually
// the oldest WR itself; one used out of order is marked and waits for its turn. In the error
// state nothing more is taken and the rest flush.
template <bool Recv, class Q>
uint32_t QueuePair::poll_ring(Q& q, Completion* out, uint32_t max) noexcept {
    constexpr bool recv = Recv;
    constexpr WcOpcode op = Recv ? WcOpcode::recv : WcOpcode::send;
    WorkRing& ring = Recv ? rq_ : sq_;
    const bool ready = state() == QpState::ready;
    uint32_t n = 0;
    while (n < max && ring.head != ring.tail) {
        Slot& s = ring.at(ring.head);
        if (!s.done) {
            if (ready) {
                uint32_t token, len;
                if (!q.poll_used(token, len)) {
                    if (q.broken()) [[unlikely]]
                        fail_broken();
                    break;
                }
                complete_used(ring, token, len, recv);
                if (token != (ring.head & ring.mask)) [[unlikely]]
                    continue;   // out of order: marked, the oldest is still to come
            } else {
                set_flushed(s, recv);
            }
        }
        ++ring.head;
        retire(s, op, out, n);
    }
    ring.returned = ring.head;   // send_ready()/recv_ready() read it in either order
    return n;
}

// With IN_ORDER the device returns buffers in the order they were posted, so a used element
// (one per batch, §2.7.9/§2.8.8) stands for the oldest WRs the device has: no token to look
// up. Two passes: take_returned() moves `returned` past what the device returned, then the
// WRs up to it retire — each pass a short loop that keeps its state in registers.

// Moves ring.returned past the WRs the device returned — a run's WRs are the oldest it still
// has; a bad key's WR (done at post, never given to the device) keeps its place; a receive's
// run gives its last WR the element's length, the others keep their buffer's — and past the
// bad keys' WRs after them. In the error state the device is not read: every WR left flushes.
template <bool Recv, class Q>
inline void QueuePair::take_returned(Q& q, WorkRing& ring, uint32_t limit) noexcept {
    if (state() != QpState::ready) [[unlikely]]
        return flush_unreturned<Recv>(ring);
    if (ring.unsent != 0) [[unlikely]]
        return take_returned_past_unsent<Recv>(q, ring, limit);
    // Every WR after `returned` is at the device: a run is the next r.count of them.
    if constexpr (Recv) {
        // The first run alone (a poll's usual lot at low rates) is cheaper through
        // take_used_run(). A run's last WR gets the element's length.
        Slot* const slots = ring.slots.data();
        const uint32_t mask = ring.mask;
        uint32_t at = ring.returned;
        const auto take = [&](virtio::UsedRun r) {
            at += r.count;
            set_received(slots[(at - 1) & mask], r.last_len);
        };
        if (const virtio::UsedRun first = q.take_used_run(); first.count != 0) {
            take(first);
            if (first.count < limit && q.has_used()) q.take_used_runs(limit - first.count, take);
            ring.returned = at;
        }
    } else {
        ring.returned += q.take_all_used();   // a send's length does not matter: all, at once
    }
    if (q.broken()) [[unlikely]]
        fail_broken();
}

// The same when WRs with a bad key wait among them: a run's WRs are the next r.count that
// went to the device. A run never counts more WRs than the device has (the virtqueue checks it
// against the buffers in flight), so these scans stop before the tail.
template <bool Recv, class Q>
void QueuePair::take_returned_past_unsent(Q& q, WorkRing& ring, uint32_t limit) noexcept {
    Slot* const slots = ring.slots.data();
    const uint32_t mask = ring.mask, tail = ring.tail;
    uint32_t at = ring.returned, passed = 0;
    const auto skip_unsent = [&] {
        for (; at != tail && slots[at & mask].done; ++at) ++passed;
    };
    q.take_used_runs(limit, [&](virtio::UsedRun r) {
        for (uint32_t k = r.count;; ++at) {
            skip_unsent();
            if (--k == 0) break;
        }
        if constexpr (Recv) set_received(slots[at & mask], r.last_len);
        ++at;
    });
    skip_unsent();
    ring.unsent -= passed;
    ring.returned = at;
    if (q.broken()) [[unlikely]]
        fail_broken();
}

// The error state: the device is not read again; every WR it has not returned flushes.
template <bool Recv>
void QueuePair::flush_unreturned(WorkRing& ring) noexcept {
    for (uint32_t at = ring.returned; at != ring.tail; ++at)
        if (Slot& s = ring.at(at); !s.done) set_flushed(s, Recv);
    ring.returned = ring.tail;
    ring.unsent = 0;
}

template <bool Recv, class Q>
uint32_t QueuePair::poll_in_order(Q& q, Completion* out, uint32_t max) noexcept {
    constexpr WcOpcode op = Recv ? WcOpcode::recv : WcOpcode::send;
    WorkRing& ring = Recv ? rq_ : sq_;
    // A receive is a completion each: take no more than fit. Sends may be unsignaled: take all.
    const uint32_t waiting = ring.returned - ring.head;
    if (!Recv || waiting < max) take_returned<Recv>(q, ring, Recv ? max - waiting : ~0u);
    // Then the WRs up to `returned` retire: the statistics in registers (added once), a
    // completion for each receive — at most `max` of them, so the bound is set once — and for
    // each signaled or failed send, the only ones that check for room.
    const Slot* const slots = ring.slots.data();
    const uint32_t mask = ring.mask, start = ring.head;
    uint32_t head = start, n = 0, failed = 0;
    uint64_t bytes = 0;
    const auto complete = [&](const Slot& s, bool ok) {
        if (ok) [[likely]]
            bytes += s.byte_len;
        else
            ++failed;
        write_completion(s, op, out[n++]);
    };
    if constexpr (Recv) {
        for (const uint32_t stop = start + std::min(ring.returned - start, max); head != stop; ++head) {
            const Slot& s = slots[head & mask];
            complete(s, s.status == WcStatus::success);
        }
    } else {
        for (const uint32_t end = ring.returned; head != end; ++head) {
            const Slot& s = slots[head & mask];
            const bool ok = s.status == WcStatus::success;
            if (ok && !(s.send_flags & send_signaled)) [[likely]] {
                bytes += s.byte_len;
                continue;
            }
            if (n == max) break;
            complete(s, ok);
        }
    }
    ring.head = head;
    (Recv ? rx_packets_ : tx_packets_).add(head - start - failed);
    (Recv ? rx_bytes_ : tx_bytes_).add(bytes);
    return n;
}

inline uint32_t QueuePair::poll_send(Completion* out, uint32_t max) noexcept {
    if (packed_)
        return ptx_->features().in_order ? poll_in_order<false>(*ptx_, out, max)
                                         : poll_ring<false>(*ptx_, out, max);
    return stx_->features().in_order ? poll_in_order<false>(*stx_, out, max)
                                     : poll_ring<false>(*stx_, out, max);
}

inline uint32_t QueuePair::poll_recv(Completion* out, uint32_t max) noexcept {
    if (packed_)
        return prx_->features().in_order ? poll_in_order<true>(*prx_, out, max)
                                         : poll_ring<true>(*prx_, out, max);
    return srx_->features().in_order ? poll_in_order<true>(*srx_, out, max)
                                     : poll_ring<true>(*srx_, out, max);
}

inline bool QueuePair::send_ready() noexcept {
    if (sq_.head == sq_.tail) return false;
    if (sq_.returned != sq_.head || sq_.at(sq_.head).done || state() != QpState::ready) return true;
    return packed_ ? ptx_->has_used() : stx_->has_used();
}

inline bool QueuePair::recv_ready() noexcept {
    if (rq_.head == rq_.tail) return false;
    if (rq_.returned != rq_.head || rq_.at(rq_.head).done || state() != QpState::ready) return true;
    return packed_ ? prx_->has_used() : srx_->has_used();
}

inline int CompletionQueue::poll(std::span<Completion> out) noexcept {
    if (destroyed_) [[unlikely]]
        return -ENODEV;
    // A look at each queue's next used entry first (has_ready(): a few loads): a busy loop's
    // empty polls, the latency path, skip the completion pass and its set-up.
    const uint32_t n = has_ready() ? poll_queues(out) : 0;
    if (polls_for_gone_ && n == 0 && ++idle_polls_ >= kHangupCheckPolls) [[unlikely]] {
        idle_polls_ = 0;
        check_gone();
    }
    return static_cast<int>(n);
}

// The driver's classes by role, for code written once for every driver
// (examples::BasicPort<virtio_net::Driver>, the lab's MqPort).
struct Driver {
    using Device = virtio_net::Device;
    using DeviceOptions = virtio_net::DeviceOptions;
    using CompletionQueue = virtio_net::CompletionQueue;
    using QueuePair = virtio_net::QueuePair;
    using QpInitAttr = virtio_net::QpInitAttr;
};

}  // namespace vfab::virtio_net
