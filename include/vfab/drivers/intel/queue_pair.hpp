// The fast path the Intel e1000 family shares: a queue pair over one legacy-style descriptor
// ring each way (82574L §7.1/7.2, 82576 §7.1/7.2 — the same shape, other bit positions). Work
// requests live in a ring of slots beside the descriptor rings: a send takes one descriptor
// per SGE (and a context descriptor when its checksum offsets change), a receive one buffer;
// a WR with a bad key takes none and completes in order with an error. Completions come from
// the descriptors' DD bits, oldest first: a send's from the DD of its post's last descriptor,
// the only one with RS (the device finishes a ring in order; a send poll whose newest
// descriptor is done retires every send without reading more); in the error state the rest
// flush. A post finds its room once and queues that many WRs unchecked. Counters run
// freely (a ring index is counter & mask). The transmit tail goes to the device once per post
// call; the receive tail once a batch of buffers (an eighth of the ring, at most kRxTailBatch)
// waits for it, or at once while the device holds fewer than a batch (as DPDK's
// rx_free_thresh): a poll that finds the ring empty while the device runs that low writes it
// too, and so does arm(). Held buffers never leave the device short of a batch to receive into.
//
// A device family supplies `Traits` (e1000e::QueueTraits, igb::QueueTraits):
//   TxDesc, TxContextDesc, RxDesc, TxContext     its descriptor formats, the context it keeps
//   kRxDD, kRxEOP, kRxErrFrame                   write-back status bits
//   tx_done(const volatile TxDesc&)              the device has sent it (DD)
//   make_context(const net::L4Offsets&, TxContext&, uint32_t& popts)   false: offsets it cannot offload
//   write_context(TxContextDesc&, const TxContext&)
//   write_data(TxDesc&, iova, len, first, last, total, popts, wr flags)
//   write_rx(RxDesc&, iova)
//   rx_csum_ok(status_error)                     a good frame's checksums were checked and good
//   rx_any_flags(status_error)                   optional: of any frame written back (wc_timestamped)
// and derives its QueuePair from QueuePairCore<Traits>, adding the control path.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "vfab/dma/dma_arena.hpp"
#include "vfab/dma/mr_table.hpp"
#include "vfab/drivers/common/stat_counter.hpp"
#include "vfab/mmio.hpp"
#include "vfab/net/checksum.hpp"
#include "vfab/types.hpp"

namespace vfab::intel {

inline constexpr uint32_t kMaxSendSge = 8;
inline constexpr uint32_t kEthHeader = 14;
inline constexpr uint32_t kMaxQueueDepth = 4096;   // WRs per queue
// Receive buffers posted before the receive tail is written (one MMIO write, a VM exit under
// virtualisation), unless the device holds fewer than this many: at most this, an eighth of
// the ring below 512 entries (a batch of 64 halves the writes DPDK's rx_free_thresh of 32
// makes at a burst of 32: bench/run's lab MMIO figures).
inline constexpr uint32_t kRxTailBatch = 64;

// Where a queue pair's rings are and what it may post: filled by the driver's create_qp (rings
// in DMA memory) and by the unit tests' and bench/'s models (rings in plain memory, IOVA = VA).
template <class Traits>
struct RingView {
    typename Traits::TxDesc* tx = nullptr;
    uint32_t tx_entries = 0;   // a power of 2, as rx_entries and send_depth
    typename Traits::RxDesc* rx = nullptr;
    uint32_t rx_entries = 0;
    uint32_t send_depth = 0;   // WRs outstanding at most (receives: rx_entries - 1)
    uint32_t max_send_sge = 1;
    volatile uint8_t* bar = nullptr;
    uint32_t tdt = 0, rdt = 0;   // the tail registers' offsets
    const dma::MrTable* mrs = nullptr;
    uint32_t queue = 0;
    uint32_t max_frame = 1514;
    uint32_t rx_buffer = 2048;
    bool sq_sig_all = false;
};

// What post_send keeps in registers while it queues a batch (members would be reloaded after
// every byte-wide descriptor store, which may alias them), written back once at its end. The
// statistics go to memory as they change (an add to memory is one instruction too, and a
// register less for the loop).
struct SendCursor {
    uint32_t sq_tail, tx_tail;
    uint32_t sq_end, tx_end;     // where the tails must stop: the WR slots and descriptors are full
                                 // (one descriptor stays empty)
};

template <class Traits>
class QueuePairCore {
public:
    using TxDesc = typename Traits::TxDesc;
    using RxDesc = typename Traits::RxDesc;

