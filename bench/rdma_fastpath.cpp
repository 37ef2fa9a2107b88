// Cost of vfab's RDMA transport per message, without a device: two ports wired to each other
// through tests/unit/rdma_fake_link.hpp (two fake raw devices that hand each frame over in
// memory), an RC queue pair on each, one side sending WRITEs or SENDs of one size to the other.
// bench/rdma_callgrind.sh counts the transport's instructions with callgrind — requester,
// responder and completer, not the fake devices' own copying — which is the figure to compare;
// the wall-clock time printed here includes the model and is indicative only.
//
//   rdma_fastpath write|send SIZE [MESSAGES] [WINDOW] [SIGNAL] [CRC32] [native|verbs]
//     SIZE bytes a message (path MTU 1024, as in the lab), WINDOW messages outstanding at most,
//     a completion every SIGNAL messages (and for the last). Defaults: 20000 messages, window 1,
//     every message signalled. verbs: the application's calls (post_send, the CQ polls,
//     post_recv) are the drop-in libibverbs' (verbs/: ibv_post_send, ibv_poll_cq,
//     ibv_post_recv as an unmodified program makes them) over the same transport objects.
//   rdma_fastpath regmr|regmr-scattered SIZE [CYCLES]
//     fast registration cycles on A's queue pair (docs/rdma-memory.md): a REG_MR of SIZE bytes
//     in 4 KiB blocks, unsignalled, and a signalled LOCAL_INV of the new key, posted in one call;
//     then A's CQ polled for the LOCAL_INV's completion. Nothing goes on the wire. The blocks
//     follow each other (one run), or are listed last first (scattered: the MR's block map).
//
// Every call into the transport goes through the counted_* functions below, so that callgrind
// can collect inside them only (--toggle-collect='*counted_*') and leave out the fake devices'
// functions called from within (toggled off again by name, see bench/rdma_callgrind.sh):
//   counted_post_send       the requester as the application's post_send runs it (the first
//                           packets of the message are built and handed to the raw queue pair)
//   counted_requester_poll  the requester's CQ poll: its port's progress — ACKs and the
//                           completer, more packets once the send window opens, completions
//   counted_responder       the responder's port: requests parsed, checked and executed,
//                           ACKs sent; for SEND its CQ poll and receives posted again
// Counters are zeroed after a warm-up of 64 messages (ARP, first touches), so set-up is not counted.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rdma_fake_link.hpp"
#include "verbs/objects.hpp"

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define VFAB_BENCH_ZERO_STATS() CALLGRIND_ZERO_STATS
#else
#define VFAB_BENCH_ZERO_STATS() ((void)0)
#endif

using namespace vfab::rdma;
namespace dma = vfab::dma;
using vfab::PostResult;

namespace {

constexpr uint32_t kAllRemote = uint32_t(dma::Access::local_write | dma::Access::remote_write |
                                         dma::Access::remote_read | dma::Access::remote_atomic);

struct Side {
    Port* port = nullptr;
    Cq* cq = nullptr;
    Qp* qp = nullptr;
    std::vector<uint8_t> mem;
    dma::MemoryRegion mr;
};

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "rdma_fastpath: %s\n", what.c_str());
    std::exit(1);
}

void make_side(Side& s, Port& port, size_t bytes) {
    s.port = &port;
    auto cq = port.create_cq(4096);
    if (!cq) die(cq.error().message);
    s.cq = *cq;
    RdmaQpInitAttr ia;
    ia.qp_type = QpType::rc;
    ia.send_cq = ia.recv_cq = s.cq;
    ia.cap.max_send_wr = 1024;
    ia.cap.max_recv_wr = 1024;
    auto qp = port.create_qp(ia);
    if (!qp) die(qp.error().message);
    s.qp = *qp;
    s.mem.assign(bytes, 0x5a);
    auto mr = port.pd().register_memory(s.mem.data(), s.mem.size(), dma::Access(kAllRemote));
    if (!mr) die(mr.error().message);
    s.mr = *mr;
}

// INIT -> RTR -> RTS towards `peer`, as an application does it.
void connect(Side& me, const Side& peer, uint32_t my_psn, uint32_t peer_psn) {
    QpAttr a;
    a.qp_state = RdmaQpState::init;
    a.qp_access_flags = kAllRemote;
    if (auto r = me.qp->modify(a, attr_state | attr_pkey_index | attr_port | attr_access_flags); !r) die(r.error().message);
    a.qp_state = RdmaQpState::rtr;
    a.path_mtu = 3;   // 1024
    a.dest_qp_num = peer.qp->qp_num();
    a.rq_psn = peer_psn;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 1;
    a.ah_attr.dgid = peer.port->gid();
    if (auto r = me.qp->modify(a, attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn |
                                      attr_max_dest_rd_atomic | attr_min_rnr_timer);
        !r)
        die(r.error().message);
    a.qp_state = RdmaQpState::rts;
    a.sq_psn = my_psn;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 16;
    if (auto r = me.qp->modify(a, attr_state | attr_sq_psn | attr_timeout | attr_retry_cnt | attr_rnr_retry |
                                      attr_max_qp_rd_atomic);
        !r)
        die(r.error().message);
}

}  // namespace

