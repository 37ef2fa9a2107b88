// Cost of vfab's virtio-net fast path per packet, without a device: post_recv + post_send + the
// polls that reap both completions, over split or packed rings in this process whose model
// device (tests/unit/virtio_model.hpp) loops each frame back (the loop: fastpath_loop.hpp).
// bench/fastpath_callgrind.sh virtio-split|virtio-packed counts the driver's instructions.
//
//   virtio_net_fastpath split|packed [BATCH] [FRAMES] [chain|headroom] [in-order|any-order] [mmio]
// chain (the default): the driver's header descriptor, then the frame's; headroom: the header
// in the 64 bytes before each frame (QpInitAttr::hdr_in_headroom), one descriptor per frame.
// in-order: VIRTIO_F_IN_ORDER, as DPDK's vhost back-end offers (QEMU's virtio-net does not).
// mmio: instead of timing, the notifications (doorbell stores) per packet (bench/mmio_counter.hpp).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fastpath_loop.hpp"
#include "mmio_counter.hpp"
#include "virtio_net_harness.hpp"

using namespace vfab;
using namespace vfab::virtio_net;

namespace {

constexpr uint32_t kSize = 256;

constexpr uint32_t kHeadroom = 64;

template <class Q, class D>
int run(bool packed, uint32_t batch, uint64_t frames, bool headroom, bool in_order, bool mmio) {
    const virtio::RingFeatures f{true, in_order};   // EVENT_IDX, as negotiated with QEMU
    LoopbackRings<Q, D> rings(kSize, f);
    bench::MmioCounter bell(sizeof(uint16_t));
    FastPathHarness h(rings, kSize, f, headroom, reinterpret_cast<uint16_t*>(bell.data()));
    std::vector<uint8_t> mem(size_t(batch) * 2 * 2048);
    const uint32_t lkey = h.register_memory(mem.data(), mem.size());
    if (mmio)
        return bench::count_mmio(bell, h.qp, h.cq, [&] { rings.step(); }, mem.data(), lkey, batch, frames,
                                 packed ? "virtio-net packed" : "virtio-net split", headroom ? kHeadroom : 0);
    const double ns = bench::fastpath_loop(h.qp, h.cq, [&] { rings.step(); }, mem.data(), lkey, batch, frames,
                                           headroom ? kHeadroom : 0);
    if (ns < 0) return 1;
    std::printf("virtio-net fast path (%s, %s%s): batch %u, %llu packets, %.1f ns/packet incl. the model device\n",
                packed ? "packed" : "split", headroom ? "header in headroom" : "header descriptor",
                in_order ? ", in order" : "", batch, (unsigned long long)frames, ns);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const bool packed = argc > 1 && std::strcmp(argv[1], "packed") == 0;
    const uint32_t batch = argc > 2 ? uint32_t(std::atoi(argv[2])) : 32;
    const uint64_t frames = argc > 3 ? uint64_t(std::atoll(argv[3])) : 200000;
    const bool headroom = argc > 4 && std::strcmp(argv[4], "headroom") == 0;
    const bool in_order = argc > 5 && std::strcmp(argv[5], "in-order") == 0;
    const bool mmio = argc > 6 && std::strcmp(argv[6], "mmio") == 0;
    if ((argc > 1 && !packed && std::strcmp(argv[1], "split") != 0) ||
        (argc > 4 && !headroom && std::strcmp(argv[4], "chain") != 0) ||
        (argc > 5 && !in_order && std::strcmp(argv[5], "any-order") != 0) || (argc > 6 && !mmio) || argc > 7) {
        std::fprintf(stderr, "usage: virtio_net_fastpath split|packed [BATCH 1..64] [FRAMES] [chain|headroom] "
                             "[in-order|any-order] [mmio]\n");
        return 2;
    }
    if (batch == 0 || batch > 64) {
        std::fprintf(stderr, "batch must be 1..64\n");
        return 2;
    }
    return packed ? run<virtio::PackedQueue, virtio::model::PackedDevice>(true, batch, frames, headroom, in_order, mmio)
                  : run<virtio::SplitQueue, virtio::model::SplitDevice>(false, batch, frames, headroom, in_order, mmio);
}
