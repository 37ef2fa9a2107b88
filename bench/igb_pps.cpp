// Packets per second between the lab's two igb (Intel 82576) with N queue pairs on each, in the
// lab: 00:0a.0 sends 64-byte IPv4/UDP frames of many flows (the UDP source port varies) from
// its N queues, 00:05.0 spreads them over its N queues by RSS (IPv4 + UDP/IPv4, table 0..N-1)
// and receives on all of them; zero copy, busy polling, BATCH sends per doorbell and BATCH
// receive buffers re-posted per doorbell (at most half a ring). The same work as dpdk-testpmd txonly --txq=N --txonly-multi-flow on one port and rxonly --rxq=N
// --rss-udp on the other (scripts/lab.d/dpdk-pps.sh with DPDK_PPS_QUEUES=N), so the two can be
// compared in one boot (bench/igb_vs_dpdk.sh).
//
// Threads (--threads): `per-queue` (default) one receiving thread per queue pair of 05.0 and
// one sending thread per queue of 0a.0, 2N threads on the guest's 2 vCPUs; `2` one thread
// sending on every queue and one receiving on every queue (as testpmd's two forwarding lcores,
// pinned the same way: receiver on CPU 0, sender on CPU 1); `1` one thread doing all of it
// round-robin, so queue counts compare at equal CPU. One parsable line:
//   vfab-igb queues=N threads=T tx_pps=... rx_pps=... seconds=... batch=32 tx_packets=...
//            rx_packets=... lost=... tx_hw=... rx_hw=... rx_queues=a,b,.. rss_expected_pct=a,b,..
// A device removed or reset mid-run ends it at once with one line naming it, exit status 1.
// The rates are over the measured window (after a warm-up); the packet counts cover the whole
// run, the receiver having polled on for a moment after the last send, so lost = tx_packets -
// rx_packets is what never arrived. Under TCG the sender outruns the receiver and QEMU drops
// what finds no receive descriptor (SRRCTL.DROP_EN), uncounted.
#include <pthread.h>
#include <sched.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "device_events.hpp"
#include "vfab/drivers/igb.hpp"
#include "vfab/net/checksum.hpp"
#include "vfab/net/rss.hpp"
#include "vfab/log.hpp"

using namespace vfab;

namespace {

constexpr uint32_t kRxBuf = 2048, kTxSlot = 128, kFrame = 64;   // 64 bytes without FCS: as dpdk-pps
constexpr uint32_t kMaxBatch = 64;

struct Args {
    double seconds = 3.0;
    uint32_t queues = 1;
    std::string threads = "per-queue";
    uint32_t batch = 32;
    uint32_t ring = 512;
    uint32_t flows = 256;
    std::string tx = "0000:00:0a.0", rx = "0000:00:05.0";
};

// A counter written by one thread, read by the main one; one per cache line.
struct alignas(64) Count {
    std::atomic<uint64_t> v{0};
    void add(uint64_t n) noexcept { v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
    uint64_t get() const noexcept { return v.load(std::memory_order_relaxed); }
};

struct Port {
    std::unique_ptr<igb::Device> dev;
    std::vector<igb::CompletionQueue*> cqs;
    std::vector<igb::QueuePair*> qps;
    uint8_t* mem = nullptr;
    uint32_t lkey = 0;
};

Result<Port> open_port(const std::string& bdf, uint32_t queues, uint32_t ring, size_t slot) {
    auto addr = PciAddress::parse(bdf);
    if (!addr) return Error{EINVAL, "bad PCI address " + bdf};
    auto dev = igb::Device::open(*addr);
    if (!dev) return dev.take_error();
    Port p;
    p.dev = std::move(*dev);
    if (queues > p.dev->attr().max_qp)
        return Error{EINVAL, bdf + " has " + std::to_string(p.dev->attr().max_qp) + " queue pairs"};
    for (uint32_t q = 0; q < queues; ++q) {
        auto cq = p.dev->create_cq(2 * ring);
        if (!cq) return cq.take_error();
        igb::QpInitAttr a;
        a.send_cq = a.recv_cq = *cq;
        a.caps = {ring, ring - 1, 1, 1};
        auto qp = p.dev->create_qp(a);
        if (!qp) return qp.take_error();
        p.cqs.push_back(*cq);
        p.qps.push_back(*qp);
    }
    const size_t len = size_t(queues) * ring * slot;
    auto arena = p.dev->pd().create_arena(len);
    if (!arena) return arena.take_error();
    p.mem = (*arena)->data();
    auto mr = p.dev->pd().register_memory(p.mem, len, dma::Access::local_write);
    if (!mr) return mr.take_error();
    p.lkey = mr->lkey;
    return p;
}

// 14 + 20 + 8 header bytes and zeros up to kFrame; flows differ in the UDP source port only.
void build_frame(uint8_t* f, const uint8_t* dst, const uint8_t* src, uint32_t flow) {
    std::memset(f, 0, kFrame);
    std::memcpy(f, dst, 6);
    std::memcpy(f + 6, src, 6);
    f[12] = 0x08;
    uint8_t* ip = f + 14;
    ip[0] = 0x45;
    net::store_be16(ip + 2, kFrame - 14);
    ip[8] = 64;
    ip[9] = 17;
    const uint8_t saddr[4] = {198, 18, 0, 1}, daddr[4] = {198, 18, 0, 2};
    std::memcpy(ip + 12, saddr, 4);
    std::memcpy(ip + 16, daddr, 4);
    net::store_be16(ip + 10, net::ipv4_header_checksum(ip));
    uint8_t* udp = ip + 20;
    net::store_be16(udp, uint16_t(1024 + flow));
    net::store_be16(udp + 2, 9);
    net::store_be16(udp + 4, kFrame - 34);   // UDP checksum 0: none (IPv4)
}

// One sending queue: frames built once, one per send slot, re-sent in order.
struct TxQueue {
    igb::QueuePair* qp = nullptr;
    igb::CompletionQueue* cq = nullptr;
    std::vector<Sge> sge;
    std::vector<SendWr> wr;
    uint64_t next = 0;
    uint32_t in_flight = 0;
    Count sent, errors;
};
// One receiving queue: its buffers, re-posted in batches as frames arrive.
struct RxQueue {
    igb::QueuePair* qp = nullptr;
    igb::CompletionQueue* cq = nullptr;
    std::vector<Sge> sge;
    std::vector<RecvWr> wr, pending;
    Count received, errors;
};

struct Run {
    uint32_t batch = 32;
    uint32_t rx_post = 32;   // receive buffers re-posted per doorbell
    std::atomic<bool> tx_stop{false}, rx_stop{false};

