// The RDMA port: one raw queue pair of the device, its receive and send buffers, progress and the
// timers. ARP and the address handles are in arp.cpp; received frames go to demux.cpp.
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "engine.hpp"

namespace vfab::rdma {

Result<std::unique_ptr<Port>> Port::create(vfab::Device& dev, const PortConfig& cfg) {
    return create(std::make_unique<DeviceLink<vfab::Device>>(dev), cfg);
}

Result<std::unique_ptr<Port>> Port::create(std::unique_ptr<RawLink> link, const PortConfig& cfg) {
    if (!link) return Error{EINVAL, "RDMA port: no raw link given"};
    auto p = std::make_unique<detail::PortImpl>(std::move(link), cfg);
    if (auto r = p->init(); !r) return r.take_error();
    return std::unique_ptr<Port>(std::move(p));
}

namespace detail {

using namespace wire;

uint64_t now_ns() noexcept { return clock_ns(CLOCK_MONOTONIC); }

namespace {
// CLOCK_MONOTONIC as of the last timekeeping tick, read from the vDSO's page without a system
// call. Where the clocksource has no vDSO reader (HPET, as in VMs whose TSCs are unstable)
// now_ns() is a system call and a device register read — under an emulator also a lock that
// the other CPUs' doorbell writes wait for — too much for every progress round of a busy poll.
uint64_t coarse_now_ns() noexcept { return clock_ns(CLOCK_MONOTONIC_COARSE); }

constexpr uint32_t kRawBatch = 32;
constexpr uint32_t kArpEntries = 256;
}  // namespace

PortImpl::PortImpl(std::unique_ptr<RawLink> link, const PortConfig& cfg) : link_(std::move(link)), cfg_(cfg) {}

PortImpl::~PortImpl() {
    stop_progress_thread();
    unlock_calls();   // the device's protection domain outlives the port: not its lock
    qps_.clear();
    qp1_.reset();
    cqs_.clear();
    link_->close();   // the device lets go of the buffers before they are deregistered
    if (mr_.lkey) (void)link_->pd().deregister(mr_);
}

Result<void> PortImpl::init() {
    const DeviceAttr& a = link_->attr();
    std::memcpy(mac_, a.mac, sizeof mac_);
    mrs_ = &link_->pd().table();
    if (cfg_.ipv4 == 0 || cfg_.ipv4 == 0xFFFFFFFFu || (cfg_.ipv4 >> 24) == 127)
        return Error{EINVAL, "RDMA port: give it an IPv4 address of its own (PortConfig::ipv4), not 0, a broadcast or "
                             "a loopback address, and not one a kernel interface on the same link has"};
    if (cfg_.rx_buffers < 8 || cfg_.tx_buffers < 8 || cfg_.max_qp == 0 || cfg_.max_qp > (1u << 16))
        return Error{EINVAL, "RDMA port: rx_buffers and tx_buffers must be at least 8, max_qp 1 to 65536"};
    (void)use_crc32_method(cfg_.crc32);
    // The largest IB MTU whose packets fit the link: headers up to IP 20 + UDP 8 + BTH 12 +
    // RETH 16 + ImmDt 4 + ICRC 4 = 64 bytes (rxe reserves 80).
    active_mtu_ = 0;
    for (uint32_t code = 5; code >= 1; --code)
        if (mtu_bytes(code) + 64 <= a.mtu) { active_mtu_ = code; break; }
    if (active_mtu_ == 0)
        return Error{EINVAL, str_cat("RDMA port: the device's MTU (", a.mtu, ") cannot carry 256-byte RoCE packets")};

    // The raw queue pair first: its queues may hold fewer WRs than asked for; the buffers
    // follow what it took.
    uint32_t rx = cfg_.rx_buffers, tx = cfg_.tx_buffers;
    if (a.max_qp_wr) rx = std::min(rx, a.max_qp_wr), tx = std::min(tx, a.max_qp_wr);
    if (auto r = link_->open(rx, tx); !r) return Error{r.error().code, "RDMA port: " + r.error().message};
    cfg_.rx_buffers = rx;
    cfg_.tx_buffers = tx;
    deferred_rx_.reserve(rx + tx);

    const uint32_t frame = std::max<uint32_t>(a.recv_buffer_size, a.mtu + kEthHeader);
    slot_size_ = (frame + 63) & ~63u;
    const uint32_t slots = rx + tx;
    auto arena = link_->pd().create_arena(size_t(slot_size_) * slots);
    if (!arena) return Error{arena.error().code, "RDMA port: buffers: " + arena.error().message};
    buffers_ = static_cast<uint8_t*>((*arena)->data());
    auto mr = link_->pd().register_memory(buffers_, uint64_t(slot_size_) * slots, dma::Access::local_write);
    if (!mr) return Error{mr.error().code, "RDMA port: buffers: " + mr.error().message};
    mr_ = *mr;

    timespec res{};
    clock_getres(CLOCK_MONOTONIC_COARSE, &res);
    // The coarse clock lags by up to a tick and some (4.24 ms seen with 4 ms ticks): two ticks.
    coarse_slack_ns_ = 2 * ns_of(res);
    timer_fd_ = vfio::UniqueFd(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC), vfio::Sys::real());
    if (!timer_fd_) return Error::from_errno(errno, "RDMA port: timerfd_create");
    async_fd_ = vfio::UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), vfio::Sys::real());
    if (!async_fd_) return Error::from_errno(errno, "RDMA port: eventfd for asynchronous events");
    wake_fd_ = vfio::UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), vfio::Sys::real());
    if (!wake_fd_) return Error::from_errno(errno, "RDMA port: eventfd for the progress thread");
    events_.resize(kMaxAsyncEvents);
    link_up_ = link_->link_state().up;
    next_link_check_ = coarse_now_ns() + kLinkCheckNs;
    overran_cqs_.reserve(16);

    tx_free_.reserve(cfg_.tx_buffers);
    for (uint32_t i = cfg_.tx_buffers; i-- > 0;) tx_free_.push_back(cfg_.rx_buffers + i);
    loopback_.reserve(cfg_.tx_buffers);   // each holds a tx slot: never more than there are
    raw_wc_.resize(kRawBatch);
    // The batches' WRs made once, each with its own SGE: a frame fills in its slot and address.
    tx_sges_.assign(cfg_.tx_buffers, Sge{0, 0, mr_.lkey});
    tx_batch_.resize(cfg_.tx_buffers);
    for (uint32_t i = 0; i < cfg_.tx_buffers; ++i) tx_batch_[i] = {0, &tx_sges_[i], 1, 0};
    rx_sges_.assign(cfg_.rx_buffers, Sge{0, slot_size_, mr_.lkey});
    rx_batch_.resize(cfg_.rx_buffers);
    for (uint32_t i = 0; i < cfg_.rx_buffers; ++i) rx_batch_[i] = {0, &rx_sges_[i], 1, 0};
    qps_.resize(cfg_.max_qp);
    qp_numbers_ = QpNumbers(cfg_.max_qp);
    ready_.reserve(cfg_.max_qp);
    arp_.resize(kArpEntries);
    for (uint32_t i = 0; i < cfg_.rx_buffers; ++i) post_rx(i);
    flush_rx();
    if (rx_count_) return Error{EIO, "RDMA port: the raw queue pair refused its receive buffers"};
    return {};
}

