// Raw-packet queue pairs (QpType::raw_packet, ibv's IBV_QPT_RAW_PACKET) and the flows that
// steer received frames to them (docs/rdma-raw-packet.md). A raw-packet queue pair sends
// whole Ethernet frames with the port's own and receives the frames its flows match: those the
// transport does not take (RoCEv2 for the port's address), or, for a sniffer, every one; the
// multicast frames the port's raw-packet queue pairs send are offered to its flows too.
#pragma once

#include <memory>
#include <vector>

#include "qp_numbers.hpp"
#include "vfab/rdma/rdma.hpp"

namespace vfab::rdma::detail {

class PortImpl;
class CqImpl;

inline constexpr uint32_t kFirstRawQpn = kQpnLimit;   // raw-packet QP numbers: this + index
inline constexpr uint32_t kMaxFlows = 1024;           // flows of a port

class RawPacketQp final : public Qp {
public:
    RawPacketQp(PortImpl& port, uint32_t qpn, const RdmaQpInitAttr& a);

    // The states of IB spec table 91 with no attributes of a connection: RESET, INIT (port),
    // RTR (receives), RTS (sends); ERR flushes the posted receives.
    Result<void> modify(const QpAttr& attr, uint32_t mask) override;
    QpAttr query() const override;
    // Each WR is one frame (SEND only), gathered at post time into a send buffer of the port:
    // it completes at once. EINVAL: not in RTS, another opcode, too many SGEs or inline bytes,
    // shorter than an Ethernet header or longer than the link's frames; ENOMEM: no send buffer
    // free now (post it again). A bad lkey completes the WR with loc_prot_err.
    PostResult post_send(std::span<const RdmaSendWr> wrs) noexcept override;
    // EINVAL in RESET or with more SGEs than max_recv_sge; ENOMEM: the queue is full. Keys are
    // checked as a frame lands (loc_prot_err then).
    PostResult post_recv(std::span<const RecvWr> wrs) noexcept override;
    uint32_t qp_num() const noexcept override { return qpn_; }
    QpType type() const noexcept override { return QpType::raw_packet; }
    RdmaQpState state() const noexcept override;   // under the port's lock: the thread moves it
    Result<uint32_t> bind_mw(uint32_t, const MwBindInfo&, uint64_t, uint32_t) override;
    Result<void> attach_mcast(const Gid&, uint16_t) override;
    Result<void> detach_mcast(const Gid&, uint16_t) override;
    // EBUSY while a flow names it (destroy those first, as with a kernel device).
    Result<void> destroy() override;

    // A frame a flow steered here, scattered into the oldest receive (a completion, loc_len_err
    // when it does not fit); false when the queue pair takes none now (not in RTR or RTS, or no
    // receive posted).
    bool deliver(const uint8_t* frame, uint32_t len) noexcept;
    // Its CQ lost a completion: qp_fatal, and the error state.
    void cq_overran() noexcept;
    bool uses(const CqImpl* cq) const noexcept { return cq == scq_ || cq == rcq_; }
    bool destroyed = false;
    uint32_t flows = 0;   // live flows naming it

private:
    void to_error() noexcept;
    PortImpl& port_;
    const uint32_t qpn_;
    CqImpl* const scq_;
    CqImpl* const rcq_;
    const bool sq_sig_all_;
    const RdmaQpCaps cap_;
    RdmaQpState state_ = RdmaQpState::reset;
    uint8_t port_num_ = 1;
    struct Recv {
        uint64_t wr_id = 0;
        uint32_t nsge = 0;
    };
    std::vector<Recv> rq_;      // a ring of a power of two
    std::vector<Sge> rq_sges_;  // cap_.max_recv_sge per slot
    uint32_t rq_head_ = 0, rq_tail_ = 0;
};

class FlowImpl final : public Flow {
public:
    FlowImpl(PortImpl& port, RawPacketQp* qp, const FlowRule& rule) : qp(qp), rule(rule), port_(port) {}
    Result<void> destroy() override;
    RawPacketQp* const qp;
    const FlowRule rule;
    bool destroyed = false;

private:
    PortImpl& port_;
};

// The fields of a received frame a rule can look at, read once per frame.
struct FrameKeys {
    const uint8_t* dst_mac = nullptr;
    const uint8_t* src_mac = nullptr;
    uint16_t ether_type = 0;
    bool has_vlan = false;
    uint16_t vlan_tag = 0;
    bool ipv4 = false;
    uint32_t src_ip = 0, dst_ip = 0;
    uint8_t ip_proto = 0;
    bool has_ports = false;   // TCP or UDP, and not a later fragment
    uint16_t src_port = 0, dst_port = 0;
    static FrameKeys of(const uint8_t* f, uint32_t len) noexcept;   // len >= 14
};
bool matches(const FlowRule& r, const FrameKeys& k) noexcept;

}  // namespace vfab::rdma::detail