    void tx_step(TxQueue& q, bool post) const noexcept {
        const auto ring = uint32_t(q.wr.size());
        if (post && q.in_flight + batch <= ring) {
            const auto first = uint32_t(q.next % ring);
            const uint32_t n = std::min(batch, ring - first);
            const PostResult r = q.qp->post_send({q.wr.data() + first, n});
            q.in_flight += r.posted;
            q.next += r.posted;
        }
        Completion wc[kMaxBatch];
        const int n = q.cq->poll(wc);
        uint32_t ok = 0, bad = 0;
        for (int i = 0; i < n; ++i) {
            if (wc[i].opcode != WcOpcode::send) continue;
            --q.in_flight;
            (wc[i].status == WcStatus::success ? ok : bad)++;
        }
        if (n < 0) bad++;
        if (ok) q.sent.add(ok);
        if (bad) q.errors.add(bad);
    }
    // Buffers go back once a batch of them is free: each post is a tail-register write, an
    // exit to the emulator that waits for its lock while the sender's doorbells hold it (the
    // same as DPDK's igb PMD, whose rx_free_thresh is 32).
    void rx_step(RxQueue& q) const noexcept {
        Completion wc[kMaxBatch];
        const int n = q.cq->poll(wc);
        uint32_t ok = 0, bad = n < 0 ? 1 : 0;
        for (int i = 0; i < n; ++i) {
            if (wc[i].opcode != WcOpcode::recv) continue;
            (wc[i].status == WcStatus::success ? ok : bad)++;
            q.pending.push_back(q.wr[wc[i].wr_id]);   // reserved: never allocates
        }
        if (q.pending.size() >= rx_post) {
            if (q.qp->post_recv(q.pending).posted != q.pending.size()) bad++;
            q.pending.clear();
        }
        if (ok) q.received.add(ok);
        if (bad) q.errors.add(bad);
    }
    // A thread's loop over its queues until the receivers stop; it sends until tx_stop and
    // reaps send completions until the end.
    void loop(std::vector<TxQueue*> txs, std::vector<RxQueue*> rxs) const noexcept {
        while (!rx_stop.load(std::memory_order_relaxed)) {
            const bool post = !tx_stop.load(std::memory_order_relaxed);
            for (TxQueue* t : txs) tx_step(*t, post);
            for (RxQueue* r : rxs) rx_step(*r);
        }
    }
};

void pin(std::thread& t, int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    (void)pthread_setaffinity_np(t.native_handle(), sizeof(set), &set);   // best effort
}

int fail(const std::string& what, const std::string& why) {
    std::fprintf(stderr, "igb_pps: %s: %s\n", what.c_str(), why.c_str());
    return 1;
}

std::string joined(const std::vector<uint64_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s;
}

int bench(const Args& a) {
    auto rx = open_port(a.rx, a.queues, a.ring, kRxBuf);
    if (!rx) return fail(a.rx, rx.error().message);
    auto tx = open_port(a.tx, a.queues, a.ring, kTxSlot);
    if (!tx) return fail(a.tx, tx.error().message);
    std::vector<uint16_t> table(a.queues);
    for (uint32_t q = 0; q < a.queues; ++q) table[q] = uint16_t(q);
    const RssConfig rss{net::kDefaultRssKey, table, rss_ipv4 | rss_udp_ipv4};
    if (auto r = rx->dev->configure_rss(rss); !r) return fail(a.rx, "configure_rss: " + r.error().message);

    // Receive buffers: every ring full before the first frame is sent.
    std::vector<std::unique_ptr<RxQueue>> rxq;
    for (uint32_t q = 0; q < a.queues; ++q) {
        auto r = std::make_unique<RxQueue>();
        r->qp = rx->qps[q];
        r->cq = rx->cqs[q];
        const uint32_t depth = r->qp->caps().max_recv_wr;
        r->sge.resize(depth);
        r->wr.resize(depth);
        r->pending.reserve(depth);
        for (uint32_t i = 0; i < depth; ++i) {
            r->sge[i] = {reinterpret_cast<uint64_t>(rx->mem + (size_t(q) * a.ring + i) * kRxBuf), kRxBuf, rx->lkey};
            r->wr[i] = {i, &r->sge[i], 1, 0};
        }
        if (PostResult p = r->qp->post_recv(r->wr); !p) return fail("post_recv", std::strerror(p.error));
        rxq.push_back(std::move(r));
    }
    // Frames: the flows dealt out over every queue's send slots; what RSS should make of them.
    std::vector<std::unique_ptr<TxQueue>> txq;
    std::vector<uint64_t> expected(a.queues, 0);
    for (uint32_t q = 0; q < a.queues; ++q) {
        auto t = std::make_unique<TxQueue>();
        t->qp = tx->qps[q];
        t->cq = tx->cqs[q];
        t->sge.resize(a.ring);
        t->wr.resize(a.ring);
        for (uint32_t i = 0; i < a.ring; ++i) {
            uint8_t* f = tx->mem + (size_t(q) * a.ring + i) * kTxSlot;
            build_frame(f, rx->dev->attr().mac, tx->dev->attr().mac, (q + i * a.queues) % a.flows);
            ++expected[net::rss_queue(f, kFrame, rss)];
            t->sge[i] = {reinterpret_cast<uint64_t>(f), kFrame, tx->lkey};
            t->wr[i] = {i, &t->sge[i], 1, send_signaled};
        }
        txq.push_back(std::move(t));
    }
    (void)rx->dev->stats();   // the hardware counters are clear-on-read: start from here
    (void)tx->dev->stats();

    Run run;
    run.batch = a.batch;
    run.rx_post = std::max(1u, std::min(a.batch, (a.ring - 1) / 2));
    std::vector<std::thread> threads;
    auto all_tx = [&] { std::vector<TxQueue*> v; for (auto& t : txq) v.push_back(t.get()); return v; };
    auto all_rx = [&] { std::vector<RxQueue*> v; for (auto& r : rxq) v.push_back(r.get()); return v; };
    if (a.threads == "1") {
        threads.emplace_back([&, t = all_tx(), r = all_rx()] { run.loop(t, r); });
    } else if (a.threads == "2") {
        threads.emplace_back([&, r = all_rx()] { run.loop({}, r); });   // receiver first
        pin(threads.back(), 0);
        threads.emplace_back([&, t = all_tx()] { run.loop(t, {}); });
        pin(threads.back(), 1);
    } else {
        for (auto& r : rxq) threads.emplace_back([&, p = r.get()] { run.loop({}, {p}); });
        for (auto& t : txq) threads.emplace_back([&, p = t.get()] { run.loop({p}, {}); });
    }
    auto totals = [&] {
        uint64_t s = 0, r = 0;
        for (auto& t : txq) s += t->sent.get();
        for (auto& q : rxq) r += q->received.get();
        return std::pair{s, r};
    };
    using clock = std::chrono::steady_clock;
    // This thread watches both devices while the others run (next_event() may be called beside
    // the fast path: a queue pair's state is atomic): a removal or reset ends the run at once.
    examples::EventWatch<igb::Device> tx_watch(*tx->dev), rx_watch(*rx->dev);
    std::optional<std::string> stopped;
    auto watch_for = [&](std::chrono::duration<double> d) {
        for (const auto end = clock::now() + std::chrono::duration_cast<clock::duration>(d); !stopped && clock::now() < end;) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            if (!(stopped = tx_watch.stop_reason())) stopped = rx_watch.stop_reason();
        }
        return !stopped;
    };
    auto end_run = [&] {
        run.tx_stop = true;
        run.rx_stop = true;
        for (auto& t : threads) t.join();
        std::fprintf(stderr, "igb_pps: %s\n", stopped->c_str());
        return 1;
    };
    if (!watch_for(std::chrono::milliseconds(300))) return end_run();   // past the first bursts
    const auto [s0, r0] = totals();
    const auto t0 = clock::now();
    if (!watch_for(std::chrono::duration<double>(a.seconds))) return end_run();
    const auto [s1, r1] = totals();
    const double secs = std::chrono::duration<double>(clock::now() - t0).count();
    run.tx_stop = true;
    if (!watch_for(std::chrono::milliseconds(300))) return end_run();   // the last frames arrive
    run.rx_stop = true;
    for (auto& t : threads) t.join();

