// Packets per second NIC0 -> NIC1 with vfab's e1000e driver (or, built as virtio_net_pps, its
// virtio-net driver: 00:04.0 -> 00:06.0), in the lab: one thread sends
// 64-byte frames on NIC0 in batches and receives them on NIC1, zero copy, busy polling — the
// same work as dpdk-testpmd's txonly on one port and rxonly on the other, so the two can be
// compared in one boot (bench/vs_dpdk.sh). THREADS=2 sends and receives on two threads,
// as the two testpmd processes of scripts/lab.d/dpdk-pps.sh do. Prints one parsable line:
//   vfab-e1000e tx_pps=... rx_pps=... seconds=... batch=... threads=...
//
//   e1000e_pps [SECONDS] [BATCH] [THREADS] [TX_BDF] [RX_BDF]
//
// A port's device removed or reset mid-run ends it at once with one line naming the port
// (docs/reliability.md), exit status 1.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "device_events.hpp"
#include "vfab/drivers/e1000e.hpp"
#include "vfab/drivers/virtio_net.hpp"
#include "vfab/log.hpp"

using namespace vfab;

namespace {

#ifdef VFAB_BENCH_VIRTIO_NET
namespace drv = vfab::virtio_net;
constexpr const char* kName = "virtio-net";
constexpr const char* kTx = "0000:00:04.0";
constexpr const char* kRx = "0000:00:06.0";
constexpr uint32_t kRing = 128;   // a 256-entry virtqueue: a header and a frame per WR
#else
namespace drv = vfab::e1000e;
constexpr const char* kName = "e1000e";
constexpr const char* kTx = "0000:00:02.0";
constexpr const char* kRx = "0000:00:03.0";
constexpr uint32_t kRing = 512;
#endif
constexpr uint32_t kBuf = 2048, kFrame = 64;   // 64 bytes: as dpdk-pps

struct Port {
    std::unique_ptr<drv::Device> dev;
    drv::CompletionQueue* cq = nullptr;
    drv::QueuePair* qp = nullptr;
    uint8_t* mem = nullptr;
    uint32_t lkey = 0;
};

int fail(const char* what, const std::string& why) {
    std::fprintf(stderr, "%s pps: %s: %s\n", kName, what, why.c_str());
    return 1;
}

Result<Port> open_port(const char* bdf) {
    auto addr = PciAddress::parse(bdf);
    if (!addr) return Error{EINVAL, std::string("bad PCI address ") + bdf};
    auto dev = drv::Device::open(*addr);
    if (!dev) return dev.take_error();
    Port p;
    p.dev = std::move(*dev);
    auto cq = p.dev->create_cq(2 * kRing);
    if (!cq) return cq.take_error();
    p.cq = *cq;
    drv::QpInitAttr attr;
    attr.send_cq = attr.recv_cq = p.cq;
    attr.caps.max_send_wr = kRing;
    attr.caps.max_recv_wr = kRing - 1;
    attr.caps.max_send_sge = attr.caps.max_recv_sge = 1;
    auto qp = p.dev->create_qp(attr);
    if (!qp) return qp.take_error();
    p.qp = *qp;
    auto arena = p.dev->pd().create_arena(size_t(2 * kRing) * kBuf);
    if (!arena) return arena.take_error();
    p.mem = (*arena)->data();
    auto mr = p.dev->pd().register_memory(p.mem, (*arena)->size(), dma::Access::local_write);
    if (!mr) return mr.take_error();
    p.lkey = mr->lkey;
    return p;
}

}  // namespace