// ---- raw buffers --------------------------------------------------------------------------------

void PortImpl::post_rx(uint32_t slot) noexcept {
    const uint32_t i = rx_count_++;
    rx_sges_[i].addr = reinterpret_cast<uint64_t>(buffers_ + size_t(slot) * slot_size_);
    rx_batch_[i].wr_id = slot;
}

void PortImpl::flush_rx() noexcept {
    if (!rx_count_) return;
    const PostResult r = link_->post_recv(std::span(rx_batch_.data(), rx_count_));
    // What the queue did not take waits for the next flush, first in the batch.
    uint32_t left = 0;
    for (uint32_t i = r.posted; i < rx_count_; ++i, ++left) {
        rx_batch_[left].wr_id = rx_batch_[i].wr_id;
        rx_sges_[left].addr = rx_sges_[i].addr;
    }
    rx_count_ = left;
}

uint8_t* PortImpl::tx_buffer() noexcept {
    if (tx_free_.empty()) {
        // Reap send completions first: a burst may have used every buffer.
        reap_tx();
        if (tx_free_.empty()) return nullptr;
    }
    const uint32_t slot = tx_free_.back();
    tx_free_.pop_back();
    return buffers_ + size_t(slot) * slot_size_;
}

void PortImpl::tx_queue(uint8_t* buf, uint32_t len) noexcept {
    const uint32_t slot = uint32_t((buf - buffers_) / slot_size_);
    if (tx_drop_ && tx_drop_(tx_drop_ctx_, buf, len)) {   // the test hook: lost on the way out
        ++stats_.tx_frames;
        tx_release(buf);
        return;
    }
    if (std::memcmp(buf, mac(), 6) == 0) {   // to this port: received in run(), never on the wire
        loopback_.push_back({slot, len});
        ++stats_.tx_frames;
        kick();
        return;
    }
    const uint32_t i = tx_count_++;
    tx_sges_[i].addr = reinterpret_cast<uint64_t>(buf);
    tx_sges_[i].length = len;
    tx_batch_[i].wr_id = slot;
    ++stats_.tx_frames;
    if (tx_count_ == tx_batch_.size()) tx_flush();
}