    const auto [sent, received] = totals();
    uint64_t errors = 0;
    std::vector<uint64_t> per_queue;
    for (auto& t : txq) errors += t->errors.get();
    for (auto& q : rxq) errors += q->errors.get(), per_queue.push_back(q->received.get());
    const uint64_t nthreads = a.threads == "per-queue" ? 2 * a.queues : std::stoul(a.threads);
    std::vector<uint64_t> share;   // percent of the send slots' frames RSS puts on each queue
    for (uint64_t e : expected) share.push_back(e * 100 / (uint64_t(a.queues) * a.ring));
    std::printf("vfab-igb queues=%u threads=%llu tx_pps=%.0f rx_pps=%.0f seconds=%.2f batch=%u tx_packets=%llu "
                "rx_packets=%llu lost=%lld tx_hw=%llu rx_hw=%llu rx_queues=%s rss_expected_pct=%s\n",
                a.queues, (unsigned long long)nthreads, double(s1 - s0) / secs, double(r1 - r0) / secs, secs, a.batch,
                (unsigned long long)sent, (unsigned long long)received, (long long)(sent - received),
                (unsigned long long)tx->dev->stats().tx_packets, (unsigned long long)rx->dev->stats().rx_packets,
                joined(per_queue).c_str(), joined(share).c_str());
    if (errors) return fail("completions", std::to_string(errors) + " in error");
    if (received == 0) return fail(a.rx, "received nothing");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    vfab::set_log_handler(vfab::log_to_stderr, nullptr, vfab::LogLevel::warning);   // vfab's warnings on stderr
    CLI::App app{"igb_pps: packets per second 00:0a.0 -> 00:05.0 with N queue pairs and RSS"};
    app.name("igb_pps");
    app.failure_message([](const CLI::App*, const CLI::Error& e) {
        return std::string("igb_pps: ") + e.what() + " (see igb_pps --help)\n";
    });
    Args a;
    app.add_option("--seconds", a.seconds, "Measured time (0.1..600)")->capture_default_str()->check(CLI::Range(0.1, 600.0));
    app.add_option("--queues", a.queues, "Queue pairs on each port: 1, 2, 4 or 8 (the RSS table is 0..N-1)")
        ->capture_default_str()
        ->check(CLI::IsMember({1u, 2u, 4u, 8u}));
    app.add_option("--threads", a.threads, "per-queue (2N threads), 2 (a sender and a receiver) or 1 (all, round-robin)")
        ->capture_default_str()
        ->check(CLI::IsMember({"per-queue", "2", "1"}));
    app.add_option("--batch", a.batch, "Sends per doorbell (1..64)")->capture_default_str()->check(CLI::Range(1u, kMaxBatch));
    app.add_option("--ring", a.ring, "Send and receive slots per queue (64, 128, ... 4096)")
        ->capture_default_str()
        ->check(CLI::IsMember({64u, 128u, 256u, 512u, 1024u, 2048u, 4096u}));
    app.add_option("--flows", a.flows, "UDP source ports the frames cycle through (1..60000)")
        ->capture_default_str()
        ->check(CLI::Range(1u, 60000u));
    app.add_option("--tx", a.tx, "Sending igb")->capture_default_str();
    app.add_option("--rx", a.rx, "Receiving igb")->capture_default_str();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    if (a.tx == a.rx) {
        std::fprintf(stderr, "igb_pps: --tx and --rx name the same device (see igb_pps --help)\n");
        return 2;
    }
    if (a.batch > a.ring) {
        std::fprintf(stderr, "igb_pps: --batch %u is more than --ring %u (see igb_pps --help)\n", a.batch, a.ring);
        return 2;
    }
    return bench(a);
}
