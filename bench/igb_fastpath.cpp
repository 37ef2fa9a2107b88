// Cost of vfab's igb fast path per packet, without a device: post_recv + post_send + the polls
// that reap both completions, over the rings of tests/unit/igb_harness.hpp, whose model of the
// 82576 loops each frame back (the loop: fastpath_loop.hpp). bench/fastpath_callgrind.sh igb
// counts the driver's instructions with callgrind, which is the figure to compare (wall-clock
// time here is noisy and includes the model).
//
//   igb_fastpath [BATCH] [FRAMES]      prints ns per packet (wall clock, indicative)
//   igb_fastpath BATCH FRAMES mmio     MMIO reads and writes per packet (bench/mmio_counter.hpp)
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "fastpath_loop.hpp"
#include "igb_harness.hpp"
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
    bench::MmioCounter regs(igb::FastPathHarness::kBarSize);
    igb::FastPathHarness h(batch * 2, batch * 2, 1, 0, 0, regs.data());
    std::vector<uint8_t> mem(size_t(batch) * 2 * 2048);
    const uint32_t lkey = h.register_memory(mem.data(), mem.size());
    if (mmio) return bench::count_mmio(regs, h.qp, h.cq, [&] { h.device_step(); }, mem.data(), lkey, batch, frames, "igb");
    const double ns = bench::fastpath_loop(h.qp, h.cq, [&] { h.device_step(); }, mem.data(), lkey, batch, frames);
    if (ns < 0) return 1;
    if (!h.violations.empty()) {   // the driver wrote something the 82576 would misread
        std::fprintf(stderr, "ring model: %s\n", h.violations.front().c_str());
        return 1;
    }
    std::printf("igb fast path: batch %u, %llu packets, %.1f ns/packet incl. the ring model\n", batch,
                (unsigned long long)frames, ns);
    return 0;
}
