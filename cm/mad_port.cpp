// The CM's MADs through QP1 (see mad_port.hpp).
#include "mad_port.hpp"

#include <algorithm>

namespace vfab::cm {

namespace {
constexpr uint32_t kRecvSlot = uint32_t(rdma::wire::kGrhSize + kMadSize);   // what a UD receive lands
constexpr size_t kGrhSrcIp = rdma::wire::kGrhSize - rdma::wire::kIpv4Header + 12;   // the IPv4 source in the GRH
}  // namespace

Result<std::unique_ptr<MadPort>> MadPort::open(rdma::Port& port, uint32_t depth) {
    if (depth == 0 || depth > 4096) return Error{EINVAL, "CM: 1 to 4096 MAD buffers each way"};
    std::unique_ptr<MadPort> p(new MadPort(port, depth));
    if (auto r = p->init(); !r) return r.take_error();
    return p;
}

Result<void> MadPort::init() {
    auto scq = port_.create_cq(depth_);
    if (!scq) return Error{scq.error().code, "CM: QP1's send CQ: " + scq.error().message};
    send_cq_ = *scq;
    auto rcq = port_.create_cq(depth_);
    if (!rcq) return Error{rcq.error().code, "CM: QP1's receive CQ: " + rcq.error().message};
    recv_cq_ = *rcq;
    rdma::RdmaQpInitAttr ia;
    ia.qp_type = rdma::QpType::ud;
    ia.send_cq = send_cq_;
    ia.recv_cq = recv_cq_;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = depth_;
    auto qp = port_.create_qp1(ia);
    if (!qp) return Error{qp.error().code, "CM: " + qp.error().message};
    qp_ = *qp;
    rdma::QpAttr a;
    a.qp_state = rdma::RdmaQpState::init;
    if (auto r = qp_->modify(a, rdma::attr_state | rdma::attr_pkey_index | rdma::attr_port | rdma::attr_qkey); !r)
        return Error{r.error().code, "CM: QP1 to INIT: " + r.error().message};
    a.qp_state = rdma::RdmaQpState::rtr;
    if (auto r = qp_->modify(a, rdma::attr_state); !r) return Error{r.error().code, "CM: QP1 to RTR: " + r.error().message};
    a.qp_state = rdma::RdmaQpState::rts;
    if (auto r = qp_->modify(a, rdma::attr_state | rdma::attr_sq_psn); !r)
        return Error{r.error().code, "CM: QP1 to RTS: " + r.error().message};
    buffers_.assign(size_t(depth_) * (kRecvSlot + kMadSize), 0);
    auto mr = port_.pd().register_memory(buffers_.data(), buffers_.size(), dma::Access::local_write);
    if (!mr) return Error{mr.error().code, "CM: MAD buffers: " + mr.error().message};
    mr_ = *mr;
    for (uint32_t i = 0; i < depth_; ++i) post_recv(i);
    for (uint32_t i = depth_; i-- > 0;) free_sends_.push_back(i);
    return {};
}

MadPort::~MadPort() {
    if (qp_) (void)qp_->destroy();
    for (const Peer& p : peers_) (void)p.ah->destroy();
    if (send_cq_) (void)send_cq_->destroy();
    if (recv_cq_) (void)recv_cq_->destroy();
    if (mr_.lkey) (void)port_.pd().deregister(mr_);
}

void MadPort::post_recv(uint32_t slot) noexcept {
    Sge s{reinterpret_cast<uint64_t>(buffers_.data() + size_t(slot) * kRecvSlot), kRecvSlot, mr_.lkey};
    RecvWr r{slot, &s, 1, 0};
    (void)qp_->post_recv(std::span(&r, 1));
}

rdma::AddressHandle* MadPort::ah_for(uint32_t ip) {
    for (const Peer& p : peers_)
        if (p.ip == ip) return p.ah;
    rdma::AhAttr a;
    a.dgid = rdma::Gid::from_ipv4(ip);
    auto ah = port_.create_ah(a);
    if (!ah) return nullptr;
    peers_.push_back({ip, *ah});
    return *ah;
}

void MadPort::reap_sends() noexcept {
    rdma::Wc wc[16];
    int n;
    while ((n = send_cq_->poll(wc)) > 0)
        for (int i = 0; i < n; ++i) free_sends_.push_back(uint32_t(wc[i].wr_id));
}

Result<void> MadPort::send(const Message& m, uint64_t tid, uint32_t dst_ip) {
    reap_sends();
    flush_backlog();
    if (backlog_.empty()) {
        auto r = post(m, tid, dst_ip);
        if (r || r.error().code != EAGAIN) return r;
    }
    if (backlog_.size() >= kMaxBacklog) return Error{EAGAIN, "CM: every MAD send buffer is in use and the backlog is full"};
    backlog_.push_back({m, tid, dst_ip});
    return {};
}

void MadPort::flush_backlog() noexcept {
    while (!backlog_.empty() && !free_sends_.empty()) {
        const Waiting& w = backlog_.front();
        (void)post(w.msg, w.tid, w.dst_ip);   // a refused one is the caller's timer's to send again
        backlog_.pop_front();
    }
}

Result<void> MadPort::post(const Message& m, uint64_t tid, uint32_t dst_ip) {
    if (free_sends_.empty()) return Error{EAGAIN, "CM: every MAD send buffer is in use"};
    rdma::AddressHandle* ah = ah_for(dst_ip);
    if (!ah) return Error{ENOMEM, "CM: no address handle for the peer"};
    const uint32_t slot = free_sends_.back();
    uint8_t* mad = buffers_.data() + size_t(depth_) * kRecvSlot + size_t(slot) * kMadSize;
    encode(m, tid, mad);
    Sge s{reinterpret_cast<uint64_t>(mad), uint32_t(kMadSize), mr_.lkey};
    rdma::RdmaSendWr w;
    w.wr_id = slot;
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = rdma::WrOpcode::send;
    w.send_flags = rdma::wr_signaled;
    w.ah = ah;
    w.remote_qpn = rdma::wire::kGsiQpn;
    w.remote_qkey = rdma::wire::kGsiQkey;
    if (auto r = qp_->post_send(std::span(&w, 1)); !r) return Error{r.error, "CM: QP1 refused the MAD"};
    free_sends_.pop_back();
    return {};
}

size_t MadPort::poll(std::span<Received> out) {
    port_.progress();
    reap_sends();
    flush_backlog();
    size_t got = 0;
    rdma::Wc wc[16];
    while (got < out.size()) {
        const int n = recv_cq_->poll(std::span(wc, std::min<size_t>(16, out.size() - got)));
        if (n <= 0) break;
        for (int i = 0; i < n; ++i) {
            const uint32_t slot = uint32_t(wc[i].wr_id);
            const uint8_t* buf = buffers_.data() + size_t(slot) * kRecvSlot;
            Received& r = out[got];
            if (wc[i].status == rdma::RdmaWcStatus::success && wc[i].byte_len >= kRecvSlot &&
                decode(buf + rdma::wire::kGrhSize, kMadSize, r.msg, r.tid) == DecodeResult::ok) {
                r.src_ip = rdma::wire::load32(buf + kGrhSrcIp);
                ++got;
            } else {
                ++dropped_;
            }
            if (wc[i].status != rdma::RdmaWcStatus::wr_flush_err) post_recv(slot);
        }
    }
    return got;
}

}  // namespace vfab::cm
