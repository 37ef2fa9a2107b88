// The loop both fast-path benches run: each round posts BATCH receives and BATCH sends of
// 60-byte frames (one SGE each, zero copy from registered memory), lets the ring model play the
// device, and polls until both completions of every frame are reaped. Only driver_post and
// driver_poll run the driver's code: bench/fastpath_callgrind.sh counts instructions in them.
#pragma once

#include <chrono>
#include <cstdio>
#include <span>
#include <vector>

#include "vfab/types.hpp"

namespace vfab::bench {

template <class Qp>
[[gnu::noipa]] uint32_t driver_post(Qp& qp, std::span<const RecvWr> rx, std::span<const SendWr> tx) {
    PostResult r = qp.post_recv(rx);
    PostResult s = qp.post_send(tx);
    return r.posted + s.posted;
}

template <class Cq>
[[gnu::noipa]] int driver_poll(Cq& cq, std::span<Completion> wc) {
    return cq.poll(wc);
}

// `memory` holds 2 * batch buffers of 2 KiB registered under `lkey`; `device_step()` is the
// ring model. Each SGE starts `headroom` bytes into its buffer (for a driver that writes a
// header there, as virtio-net with QpInitAttr::hdr_in_headroom). Returns the wall-clock nanoseconds per packet, or a negative value on failure
// (reported on stderr). Whole rounds: `frames` rounded up to a multiple of `batch`.
template <class Qp, class Cq, class Step>
double fastpath_loop(Qp& qp, Cq& cq, Step&& device_step, uint8_t* memory, uint32_t lkey, uint32_t batch,
                     uint64_t frames, uint32_t headroom = 0) {
    constexpr uint32_t kBuf = 2048, kFrameLen = 60;
    std::vector<Sge> rsge(batch), tsge(batch);
    std::vector<RecvWr> rwr(batch);
    std::vector<SendWr> twr(batch);
    for (uint32_t i = 0; i < batch; ++i) {
        rsge[i] = {reinterpret_cast<uint64_t>(memory + size_t(i) * kBuf + headroom), kBuf - headroom, lkey};
        tsge[i] = {reinterpret_cast<uint64_t>(memory + size_t(batch + i) * kBuf + headroom), kFrameLen, lkey};
        rwr[i] = {i, &rsge[i], 1, 0};
        twr[i] = {i, &tsge[i], 1, send_signaled};
    }
    std::vector<Completion> wc(2 * batch);
    const auto start = std::chrono::steady_clock::now();
    uint64_t done = 0;
    for (; done < frames; done += batch) {
        if (driver_post(qp, std::span<const RecvWr>(rwr), std::span<const SendWr>(twr)) != 2 * batch) {
            std::fprintf(stderr, "post failed\n");
            return -1;
        }
        device_step();
        for (uint32_t reaped = 0; reaped < 2 * batch;) {
            const int n = driver_poll(cq, std::span<Completion>(wc));
            if (n <= 0) {
                std::fprintf(stderr, "poll returned %d after %u of %u completions\n", n, reaped, 2 * batch);
                return -1;
            }
            reaped += uint32_t(n);
        }
    }
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / double(done);
}

// The same loop with the driver's MMIO accesses counted (`regs`: the model's register space, an
// MmioCounter; the model device's own accesses are not counted). Prints one line; exit status.
template <class Counter, class Qp, class Cq, class Step>
int count_mmio(Counter& regs, Qp& qp, Cq& cq, Step&& device_step, uint8_t* memory, uint32_t lkey, uint32_t batch,
               uint64_t frames, const char* what, uint32_t headroom = 0) {
    regs.start();
    const double ns = fastpath_loop(
        qp, cq,
        [&] {
            regs.pause();
            device_step();
            regs.resume();
        },
        memory, lkey, batch, frames, headroom);
    regs.stop();
    if (ns < 0) return 1;
    const uint64_t done = (frames + batch - 1) / batch * batch;
    std::printf("%s batch %u: %.3f MMIO reads and %.3f MMIO writes per packet (%llu and %llu for %llu packets)\n", what,
                batch, double(regs.reads()) / double(done), double(regs.writes()) / double(done),
                (unsigned long long)regs.reads(), (unsigned long long)regs.writes(), (unsigned long long)done);
    return 0;
}

}  // namespace vfab::bench
