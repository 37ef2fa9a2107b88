// The traffic check shared by the e1000e lab tests of every API (direct, multiplexed, C):
// `count` frames of sizes 60..1514 from one queue pair to another, sent zero-copy from user
// memory registered on the sender and received zero-copy into user memory registered on the
// receiver; content, length and order of every frame verified.
//
// Works with any queue pair / completion queue pair of types offering post_send, post_recv
// and poll with the vfab signatures.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "frames.hpp"
#include "vfab/types.hpp"

namespace vfab::lab {

struct TrafficSide {
    const uint8_t* mac;
    uint8_t* buffers;     // `slots` buffers of 2048 bytes, registered under `lkey`
    uint32_t lkey;
    uint32_t slots;
    uint32_t room = 0;    // each frame starts this far into its buffer (a header in headroom)
};

struct TrafficResult {
    std::string error;    // empty: every frame arrived intact and in order
    uint64_t frames = 0;
    double seconds = 0;
};

template <class Qp, class Cq>
TrafficResult run_traffic(Qp& tx_qp, Cq& tx_cq, Qp& rx_qp, Cq& rx_cq, const TrafficSide& tx, const TrafficSide& rx,
                          uint32_t count, bool split_sges = true) {
    constexpr uint32_t kBuf = 2048;
    TrafficResult res;
    auto fail = [&](std::string why) {
        res.error = std::move(why);
        return res;
    };
    auto post_rx = [&](uint32_t slot) {
        Sge sge{reinterpret_cast<uint64_t>(rx.buffers + size_t(slot) * kBuf + rx.room), kBuf - rx.room, rx.lkey};
        RecvWr wr{slot, &sge, 1, 0};
        return rx_qp.post_recv(std::span<const RecvWr>(&wr, 1));
    };
    for (uint32_t s = 0; s < rx.slots; ++s)
        if (PostResult r = post_rx(s); !r) return fail("post_recv: errno " + std::to_string(r.error));

    std::vector<uint32_t> free_tx;
    for (uint32_t s = 0; s < tx.slots; ++s) free_tx.push_back(s);
    uint32_t sent = 0, received = 0, send_done = 0;
    Completion wc[32];
    const auto start = std::chrono::steady_clock::now();
    auto last_progress = start;
    while (received < count) {
        // Send while the receiver has buffers for every frame in flight.
        SendWr wrs[16];
        Sge sges[16][2];
        uint32_t n = 0;
        while (n < 16 && sent + n < count && !free_tx.empty() && (sent + n) - received < rx.slots) {
            const uint32_t seq = sent + n, len = frame_size(seq), slot = free_tx.back();
            free_tx.pop_back();
            uint8_t* f = tx.buffers + size_t(slot) * kBuf + tx.room;
            build_frame(f, len, rx.mac, tx.mac, seq);
            // Every third frame goes out as two SGEs (header, payload): scatter/gather.
            const bool split = split_sges && seq % 3 == 0;
            sges[n][0] = {reinterpret_cast<uint64_t>(f), split ? 14u : len, tx.lkey};
            sges[n][1] = {reinterpret_cast<uint64_t>(f + 14), len - 14, tx.lkey};
            wrs[n] = {uint64_t(slot) << 32 | seq, sges[n], split ? 2u : 1u, send_signaled};
            ++n;
        }
        if (n) {
            PostResult r = tx_qp.post_send(std::span<const SendWr>(wrs, n));
            if (r.error != 0 && r.error != ENOMEM) return fail("post_send: errno " + std::to_string(r.error));
            for (uint32_t i = r.posted; i < n; ++i) free_tx.push_back(uint32_t(wrs[i].wr_id >> 32));
            sent += r.posted;
        }
        int got = tx_cq.poll(std::span<Completion>(wc));
        if (got < 0) return fail("poll(send CQ): " + std::to_string(got));
        for (int i = 0; i < got; ++i) {
            if (wc[i].opcode != WcOpcode::send) continue;
            if (wc[i].status != WcStatus::success) return fail(std::string("send completion: ") + to_string(wc[i].status));
            if (uint32_t(wc[i].wr_id) != send_done) return fail("send completions out of order");
            ++send_done;
            free_tx.push_back(uint32_t(wc[i].wr_id >> 32));
        }
        got = rx_cq.poll(std::span<Completion>(wc));
        if (got < 0) return fail("poll(receive CQ): " + std::to_string(got));
        for (int i = 0; i < got; ++i) {
            if (wc[i].opcode != WcOpcode::recv) continue;
            if (wc[i].status != WcStatus::success) return fail(std::string("receive completion: ") + to_string(wc[i].status));
            const auto slot = uint32_t(wc[i].wr_id);
            std::string bad = check_frame(rx.buffers + size_t(slot) * kBuf + rx.room, wc[i].byte_len, received);
            if (!bad.empty()) return fail(bad);
            ++received;
            if (PostResult r = post_rx(slot); !r) return fail("post_recv: errno " + std::to_string(r.error));
        }
        const auto now = std::chrono::steady_clock::now();
        if (got > 0) last_progress = now;
        if (now - last_progress > std::chrono::seconds(10))
            return fail("no frame for 10 s: sent " + std::to_string(sent) + ", received " + std::to_string(received));
    }
    res.frames = received;
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return res;
}

}  // namespace vfab::lab