    // Queues `wrs` in order, then writes the transmit tail once. Each WR: 1 to
    // caps().max_send_sge SGEs, 14 to mtu + 14 bytes in all; send_ip_csum wants the headers in
    // the first SGE (else EINVAL). A bad lkey completes in order with local_protection_error.
    // Stops at the first WR refused (PostResult). Fast path: no allocation, system call or lock.
    PostResult post_send(std::span<const SendWr> wrs) noexcept;
    // Hands the device one buffer per WR (one SGE of at least attr().recv_buffer_size bytes, in
    // a region with local_write) and writes the receive tail once. A bad lkey completes in
    // order with local_protection_error. Stops at the first WR refused (PostResult). Fast path.
    PostResult post_recv(std::span<const RecvWr> wrs) noexcept;

    // ready; error after reset() or a device error or removal (posts: EIO; outstanding WRs
    // flush); destroyed after destroy() (posts: ENODEV). From any thread.
    QpState state() const noexcept { return state_.load(std::memory_order_relaxed); }
    // The number its completions carry (Completion::qp_num): queue() + 1, never 0.
    uint32_t qp_num() const noexcept { return qp_num_; }   // queue() + 1
    // What it got for create_qp's caps: max_send_wr rounded up to a power of 2 (8 at least),
    // max_recv_wr to one less than one (7 at least), max_send_sge as asked, max_recv_sge 1.
    const QpCaps& caps() const noexcept { return caps_; }
    // The hardware queue pair (receive and transmit queue n); RssConfig::table names it.
    uint32_t queue() const noexcept { return queue_; }
    // Sends as they are posted (as DPDK counts them) and receives as they complete, with their
    // bytes, since the queue pair was created; a send that then fails or is flushed is taken
    // back (in the error state, a frame sent in a post whose end the device had not written
    // back counts as flushed). From any thread.
    QpStats stats() const noexcept { return {tx_packets_.get(), tx_bytes_.get(), rx_packets_.get(), rx_bytes_.get()}; }
    // Hands the device the receive buffers posted since the receive tail was last written (one
    // MMIO write; nothing when there are none). poll() does it when it finds the receive ring
    // empty and the device holding fewer than a batch, and the completion queue's arm() before
    // it returns: call it only to hand buffers over sooner without polling. Fast path.
    void flush_recv_tail() noexcept {
        if (rx_tail_ != rx_written_) write_rx_tail();
    }
    // Outstanding work requests, for tests and diagnostics.
    uint32_t send_outstanding() const noexcept { return sq_tail_ - sq_head_; }
    // Receives posted and not yet returned by a poll (refused ones included).
    uint32_t recv_outstanding() const noexcept { return rq_tail_ - rq_head_; }
    // Receive buffers held back before the tail is written (kRxTailBatch).
    uint32_t recv_tail_batch() const noexcept { return rx_batch_; }

protected:
    // For the completion queue (queue::CompletionQueueCore, a friend of the derived class).
    // Whether the oldest send has a completion to give: done (DD on its post's last descriptor),
    // refused when posted, or to flush in the error state.
    bool send_ready() const noexcept;
    // The same for the oldest receive.
    bool recv_ready() const noexcept;
    // Up to `max` send completions, oldest first: errors always, successes when signaled (else
    // the slot is freed silently); unfinished ones as wr_flush_error in the error state. Returns
    // how many it wrote to `out`. Fast path.
    uint32_t poll_send(Completion* out, uint32_t max) noexcept;
    // Up to `max` receive completions, oldest first, with byte_len and flags (wc_ip_csum_ok,
    // wc_timestamped); local_length_error: a frame larger than one buffer; general_error: a bad
    // frame (CRC, symbol...); wr_flush_error in the error state. Fast path.
    uint32_t poll_recv(Completion* out, uint32_t max) noexcept;
    // poll_send() in the error state: the sends of the posts whose last descriptor the device
    // wrote back complete as usual, the rest as wr_flush_error (frames of a post it was still
    // sending among them: only a post's last descriptor reports). Out of line: the fast loops
    // keep no state for it.
    uint32_t flush_send(Completion* out, uint32_t max) noexcept;
    // poll_recv() in the error state, as flush_send().
    uint32_t flush_recv(Completion* out, uint32_t max) noexcept;

