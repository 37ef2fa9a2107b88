// The raw-packet queue pair an RDMA port carries its frames on, over the device API of the
// application's choice (docs/rdma.md, "Three ways to link"):
//
//   multiplexed   rdma::Port::create(vfab::Device&, cfg)              libvfab, any provider
//   direct        rdma::create_port(e1000e::Device&, cfg)             one driver, no libvfab:
//                 its post/poll inline in DeviceLink<e1000e::Device>, compiled in the caller
//
// The port makes one call here per batch of frames; everything else is the transport's.
#pragma once

#include <cerrno>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>

#include "vfab/dma/protection_domain.hpp"
#include "vfab/result.hpp"
#include "vfab/types.hpp"

namespace vfab::rdma {

class RawLink {
public:
    virtual ~RawLink() = default;
    // The device's attributes: the port takes its MAC, MTU and queue limits from them.
    virtual const DeviceAttr& attr() const = 0;
    // The device's protection domain: the port's frame buffers and the RDMA memory regions are
    // registered in it.
    virtual dma::ProtectionDomain& pd() = 0;
    // Makes the raw queue pair with up to `rx` receive and `tx` send WRs (each at least 8); on
    // success they hold what it took, which may be fewer.
    virtual Result<void> open(uint32_t& rx, uint32_t& tx) = 0;
    // Destroys the queue pair and its CQs: the device no longer uses the port's buffers.
    virtual void close() noexcept = 0;
    // Send completions come on poll_send; with one CQ (one_cq()) received frames may be among them.
    virtual bool one_cq() const noexcept = 0;
    // Frames to send on the raw queue pair, as vfab::QueuePair::post_send (PostResult). Fast
    // path, as are the post and poll calls below; all only between open() and close().
    virtual PostResult post_send(std::span<const SendWr> wrs) noexcept = 0;
    // Receive buffers for the raw queue pair, as vfab::QueuePair::post_recv. Fast path.
    virtual PostResult post_recv(std::span<const RecvWr> wrs) noexcept = 0;
    // Up to out.size() completions of the receive CQ (with one_cq(), send completions among
    // them); a negative errno when the CQ is gone. Fast path.
    virtual int poll_recv(std::span<Completion> out) noexcept = 0;
    // Up to out.size() completions of the send CQ (with one_cq() the receive CQ, received
    // frames among them); a negative errno when the CQ is gone. Fast path.
    virtual int poll_send(std::span<Completion> out) noexcept = 0;
    // The receive CQ's channel: readable after arm_recv() once a frame arrives.
    virtual int recv_channel_fd() const noexcept = 0;
    // Asks the receive CQ for one notification on recv_channel_fd(), as CompletionQueue::arm.
    virtual Result<void> arm_recv() = 0;
    // Clears the receive channel's notifications (CompletionQueue::take_events).
    virtual void take_recv_events() noexcept = 0;
    // The multicast groups the device passes up (vfab::Device::set_multicast).
    virtual Result<void> set_multicast(std::span<const MacAddress> groups) = 0;
    // The link as the device reports it now (vfab::Device::link): the port reads it every
    // kLinkCheckNs and raises port_active / port_error when it changes. Not the fast path.
    virtual LinkState link_state() const = 0;
    RawLink(const RawLink&) = delete;
    RawLink& operator=(const RawLink&) = delete;

protected:
    RawLink() = default;
};

namespace detail {
template <class F>
struct CreateQpArg;
template <class C, class R, class A>
struct CreateQpArg<R (C::*)(const A&)> {
    using type = A;
};
}  // namespace detail

// A RawLink over a device of the multiplexed API (vfab::Device) or of one driver's direct API
// (e1000e::Device, virtio_net::Device, igb::Device, igbvf::Device): the same calls, so one
// template; with a direct device they are non-virtual and inlined here.
template <class Dev>
class DeviceLink final : public RawLink {
public:
    using InitAttr = typename detail::CreateQpArg<decltype(&Dev::create_qp)>::type;
    using Cq = std::remove_pointer_t<decltype(std::declval<InitAttr&>().send_cq)>;
    using Qp = std::remove_pointer_t<std::remove_cvref_t<decltype(*std::declval<Dev&>().create_qp(std::declval<InitAttr&>()))>>;

    // Over `dev`, which must outlive the link; nothing is made on it until open().
    explicit DeviceLink(Dev& dev) : dev_(dev) {}
    ~DeviceLink() override { close(); }

    // The device's attributes (Dev::attr()).
    const DeviceAttr& attr() const override { return dev_.attr(); }
    // The device's protection domain (Dev::pd()).
    dma::ProtectionDomain& pd() override { return dev_.pd(); }

    Result<void> open(uint32_t& rx, uint32_t& tx) override {
        const DeviceAttr& a = dev_.attr();
        // Two CQs where the device has them, so that taking back send buffers never meets a
        // received frame.
        auto rcq = dev_.create_cq(a.max_cq >= 2 ? rx : rx + tx);
        if (!rcq) return rcq.take_error();
        rcq_ = scq_ = *rcq;
        if (a.max_cq >= 2) {
            auto scq = dev_.create_cq(tx);
            if (!scq) return scq.take_error();
            scq_ = *scq;
        }
        // A queue may hold fewer WRs than asked for (a virtqueue needs a descriptor more per WR).
        for (;;) {
            InitAttr qa{};
            qa.send_cq = scq_;
            qa.recv_cq = rcq_;
            qa.caps = {tx, rx, 1, 1};
            qa.sq_sig_all = true;
            auto qp = dev_.create_qp(qa);
            if (qp) {
                qp_ = *qp;
                return {};
            }
            if (rx <= 8 || tx <= 8) return qp.take_error();
            rx /= 2;
            tx /= 2;
        }
    }

    void close() noexcept override {
        if (qp_) (void)qp_->destroy();
        if (scq_ && scq_ != rcq_) (void)scq_->destroy();
        if (rcq_) (void)rcq_->destroy();
        qp_ = nullptr;
        rcq_ = scq_ = nullptr;
    }

    bool one_cq() const noexcept override { return rcq_ == scq_; }
    // The queue pair's post_send, inlined for a direct device. After open() only.
    PostResult post_send(std::span<const SendWr> wrs) noexcept override { return qp_->post_send(wrs); }
    // The queue pair's post_recv, inlined for a direct device. After open() only.
    PostResult post_recv(std::span<const RecvWr> wrs) noexcept override { return qp_->post_recv(wrs); }
    // The receive CQ's poll, inlined for a direct device. After open() only.
    int poll_recv(std::span<Completion> out) noexcept override { return rcq_->poll(out); }
    // The send CQ's poll (the receive CQ's when one_cq()). After open() only.
    int poll_send(std::span<Completion> out) noexcept override { return scq_->poll(out); }
    int recv_channel_fd() const noexcept override { return rcq_->channel_fd(); }
    // The receive CQ's arm(). After open() only.
    Result<void> arm_recv() override { return rcq_->arm(); }
    // The receive CQ's take_events(), its count dropped. After open() only.
    void take_recv_events() noexcept override { (void)rcq_->take_events(); }
    Result<void> set_multicast(std::span<const MacAddress> groups) override {
        if constexpr (requires { dev_.set_multicast(groups); })
            return dev_.set_multicast(groups);
        else
            return Error{EOPNOTSUPP, "this device has no multicast filter in its direct API"};
    }
    LinkState link_state() const override { return dev_.link(); }

private:
    Dev& dev_;
    Cq* rcq_ = nullptr;
    Cq* scq_ = nullptr;
    Qp* qp_ = nullptr;
};

}  // namespace vfab::rdma