// The counted calls (callgrind collects inside these only). Outside the anonymous namespace and
// never inlined, so that their names survive as they are.
extern "C" {
__attribute__((noinline)) PostResult counted_post_send(Qp* qp, const RdmaSendWr* wr) { return qp->post_send(std::span(wr, 1)); }
__attribute__((noinline)) PostResult counted_post_send_list(Qp* qp, const RdmaSendWr* wr, size_t n) {
    return qp->post_send(std::span(wr, n));
}
__attribute__((noinline)) int counted_requester_poll(Cq* cq, Wc* wc, size_t n) { return cq->poll(std::span(wc, n)); }
__attribute__((noinline)) int counted_responder_poll(Cq* cq, Wc* wc, size_t n) { return cq->poll(std::span(wc, n)); }
__attribute__((noinline)) int counted_responder_progress(Port* port) { return port->progress(); }
__attribute__((noinline)) PostResult counted_responder_post_recv(Qp* qp, const RecvWr* wr, size_t n) {
    return qp->post_recv(std::span(wr, n));
}
// The same through the drop-in libibverbs' calls (the verbs mode).
__attribute__((noinline)) int counted_post_send_verbs(ibv_qp* qp, ibv_send_wr* wr) {
    ibv_send_wr* bad = nullptr;
    return vfab::verbs::post_send(qp, wr, &bad);
}
__attribute__((noinline)) int counted_requester_poll_verbs(ibv_cq* cq, ibv_wc* wc, int n) { return vfab::verbs::poll_cq(cq, n, wc); }
__attribute__((noinline)) int counted_responder_poll_verbs(ibv_cq* cq, ibv_wc* wc, int n) { return vfab::verbs::poll_cq(cq, n, wc); }
__attribute__((noinline)) int counted_responder_post_recv_verbs(ibv_qp* qp, ibv_recv_wr* wr) {
    ibv_recv_wr* bad = nullptr;
    return vfab::verbs::post_recv(qp, wr, &bad);
}
}

