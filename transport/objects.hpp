// The port's objects besides queue pairs: completion queues, address handles, XRC domains and
// shared receive queues. Private to transport/.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "channel.hpp"
#include "common.hpp"
#include "recv_queue.hpp"

namespace vfab::rdma::detail {

class PortImpl;

class CqImpl final : public Cq {
public:
    CqImpl(PortImpl& port, uint32_t capacity);
    Result<void> init();

    int poll(std::span<Wc> out) noexcept override;
    Result<void> arm(bool solicited_only) override;
    int channel_fd() const noexcept override { return channel_.fd(); }
    uint64_t take_events() noexcept override;
    uint64_t overruns() const noexcept override;   // under the port's lock: the thread counts them
    void set_ignore_overrun(bool on) noexcept override;   // under the port's lock
    void set_notify_hook(void (*hook)(void*), void* ctx) noexcept override;
    Result<uint32_t> resize(uint32_t cqe) override;
    Result<void> destroy() override;

    // Adds a completion; false (and counted) when the queue is full: the port then raises
    // cq_error and puts the CQ's queue pairs in error (PortImpl::fail_overrun_cqs).
    bool push(const Wc& wc, bool solicited) noexcept;
    uint32_t users = 0;        // queue pairs using it
    bool destroyed = false;
    bool overran = false;      // cq_error raised: once per CQ
    bool ignore_overrun_ = false;
    uint64_t overruns_ = 0;

private:
    PortImpl& port_;
    std::vector<Wc> ring_;
    uint64_t head_ = 0, tail_ = 0;
    bool solicited_only_ = false;
    Channel channel_;
};

class AhImpl final : public AddressHandle {
public:
    AhImpl(PortImpl& port, const AhAttr& a) : port_(port), attr_(a) {}
    const AhAttr& attr() const noexcept override { return attr_; }
    Result<void> destroy() override;
    Result<void> wait_resolved(uint32_t limit_ms) override;
    bool destroyed = false;
    // The destination's MAC once ARP gave it (under the port's lock), kept as a RoCE device's
    // address handle keeps its: later sends never wait for the ARP table, which may have let
    // the entry go; a new MAC the peer announces is copied in (PortImpl::on_arp).
    mutable uint8_t mac[6] = {};
    mutable bool mac_known = false;
    // The MAC known (true), or asked of the ARP table, which starts ARP; `failed` (false on
    // entry) once ARP gave up. Under the port's lock.
    bool mac_ready(bool& failed) const noexcept { return mac_known || learn_mac(failed); }

private:
    bool learn_mac(bool& failed) const noexcept;   // arp.cpp
    PortImpl& port_;
    AhAttr attr_;
};

class XrcdImpl final : public XrcDomain {
public:
    explicit XrcdImpl(PortImpl& port) : port_(port) {}
    Result<void> destroy() override;
    uint32_t users = 0;   // XRC SRQs and receive queue pairs in it
    bool destroyed = false;

private:
    PortImpl& port_;
};

class SrqImpl final : public Srq {
public:
    SrqImpl(PortImpl& port, const SrqAttr& a, uint32_t srqn) : srqn(srqn), port_(port), limit_(a.srq_limit) {
        rq.init(a.max_wr, a.max_sge);
    }
    PostResult post_recv(std::span<const RecvWr> wrs) noexcept override;
    Result<void> modify(const SrqAttr& attr, uint32_t mask) override;
    SrqAttr query() const override;
    uint32_t srq_num() const noexcept override { return srqn; }
    Result<void> destroy() override;
    const uint32_t srqn;
    XrcdImpl* xrcd = nullptr;   // an XRC SRQ: its domain and the CQ its receives complete on
    CqImpl* cq = nullptr;

    // A queue pair took a WR: the limit event when fewer than the limit stay posted.
    void taken() noexcept;
    RecvQueue rq;
    uint32_t users = 0;   // queue pairs using it
    bool destroyed = false;

private:
    PortImpl& port_;
    uint32_t limit_ = 0;
};

}  // namespace vfab::rdma::detail
