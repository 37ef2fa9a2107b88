// dpdk_virtio_user_bench: DPDK's own virtio driver (the virtio_user PMD: virtio rings served
// over vhost-user, no VM) against the same DPDK vhost back-end as vhost_user_bench, with the
// same modes, burst and output (../vhost_bench_common.hpp); bench/vhost_vs_dpdk.sh compares.
//
//   dpdk_virtio_user_bench --socket PATH --mode tx|rx|pingpong|loop [--burst 32] [--seconds 1]
//                          [--ring packed|split] [--backend-stats CMD] [--lcores 0] [--no-huge]
//                          [--eal "MORE EAL ARGS"] [--json]
//
// Written as a DPDK application would be: tx allocates mbufs in bulk and copies the 60-byte
// frame in (as testpmd's txonly), rx frees what rx_burst returned, loop sends the received
// mbufs back out (as testpmd's io). Devargs match what vfab negotiates where DPDK lets us
// choose: 1024-entry rings, IN_ORDER, no MRG_RXBUF, the same ring format.
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include <sstream>

#include "vhost_bench_common.hpp"

namespace vfab::bench::vhost {
namespace {

constexpr uint16_t kRing = 1024;
constexpr uint32_t kMbufs = 8191;   // 2^n - 1: what the mempool sizes best

// The only calls into the PMD on the fast path; callgrind counts exactly these
// (--toggle-collect='*counted_*'), as vhost_user_bench's counted_post_*/counted_poll.
[[gnu::noipa]] uint16_t counted_tx_burst(uint16_t port, rte_mbuf** m, uint16_t n) {
    return rte_eth_tx_burst(port, 0, m, n);
}
[[gnu::noipa]] uint16_t counted_rx_burst(uint16_t port, rte_mbuf** m, uint16_t n) {
    return rte_eth_rx_burst(port, 0, m, n);
}
[[gnu::noipa]] uint16_t counted_idle_rx_burst(uint16_t port, rte_mbuf** m, uint16_t n) {
    return rte_eth_rx_burst(port, 0, m, n);
}

class DpdkPort {
public:
    DpdkPort(uint16_t port, rte_mempool* pool) : port_(port), pool_(pool) {
        rte_ether_addr mac{};
        rte_eth_macaddr_get(port, &mac);
        build_frame(frame_, mac.addr_bytes, 0);
    }
    ~DpdkPort() {
        if (held_) rte_pktmbuf_free_bulk(loop_, held_);
    }
    const std::string& error() const { return error_; }

    uint32_t send(uint32_t n) {
        rte_mbuf* m[kMaxBurst];
        if (rte_pktmbuf_alloc_bulk(pool_, m, n) != 0) return 0;   // all in the TX ring: freed by later bursts
        for (uint32_t i = 0; i < n; ++i) fill(m[i]);
        const uint16_t k = counted_tx_burst(port_, m, uint16_t(n));
        if (k < n) rte_pktmbuf_free_bulk(m + k, n - k);
        return k;
    }
    bool send_one(uint32_t seq) {
        rte_mbuf* m = rte_pktmbuf_alloc(pool_);
        if (!m) return false;
        fill(m);
        std::memcpy(rte_pktmbuf_mtod(m, uint8_t*) + kSeqOffset, &seq, 4);
        for (int tries = 0; tries < 1000000; ++tries)
            if (counted_tx_burst(port_, &m, 1) == 1) return true;
        rte_pktmbuf_free(m);
        return false;
    }
    uint32_t recv(uint32_t max, uint32_t* seq) {
        rte_mbuf* m[kMaxBurst];
        const uint16_t n = counted_rx_burst(port_, m, uint16_t(std::min(max, kMaxBurst)));
        if (seq && n && m[n - 1]->data_len >= kSeqOffset + 4) *seq = frame_seq(rte_pktmbuf_mtod(m[n - 1], uint8_t*));
        if (n) rte_pktmbuf_free_bulk(m, n);
        return n;
    }
    void finish_tx() {}   // what tx_burst took is in the ring; the back-end's counters tell the rest
    // Mode loop: the frames that came back go out again (mbufs from the first round only).
    void loop_round(uint32_t burst, const Options& o, LoopStats& st) {
        if (held_ != burst) {
            if (held_) rte_pktmbuf_free_bulk(loop_, held_);
            held_ = 0;
            if (rte_pktmbuf_alloc_bulk(pool_, loop_, burst) != 0) return void(st.failed = true);
            for (uint32_t i = 0; i < burst; ++i) fill(loop_[i]);
            held_ = burst;
        }
        for (uint32_t sent = 0; sent < burst;) sent += counted_tx_burst(port_, loop_ + sent, uint16_t(burst - sent));
        held_ = 0;   // the PMD owns them now
        if (o.settle_us) {
            const auto until = Clock::now() + std::chrono::microseconds(o.settle_us);
            while (Clock::now() < until) {}
        }
        const auto deadline = Clock::now() + std::chrono::seconds(1);
        for (uint32_t got = 0; got < burst;) {
            const uint16_t n = counted_rx_burst(port_, loop_ + got, uint16_t(burst - got));
            ++st.polls;
            st.empty_polls += n == 0;
            got += n;
            held_ = got;
            if (n == 0 && Clock::now() > deadline) return void(st.failed = true);
        }
        st.packets += burst;
    }

