// Raw Ethernet frames beside RDMA on the port's device queue: a software queue pair and CQ with
// the provider API's interface (vfab::QueuePair, vfab::CompletionQueue). Frames that are not
// the transport's — not RoCEv2 for the port's address, and every ARP frame too — are copied
// into the receives posted here; frames posted here leave with the port's own. An application
// keeps its raw traffic on a NIC whose only queue the port drives (e1000e, igbvf). The
// provider API's types are named vfab:: here: the RDMA API has types of the same names.
#pragma once

#include <vector>

#include "channel.hpp"
#include "vfab/vfab.hpp"

namespace vfab::rdma::detail {

class PortImpl;

inline constexpr uint32_t kRawMaxSge = 8;   // SGEs of a raw send

// A raw frame's bytes gathered into `to` from `n` SGEs, under their lkeys (local access) or, for
// inline data, from their addresses as they are; false, with `to` partly written, when a key
// does not translate. Both raw queues' sends (RawQp, RawPacketQp).
bool gather_frame(dma::MrTable& mrs, const Sge* sgl, uint32_t n, bool inline_data, uint8_t* to) noexcept;

class RawCq final : public vfab::CompletionQueue {
public:
    RawCq(PortImpl& port, uint32_t depth);
    Result<void> init();
    int poll(std::span<vfab::Completion> out) noexcept override;
    Result<void> arm() override;
    int channel_fd() const noexcept override { return channel_.fd(); }
    uint64_t take_events() noexcept override;
    Result<void> destroy() override { return Error{EBUSY, "the raw CQ goes with its RDMA port"}; }
    void push(const vfab::Completion& c) noexcept;
    uint64_t overruns = 0;

private:
    PortImpl& port_;
    std::vector<vfab::Completion> ring_;
    uint64_t head_ = 0, tail_ = 0;
    Channel channel_;
};

class RawQp final : public vfab::QueuePair {
public:
    RawQp(PortImpl& port, RawCq& cq, uint32_t depth);
    PostResult post_send(std::span<const vfab::SendWr> wrs) noexcept override;
    PostResult post_recv(std::span<const vfab::RecvWr> wrs) noexcept override;
    vfab::QpState state() const noexcept override { return vfab::QpState::ready; }
    uint32_t qp_num() const noexcept override { return 0; }
    const vfab::QpCaps& caps() const noexcept override { return caps_; }
    uint32_t queue() const noexcept override { return 0; }
    vfab::QpStats stats() const noexcept override { return stats_; }
    Result<void> destroy() override { return Error{EBUSY, "the raw queue pair goes with its RDMA port"}; }
    // A frame for the application into the oldest receive; false when none is posted.
    bool deliver(const uint8_t* frame, uint32_t len) noexcept;

private:
    PortImpl& port_;
    RawCq& cq_;
    vfab::QpCaps caps_;
    vfab::QpStats stats_;
    std::vector<vfab::RecvWr> rq_;
    std::vector<vfab::Sge> rq_sges_;
    uint32_t rq_head_ = 0, rq_tail_ = 0;
};

}  // namespace vfab::rdma::detail