void PortImpl::tx_release(uint8_t* buf) noexcept { tx_free_.push_back(uint32_t((buf - buffers_) / slot_size_)); }

void PortImpl::tx_flush() noexcept {
    if (!tx_count_) return;
    const PostResult r = link_->post_send(std::span(tx_batch_.data(), tx_count_));
    // A refused frame (the device in error) is given back; the protocol's timers resend.
    for (uint32_t i = r.posted; i < tx_count_; ++i) tx_free_.push_back(uint32_t(tx_batch_[i].wr_id));
    tx_count_ = 0;
}

// ---- progress ------------------------------------------------------------------------------------

// One batch of the raw queue pair's completions: send buffers back to the free list, received
// frames through the transport and their buffers posted again.
int PortImpl::poll_raw() noexcept {
    reap_tx();
    int n = int(deferred_rx_.size());
    for (const Completion& c : deferred_rx_) on_raw_recv(c);
    deferred_rx_.clear();
    std::span<Completion> wc(raw_wc_.data(), kRawBatch);
    const int got = link_->poll_recv(wc);
    for (int i = 0; i < got; ++i) {
        if (wc[i].opcode == vfab::WcOpcode::send) tx_free_.push_back(uint32_t(wc[i].wr_id));
        else on_raw_recv(wc[i]);
    }
    flush_rx();
    return n + (got < 0 ? 0 : got);
}

void PortImpl::on_raw_recv(const Completion& c) noexcept {
    const uint32_t slot = uint32_t(c.wr_id);
    if (c.status == vfab::WcStatus::success) on_frame(buffers_ + size_t(slot) * slot_size_, c.byte_len);
    post_rx(slot);
}

void PortImpl::reap_tx() noexcept {
    std::span<Completion> wc(raw_wc_.data(), kRawBatch);
    int n;
    while ((n = link_->poll_send(wc)) > 0)
        for (int i = 0; i < n; ++i) {
            if (wc[i].opcode == vfab::WcOpcode::send) tx_free_.push_back(uint32_t(wc[i].wr_id));
            else deferred_rx_.push_back(wc[i]);
        }
}

int PortImpl::progress() noexcept {
    Guard g(*this);
    return run();
}

int PortImpl::run() noexcept {
    int work = 0;
    for (int round = 0; round < 4; ++round) {
        const int n = poll_raw() + run_loopback();
        work += n;
        if (n < int(kRawBatch)) break;
    }
    // The precise clock only once the coarse one says a deadline may have come.
    if (next_deadline_ && coarse_now_ns() + coarse_slack_ns_ >= next_deadline_) {
        if (const uint64_t now = now_ns(); now >= next_deadline_) {
            run_timers(now);
            ++work;
        }
    }
    // Queue pairs with something to send; one that still has more (no buffer) stays listed.
    for (size_t i = 0; i < ready_.size();) {
        QpImpl* qp = ready_[i];
        qp->in_ready = false;
        qp->pump();
        if (qp->in_ready) {
            ++i;
        } else {
            ready_[i] = ready_.back();
            ready_.pop_back();
        }
        ++work;
        if (tx_free_.empty()) break;
    }
    tx_flush();
    if (!overran_cqs_.empty()) fail_overrun_cqs();
    if (++runs_ % kLinkCheckRuns == 0) maybe_check_link();
    return work;
}

