// Cost of vfab's virtio-net fast path per packet, without a device: post_recv + post_send + the
// polls that reap both completions, over split or packed rings in this process whose model
// device (tests/unit/virtio_model.hpp) loops each frame back. Only the driver's code is in the
// functions named driver_*; bench/fastpath_callgrind.sh virtio-split/-packed counts their instructions.
//
//   virtio_net_fastpath split|packed [BATCH] [FRAMES]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "virtio_net_harness.hpp"

using namespace vfab;
using namespace vfab::virtio_net;

namespace {

constexpr uint32_t kBuf = 2048, kFrameLen = 60, kSize = 256;

[[gnu::noinline]] uint32_t driver_post(QueuePair& qp, std::span<const RecvWr> rx, std::span<const SendWr> tx) {
    PostResult r = qp.post_recv(rx);
    PostResult s = qp.post_send(tx);
    return r.posted + s.posted;
}

[[gnu::noinline]] int driver_poll(CompletionQueue& cq, std::span<Completion> wc) { return cq.poll(wc); }

template <class Q, class D>
int run(bool packed, uint32_t batch, uint64_t frames) {
    const virtio::RingFeatures f{true, false};   // EVENT_IDX, as negotiated with QEMU
    LoopbackRings<Q, D> rings(kSize, f);
    FastPathHarness h;
    h.attach(rings, kSize, f, packed);
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
    uint64_t done = 0;
    const auto start = std::chrono::steady_clock::now();
    while (done < frames) {
        if (driver_post(h.qp, rwr, twr) != 2 * batch) {
            std::fprintf(stderr, "post failed\n");
            return 1;
        }
        rings.step();
        uint32_t reaped = 0;
        while (reaped < 2 * batch) {
            const int n = driver_poll(h.cq, wc);
            if (n <= 0) {
                std::fprintf(stderr, "poll returned %d after %u of %u completions\n", n, reaped, 2 * batch);
                return 1;
            }
            reaped += uint32_t(n);
        }
        done += batch;
    }
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    std::printf("virtio-net fast path (%s): batch %u, %llu packets, %.1f ns/packet incl. the model device\n",
                packed ? "packed" : "split", batch, (unsigned long long)done, ns / double(done));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const bool packed = argc > 1 && std::strcmp(argv[1], "packed") == 0;
    const uint32_t batch = argc > 2 ? uint32_t(std::atoi(argv[2])) : 32;
    const uint64_t frames = argc > 3 ? uint64_t(std::atoll(argv[3])) : 200000;
    if (argc > 1 && !packed && std::strcmp(argv[1], "split") != 0) {
        std::fprintf(stderr, "usage: virtio_net_fastpath split|packed [BATCH 1..64] [FRAMES]\n");
        return 2;
    }
    if (batch == 0 || batch > 64) {
        std::fprintf(stderr, "batch must be 1..64\n");
        return 2;
    }
    return packed ? run<virtio::PackedQueue, virtio::model::PackedDevice>(true, batch, frames)
                  : run<virtio::SplitQueue, virtio::model::SplitDevice>(false, batch, frames);
}