    void idle_polls(uint32_t n) {
        rte_mbuf* m[kMaxBurst];
        for (uint32_t i = 0; i < n; ++i)
            if (const uint16_t k = counted_idle_rx_burst(port_, m, kMaxBurst)) rte_pktmbuf_free_bulk(m, k);
    }

private:
    void fill(rte_mbuf* m) {
        std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), frame_, kFrameLen);
        m->data_len = uint16_t(kFrameLen);
        m->pkt_len = kFrameLen;
    }

    uint16_t port_;
    rte_mempool* pool_;
    uint8_t frame_[kFrameLen];
    rte_mbuf* loop_[kMaxBurst] = {};
    uint32_t held_ = 0;
    std::string error_;
};

std::string devargs(const Options& o) {
    return "net_virtio_user0,path=" + o.socket + ",queues=1,queue_size=" + std::to_string(kRing) +
           ",in_order=1,mrg_rxbuf=0,mac=02:76:66:61:62:02,packed_vq=" + (o.ring == "packed" ? "1" : "0");
}

int fail(const std::string& what) {
    std::fprintf(stderr, "dpdk_virtio_user_bench: %s\n", what.c_str());
    return 1;
}

int run(int argc, char** argv) {
    Options o;
    std::string lcores = "0", eal_more;
    uint32_t mem = 64;
    bool no_huge = false;
    if (auto rc = parse_options("dpdk_virtio_user_bench", argc, argv, o, [&](CLI::App& app) {
            app.add_option("--lcores", lcores, "EAL -l: the core this process polls on")->capture_default_str();
            app.add_option("--mem", mem, "EAL -m: MiB of memory")->capture_default_str()->check(CLI::Range(16u, 4096u));
            app.add_flag("--no-huge", no_huge, "EAL --no-huge: 4 KiB pages (under valgrind)");
            app.add_option("--eal", eal_more, "More EAL arguments, separated by spaces");
        }))
        return *rc;
    if (o.socket.find(',') != std::string::npos) return std::fprintf(stderr, "dpdk_virtio_user_bench: --socket: no commas (devargs)\n"), 2;
    std::vector<std::string> args = {"dpdk_virtio_user_bench", "-l", lcores, "--no-pci", "-m", std::to_string(mem),
                                     "--vdev", devargs(o), "--log-level=warning", "--no-telemetry"};
    // --no-huge is legacy memory (one memfd, which virtio_user shares with the back-end):
    // --in-memory and --single-file-segments are refused with it; --no-shconf leaves no files.
    args.push_back(no_huge ? "--no-huge" : "--in-memory");
    args.push_back(no_huge ? "--no-shconf" : "--single-file-segments");
    std::istringstream more(eal_more);
    for (std::string a; more >> a;) args.push_back(a);
    std::vector<char*> argp;
    for (std::string& a : args) argp.push_back(a.data());
    if (rte_eal_init(int(argp.size()), argp.data()) < 0) return fail(std::string("EAL: ") + rte_strerror(rte_errno));

    int rc = 1;
    uint16_t port = 0;
    rte_mempool* pool = nullptr;
    if (rte_eth_dev_get_port_by_name("net_virtio_user0", &port) != 0) {
        fail("no net_virtio_user0 port (is the back-end listening on " + o.socket + "?)");
    } else if (!(pool = rte_pktmbuf_pool_create("vhb", kMbufs, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE, int(rte_socket_id())))) {
        fail(std::string("mbuf pool: ") + rte_strerror(rte_errno));
    } else {
        rte_eth_conf conf{};
        int e = rte_eth_dev_configure(port, 1, 1, &conf);
        if (e == 0) e = rte_eth_rx_queue_setup(port, 0, kRing, rte_eth_dev_socket_id(port), nullptr, pool);
        if (e == 0) e = rte_eth_tx_queue_setup(port, 0, kRing, rte_eth_dev_socket_id(port), nullptr);
        if (e == 0) e = rte_eth_dev_start(port);
        if (e != 0) {
            fail(std::string("port setup: ") + rte_strerror(-e));
        } else {
            Report r;
            {
                DpdkPort p(port, pool);
                r = run_bench(p, o, "dpdk");
            }
            r.info["devargs"] = devargs(o);
            rc = print_report(r, o);
            rte_eth_dev_stop(port);
        }
        rte_eth_dev_close(port);
    }
    rte_eal_cleanup();
    return rc;
}

}  // namespace
}  // namespace vfab::bench::vhost

int main(int argc, char** argv) {
    try {
        return vfab::bench::vhost::run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dpdk_virtio_user_bench: %s\n", e.what());
        return 1;
    }
}