    struct Slot {
        uint64_t wr_id;
        uint32_t byte_len;
        uint16_t ndesc;   // hardware descriptors used; 0: completed in software (an error)
        WcStatus status;
        // A send's flags (its low byte, sq_sig_all's send_signaled included): with
        // send_signaled a success completes; a refused send has it too. Receives: always.
        uint8_t flags;
    };
    using TxContext = typename Traits::TxContext;

    QueuePairCore() = default;
    // Over rings already in place (the unit tests' and bench/'s queue pairs): attach_rings(v).
    explicit QueuePairCore(const RingView<Traits>& v) { attach_rings(v); }
    ~QueuePairCore() = default;
    // Control path: takes the rings (the slot rings are allocated here), or lets them go (the
    // queue pair is then destroyed: a late post returns ENODEV).
    void attach_rings(const RingView<Traits>& v) {
        tx_ = v.tx, tx_mask_ = v.tx_entries - 1, tx_head_ = tx_tail_ = tx_clean_ = 0;
        rs_storage_.assign(v.tx_entries, 0);
        rs_ = rs_storage_.data(), rs_head_ = rs_tail_ = 0;
        rx_ = v.rx, rx_mask_ = v.rx_entries - 1, rx_head_ = rx_tail_ = rx_written_ = 0;
        rx_batch_ = std::clamp<uint32_t>(v.rx_entries / 8, 1, kRxTailBatch);
        sq_storage_.assign(v.send_depth, Slot{});
        rq_storage_.assign(v.rx_entries, Slot{});
        sq_ = sq_storage_.data(), sq_mask_ = v.send_depth - 1, sq_head_ = sq_tail_ = 0;
        rq_ = rq_storage_.data(), rq_mask_ = v.rx_entries - 1, rq_head_ = rq_tail_ = 0;
        caps_ = {v.send_depth, v.rx_entries - 1, v.max_send_sge, 1};
        tdt_ = v.bar + v.tdt, rdt_ = v.bar + v.rdt, mrs_ = v.mrs, queue_ = v.queue, qp_num_ = v.queue + 1;
        max_frame_ = v.max_frame, max_span_ = v.max_frame - kEthHeader, rx_buffer_ = v.rx_buffer, sig_all_ = v.sq_sig_all ? uint32_t(send_signaled) : 0;
        tx_ctx_.reset();
    }
    // destroy()'s last step, once the device stopped the queues: the state becomes destroyed
    // and the descriptor rings' DMA memory and the slot rings are freed. Must not run while the
    // owning thread posts or polls.
    void release_rings() noexcept {
        state_ = QpState::destroyed;
        rings_.reset();
        sq_storage_ = {};
        rq_storage_ = {};
        rs_storage_ = {};
        sq_head_ = sq_tail_ = rq_head_ = rq_tail_ = 0;
    }
    // Moves tx_clean_ past the posts whose last descriptor the device wrote back done (in
    // order: it stops at the first that is not), and returns it.
    uint32_t take_clean() noexcept {
        uint32_t clean = tx_clean_, r = rs_head_;
        for (; r != rs_tail_ && tx_done_at(rs_[r & tx_mask_]); ++r) clean = rs_[r & tx_mask_] + 1;
        if (r != rs_head_) mmio::dma_rmb();
        rs_head_ = r, tx_clean_ = clean;
        return clean;
    }
    // Whether the descriptors before `end` (a free-running count) lie before `clean`: done.
    static bool done_before(uint32_t end, uint32_t clean) noexcept { return int32_t(clean - end) >= 0; }
    // Whether the device wrote back transmit descriptor `i` (a free-running count) done.
    bool tx_done_at(uint32_t i) const noexcept {
        return Traits::tx_done(*reinterpret_cast<const volatile TxDesc*>(&tx_[i & tx_mask_]));
    }
    // Receive descriptor `i` (a free-running count), read as the device writes it back.
    const volatile RxDesc& rx_at(uint32_t i) const noexcept {
        return *reinterpret_cast<const volatile RxDesc*>(&rx_[i & rx_mask_]);
    }
    // A receive's write-back after DD (`se`, its status and errors): its length and completion
    // flags, and the status returned (local_length_error: larger than one buffer;
    // general_error: a bad frame).
    static WcStatus rx_written_back(const volatile RxDesc& d, uint32_t se, uint32_t& len, uint16_t& flags) noexcept;
    // send_ip_csum: reads the headers in `first` at its CPU address, fills the context and the
    // data descriptors' options, seeds the TCP/UDP checksum with the pseudo-header; EINVAL when
    // the SGE does not translate, the frame is not IPv4/IPv6 and TCP/UDP, or Traits refuses it.
    int prepare_checksum(const Sge& first, TxContext& ctx, uint32_t& popts) noexcept;
    // post_send's work for one WR of `nsge` SGEs (checked by the caller) at the cursor: 0, or
    // the errno that refuses it (the cursor then unchanged).
    int queue_send(const SendWr& wr, uint32_t nsge, SendCursor& c) noexcept;
    // The same for the usual WR, one SGE without send_ip_csum: inlined in post_send's loop.
    // Written apart from queue_send on purpose: queue_send(wr, 1, c) inlined in its place costs
    // 13 instructions per packet more at batch 32 and 39 at batch 1 (bench/fastpath_callgrind.sh).
    int queue_send_one(const SendWr& wr, SendCursor& c) noexcept;
    // What queue_send_other() gives: the cursor after the WR and queue_send's result.
    struct SendStep {
        SendCursor c;
        int err;
    };
    // Any other WR, out of line (its checks and scratch would crowd the loop's registers).
    SendStep queue_send_other(const SendWr& wr, SendCursor c) noexcept;
    // Writes the receive tail (rx_tail_), after a barrier for the descriptors it hands over.
    void write_rx_tail() noexcept {
        mmio::dma_wmb();   // descriptors before the tail that hands them to the device
        mmio::write<uint32_t>(rdt_, 0, rx_tail_ & rx_mask_);
        rx_written_ = rx_tail_;
    }