namespace {

struct Run {
    bool verbs = false;   // the application's calls through the drop-in libibverbs
    bool send = false;
    bool regmr = false;
    bool scattered = false;   // regmr: blocks listed last first
    uint32_t size = 64;
    uint64_t messages = 20000;
    uint32_t window = 1, signal = 1;
};

// The drop-in libibverbs' objects over the transport's QPs and CQs of both ends (verbs mode).
struct VerbsEnds {
    vfab::verbs::Qp qa, qb;
    vfab::verbs::Cq ca, cb;
    VerbsEnds(Side& a, Side& b) {
        qa.t = a.qp, qb.t = b.qp, ca.t = a.cq, cb.t = b.cq;
        qa.ex.qp_base.qp_type = qb.ex.qp_base.qp_type = IBV_QPT_RC;
    }
};

// Sends `n` messages A -> B; the number completed (n unless something failed).
uint64_t transfer(const Run& r, Side& a, Side& b, VerbsEnds& v, uint64_t n) {
    Sge s{reinterpret_cast<uint64_t>(a.mem.data()), r.size, a.mr.lkey};
    RdmaSendWr w;
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = r.send ? WrOpcode::send : WrOpcode::rdma_write;
    w.remote_addr = reinterpret_cast<uint64_t>(b.mem.data());
    w.rkey = b.mr.rkey;
    // SEND: receives for a window ahead, posted again as they complete (one call per poll).
    Sge rs{reinterpret_cast<uint64_t>(b.mem.data()), r.size, b.mr.lkey};
    std::vector<RecvWr> recvs(1024, RecvWr{0, &rs, 1, 0});
    // The same WRs as a program gives them to libibverbs (verbs mode).
    ibv_send_wr vw{};
    vw.sg_list = reinterpret_cast<ibv_sge*>(&s);
    vw.num_sge = 1;
    vw.opcode = r.send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE;
    vw.wr.rdma.remote_addr = w.remote_addr;
    vw.wr.rdma.rkey = w.rkey;
    std::vector<ibv_recv_wr> vrecvs(1024);
    for (size_t i = 0; i < vrecvs.size(); ++i)
        vrecvs[i] = {0, i + 1 < vrecvs.size() ? &vrecvs[i + 1] : nullptr, reinterpret_cast<ibv_sge*>(&rs), 1};
    uint64_t received = 0;
    auto repost = [&](size_t k) {
        if (!r.verbs) {
            if (!counted_responder_post_recv(b.qp, recvs.data(), k)) die("post_recv refused");
            return;
        }
        ibv_recv_wr* after = vrecvs[k - 1].next;
        vrecvs[k - 1].next = nullptr;
        if (counted_responder_post_recv_verbs(v.qb.ibv(), vrecvs.data())) die("ibv_post_recv refused");
        vrecvs[k - 1].next = after;
    };
    auto post = [&](uint64_t id, uint32_t flags) {
        if (r.verbs) {
            vw.wr_id = id;
            vw.send_flags = flags;
            return counted_post_send_verbs(v.qa.ibv(), &vw) == 0;
        }
        w.wr_id = id;
        w.send_flags = flags;
        return bool(counted_post_send(a.qp, &w));
    };
    auto poll_a = [&](Wc* wc, int n) {
        return r.verbs ? counted_requester_poll_verbs(v.ca.ibv(), reinterpret_cast<ibv_wc*>(wc), n)
                       : counted_requester_poll(a.cq, wc, size_t(n));
    };
    auto poll_b = [&](Wc* wc, int n) {
        return r.verbs ? counted_responder_poll_verbs(v.cb.ibv(), reinterpret_cast<ibv_wc*>(wc), n)
                       : counted_responder_poll(b.cq, wc, size_t(n));
    };
    if (r.send) repost(std::min<size_t>(recvs.size(), r.window + 64));
    uint64_t posted = 0, completed = 0;
    Wc wc[64];
    uint64_t idle = 0;
    while (completed < n) {
        while (posted < n && posted - completed < r.window) {
            if (!post(posted, (posted + 1) % r.signal == 0 || posted + 1 == n ? uint32_t(wr_signaled) : 0u))
                die("post_send refused");
            ++posted;
        }
        int k = poll_a(wc, 64);
        for (int i = 0; i < k; ++i) {
            if (wc[i].status != RdmaWcStatus::success) die(std::string("completion: ") + to_string(wc[i].status));
            completed = wc[i].wr_id + 1;
        }
        bool work = k > 0;
        if (r.send) {
            const int m = poll_b(wc, 64);
            for (int i = 0; i < m; ++i)
                if (wc[i].status != RdmaWcStatus::success) die(std::string("receive: ") + to_string(wc[i].status));
            if (m > 0) {
                received += uint64_t(m);
                repost(size_t(m));
                work = true;
            }
        } else {
            work |= counted_responder_progress(b.port) > 0;
        }
        idle = work ? 0 : idle + 1;
        if (idle > 10000000) die("no progress for 10 million rounds");
    }
    if (r.send) {   // the last receives complete with (or before) the last ACK: take them
        for (int spins = 0; received < n && spins < 1000000; ++spins) {
            const int m = poll_b(wc, 64);
            if (m > 0) received += uint64_t(m), repost(size_t(m));
        }
        if (received != n) die("receives missing");
    }
    return completed;
}

// `n` REG_MR + LOCAL_INV cycles on A's queue pair; the number completed.
uint64_t regmr_cycles(const Run& r, Side& a, uint64_t n) {
    static uint32_t key = 0;
    if (!key) {
        auto k = a.port->pd().alloc_mr(r.size, uint32_t((r.size + 4095) / 4096));
        if (!k) die(k.error().message);
        key = *k;
    }
    const uint64_t base = (reinterpret_cast<uint64_t>(a.mem.data()) + 4095) & ~uint64_t(4095);
    std::vector<uint64_t> blocks((r.size + 4095) / 4096);
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = base + (r.scattered ? blocks.size() - 1 - i : i) * 4096;
    RegMrInfo info{blocks.data(), uint32_t(blocks.size()), 4096, 0, kAllRemote, r.size, 0x10000000};
    RdmaSendWr w[2];
    w[0].opcode = WrOpcode::reg_mr;
    w[0].reg = &info;
    w[1].opcode = WrOpcode::local_inv;
    w[1].send_flags = wr_signaled;
    Wc wc[4];
    uint64_t done = 0;
    for (uint64_t i = 0; i < n; ++i) {
        w[0].mem_key = key;
        w[0].new_key = w[1].imm_data = next_key(key);
        key = w[0].new_key;
        if (!counted_post_send_list(a.qp, w, 2)) die("post_send refused");
        int k = 0;
        while ((k = counted_requester_poll(a.cq, wc, 4)) == 0) {
        }
        if (wc[0].status != RdmaWcStatus::success) die(std::string("LOCAL_INV: ") + to_string(wc[0].status));
        done += uint64_t(k);
    }
    return done;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: rdma_fastpath write|send SIZE [MESSAGES] [WINDOW] [SIGNAL] [auto|tables|clmul] [native|verbs]\n"
                             "       rdma_fastpath regmr|regmr-scattered SIZE [CYCLES]\n");
        return 2;
    }
    Run r;
    const std::string op = argv[1];
    if (op != "write" && op != "send" && op != "regmr" && op != "regmr-scattered") {
        std::fprintf(stderr, "rdma_fastpath: the operation is write, send, regmr or regmr-scattered\n");
        return 2;
    }
    r.send = op == "send";
    r.scattered = op == "regmr-scattered";
    r.regmr = op == "regmr" || r.scattered;
    r.size = uint32_t(std::atoi(argv[2]));
    if (argc > 3) r.messages = uint64_t(std::atoll(argv[3]));
    if (argc > 4) r.window = uint32_t(std::atoi(argv[4]));
    if (argc > 5) r.signal = uint32_t(std::atoi(argv[5]));
    // The CRC-32 method (icrc.hpp): under valgrind automatic would time valgrind's PCLMULQDQ.
    const std::string crc = argc > 6 ? argv[6] : "auto";
    const std::string api = argc > 7 ? argv[7] : "native";
    if (api != "native" && api != "verbs") {
        std::fprintf(stderr, "rdma_fastpath: the API is native or verbs\n");
        return 2;
    }
    r.verbs = api == "verbs";
    if (crc != "auto" && crc != "tables" && crc != "clmul") {
        std::fprintf(stderr, "rdma_fastpath: the CRC-32 method is auto, tables or clmul\n");
        return 2;
    }
    if (r.size == 0 || r.size > (1u << 20) || r.messages == 0 || r.window == 0 || r.window > 512 || r.signal == 0 ||
        r.signal > r.window) {
        std::fprintf(stderr, "rdma_fastpath: SIZE 1..1 MiB, MESSAGES > 0, WINDOW 1..512, SIGNAL 1..WINDOW\n");
        return 2;
    }
    vfab::test::RdmaPair pair(1500);   // a 1500-byte link: path MTU 1024, as the lab's NICs and rxe
    if (r.verbs) {   // as the drop-in opens its ports: every call takes the port's lock
        pair.a->share_between_threads();
        pair.b->share_between_threads();
    }
    Side a, b;
    make_side(a, *pair.a, std::max<size_t>(r.size, 4096) + 4096);
    make_side(b, *pair.b, std::max<size_t>(r.size, 4096));
    connect(a, b, 100, 200);
    connect(b, a, 200, 100);
    const Crc32Method method = use_crc32_method(crc == "tables" ? Crc32Method::tables
                                                : crc == "clmul" ? Crc32Method::clmul
                                                                 : Crc32Method::automatic);

    if (r.regmr) {
        regmr_cycles(r, a, 64);   // warm-up
        VFAB_BENCH_ZERO_STATS();
        const auto t0 = std::chrono::steady_clock::now();
        const uint64_t done = regmr_cycles(r, a, r.messages);
        const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
        std::printf("rdma_fastpath regmr size=%u cycles=%llu: %.0f ns/cycle (REG_MR + LOCAL_INV), %llu completions\n",
                    r.size, (unsigned long long)r.messages, ns / double(r.messages), (unsigned long long)done);
        return 0;
    }
    VerbsEnds v(a, b);
    transfer(r, a, b, v, 64);   // warm-up: ARP both ways, first touches
    VFAB_BENCH_ZERO_STATS();
    const auto t0 = std::chrono::steady_clock::now();
    transfer(r, a, b, v, r.messages);
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    const PortStats sa = a.port->stats(), sb = b.port->stats();
    if (sa.retransmits || sb.retransmits) die("retransmissions on a lossless wire");
    std::printf("rdma_fastpath %s size=%u messages=%llu window=%u signal=%u crc32=%s: %.0f ns/message incl. the "
                "model, frames a->b %llu b->a %llu\n",
                op.c_str(), r.size, (unsigned long long)r.messages, r.window, r.signal,
                method == Crc32Method::clmul ? "clmul" : "tables", ns / double(r.messages),
                (unsigned long long)sa.tx_frames, (unsigned long long)sb.tx_frames);
    return 0;
}
