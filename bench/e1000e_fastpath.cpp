// Cost of vfab's e1000e fast path per packet, without a device: post_recv + post_send + the
// polls that reap both completions, over the rings of tests/unit/e1000e_harness.hpp, whose
// model of the 82574L loops each frame back. Only the driver's code is in the functions
// named driver_*; bench/fastpath_callgrind.sh counts their instructions with callgrind
// (--toggle-collect), which is the figure to compare (wall-clock time here is noisy).
//
//   e1000e_fastpath [BATCH] [FRAMES]      prints ns per packet (wall clock, indicative)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "e1000e_harness.hpp"

using namespace vfab;

namespace {

constexpr uint32_t kBuf = 2048;
constexpr uint32_t kFrameLen = 60;

[[gnu::noinline]] uint32_t driver_post(e1000e::QueuePair& qp, std::span<const RecvWr> rx, std::span<const SendWr> tx) {
    PostResult r = qp.post_recv(rx);
    PostResult s = qp.post_send(tx);
    return r.posted + s.posted;
}

[[gnu::noinline]] int driver_poll(e1000e::CompletionQueue& cq, std::span<Completion> wc) { return cq.poll(wc); }

}  // namespace

int main(int argc, char** argv) {
    const uint32_t batch = argc > 1 ? uint32_t(std::atoi(argv[1])) : 32;
    const uint64_t frames = argc > 2 ? uint64_t(std::atoll(argv[2])) : 1000000;
    if (batch == 0 || batch > 256) {
        std::fprintf(stderr, "batch must be 1..256\n");
        return 2;
    }
    e1000e::FastPathHarness h(batch * 2, batch * 2, 1);
    std::vector<uint8_t> mem(size_t(batch) * 2 * kBuf);
    const uint32_t lkey = h.register_memory(mem.data(), mem.size());
    std::vector<Sge> rsge(batch), tsge(batch);
    std::vector<RecvWr> rwr(batch);
    std::vector<SendWr> twr(batch);
    for (uint32_t i = 0; i < batch; ++i) {
        rsge[i] = {reinterpret_cast<uint64_t>(mem.data() + size_t(i) * kBuf), kBuf, lkey};
        tsge[i] = {reinterpret_cast<uint64_t>(mem.data() + size_t(batch + i) * kBuf), kFrameLen, lkey};
        rwr[i] = {i, &rsge[i], 1, 0};
        twr[i] = {i, &tsge[i], 1, send_signaled};
    }
    std::vector<Completion> wc(2 * batch);
    uint64_t done = 0, completions = 0;
    const auto start = std::chrono::steady_clock::now();
    while (done < frames) {
        if (driver_post(h.qp, rwr, twr) != 2 * batch) {
            std::fprintf(stderr, "post failed\n");
            return 1;
        }
        h.device_step();
        uint32_t reaped = 0;
        while (reaped < 2 * batch) {
            int n = driver_poll(h.cq, wc);
            if (n <= 0) {
                std::fprintf(stderr, "poll returned %d\n", n);
                return 1;
            }
            reaped += uint32_t(n);
        }
        completions += reaped;
        done += batch;
    }
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    std::printf("e1000e fast path: batch %u, %llu packets (%llu completions), %.1f ns/packet incl. the ring model\n",
                batch, (unsigned long long)done, (unsigned long long)completions, ns / double(done));
    return 0;
}