void PortImpl::fail_overrun_cqs() noexcept {
    std::vector<CqImpl*> cqs;
    cqs.swap(overran_cqs_);
    for (CqImpl* cq : cqs) {
        AsyncEvent e;
        e.type = AsyncEventType::cq_error;
        e.cq = cq;
        raise(e);
        each_qp([&](QpImpl& qp) {
            if (qp.uses(cq)) qp.cq_overran();
        });
        for (auto& qp : raw_qps_)
            if (!qp->destroyed && qp->uses(cq)) qp->cq_overran();
    }
    tx_flush();
}

// The link read every kLinkCheckNs (an MMIO read or two): port events when it changed.
void PortImpl::maybe_check_link() noexcept {
    const uint64_t now = coarse_now_ns();
    if (now < next_link_check_) return;
    next_link_check_ = now + kLinkCheckNs;
    const bool up = link_->link_state().up;
    if (up == link_up_) return;
    link_up_ = up;
    AsyncEvent e;
    e.type = up ? AsyncEventType::port_active : AsyncEventType::port_error;
    raise(e);
}

int PortImpl::run_loopback() noexcept {
    // The frames queued so far, in order; those their handling sends come in the next round.
    const size_t n = loopback_.size();
    for (size_t i = 0; i < n; ++i) {
        const LoopFrame f = loopback_[i];
        on_frame(buffers_ + size_t(f.slot) * slot_size_, f.len);
        tx_free_.push_back(f.slot);
    }
    loopback_.erase(loopback_.begin(), loopback_.begin() + ptrdiff_t(n));
    return int(n);
}

void PortImpl::mark_ready(QpImpl* qp) noexcept {
    if (qp->in_ready) return;
    qp->in_ready = true;
    kick();
    if (std::find(ready_.begin(), ready_.end(), qp) == ready_.end()) ready_.push_back(qp);
}

void PortImpl::note_deadline(uint64_t when) noexcept {
    if (when && (next_deadline_ == 0 || when < next_deadline_)) next_deadline_ = when;
    if (when && when < sleep_deadline_ && sleeping_.load(std::memory_order_relaxed)) kick();
}

void PortImpl::kick() noexcept {
    if (sleeping_.load(std::memory_order_relaxed)) wake();
}

void PortImpl::program_waits() noexcept {
    if (program_waits_.exchange(true, std::memory_order_relaxed)) return;
    if (thread_.joinable()) wake();   // a napping thread goes to sleep on the interrupt instead
}

void PortImpl::wake() noexcept {
    const uint64_t one = 1;
    (void)!::write(wake_fd_.get(), &one, sizeof one);
}

void PortImpl::run_timers(uint64_t now) noexcept {
    next_deadline_ = 0;
    arp_timers(now);
    each_qp([&](QpImpl& qp) {
        const uint64_t d = qp.deadline();
        if (d && d <= now) qp.on_timer(now);
        note_deadline(qp.deadline());
    });
}

void PortImpl::arm_timer() noexcept {
    itimerspec its{};
    if (next_deadline_) {
        its.it_value.tv_sec = time_t(next_deadline_ / 1000000000u);
        its.it_value.tv_nsec = long(next_deadline_ % 1000000000u);
    }
    (void)timerfd_settime(timer_fd_.get(), TFD_TIMER_ABSTIME, &its, nullptr);
}

Result<Port::RawQueue> PortImpl::raw_queue(uint32_t depth) {
    Guard g(*this);
    if (!app_raw_qp_) {
        if (depth < 8 || depth > 16384) return Error{EINVAL, "raw_queue: depth is 8 to 16384"};
        auto cq = std::make_unique<RawCq>(*this, depth * 2);
        if (auto r = cq->init(); !r) return r.take_error();
        app_raw_qp_ = std::make_unique<RawQp>(*this, *cq, depth);
        app_raw_cq_ = std::move(cq);
    }
    return RawQueue{app_raw_qp_.get(), app_raw_cq_.get()};
}

