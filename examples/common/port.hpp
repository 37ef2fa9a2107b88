// One NIC port as the examples use it: a device opened through a driver's direct API (e1000e
// by default: Port; BasicPort<Driver> for another driver of the same shape), one completion
// queue shared by sends and receives, one raw-packet queue pair, and an arena of 2 KiB
// buffers registered with the device's protection domain (send buffers first, then receive
// buffers). Every setup error is the driver's own message, prefixed with the port.
#pragma once

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "device_events.hpp"
#include "packet.hpp"
#include "vfab/dma/dma_memory.hpp"
#include "vfab/drivers/e1000e.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::examples {

struct PortOptions {
    uint32_t send_slots = 256;   // send buffers (and send queue depth)
    uint32_t recv_slots = 511;   // receive buffers (and receive queue depth)
    bool promiscuous = false;    // where the driver has the option
};

template <class Driver>
class BasicPort {
public:
    static constexpr uint32_t kBuf = 2048;
    using Device = typename Driver::Device;
    using CompletionQueue = typename Driver::CompletionQueue;
    using QueuePair = typename Driver::QueuePair;

    // `opts`: the driver's own device options (PortOptions::promiscuous goes into them).
    static Result<BasicPort> open(std::string_view bdf, const PortOptions& o = {}, typename Driver::DeviceOptions opts = {}) {
        auto addr = PciAddress::parse(bdf);
        if (!addr) return addr.take_error();
        // The driver's messages mostly name the device already; name it where they do not.
        const std::string where = addr->to_string();
        auto fail = [&](const Error& e) {
            return e.message.find(where) != std::string::npos ? e : Error{e.code, str_cat(where, ": ", e.message)};
        };
        if constexpr (requires { opts.promiscuous; }) opts.promiscuous = opts.promiscuous || o.promiscuous;
        auto dev = Device::open(*addr, opts);
        if (!dev) return fail(dev.error());
        BasicPort p;
        p.dev_ = std::move(*dev);
        auto cq = p.dev_->create_cq(o.send_slots + o.recv_slots);
        if (!cq) return fail(cq.error());
        p.cq_ = *cq;
        typename Driver::QpInitAttr qa;
        qa.send_cq = qa.recv_cq = p.cq_;
        qa.caps.max_send_wr = o.send_slots;
        qa.caps.max_recv_wr = o.recv_slots;
        auto qp = p.dev_->create_qp(qa);
        if (!qp) return fail(qp.error());
        p.qp_ = *qp;
        p.send_slots_ = o.send_slots;
        p.recv_slots_ = std::min(o.recv_slots, p.qp_->caps().max_recv_wr);
        const size_t len = size_t(p.send_slots_ + p.recv_slots_) * kBuf;
        auto arena = p.dev_->pd().create_arena(len, dma::near_device(*addr));
        if (!arena) return fail(arena.error());
        auto mr = p.dev_->pd().register_memory((*arena)->data(), len, dma::Access::local_write);
        if (!mr) return fail(mr.error());
        p.buffers_ = (*arena)->data();
        p.mr_ = *mr;
        std::memcpy(p.mac_.data(), p.dev_->attr().mac, 6);
        return p;
    }

    Device& device() { return *dev_; }
    CompletionQueue& cq() { return *cq_; }
    QueuePair& qp() { return *qp_; }
    const pkt::Mac& mac() const { return mac_; }
    std::string name() const { return dev_->attr().address.to_string(); }
    uint32_t send_slots() const { return send_slots_; }
    uint32_t recv_slots() const { return recv_slots_; }
    uint32_t lkey() const { return mr_.lkey; }

    // Send buffer i (0..send_slots) and receive buffer i (0..recv_slots).
    uint8_t* send_buffer(uint32_t i) const { return buffers_ + size_t(i) * kBuf; }
    uint8_t* recv_buffer(uint32_t i) const { return buffers_ + size_t(send_slots_ + i) * kBuf; }

    // The device's asynchronous events, without blocking (next_event() until none): nothing
    // while the port can carry on, or one line saying why it cannot — the kernel wants the
    // device back (removal), it stopped working, or it was reset. Traffic must then stop and the
    // port be closed promptly: a removal waits for the close. Cheap enough to call whenever a
    // poll found nothing; a busy loop also calls it every few milliseconds.
    std::optional<std::string> stop_reason() { return examples::stop_reason(*dev_, name()); }
    // Readable when an event may be waiting (for poll(2) beside the completion channels).
    int event_fd() const { return dev_->event_fd(); }

    // Posts receive buffer `slot` (wr_id = slot).
    PostResult post_recv(uint32_t slot) noexcept {
        Sge sge{reinterpret_cast<uint64_t>(recv_buffer(slot)), kBuf, mr_.lkey};
        RecvWr wr{slot, &sge, 1, 0};
        return qp_->post_recv({&wr, 1});
    }
    // Posts every receive buffer.
    PostResult post_all_recv() noexcept {
        for (uint32_t s = 0; s < recv_slots_; ++s)
            if (PostResult r = post_recv(s); !r) return r;
        return {0, recv_slots_};
    }
    // Sends `len` bytes at `buf` (inside the arena) as one frame.
    PostResult send(uint64_t wr_id, const uint8_t* buf, uint32_t len, uint32_t flags = send_signaled) noexcept {
        Sge sge{reinterpret_cast<uint64_t>(buf), len, mr_.lkey};
        SendWr wr{wr_id, &sge, 1, flags};
        return qp_->post_send({&wr, 1});
    }

private:
    BasicPort() = default;
    std::unique_ptr<Device> dev_;
    CompletionQueue* cq_ = nullptr;
    QueuePair* qp_ = nullptr;
    uint8_t* buffers_ = nullptr;   // in an arena the protection domain owns
    dma::MemoryRegion mr_;
    pkt::Mac mac_{};
    uint32_t send_slots_ = 0, recv_slots_ = 0;
};

using Port = BasicPort<e1000e::Driver>;

// Interrupt mode: arm every completion queue, then sleep until one of their channels fires
// (or timeout_ms passes). arm() signals at once when a completion is already waiting, so no
// completion is slept through. Returns 1 when a channel fired, 0 on timeout, -1 (and sets
// `error`) when arming or waiting failed. Any driver's completion queues (name the type:
// wait_for_completions<virtio_net::CompletionQueue>(...)); e1000e's by the overload below.
template <class Cq>
int wait_for_completions(std::span<Cq* const> cqs, int timeout_ms, std::string& error) {
    pollfd fds[64];
    if (cqs.size() > std::size(fds)) {
        error = "wait_for_completions: more than " + std::to_string(std::size(fds)) + " completion queues";
        return -1;
    }
    size_t n = 0;
    for (Cq* cq : cqs) {
        if (auto r = cq->arm(); !r) {
            error = "arm: " + r.error().message;
            return -1;
        }
        fds[n++] = {cq->channel_fd(), POLLIN, 0};
    }
    const int ready = ::poll(fds, n, timeout_ms);
    if (ready < 0 && errno != EINTR) {
        error = std::string("poll: ") + std::strerror(errno);
        return -1;
    }
    for (Cq* cq : cqs) cq->take_events();
    return ready > 0 ? 1 : 0;
}

inline int wait_for_completions(std::span<e1000e::CompletionQueue* const> cqs, int timeout_ms, std::string& error) {
    return wait_for_completions<e1000e::CompletionQueue>(cqs, timeout_ms, error);
}

}  // namespace vfab::examples
