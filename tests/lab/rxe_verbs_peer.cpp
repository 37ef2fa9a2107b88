// rxe_verbs_peer: the other end of rdma_rxe_test's one-sided tests, written against the system's
// libibverbs and run on the kernel's rxe (rxe0, GID index 1) — the verbs programs vfab must
// interoperate with. It listens on TCP 127.0.0.1:PORT, trades one line with the test
//   "<qpn> <psn> <gid: 32 hex digits> <rkey> <addr> <len>"   (hex numbers)
// and connects an RC queue pair to the test's. Then:
//   target     its 1 MiB buffer (bytes (i * 7 + 3) & 0xff, the 16 bytes at 512 KiB zero) is the
//              test's to write, read and update; SENDs land in receives it keeps posted (64 KiB
//              each, past the buffer). It answers "dump OFF LEN" with the bytes in hex and
//              "recvlog" with "<messages> <hash>" (FNV-1a over each message's length, immediate
//              and bytes, in arrival order), and ends at "quit".
//   initiator  it runs WRITE, READ, FETCH_ADD, CMP_SWAP against the test's buffer, checks what
//              comes back, and last a WRITE with a wrong rkey, which must end in
//              IBV_WC_REM_ACCESS_ERR. One line per step ("ok ..." / "FAIL ..."); exit 0 iff all ok.
//   invalidate the test names a key of its memory ("remote|local <rkey> <addr>", hex) that this
//              end writes 4096 bytes through; then "remote": a SEND_WITH_INV of that key, "local":
//              "wrote" to the test, which invalidates it itself and answers "again"; either way
//              its next WRITE through the key must end in IBV_WC_REM_ACCESS_ERR.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "verbs_peer_util.hpp"

namespace {

constexpr size_t kBuf = 1 << 20;
constexpr size_t kRecvSlot = 1 << 16;
constexpr uint32_t kRecvs = 64;   // receives kept posted (target mode), after the 1 MiB buffer
constexpr size_t kCounter = 512 * 1024;

struct Dest {
    uint32_t qpn = 0, psn = 0, rkey = 0, len = 0;
    uint64_t addr = 0;
    ibv_gid gid{};
};

using vfab::lab::peer::die;
using vfab::lab::peer::read_line;
using vfab::lab::peer::write_str;

std::string format(const Dest& d) {
    char b[160];
    int n = std::snprintf(b, sizeof b, "%x %x ", d.qpn, d.psn);
    for (uint8_t x : d.gid.raw) n += std::snprintf(b + n, sizeof b - size_t(n), "%02x", x);
    std::snprintf(b + n, sizeof b - size_t(n), " %x %" PRIx64 " %x\n", d.rkey, d.addr, d.len);
    return b;
}

bool parse(const std::string& s, Dest& d) {
    char gid[33] = {};
    if (std::sscanf(s.c_str(), "%x %x %32s %x %" SCNx64 " %x", &d.qpn, &d.psn, gid, &d.rkey, &d.addr, &d.len) != 6)
        return false;
    for (int i = 0; i < 16; ++i) {
        unsigned b;
        std::sscanf(gid + 2 * i, "%2x", &b);
        d.gid.raw[i] = uint8_t(b);
    }
    return true;
}

struct Verbs {
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
    ibv_qp* qp = nullptr;
    ibv_mr* mr = nullptr;
    uint8_t* buf = nullptr;

    ibv_wc wait() {
        ibv_wc wc{};
        for (int i = 0; i < 20000000; ++i) {
            int n = ibv_poll_cq(cq, 1, &wc);
            if (n) return wc;
            if (i > 1000) usleep(50);
        }
        wc.status = IBV_WC_GENERAL_ERR;
        wc.vendor_err = 0xdead;   // timed out
        return wc;
    }
    ibv_wc post(ibv_wr_opcode op, uint64_t local_off, uint32_t len, const Dest& r, uint64_t remote_off,
                uint64_t compare_add = 0, uint64_t swap = 0, uint32_t rkey_xor = 0) {
        ibv_sge sge{reinterpret_cast<uint64_t>(buf + local_off), len, mr->lkey};
        ibv_send_wr wr{}, *bad = nullptr;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = op;
        wr.send_flags = IBV_SEND_SIGNALED;
        if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
            wr.wr.atomic.remote_addr = r.addr + remote_off;
            wr.wr.atomic.rkey = r.rkey ^ rkey_xor;
            wr.wr.atomic.compare_add = compare_add;
            wr.wr.atomic.swap = swap;
        } else {
            wr.wr.rdma.remote_addr = r.addr + remote_off;
            wr.wr.rdma.rkey = r.rkey ^ rkey_xor;
        }
        if (ibv_post_send(qp, &wr, &bad)) {
            ibv_wc wc{};
            wc.status = IBV_WC_GENERAL_ERR;
            return wc;
        }
        return wait();
    }
};

// One line per step ("ok ..." / "FAIL ..."), and how many failed.
struct Steps {
    int bad = 0;
    void check(bool ok, const char* what) {
        std::printf("%s %s\n", ok ? "ok" : "FAIL", what);
        std::fflush(stdout);
        bad += !ok;
    }
};

