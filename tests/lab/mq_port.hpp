// Multi-queue lab tests' common parts, for any driver's direct API (virtio-net, igb): a port
// with several queue pairs (one CQ each) and an arena of buffers, IPv4/UDP frames of numbered
// flows, sending from one queue pair and receiving on all of them.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "lab_env.hpp"
#include "vfab/dma/protection_domain.hpp"
#include "vfab/net/checksum.hpp"
#include "vfab/net/rss.hpp"
#include "vfab/types.hpp"

namespace vfab::lab {

inline constexpr uint32_t kMqBuf = 2048, kMqSlots = 128, kMqFlows = 64, kMqFrameLen = 80;

// Driver is a traits struct: Device, CompletionQueue, QueuePair, QpInitAttr, DeviceOptions.
template <class Driver>
struct MqPort {
    std::unique_ptr<typename Driver::Device> dev;
    std::vector<typename Driver::CompletionQueue*> cqs;
    std::vector<typename Driver::QueuePair*> qps;
    uint8_t* data = nullptr;
    dma::MemoryRegion mr;

    void open(const char* name, const typename Driver::DeviceOptions& o, uint32_t nqp) {
        auto d = Driver::Device::open(address_of(name), o);
        ASSERT_TRUE(d.ok()) << d.error().message;
        dev = std::move(*d);
        const size_t len = size_t(nqp) * 2 * kMqSlots * kMqBuf;
        auto arena = dev->pd().create_arena(len);
        ASSERT_TRUE(arena.ok()) << arena.error().message;
        data = (*arena)->data();
        auto m = dev->pd().register_memory(data, len, dma::Access::local_write);
        ASSERT_TRUE(m.ok()) << m.error().message;
        mr = *m;
        for (uint32_t i = 0; i < nqp; ++i) add_qp();
    }
    void add_qp() {
        auto c = dev->create_cq(1024);
        ASSERT_TRUE(c.ok()) << c.error().message;
        typename Driver::QpInitAttr a;
        a.send_cq = a.recv_cq = *c;
        a.caps = {kMqSlots, kMqSlots, 1, 1};
        auto q = dev->create_qp(a);
        ASSERT_TRUE(q.ok()) << q.error().message;
        ASSERT_EQ((*q)->queue(), qps.size());
        cqs.push_back(*c);
        qps.push_back(*q);
    }
    uint8_t* rx_buf(uint32_t q, uint32_t slot) const { return data + (size_t(q) * 2 * kMqSlots + slot) * kMqBuf; }
    uint8_t* tx_buf(uint32_t q, uint32_t slot) const { return rx_buf(q, kMqSlots + slot); }
    void post_recv(uint32_t q, uint32_t slot) {
        const Sge sge{reinterpret_cast<uint64_t>(rx_buf(q, slot)), kMqBuf, mr.lkey};
        const RecvWr wr{slot, &sge, 1, 0};
        ASSERT_EQ(qps[q]->post_recv({&wr, 1}).error, 0);
    }
    void fill_receives() {
        for (uint32_t q = 0; q < qps.size(); ++q)
            for (uint32_t s = 0; s < qps[q]->caps().max_recv_wr && s < kMqSlots; ++s) post_recv(q, s);
    }
};

// An IPv4/UDP frame of flow `flow` carrying `seq`, and the sender's queue at byte 46.
inline void build_udp(uint8_t* f, const uint8_t* dst, const uint8_t* src, uint32_t flow, uint32_t seq, uint8_t queue) {
    std::memset(f, 0, kMqFrameLen);
    std::memcpy(f, dst, 6);
    std::memcpy(f + 6, src, 6);
    f[12] = 0x08;
    uint8_t* ip = f + 14;
    ip[0] = 0x45;
    net::store_be16(ip + 2, kMqFrameLen - 14);
    ip[8] = 64;
    ip[9] = 17;
    const uint8_t saddr[4] = {10, 99, uint8_t(flow / 200), uint8_t(1 + flow % 200)}, daddr[4] = {10, 99, 255, 1};
    std::memcpy(ip + 12, saddr, 4);
    std::memcpy(ip + 16, daddr, 4);
    net::store_be16(ip + 10, net::ipv4_header_checksum(ip));
    uint8_t* udp = ip + 20;
    net::store_be16(udp, uint16_t(20000 + flow * 13));
    net::store_be16(udp + 2, 4791);
    net::store_be16(udp + 4, kMqFrameLen - 34);
    std::memcpy(udp + 8, &seq, 4);
    udp[8 + 4] = queue;
}
inline uint32_t seq_of(const uint8_t* f) {
    uint32_t s;
    std::memcpy(&s, f + 42, 4);
    return s;
}
inline uint32_t flow_of_seq(uint32_t seq) { return seq % kMqFlows; }

// Sends `n` frames (n <= kMqSlots) from queue pair `q` of `port`, seq first_seq.., flows by
// flow_of, and waits for their send completions.
template <class Port>
void send_frames(Port& port, uint32_t q, const uint8_t* dst, uint32_t first_seq, uint32_t n, uint32_t (*flow_of)(uint32_t)) {
    std::vector<Sge> sges(n);
    std::vector<SendWr> wrs(n);
    for (uint32_t i = 0; i < n; ++i) {
        uint8_t* f = port.tx_buf(q, i);
        build_udp(f, dst, port.dev->attr().mac, flow_of(first_seq + i), first_seq + i, uint8_t(q));
        sges[i] = {reinterpret_cast<uint64_t>(f), kMqFrameLen, port.mr.lkey};
        wrs[i] = {first_seq + i, &sges[i], 1, send_signaled};
    }
    ASSERT_EQ(port.qps[q]->post_send(wrs).error, 0);
    uint32_t done = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    Completion wc[64];
    while (done < n && std::chrono::steady_clock::now() < deadline) {
        const int got = port.cqs[q]->poll(wc);
        ASSERT_GE(got, 0);
        for (int i = 0; i < got; ++i)
            if (wc[i].opcode == WcOpcode::send) {
                ASSERT_EQ(wc[i].status, WcStatus::success);
                ++done;
            }
    }
    ASSERT_EQ(done, n) << "send completions missing on queue " << q;
}

struct Arrival {
    uint32_t queue, seq;
    std::vector<uint8_t> frame;
};
// Receives until `n` frames arrived on any of the port's queues (re-posting each buffer).
template <class Port>
std::vector<Arrival> receive(Port& port, uint32_t n) {
    std::vector<Arrival> got;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    Completion wc[64];
    while (got.size() < n && std::chrono::steady_clock::now() < deadline)
        for (uint32_t q = 0; q < port.qps.size(); ++q) {
            const int k = port.cqs[q]->poll(wc);
            EXPECT_GE(k, 0);
            for (int i = 0; i < k; ++i) {
                if (wc[i].opcode != WcOpcode::recv) continue;
                EXPECT_EQ(wc[i].status, WcStatus::success);
                const uint8_t* f = port.rx_buf(q, uint32_t(wc[i].wr_id));
                got.push_back({q, seq_of(f), std::vector<uint8_t>(f, f + wc[i].byte_len)});
                port.post_recv(q, uint32_t(wc[i].wr_id));
            }
        }
    return got;
}

// Sends `n` frames of kMqFlows flows from `from`'s queue 0 to `to`, 64 at a time, and checks
// each lands on the queue `cfg` predicts. The frames per queue of `to`.
template <class From, class To>
std::vector<uint32_t> check_rss(From& from, To& to, const RssConfig& cfg, uint32_t n) {
    std::vector<uint32_t> per_queue(to.qps.size(), 0);
    uint32_t wrong = 0;
    for (uint32_t sent = 0; sent < n; sent += 64) {
        send_frames(from, 0, to.dev->attr().mac, sent, 64, flow_of_seq);
        if (::testing::Test::HasFatalFailure()) return per_queue;
        auto got = receive(to, 64);
        EXPECT_EQ(got.size(), 64u) << "frames lost after " << sent;
        for (const Arrival& a : got) {
            ++per_queue[a.queue];
            const uint16_t want = net::rss_queue(a.frame.data(), a.frame.size(), cfg);
            if (a.queue != want && ++wrong <= 5)
                ADD_FAILURE() << "frame " << a.seq << " (flow " << flow_of_seq(a.seq) << ") arrived on queue " << a.queue
                              << ", the table says " << want;
        }
    }
    EXPECT_EQ(wrong, 0u);
    return per_queue;
}

}  // namespace vfab::lab