    const dma::MrTable* mrs_ = nullptr;
    // Written by the control path (reset, removal, destroy) while the owning thread posts and
    // polls: atomic, read relaxed (a plain load on x86).
    std::atomic<QpState> state_{QpState::ready};
    uint32_t queue_ = 0, qp_num_ = 1;
    // The tail registers in the BAR: one load each for the doorbell.
    volatile uint8_t* tdt_ = nullptr;
    volatile uint8_t* rdt_ = nullptr;
    QpCaps caps_;
    uint32_t sig_all_ = 0;   // send_signaled when every send completes (sq_sig_all), else 0
    uint32_t max_frame_ = 1514;
    uint32_t max_span_ = 1514 - kEthHeader;   // max_frame_ - kEthHeader: one compare per send
    uint32_t rx_buffer_ = 2048;   // what each receive must hold (the device's buffer size)

    // Send: a ring of WR slots and the hardware ring of descriptors they use.
    Slot* sq_ = nullptr;
    uint32_t sq_mask_ = 0, sq_head_ = 0, sq_tail_ = 0;
    TxDesc* tx_ = nullptr;
    uint32_t tx_mask_ = 0, tx_head_ = 0, tx_tail_ = 0;
    // Report status (RS) only on each post's last descriptor: the device writes back only those
    // (a write to memory per post, not per packet, as DPDK's tx_rs_thresh), so a send is done
    // once a later one of them is. Their free-running indices, oldest first, until seen done;
    // descriptors before tx_clean_ are known done.
    uint32_t* rs_ = nullptr;
    uint32_t rs_head_ = 0, rs_tail_ = 0, tx_clean_ = 0;
    std::optional<TxContext> tx_ctx_;   // the checksum context the device holds

    // Receive: one descriptor per WR (or none for a refused one).
    Slot* rq_ = nullptr;
    uint32_t rq_mask_ = 0, rq_head_ = 0, rq_tail_ = 0;
    RxDesc* rx_ = nullptr;
    uint32_t rx_mask_ = 0, rx_head_ = 0, rx_tail_ = 0;
    uint32_t rx_written_ = 0;   // rx_tail_ as the device last saw it
    uint32_t rx_batch_ = 1;     // buffers held back before the tail is written