uint8_t pattern(size_t i, unsigned seed) { return uint8_t(i * 13 + seed + (i >> 10)); }

int run_initiator(Verbs& v, const Dest& r) {
    Steps steps;
    auto check = [&](bool ok, const char* what) { steps.check(ok, what); };
    for (size_t i = 0; i < 4096; ++i) v.buf[i] = pattern(i, 1);
    ibv_wc wc = v.post(IBV_WR_RDMA_WRITE, 0, 4096, r, 0);
    check(wc.status == IBV_WC_SUCCESS, "write 4096 at 0");
    wc = v.post(IBV_WR_RDMA_READ, 8192, 4096, r, 0);
    check(wc.status == IBV_WC_SUCCESS && std::memcmp(v.buf, v.buf + 8192, 4096) == 0, "read 4096 at 0 back");
    for (size_t i = 0; i < 100000; ++i) v.buf[16384 + i] = pattern(i, 2);
    wc = v.post(IBV_WR_RDMA_WRITE, 16384, 100000, r, 16384);
    check(wc.status == IBV_WC_SUCCESS, "write 100000 at 16384");
    wc = v.post(IBV_WR_RDMA_READ, 200000, 100000, r, 16384);
    check(wc.status == IBV_WC_SUCCESS && std::memcmp(v.buf + 16384, v.buf + 200000, 100000) == 0,
          "read 100000 at 16384 back");
    bool adds = true;
    for (uint64_t k = 0; k < 10; ++k) {
        wc = v.post(IBV_WR_ATOMIC_FETCH_AND_ADD, 400000, 8, r, kCounter, 7);
        uint64_t before;
        std::memcpy(&before, v.buf + 400000, 8);
        adds &= wc.status == IBV_WC_SUCCESS && before == 7 * k;
    }
    check(adds, "fetch_add 7 ten times from 0");
    wc = v.post(IBV_WR_ATOMIC_CMP_AND_SWP, 400000, 8, r, kCounter, 70, 0xabcdef0123456789ull);
    uint64_t before;
    std::memcpy(&before, v.buf + 400000, 8);
    check(wc.status == IBV_WC_SUCCESS && before == 70, "cmp_swap 70 -> 0xabcdef0123456789");
    wc = v.post(IBV_WR_ATOMIC_CMP_AND_SWP, 400000, 8, r, kCounter, 70, 1);
    std::memcpy(&before, v.buf + 400000, 8);
    check(wc.status == IBV_WC_SUCCESS && before == 0xabcdef0123456789ull, "cmp_swap that does not match");
    wc = v.post(IBV_WR_RDMA_WRITE, 0, 64, r, 600000, 0, 0, 0x100);
    std::printf("(bad rkey write: %s)\n", ibv_wc_status_str(wc.status));
    check(wc.status == IBV_WC_REM_ACCESS_ERR, "write with a wrong rkey: remote access error");
    return steps.bad ? 1 : 0;
}

int run_invalidate(Verbs& v, int fd) {
    char kind[16] = {};
    Dest r;
    const std::string line = read_line(fd);
    if (std::sscanf(line.c_str(), "%15s %x %" SCNx64, kind, &r.rkey, &r.addr) != 3) return die("the test's key line");
    Steps steps;
    auto check = [&](bool ok, const char* what) { steps.check(ok, what); };
    for (size_t i = 0; i < 4096; ++i) v.buf[i] = pattern(i, 5);
    ibv_wc wc = v.post(IBV_WR_RDMA_WRITE, 0, 4096, r, 0);
    check(wc.status == IBV_WC_SUCCESS, "write 4096 through the key");
    if (std::string(kind) == "remote") {
        ibv_sge sge{reinterpret_cast<uint64_t>(v.buf), 8, v.mr->lkey};
        ibv_send_wr wr{}, *badwr = nullptr;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND_WITH_INV;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.invalidate_rkey = r.rkey;
        check(ibv_post_send(v.qp, &wr, &badwr) == 0 && v.wait().status == IBV_WC_SUCCESS, "send_with_inv of the key");
    } else {
        write_str(fd, "wrote\n");
        check(read_line(fd) == "again", "the test invalidated the key");
    }
    wc = v.post(IBV_WR_RDMA_WRITE, 0, 64, r, 0);
    std::printf("(write through the invalidated key: %s)\n", ibv_wc_status_str(wc.status));
    check(wc.status == IBV_WC_REM_ACCESS_ERR, "write through the invalidated key: remote access error");
    return steps.bad ? 1 : 0;
}

