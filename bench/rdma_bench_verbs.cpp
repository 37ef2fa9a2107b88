// bench/rdma_bench's modes on the system's libibverbs — in the lab, on the kernel's rxe — with
// the same loops (bench/rdma_bench_common.hpp) and the same side channel, so that vfab <-> rxe
// and rxe <-> rxe are measured by the code that measures vfab <-> vfab:
//
//   rdma_bench_verbs server -d rxe0 [-x 1] [--port 18600]
//   rdma_bench_verbs client MODE 127.0.0.1 -d rxe1 [-x 1] [options as rdma_bench]
//
// -x is the GID index (1: rxe's RoCEv2 ::ffff:a.b.c.d entry). The QP's attributes are
// rdma_bench's: path MTU 1024, timeout 14, retry 7, RNR retry 7, 16 READs/atomics in flight.
#include <infiniband/verbs.h>

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <memory>

#include "rdma_bench_common.hpp"

namespace {

using namespace rdma_bench;

constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

struct VerbsConfig {
    std::string device;
    int gid_index = 1;
    uint32_t psn = 0x1000;
};

class VerbsEnd {
public:
    static constexpr bool kBusyProgress = false;

    static std::unique_ptr<VerbsEnd> make(const VerbsConfig& c, const Params& p, std::string& err) {
        std::unique_ptr<VerbsEnd> e(new VerbsEnd);
        e->psn_ = c.psn;
        e->gid_index_ = c.gid_index;
        int n = 0;
        e->list_ = ibv_get_device_list(&n);
        for (int i = 0; e->list_ && i < n; ++i)
            if (c.device == ibv_get_device_name(e->list_[i])) e->ctx_ = ibv_open_device(e->list_[i]);
        if (!e->ctx_) return fail(err, "no RDMA device '" + c.device + "' (ibv_devices lists them)");
        if (ibv_query_gid(e->ctx_, 1, c.gid_index, &e->gid_))
            return fail(err, "ibv_query_gid " + std::to_string(c.gid_index) + ": " + std::strerror(errno));
        e->len_ = buffer_bytes(p);
        e->buf_ = static_cast<uint8_t*>(std::aligned_alloc(4096, e->len_));
        std::memset(e->buf_, 0, e->len_);
        if (!(e->pd_ = ibv_alloc_pd(e->ctx_))) return fail(err, std::string("ibv_alloc_pd: ") + std::strerror(errno));
        if (!(e->mr_ = ibv_reg_mr(e->pd_, e->buf_, e->len_, kAccess)))
            return fail(err, std::string("ibv_reg_mr: ") + std::strerror(errno));
        if (!(e->cq_ = ibv_create_cq(e->ctx_, 4096, nullptr, nullptr, 0)))
            return fail(err, std::string("ibv_create_cq: ") + std::strerror(errno));
        ibv_qp_init_attr ia{};
        ia.send_cq = ia.recv_cq = e->cq_;
        ia.qp_type = IBV_QPT_RC;
        ia.cap.max_send_wr = 1024;
        ia.cap.max_recv_wr = 256;
        ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
        if (!(e->qp_ = ibv_create_qp(e->pd_, &ia))) return fail(err, std::string("ibv_create_qp: ") + std::strerror(errno));
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        a.qp_access_flags = kAccess;
        if (ibv_modify_qp(e->qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
            return fail(err, std::string("INIT: ") + std::strerror(errno));
        return e;
    }
    ~VerbsEnd() {
        if (qp_) ibv_destroy_qp(qp_);
        if (cq_) ibv_destroy_cq(cq_);
        if (mr_) ibv_dereg_mr(mr_);
        if (pd_) ibv_dealloc_pd(pd_);
        if (ctx_) ibv_close_device(ctx_);
        if (list_) ibv_free_device_list(list_);
        std::free(buf_);
    }

    Info info() const {
        Info i;
        i.qpn = qp_->qp_num;
        i.psn = psn_;
        std::memcpy(i.gid, gid_.raw, 16);
        i.rkey = mr_->rkey;
        i.addr = reinterpret_cast<uint64_t>(buf_);
        i.len = len_;
        return i;
    }

    std::string connect(const Info& peer) {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = IBV_MTU_1024;
        a.dest_qp_num = peer.qpn;
        a.rq_psn = peer.psn;
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 12;
        a.ah_attr.is_global = 1;
        std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
        a.ah_attr.grh.sgid_index = uint8_t(gid_index_);
        a.ah_attr.grh.hop_limit = 64;
        a.ah_attr.port_num = 1;
        if (ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
            return std::string("RTR: ") + std::strerror(errno);
        a.qp_state = IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = psn_;
        a.max_rd_atomic = 16;
        if (ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                       IBV_QP_MAX_QP_RD_ATOMIC))
            return std::string("RTS: ") + std::strerror(errno);
        return {};
    }

    uint8_t* buf() { return buf_; }
    // ibv_reg_mr of the buffer's first `len` bytes and ibv_dereg_mr: each a system call.
    bool register_cycle(uint32_t len) {
        ibv_mr* mr = ibv_reg_mr(pd_, buf_, len, kAccess);
        return mr && ibv_dereg_mr(mr) == 0;
    }

    bool post(Op op, uint64_t wr_id, uint32_t local_off, uint32_t len, uint64_t raddr, uint32_t rkey, bool signaled,
              uint64_t add) {
        ibv_sge sge{reinterpret_cast<uint64_t>(buf_ + local_off), len, mr_->lkey};
        ibv_send_wr wr{}, *bad = nullptr;
        wr.wr_id = wr_id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
        switch (op) {
        case Op::write: wr.opcode = IBV_WR_RDMA_WRITE; break;
        case Op::read: wr.opcode = IBV_WR_RDMA_READ; break;
        case Op::send: wr.opcode = IBV_WR_SEND; break;
        case Op::fetch_add: wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD; break;
        }
        if (op == Op::fetch_add) {
            wr.wr.atomic.remote_addr = raddr;
            wr.wr.atomic.rkey = rkey;
            wr.wr.atomic.compare_add = add;
        } else {
            wr.wr.rdma.remote_addr = raddr;
            wr.wr.rdma.rkey = rkey;
        }
        return ibv_post_send(qp_, &wr, &bad) == 0;
    }
    bool post_recv(uint64_t wr_id, uint32_t local_off, uint32_t len) {
        ibv_sge sge{reinterpret_cast<uint64_t>(buf_ + local_off), len, mr_->lkey};
        ibv_recv_wr wr{}, *bad = nullptr;
        wr.wr_id = wr_id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        return ibv_post_recv(qp_, &wr, &bad) == 0;
    }
    int poll(Cqe* out, int n) {
        ibv_wc wc[64];
        const int k = ibv_poll_cq(cq_, std::min(n, 64), wc);
        for (int i = 0; i < k; ++i) {
            out[i].wr_id = wc[i].wr_id;
            out[i].ok = wc[i].status == IBV_WC_SUCCESS;
            out[i].recv = wc[i].opcode & IBV_WC_RECV;
            if (!out[i].ok) out[i].status = ibv_wc_status_str(wc[i].status);
        }
        return k;
    }
    void progress() {}
    void start_answering() {}
    void stop_answering() {}
    std::string extra() const { return "device=" + std::string(ibv_get_device_name(ctx_->device)); }

private:
    VerbsEnd() = default;
    static std::unique_ptr<VerbsEnd> fail(std::string& err, const std::string& what) {
        err = what;
        return nullptr;
    }
    ibv_device** list_ = nullptr;
    ibv_context* ctx_ = nullptr;
    ibv_pd* pd_ = nullptr;
    ibv_mr* mr_ = nullptr;
    ibv_cq* cq_ = nullptr;
    ibv_qp* qp_ = nullptr;
    ibv_gid gid_{};
    int gid_index_ = 1;
    uint8_t* buf_ = nullptr;
    uint32_t len_ = 0, psn_ = 0;
};

int run(int argc, char** argv) {
    CLI::App app{"rdma_bench_verbs: rdma_bench's modes on the system's libibverbs (the kernel's rxe in the lab)"};
    app.name("rdma_bench_verbs");
    app.require_subcommand(1);
    Params p;
    std::string mode = "write_bw", label = "verbs", host;
    uint16_t port = 18600;
    VerbsConfig cfg;
    auto common = [&](CLI::App* c) {
        c->add_option("-d,--ib-dev", cfg.device, "The RDMA device (rxe0)")->required();
        c->add_option("-x,--gid-index", cfg.gid_index, "Its GID index (1: rxe's IPv4 one)")->capture_default_str();
        c->add_option("--port", port, "TCP port of the side channel")->capture_default_str();
        c->add_option("--label", label, "First field of the result line")->capture_default_str();
    };
    CLI::App* server = app.add_subcommand("server", "One end: serve one client");
    common(server);
    CLI::App* client = app.add_subcommand("client", "One end: the initiator, against a server");
    common(client);
    client->add_option("MODE", mode, "write_bw, read_lat, send_lat, write_lat, atomic_rate or reg_rate")->required()->check(
        CLI::IsMember({"write_bw", "read_lat", "send_lat", "write_lat", "atomic_rate", "reg_rate"}));
    client->add_option("HOST", host, "The server's side channel (IPv4)")->required();
    client->add_option("-s,--size", p.size, "Message size in bytes")->capture_default_str()->check(CLI::Range(1u, 1u << 24));
    client->add_option("-n,--iters", p.iters, "Messages (after the warm-up)")->capture_default_str();
    client->add_option("--window", p.window, "Outstanding WRITEs / FETCH_ADDs at most")->capture_default_str()->check(CLI::Range(1u, 512u));
    client->add_option("--signal", p.signal, "A completion every K WRITEs (and the last)")->capture_default_str()->check(CLI::Range(1u, 512u));
    client->add_option("--warmup", p.warmup, "Messages before the measurement")->capture_default_str();
    client->add_option("--add", p.add, "FETCH_ADD's addend")->capture_default_str();
    client->add_option("--timeout", p.timeout_s, "Seconds a run may take")->capture_default_str()->check(CLI::Range(1.0, 3600.0));
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    p.mode = mode;
    if (p.signal > p.window) p.signal = p.window;
    std::string err;
    if (server->parsed()) {
        cfg.psn = 0x2000;
        const int ls = listen_on(port, err);
        Channel ch = ls >= 0 ? accept_one(ls, 120000, err) : Channel();
        if (ls >= 0) ::close(ls);
        Outcome o = ch.ok() ? run_server<VerbsEnd>(ch, [&](const Params& q, std::string& e) { return VerbsEnd::make(cfg, q, e); })
                            : Outcome{err, ""};
        if (!o.error.empty()) {
            std::printf("rdma_bench label=%s impl=verbs role=server FAILED: %s\n", label.c_str(), o.error.c_str());
            return 1;
        }
        std::printf("rdma_bench label=%s impl=verbs role=server %s\n", label.c_str(), o.fields.c_str());
        return 0;
    }
    const std::string head = "rdma_bench label=" + label + " impl=verbs role=client " + format_params(p);
    auto e = VerbsEnd::make(cfg, p, err);
    Outcome o;
    if (!e) {
        o.error = err;
    } else {
        Channel ch = connect_to(host, port, 30000, err);
        o = ch.ok() ? run_client(*e, ch, p) : Outcome{err, ""};
    }
    if (!o.error.empty()) {
        std::printf("%s FAILED: %s\n", head.c_str(), o.error.c_str());
        return 1;
    }
    std::printf("%s %s %s\n", head.c_str(), o.fields.c_str(), e->extra().c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rdma_bench_verbs: %s\n", e.what());
        return 1;
    }
}