// ---- objects ------------------------------------------------------------------------------------------

Result<Cq*> PortImpl::create_cq(uint32_t cqe) {
    Guard g(*this);
    if (cqe == 0 || cqe > kMaxCqe) return Error{EINVAL, str_cat("create_cq: ", cqe, " entries; ask for 1 to ", kMaxCqe)};
    if (live(cqs_) >= kMaxCq) return Error{ENOSPC, str_cat("create_cq: the port has ", kMaxCq, " CQs already")};
    auto cq = std::make_unique<CqImpl>(*this, cqe);
    if (auto r = cq->init(); !r) return r.take_error();
    cqs_.push_back(std::move(cq));
    return cqs_.back().get();
}

Result<Qp*> PortImpl::create_qp(const RdmaQpInitAttr& a) {
    Guard g(*this);
    if (a.qp_type == QpType::raw_packet) return create_raw_packet_qp(a);
    if (auto r = check_qp_init(a); !r) return r.take_error();
    for (uint32_t i = 0; i < qps_.size(); ++i) {
        if (qps_[i] && !qps_[i]->destroyed) continue;
        auto qp = std::make_unique<QpImpl>(*this, qp_numbers_.next(i), a);
        if (auto r = qp->init(); !r) return r.take_error();
        if (qps_[i]) std::erase(ready_, qps_[i].get());   // a destroyed QP may still be listed
        qps_[i] = std::move(qp);
        return qps_[i].get();
    }
    return Error{ENOSPC, str_cat("create_qp: the port has ", qps_.size(), " queue pairs already (PortConfig::max_qp)")};
}

Result<Qp*> PortImpl::create_qp1(const RdmaQpInitAttr& a) {
    Guard g(*this);
    if (a.qp_type != QpType::ud) return Error{EINVAL, "create_qp1: QP1 is a UD queue pair (qp_type ud)"};
    if (qp1_ && !qp1_->destroyed) return Error{EBUSY, "create_qp1: the port has its QP1 already; destroy it first"};
    if (auto r = check_qp_init(a); !r) return r.take_error();
    auto qp = std::make_unique<QpImpl>(*this, kGsiQpn, a);
    if (auto r = qp->init(); !r) return r.take_error();
    if (qp1_) std::erase(ready_, qp1_.get());
    qp1_ = std::move(qp);
    return qp1_.get();
}

Result<void> PortImpl::check_qp_init(const RdmaQpInitAttr& a) {
    auto mine = [&](Cq* c) { return owns(cqs_, c); };
    const bool ini = a.qp_type == QpType::xrc_send, tgt = a.qp_type == QpType::xrc_recv;
    if (a.qp_type != QpType::rc && a.qp_type != QpType::uc && a.qp_type != QpType::ud && !ini && !tgt)
        return Error{EINVAL, "create_qp: this transport has RC, UC, UD, XRC send, XRC receive and raw-packet queue pairs"};
    if (tgt) {   // an XRC receiver: a domain, no CQs or queues of its own
        if (!owns(xrcds_, a.xrcd))
            return Error{EINVAL, "create_qp: an XRC receive queue pair needs xrcd, an XRC domain of this port"};
        if (a.srq || a.send_cq || a.recv_cq)
            return Error{EINVAL, "create_qp: an XRC receive queue pair has no CQs or SRQ of its own (its XRC SRQs have)"};
    } else {
        if (!mine(a.send_cq) || (!ini && !mine(a.recv_cq)) || (ini && a.recv_cq && !mine(a.recv_cq)))
            return Error{EINVAL, "create_qp: send_cq and recv_cq must be completion queues of this port"};
        if (ini && a.srq) return Error{EINVAL, "create_qp: an XRC send queue pair receives nothing (no srq)"};
    }
    if (a.srq && !owns(srqs_, a.srq))
        return Error{EINVAL, "create_qp: srq must be a shared receive queue of this port"};
    if (a.srq && static_cast<SrqImpl*>(a.srq)->xrcd)
        return Error{EINVAL, "create_qp: an XRC SRQ is reached through an XRC receive queue pair, not attached to a QP"};
    if (a.create_flags & ~uint32_t(qp_create_block_self_mcast_lb))
        return Error{EINVAL, str_cat("create_qp: create_flags 0x", std::hex, a.create_flags & ~uint32_t(qp_create_block_self_mcast_lb),
                                     " are not supported (block_self_mcast_lb is)")};
    const RdmaQpCaps& c = a.cap;
    const bool own_rq = !a.srq && !ini && !tgt;
    if (c.max_send_wr == 0 || c.max_send_wr > kMaxQpWr || (own_rq && (c.max_recv_wr == 0 || c.max_recv_wr > kMaxQpWr)) ||
        c.max_send_sge == 0 || c.max_send_sge > kMaxSge || (own_rq && (c.max_recv_sge == 0 || c.max_recv_sge > kMaxSge)) ||
        c.max_inline_data > kMaxInline)
        return Error{EINVAL, str_cat("create_qp: max_send_wr/max_recv_wr 1 to ", kMaxQpWr, ", SGEs 1 to ", kMaxSge,
                                     ", inline data up to ", kMaxInline)};
    return {};
}

