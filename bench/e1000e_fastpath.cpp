// Cost of vfab's e1000e fast path per packet, without a device: post_recv + post_send + the
// polls that reap both completions, over the rings of tests/unit/e1000e_harness.hpp, whose
// model of the 82574L loops each frame back. bench/fastpath_callgrind.sh e1000e counts the
// driver's instructions with callgrind, which is the figure to compare (wall-clock time here
// is noisy).
//
//   e1000e_fastpath [BATCH] [FRAMES]      prints ns per packet (wall clock, indicative)
//   e1000e_fastpath BATCH FRAMES mmio     MMIO reads and writes per packet (bench/mmio_counter.hpp)
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "e1000e_harness.hpp"
#include "fastpath_loop.hpp"
#include "mmio_counter.hpp"

using namespace vfab;

int main(int argc, char** argv) {
    const uint32_t batch = argc > 1 ? uint32_t(std::atoi(argv[1])) : 32;
    const uint64_t frames = argc > 2 ? uint64_t(std::atoll(argv[2])) : 1000000;
    if (batch == 0 || batch > 256) {
        std::fprintf(stderr, "batch must be 1..256\n");
        return 2;
    }
    const bool mmio = argc > 3 && std::string_view(argv[3]) == "mmio";
    bench::MmioCounter regs(e1000e::FastPathHarness::kBarSize);
    e1000e::FastPathHarness h(batch * 2, batch * 2, 1, regs.data());
    std::vector<uint8_t> mem(size_t(batch) * 2 * 2048);
    const uint32_t lkey = h.register_memory(mem.data(), mem.size());
    if (mmio) return bench::count_mmio(regs, h.qp, h.cq, [&] { h.device_step(); }, mem.data(), lkey, batch, frames, "e1000e");
    const double ns = bench::fastpath_loop(h.qp, h.cq, [&] { h.device_step(); }, mem.data(), lkey, batch, frames);
    if (ns < 0) return 1;
    std::printf("e1000e fast path: batch %u, %llu packets, %.1f ns/packet incl. the ring model\n", batch,
                (unsigned long long)frames, ns);
    return 0;
}