int main(int argc, char** argv) {
    vfab::set_log_handler(vfab::log_to_stderr, nullptr, vfab::LogLevel::warning);   // vfab's warnings on stderr
    const double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
    const uint32_t batch = argc > 2 ? uint32_t(std::atoi(argv[2])) : 32;
    const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
    const char* tx_bdf = argc > 4 ? argv[4] : kTx;
    const char* rx_bdf = argc > 5 ? argv[5] : kRx;
    if (batch == 0 || batch > 64) return fail("batch", "must be 1..64");
    if (threads != 1 && threads != 2) return fail("threads", "must be 1 or 2");
    auto tx = open_port(tx_bdf);
    if (!tx) return fail(tx_bdf, tx.error().message);
    auto rx = open_port(rx_bdf);
    if (!rx) return fail(rx_bdf, rx.error().message);

    // Receive buffers: the whole ring, re-posted as frames arrive.
    const uint32_t rx_depth = rx->qp->caps().max_recv_wr;
    std::vector<Sge> rsge(rx_depth);
    std::vector<RecvWr> rwr(rx_depth);
    for (uint32_t i = 0; i < rx_depth; ++i) {
        rsge[i] = {reinterpret_cast<uint64_t>(rx->mem + size_t(i) * kBuf), kBuf, rx->lkey};
        rwr[i] = {i, &rsge[i], 1, 0};
    }
    if (PostResult r = rx->qp->post_recv(rwr); !r) return fail("post_recv", std::to_string(r.error));
    // One frame per send slot, built once.
    std::vector<Sge> tsge(kRing);
    std::vector<SendWr> twr(kRing);
    for (uint32_t i = 0; i < kRing; ++i) {
        uint8_t* f = tx->mem + size_t(i) * kBuf;
        std::memcpy(f, rx->dev->attr().mac, 6);
        std::memcpy(f + 6, tx->dev->attr().mac, 6);
        f[12] = 0x88, f[13] = 0xb5;
        tsge[i] = {reinterpret_cast<uint64_t>(f), kFrame, tx->lkey};
        twr[i] = {i, &tsge[i], 1, send_signaled};
    }

    std::atomic<bool> stop{false};
    std::atomic<uint64_t> received{0};
    // Receive: reap, count, re-post the batch with one doorbell.
    auto rx_once = [&] {
        Completion wc[64];
        int n = rx->cq->poll(wc);
        RecvWr again[64];
        uint32_t k = 0;
        for (int i = 0; i < n; ++i)
            if (wc[i].opcode == WcOpcode::recv) again[k++] = rwr[wc[i].wr_id];
        if (k) {
            received.store(received.load(std::memory_order_relaxed) + k, std::memory_order_relaxed);
            (void)rx->qp->post_recv({again, k});
        }
    };
    // Each thread watches the device it drives (next_event() may flush that device's queues).
    using Watch = examples::EventWatch<drv::Device>;
    Watch tx_watch(*tx->dev), rx_watch(*rx->dev);
    std::string tx_stopped, rx_stopped;
    std::thread rx_thread;
    if (threads == 2)
        rx_thread = std::thread([&] {
            for (uint64_t k = 1; !stop.load(std::memory_order_relaxed); ++k) {
                rx_once();
                if ((k & 255) == 0)
                    if (auto why = rx_watch.stop_reason()) rx_stopped = *why, stop = true;
            }
        });

    Completion wc[64];
    uint64_t sent = 0, tx_next = 0;
    uint32_t in_flight = 0;
    const auto start = std::chrono::steady_clock::now();
    const auto end = start + std::chrono::duration<double>(seconds);
    uint64_t loops = 0;
    while (!stop.load(std::memory_order_relaxed)) {
        if ((++loops & 255) == 0) {
            if (auto why = tx_watch.stop_reason()) tx_stopped = *why;
            else if (threads == 1)
                if (auto why2 = rx_watch.stop_reason()) rx_stopped = *why2;
            if (!tx_stopped.empty() || !rx_stopped.empty() || std::chrono::steady_clock::now() >= end) break;
        }
        if (in_flight + batch <= kRing) {
            const uint32_t first = uint32_t(tx_next % kRing);
            const uint32_t n = std::min(batch, kRing - first);
            PostResult r = tx->qp->post_send({twr.data() + first, n});
            in_flight += r.posted;
            tx_next += r.posted;
        }
        int n = tx->cq->poll(wc);
        for (int i = 0; i < n; ++i) in_flight -= wc[i].opcode == WcOpcode::send;
        sent += uint64_t(std::max(n, 0));
        if (threads == 1) rx_once();
    }
    stop = true;
    if (rx_thread.joinable()) rx_thread.join();
    if (!tx_stopped.empty() || !rx_stopped.empty()) {
        std::fprintf(stderr, "%s pps: %s\n", kName, (tx_stopped.empty() ? rx_stopped : tx_stopped).c_str());
        return 1;
    }
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("vfab-%s tx_pps=%.0f rx_pps=%.0f seconds=%.2f batch=%u threads=%d\n", kName, double(sent) / t,
                double(received.load()) / t, t, batch, threads);
    return 0;
}