PortStats PortImpl::stats() const {
    Guard g(const_cast<PortImpl&>(*this));   // the progress thread writes them under the lock
    return stats_;
}

DeviceCaps PortImpl::query_device() const {
    const vfab::DeviceAttr& d = link_->attr();
    DeviceCaps c;
    VerbsDeviceAttr& a = c.attr;
    std::snprintf(a.fw_ver, sizeof a.fw_ver, "vfab %s", d.provider.c_str());
    // The node GUID from the MAC (EUI-64, as RoCE devices make it), in network byte order.
    const uint8_t* m = d.mac;
    const uint8_t guid[8] = {uint8_t(m[0] ^ 2), m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]};
    std::memcpy(&a.node_guid, guid, 8);
    a.sys_image_guid = a.node_guid;
    a.max_mr_size = ~uint64_t(0);
    a.page_size_cap = ~uint64_t(0);   // REG_MR blocks of any size
    a.vendor_id = d.vendor_id;
    a.vendor_part_id = d.device_id;
    a.max_qp = int(cfg_.max_qp);
    a.max_qp_wr = int(kMaxQpWr);
    a.device_cap_flags = device_resize_max_wr | device_curr_qp_state_mod | device_rc_rnr_nak_gen | device_srq_resize |
                         device_n_notify_cq | device_mem_window | device_mem_mgt_extensions | device_mem_window_type_2b |
                         device_xrc | device_managed_flow_steering;
    a.max_raw_ethy_qp = int(cfg_.max_qp);
    a.max_sge = a.max_sge_rd = int(kMaxSge);
    a.max_cq = int(kMaxCq);
    a.max_cqe = int(kMaxCqe);
    a.max_mr = a.max_mw = int(link_->pd().table().capacity());
    a.max_pd = 1;
    a.max_qp_rd_atom = a.max_qp_init_rd_atom = int(kMaxRdAtomic);
    a.max_res_rd_atom = int(kMaxRdAtomic * cfg_.max_qp);
    a.atomic_cap = AtomicCap::glob;   // the CPU runs them with atomic instructions on host memory
    a.max_ah = int(kMaxAh);
    a.max_mcast_grp = int(kMaxMcastGroups);
    a.max_mcast_qp_attach = int(kMaxMcastQpAttach);
    a.max_total_mcast_qp_attach = int(kMaxMcastGroups * kMaxMcastQpAttach);
    a.max_srq = int(kMaxSrq);
    a.max_srq_wr = int(kMaxSrqWr);
    a.max_srq_sge = int(kMaxSrqSge);
    a.max_pkeys = 1;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = 1;
    c.vfab_caps = vfab_cap_reg_mr_wr | vfab_cap_zero_based | vfab_cap_remote_invalidate | vfab_cap_srq | vfab_cap_async_events |
                  vfab_cap_masked_atomics | vfab_cap_block_self_mcast_lb | vfab_cap_uc;
    if (link_->pd().maps_device_memory()) c.vfab_caps |= vfab_cap_p2p_memory;
    c.max_path_mtu = active_mtu_;
    return c;
}

}  // namespace detail
}  // namespace vfab::rdma