    queue::StatCounter tx_packets_, tx_bytes_, rx_packets_, rx_bytes_;   // for stats(), from any thread
    std::vector<Slot> sq_storage_, rq_storage_;
    std::vector<uint32_t> rs_storage_;   // a post takes one descriptor at least: tx_entries
    std::optional<dma::DmaArena> rings_;
};

// ---- fast path -------------------------------------------------------------------------------

template <class T>
inline int QueuePairCore<T>::prepare_checksum(const Sge& first, TxContext& ctx, uint32_t& popts) noexcept {
    // The headers must be in the first SGE; the CPU reads them at their CPU address (for a
    // zero-based MR not its SGE address, an offset).
    const dma::Translation t = mrs_->translate(first.lkey, first.addr, first.length, dma::Access::none);
    if (t.status != dma::MrStatus::ok) return EINVAL;
    auto* frame = reinterpret_cast<uint8_t*>(t.host);
    net::L4Offsets o;
    if (!net::parse_l4(frame, first.length, o) || !T::make_context(o, ctx, popts)) return EINVAL;
    net::seed_for_offload(frame, o);   // what the device does not compute (the pseudo-header)
    return 0;
}

template <class T>
inline int QueuePairCore<T>::queue_send(const SendWr& wr, uint32_t nsge, SendCursor& c) noexcept {
    // One pass over the SGEs: lengths for the checks below, keys translated (a bad key is not
    // refused here: it becomes an error completion, in order).
    uint64_t total = 0, iova[kMaxSendSge];
    bool zero_sge = false, bad_key = false;
    for (uint32_t s = 0; s < nsge; ++s) {
        const Sge& g = wr.sg_list[s];
        total += g.length;
        zero_sge |= g.length == 0;
        const dma::IovaTranslation t = mrs_->translate_iova(g.lkey, g.addr, g.length, dma::Access::none);
        bad_key |= t.status != dma::MrStatus::ok;
        iova[s] = t.iova.value;
    }
    if (zero_sge || total < kEthHeader || total > max_frame_) [[unlikely]]
        return EINVAL;
    const bool csum = wr.flags & send_ip_csum;
    const uint32_t need = nsge + (csum ? 1 : 0);
    if (c.sq_tail == c.sq_end || c.tx_end - c.tx_tail < need) [[unlikely]]
        return ENOMEM;
    Slot& slot = sq_[c.sq_tail & sq_mask_];
    slot = {wr.wr_id, uint32_t(total), 0, WcStatus::success, uint8_t(wr.flags | sig_all_)};
    ++c.sq_tail;
    if (bad_key) [[unlikely]] {   // completes in order, touches no descriptor
        slot.status = WcStatus::local_protection_error;
        slot.flags = send_signaled;
        return 0;
    }
    uint32_t popts = 0, ndesc = nsge;
    if (csum) [[unlikely]] {
        TxContext ctx;
        if (prepare_checksum(wr.sg_list[0], ctx, popts) != 0) {
            --c.sq_tail;   // refused: the slot goes back
            return EINVAL;
        }
        // A context descriptor only when the offsets change: the device keeps the last.
        if (tx_ctx_ != ctx) {
            T::write_context(*reinterpret_cast<typename T::TxContextDesc*>(&tx_[c.tx_tail & tx_mask_]), ctx);
            ++c.tx_tail;
            tx_ctx_ = ctx;
            ++ndesc;
        }
    }
    for (uint32_t s = 0; s < nsge; ++s) {
        T::write_data(tx_[c.tx_tail & tx_mask_], iova[s], wr.sg_list[s].length, s == 0, s + 1 == nsge, uint32_t(total),
                      popts, wr.flags);
        ++c.tx_tail;
    }
    slot.ndesc = uint16_t(ndesc);
    tx_packets_.add(1);   // sends are counted when posted (as DPDK counts them)
    tx_bytes_.add(total);
    return 0;
}

template <class T>
[[gnu::always_inline]] inline int QueuePairCore<T>::queue_send_one(const SendWr& wr, SendCursor& c) noexcept {
    const Sge& g = *wr.sg_list;
    const uint32_t len = g.length;
    if (len - kEthHeader > max_span_) [[unlikely]]   // 14 to max_frame_ bytes
        return EINVAL;
    // (Room: post_send's caller checked it for this WR.)
    const dma::IovaTranslation t = mrs_->translate_iova(g.lkey, g.addr, len, dma::Access::none);
    Slot& slot = sq_[c.sq_tail & sq_mask_];
    ++c.sq_tail;
    if (t.status != dma::MrStatus::ok) [[unlikely]] {   // completes in order, touches no descriptor
        slot = {wr.wr_id, len, 0, WcStatus::local_protection_error, send_signaled};
        return 0;
    }
    slot = {wr.wr_id, len, 1, WcStatus::success, uint8_t(wr.flags | sig_all_)};
    T::write_data(tx_[c.tx_tail & tx_mask_], t.iova.value, len, true, true, len, 0, wr.flags);
    ++c.tx_tail;
    tx_packets_.add(1);   // sends are counted when posted (as DPDK counts them)
    tx_bytes_.add(len);
    return 0;
}

template <class T>
[[gnu::noinline]] typename QueuePairCore<T>::SendStep QueuePairCore<T>::queue_send_other(const SendWr& wr,
                                                                                       SendCursor c) noexcept {
    const uint32_t nsge = wr.num_sge;
    if (!wr.sg_list || nsge == 0 || nsge > caps_.max_send_sge) return {c, EINVAL};
    const int err = queue_send(wr, nsge, c);
    return {c, err};
}

template <class T>
inline PostResult QueuePairCore<T>::post_send(std::span<const SendWr> wrs) noexcept {
    if (const QpState st = state(); st != QpState::ready) [[unlikely]]
        return {st == QpState::destroyed ? ENODEV : EIO, 0};
    SendCursor c{sq_tail_, tx_tail_, sq_head_ + sq_mask_ + 1, tx_head_ + tx_mask_};
    const uint32_t old_tail = c.tx_tail;
    const SendWr* wr = wrs.data();
    const SendWr* const end = wr + wrs.size();   // pointers, not indices: a register less
    int err = 0;
    while (wr != end && !err) {
        // The WRs that surely have room for a slot and a descriptor each: the loop below checks
        // none; at `stop` (or after a WR that may take more) the room is looked at again.
        const auto room = std::min<size_t>(std::min(c.sq_end - c.sq_tail, c.tx_end - c.tx_tail), size_t(end - wr));
        if (room == 0) [[unlikely]] {
            err = ENOMEM;
            break;
        }
        for (const SendWr* const stop = wr + room; wr != stop;) {
            if (wr->num_sge == 1 && wr->sg_list && !(wr->flags & send_ip_csum)) [[likely]] {
                err = queue_send_one(*wr, c);
                if (err) [[unlikely]]
                    break;
                ++wr;
            } else {
                const SendStep step = queue_send_other(*wr, c);   // checks its own room
                c = step.c, err = step.err;
                if (!err) ++wr;
                break;
            }
        }
    }
    sq_tail_ = c.sq_tail, tx_tail_ = c.tx_tail;
    if (c.tx_tail != old_tail) {
        T::report_status(tx_[(c.tx_tail - 1) & tx_mask_]);   // the post's last descriptor
        rs_[rs_tail_++ & tx_mask_] = c.tx_tail - 1;
        mmio::dma_wmb();   // descriptors before the tail that hands them to the device
        mmio::write<uint32_t>(tdt_, 0, c.tx_tail & tx_mask_);
    }
    return {err, uint32_t(wr - wrs.data())};
}

template <class T>
inline PostResult QueuePairCore<T>::post_recv(std::span<const RecvWr> wrs) noexcept {
    if (const QpState st = state(); st != QpState::ready) [[unlikely]]
        return {st == QpState::destroyed ? ENODEV : EIO, 0};
    // The tails in registers, written back once: a descriptor's store may alias any member,
    // which would be stored and reloaded for every WR.
    uint32_t rq_tail = rq_tail_, rx_tail = rx_tail_;
    const uint32_t old_tail = rx_tail;
    const RecvWr* wr = wrs.data();
    const RecvWr* const end = wr + wrs.size();
    int err = 0;
    while (wr != end && !err) {
        // The WRs that surely have room for a slot and a descriptor each (a bad key takes no
        // descriptor: the room is looked at again at `stop`).
        const uint32_t slots = rq_head_ + rq_mask_ + 1 - rq_tail, descs = rx_head_ + rx_mask_ - rx_tail;
        const auto room = std::min<size_t>(std::min(slots, descs), size_t(end - wr));   // one descriptor stays empty
        if (room == 0) [[unlikely]] {
            err = ENOMEM;
            break;
        }
        for (const RecvWr* const stop = wr + room; wr != stop; ++wr) {
            // One buffer per frame, holding all the device may write.
            if (wr->num_sge != 1 || !wr->sg_list || wr->sg_list[0].length < rx_buffer_) [[unlikely]] {
                err = EINVAL;
                break;
            }
            const Sge& g = wr->sg_list[0];
            const dma::IovaTranslation t = mrs_->translate_iova(g.lkey, g.addr, rx_buffer_, dma::Access::local_write);
            const bool ok = t.status == dma::MrStatus::ok;
            // A bad key completes in order and takes no descriptor.
            rq_[rq_tail & rq_mask_] = {wr->wr_id, 0, uint16_t(ok),
                                       ok ? WcStatus::success : WcStatus::local_protection_error, send_signaled};
            ++rq_tail;
            if (ok) [[likely]] {
                T::write_rx(rx_[rx_tail & rx_mask_], t.iova.value);
                ++rx_tail;
            }
        }
    }
    rq_tail_ = rq_tail, rx_tail_ = rx_tail;
    // The tail once a batch waits for it, or at once while the device runs low.
    if (rx_tail != old_tail && (rx_tail - rx_written_ >= rx_batch_ || rx_written_ - rx_head_ < rx_batch_))
        write_rx_tail();
    return {err, uint32_t(wr - wrs.data())};
}

template <class T>
inline uint32_t QueuePairCore<T>::poll_send(Completion* out, uint32_t max) noexcept {
    if (state() == QpState::error) [[unlikely]]
        return flush_send(out, max);
    // Heads in registers, written back once: a completion's stores may alias any member, which
    // would be stored and reloaded for every WR. What does not change stays in memory (an
    // operand from memory costs no instruction more; a register for it would spill another).
    Completion* o = out;
    Completion* const o_end = out + max;
    uint32_t sq_head = sq_head_, tx_head = tx_head_;
    // The device finishes a ring's descriptors in order (DPDK's transmit cleanup, which tests
    // one descriptor in tx_rs_thresh, counts on it too): when the newest one is done, so is
    // every send, and none needs its own test.
    const uint32_t tx_tail = tx_tail_;
    if (tx_head != tx_tail && tx_done_at(tx_tail - 1)) {
        mmio::dma_rmb();
        tx_clean_ = tx_tail;
        rs_head_ = rs_tail_;
        for (; o != o_end && sq_head != sq_tail_; ++sq_head) {
            const Slot& s = sq_[sq_head & sq_mask_];
            tx_head += s.ndesc;
            if (s.flags & send_signaled) *o++ = {s.wr_id, s.status, WcOpcode::send, 0, s.byte_len, qp_num_, 0};
        }
    } else {
        // Else up to the newest post's last descriptor done; the sends whose descriptors all
        // lie before it (a bad key's WR has none) complete.
        const uint32_t clean = take_clean();
        for (; o != o_end && sq_head != sq_tail_; ++sq_head) {
            const Slot& s = sq_[sq_head & sq_mask_];
            if (!done_before(tx_head + s.ndesc, clean)) break;
            tx_head += s.ndesc;
            if (s.flags & send_signaled) *o++ = {s.wr_id, s.status, WcOpcode::send, 0, s.byte_len, qp_num_, 0};
        }
    }
    sq_head_ = sq_head, tx_head_ = tx_head;
    return uint32_t(o - out);
}

template <class T>
[[gnu::noinline]] uint32_t QueuePairCore<T>::flush_send(Completion* out, uint32_t max) noexcept {
    const uint32_t clean = take_clean();
    uint32_t n = 0;
    while (n < max && sq_head_ != sq_tail_) {
        const Slot& s = sq_[sq_head_ & sq_mask_];
        WcStatus status = s.status;
        if (s.ndesc) {
            if (!done_before(tx_head_ + s.ndesc, clean)) {   // not written back as done
                status = WcStatus::wr_flush_error;
                tx_packets_.add(~uint64_t(0));   // counted when posted: take it back
                tx_bytes_.add(-uint64_t(s.byte_len));
            }
            tx_head_ += s.ndesc;
        }
        ++sq_head_;
        if ((s.flags & send_signaled) || status != WcStatus::success)
            out[n++] = {s.wr_id, status, WcOpcode::send, 0, s.byte_len, qp_num_, 0};
    }
    if (sq_head_ == sq_tail_) rs_head_ = rs_tail_, tx_clean_ = tx_head_;   // nothing left to learn
    return n;
}

template <class T>
inline WcStatus QueuePairCore<T>::rx_written_back(const volatile RxDesc& d, uint32_t se, uint32_t& len,
                                                  uint16_t& flags) noexcept {
    mmio::dma_rmb();   // the rest of the write-back after DD
    len = d.wb.length;
    flags = 0;
    if constexpr (requires { T::rx_any_flags(se); }) flags = T::rx_any_flags(se);
    if ((se & (T::kRxEOP | T::kRxErrFrame)) != T::kRxEOP) [[unlikely]]   // one test for the usual frame
        return se & T::kRxEOP ? WcStatus::general_error : WcStatus::local_length_error;   // a bad frame; larger than one buffer
    if (T::rx_csum_ok(se)) flags |= wc_ip_csum_ok;
    return WcStatus::success;
}

template <class T>
inline uint32_t QueuePairCore<T>::poll_recv(Completion* out, uint32_t max) noexcept {
    if (state() == QpState::error) [[unlikely]]
        return flush_recv(out, max);
    // Heads in registers, written back once (as poll_send); the statistics once per poll: the
    // packets are the descriptors taken, less the frames in error (taken back one by one).
    // Each completion is written once, whole.
    Completion* o = out;
    Completion* const o_end = out + max;
    uint32_t rq_head = rq_head_, rx_head = rx_head_;
    uint64_t bytes = 0;
    while (o != o_end && rq_head != rq_tail_) {
        const Slot& s = rq_[rq_head & rq_mask_];
        WcStatus status = s.status;
        uint32_t len = 0;
        uint16_t flags = 0;
        if (s.ndesc) [[likely]] {   // (else: refused when posted, a bad key)
            const volatile RxDesc& d = rx_at(rx_head);
            const uint32_t se = d.wb.status_error;
            if (!(se & T::kRxDD)) break;
            status = rx_written_back(d, se, len, flags);
            if (status == WcStatus::success) [[likely]]
                bytes += len;
            else
                rx_packets_.add(~uint64_t(0));
            ++rx_head;
        }
        *o++ = {s.wr_id, status, WcOpcode::recv, flags, len, qp_num_, 0};
        ++rq_head;
    }
    rx_packets_.add(rx_head - rx_head_);
    rx_bytes_.add(bytes);
    rq_head_ = rq_head, rx_head_ = rx_head;
    // Nothing more came, and the device holds every buffer from here to the tail it saw: short
    // of a batch, it gets what is held (the caller may wait next).
    if (o != o_end && rq_head != rq_tail_ && rx_written_ - rx_head < rx_batch_) flush_recv_tail();
    return uint32_t(o - out);
}

template <class T>
[[gnu::noinline]] uint32_t QueuePairCore<T>::flush_recv(Completion* out, uint32_t max) noexcept {
    uint32_t n = 0;
    while (n < max && rq_head_ != rq_tail_) {
        const Slot& s = rq_[rq_head_ & rq_mask_];
        WcStatus status = s.status;
        uint32_t len = 0;
        uint16_t flags = 0;
        if (s.ndesc) {
            const volatile RxDesc& d = rx_at(rx_head_);
            const uint32_t se = d.wb.status_error;
            if (!(se & T::kRxDD)) {
                status = WcStatus::wr_flush_error;
            } else {
                status = rx_written_back(d, se, len, flags);
                if (status == WcStatus::success) {
                    rx_packets_.add(1);
                    rx_bytes_.add(len);
                }
            }
            ++rx_head_;
        }
        out[n++] = {s.wr_id, status, WcOpcode::recv, flags, len, qp_num_, 0};
        ++rq_head_;
    }
    return n;
}

template <class T>
inline bool QueuePairCore<T>::send_ready() const noexcept {
    if (sq_head_ == sq_tail_) return false;
    const Slot& s = sq_[sq_head_ & sq_mask_];
    if (!s.ndesc || state() == QpState::error || done_before(tx_head_ + s.ndesc, tx_clean_)) return true;
    // The oldest pending post's last descriptor is this send's or a later one.
    return rs_head_ != rs_tail_ && tx_done_at(rs_[rs_head_ & tx_mask_]);
}

template <class T>
inline bool QueuePairCore<T>::recv_ready() const noexcept {
    if (rq_head_ == rq_tail_) return false;
    const Slot& s = rq_[rq_head_ & rq_mask_];
    if (!s.ndesc || state() == QpState::error) return true;
    return rx_at(rx_head_).wb.status_error & T::kRxDD;
}

}  // namespace vfab::intel