uint64_t fnv(uint64_t h, const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

bool post_recv(Verbs& v, uint32_t slot) {
    ibv_sge sge{reinterpret_cast<uint64_t>(v.buf + kBuf + slot * kRecvSlot), uint32_t(kRecvSlot), v.mr->lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_recv(v.qp, &wr, &bad) == 0;
}

int run_target(Verbs& v, int fd) {
    // The receive side: every SEND is logged in order and its receive posted again.
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> messages{0}, hash{14695981039346656037ull};
    std::atomic<int> errors{0};
    std::thread receiver([&] {
        while (!stop.load()) {
            ibv_wc wc{};
            if (ibv_poll_cq(v.cq, 1, &wc) != 1) {
                usleep(20);
                continue;
            }
            if (wc.status != IBV_WC_SUCCESS || !(wc.opcode & IBV_WC_RECV)) {
                ++errors;
                continue;
            }
            uint64_t h = hash.load();
            const uint32_t imm = (wc.wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc.imm_data) : 0;
            h = fnv(h, &wc.byte_len, 4);
            h = fnv(h, &imm, 4);
            h = fnv(h, v.buf + kBuf + wc.wr_id * kRecvSlot, wc.byte_len);
            hash.store(h);
            ++messages;
            if (!post_recv(v, uint32_t(wc.wr_id))) ++errors;
        }
    });
    for (;;) {
        const std::string line = read_line(fd);
        if (line == "recvlog") {
            char b[64];
            std::snprintf(b, sizeof b, "%" PRIu64 " %" PRIx64 " %d\n", messages.load(), hash.load(), errors.load());
            write_str(fd, b);
            continue;
        }
        size_t off = 0, len = 0;
        if (std::sscanf(line.c_str(), "dump %zx %zx", &off, &len) == 2 && off + len <= kBuf) {
            std::string hex;
            hex.reserve(len * 2 + 1);
            char b[3];
            for (size_t i = 0; i < len; ++i) {
                std::snprintf(b, sizeof b, "%02x", v.buf[off + i]);
                hex += b;
            }
            write_str(fd, hex + "\n");
            continue;
        }
        stop = true;   // "quit", or the test went away
        receiver.join();
        return 0;
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: rxe_verbs_peer target|initiator|invalidate PORT\n");
        return 2;
    }
    const std::string mode = argv[1];
    int ndev = 0;
    ibv_device** list = ibv_get_device_list(&ndev);
    Verbs v;
    for (int i = 0; list && i < ndev; ++i)
        if (std::string(ibv_get_device_name(list[i])) == "rxe0") v.ctx = ibv_open_device(list[i]);
    if (!v.ctx) return die("open rxe0");
    v.buf = static_cast<uint8_t*>(std::aligned_alloc(4096, kBuf + kRecvs * kRecvSlot));
    for (size_t i = 0; i < kBuf; ++i) v.buf[i] = uint8_t(i * 7 + 3);
    std::memset(v.buf + kCounter, 0, 16);
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    if (!(v.pd = ibv_alloc_pd(v.ctx)) || !(v.mr = ibv_reg_mr(v.pd, v.buf, kBuf + kRecvs * kRecvSlot, access)) ||
        !(v.cq = ibv_create_cq(v.ctx, 256, nullptr, nullptr, 0)))
        return die("pd/mr/cq");
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = v.cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap = {64, kRecvs, 1, 1, 0};
    if (!(v.qp = ibv_create_qp(v.pd, &ia))) return die("create_qp");
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = access;
    if (ibv_modify_qp(v.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return die("INIT");
    if (mode == "target")
        for (uint32_t i = 0; i < kRecvs; ++i)
            if (!post_recv(v, i)) return die("post_recv");
    Dest me;
    me.qpn = v.qp->qp_num;
    me.psn = 0x2468ac;
    me.rkey = v.mr->rkey;
    me.addr = reinterpret_cast<uint64_t>(v.buf);
    me.len = kBuf;
    if (ibv_query_gid(v.ctx, 1, 1, &me.gid)) return die("query_gid 1");

    int ls = ::socket(AF_INET, SOCK_STREAM, 0), one = 1;
    ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(uint16_t(std::atoi(argv[2])));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof sa) || ::listen(ls, 1)) return die("listen");
    const int fd = ::accept(ls, nullptr, nullptr);
    ::close(ls);
    write_str(fd, format(me));
    Dest peer;
    if (!parse(read_line(fd), peer)) return die("the test's line");

    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = peer.qpn;
    a.rq_psn = peer.psn;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = peer.gid;
    a.ah_attr.grh.sgid_index = 1;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(v.qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        return die("RTR");
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = me.psn;
    a.max_rd_atomic = 4;
    if (ibv_modify_qp(v.qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                    IBV_QP_MAX_QP_RD_ATOMIC))
        return die("RTS");
    write_str(fd, "ready\n");
    const int rc = mode == "initiator"    ? run_initiator(v, peer)
                   : mode == "invalidate" ? run_invalidate(v, fd)
                                          : run_target(v, fd);
    if (mode != "target") write_str(fd, "finished\n");
    ::close(fd);
    ibv_destroy_qp(v.qp);
    ibv_destroy_cq(v.cq);
    ibv_dereg_mr(v.mr);
    ibv_dealloc_pd(v.pd);
    ibv_close_device(v.ctx);
    ibv_free_device_list(list);
    std::free(v.buf);
    return rc;
}
