// The connection manager's MADs through a port's QP1 (docs/cm.md): CM messages sent to the CM
// of an IPv4 address (its QP1, the well-known Q_Key) and received with the sender's address.
// Progress is the caller's: poll() runs the port. Everything it makes (QP1, its CQs, the
// address handles, the registered buffers) goes when it does.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "messages.hpp"
#include "vfab/rdma/rdma.hpp"

namespace vfab::cm {

class MadPort {
public:
    // QP1 of `port` with `depth` receive and `depth` send buffers of one MAD each.
    static Result<std::unique_ptr<MadPort>> open(rdma::Port& port, uint32_t depth = 64);
    ~MadPort();
    MadPort(const MadPort&) = delete;
    MadPort& operator=(const MadPort&) = delete;

    // Sends `m` (transaction `tid`) to the CM at `dst_ip`. With every send buffer in use it waits,
    // in order, for poll() to give one back (a burst of connections: 100 REQs answered at once);
    // EAGAIN only when kMaxBacklog wait already (the caller's retransmission timer sends it again).
    Result<void> send(const Message& m, uint64_t tid, uint32_t dst_ip);
    static constexpr size_t kMaxBacklog = 4096;

    struct Received {
        Message msg;
        uint64_t tid = 0;
        uint32_t src_ip = 0;   // the sender's IPv4 address (its GRH)
    };
    // Runs the port, then gives the CM messages received, at most out.size(). Datagrams that are
    // not CM messages are dropped and counted (dropped()).
    size_t poll(std::span<Received> out);
    uint64_t dropped() const noexcept { return dropped_; }
    // Whether a MAD has not left yet: one waits for a buffer, or its send has not completed (as
    // far as the last poll() knows).
    bool sending() const noexcept { return !backlog_.empty() || free_sends_.size() < depth_; }

private:
    MadPort(rdma::Port& port, uint32_t depth) : port_(port), depth_(depth) {}
    Result<void> init();
    void post_recv(uint32_t slot) noexcept;
    rdma::AddressHandle* ah_for(uint32_t ip);
    void reap_sends() noexcept;
    Result<void> post(const Message& m, uint64_t tid, uint32_t dst_ip);   // EAGAIN: no send buffer
    void flush_backlog() noexcept;

    rdma::Port& port_;
    const uint32_t depth_;
    rdma::Cq* send_cq_ = nullptr;
    rdma::Cq* recv_cq_ = nullptr;
    rdma::Qp* qp_ = nullptr;
    std::vector<uint8_t> buffers_;   // depth receive slots (GRH + MAD), then depth send slots
    dma::MemoryRegion mr_{};
    std::vector<uint32_t> free_sends_;
    struct Peer {
        uint32_t ip;
        rdma::AddressHandle* ah;
    };
    std::vector<Peer> peers_;
    uint64_t dropped_ = 0;
    struct Waiting {
        Message msg;
        uint64_t tid;
        uint32_t dst_ip;
    };
    std::deque<Waiting> backlog_;   // sends waiting for a buffer, oldest first
};

}  // namespace vfab::cm
