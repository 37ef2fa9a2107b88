// srq_pingpong: rdma-core's ibv_srq_pingpong on vfab's RDMA transport — num_qp RC queue pairs
// receiving through one shared receive queue, the same options, the same TCP exchange (256
// addresses each way) and the same message pattern, so either side may be the unmodified
// rdma-core tool on a kernel RDMA device (the Linux kernel's rxe, say).
//
//   srq_pingpong -d 0000:00:02.0 --ip 10.77.0.1 -g 0                # server
//   srq_pingpong -d 0000:00:02.0 --ip 10.77.0.1 -g 0 SERVER          # client
//   ibv_srq_pingpong -d rxe0 -g 1 SERVER                             # or rdma-core's, either side
//
// The pattern: rx_depth receives on the SRQ; the client sends on every queue pair; a queue
// pair sends its next message once its last send and a receive on it completed, until `iters`
// messages went each way in all. The SRQ is topped up when num_qp or fewer receives are left.
#include "rdma_pingpong.hpp"
#include "vfab/log.hpp"

namespace vfab::examples {
namespace {

class SrqPingpong {
public:
    SrqPingpong(const PingpongArgs& a, uint32_t num_qp) : a_(a), num_qp_(num_qp) {}

    ~SrqPingpong() {
        port_.reset();   // before the device; queue pairs, SRQ and CQ go with the port
        std::free(buf_);
    }

    int run() {
        if (num_qp_ == 0 || num_qp_ > rdma::kSrqPingpongEndpoints)
            return fail("-q: 1 to " + std::to_string(rdma::kSrqPingpongEndpoints) + " queue pairs");
        if (num_qp_ > a_.rx_depth)
            return fail("rx_depth " + std::to_string(a_.rx_depth) + " is too small for " + std::to_string(num_qp_) +
                        " QPs -- must have at least one receive per QP.");
        if (int r = open_port(a_, dev_, port_); r) return r;
        if (int r = setup(); r) return r;
        if (int r = exchange(); r) return r;
        return loop();
    }

private:
    int setup() {
        const size_t page = size_t(::sysconf(_SC_PAGESIZE));
        buf_ = static_cast<uint8_t*>(std::aligned_alloc(page, (a_.size + page - 1) / page * page));
        std::memset(buf_, 0, a_.size);
        auto mr = port_->pd().register_memory(buf_, a_.size, dma::Access::local_write);
        if (!mr) return fail("Couldn't register MR: " + mr.error().message);
        mr_ = *mr;
        auto cq = port_->create_cq(a_.rx_depth + num_qp_);
        if (!cq) return fail("Couldn't create CQ: " + cq.error().message);
        cq_ = *cq;
        auto srq = port_->create_srq(rdma::SrqAttr{a_.rx_depth, 1, 0});
        if (!srq) return fail("Couldn't create SRQ: " + srq.error().message);
        srq_ = *srq;
        for (uint32_t i = 0; i < num_qp_; ++i) {
            rdma::RdmaQpInitAttr ia;
            ia.send_cq = ia.recv_cq = cq_;
            ia.srq = srq_;
            ia.cap.max_send_wr = 1;
            ia.cap.max_send_sge = 1;
            auto qp = port_->create_qp(ia);
            if (!qp) return fail("Couldn't create QP[" + std::to_string(i) + "]: " + qp.error().message);
            qp_.push_back(*qp);
            rdma::QpAttr at;
            at.qp_state = rdma::RdmaQpState::init;
            at.port_num = uint8_t(a_.ib_port);
            if (auto r = qp_[i]->modify(at, rdma::attr_state | rdma::attr_pkey_index | rdma::attr_port |
                                                rdma::attr_access_flags);
                !r)
                return fail("Failed to modify QP[" + std::to_string(i) + "] to INIT: " + r.error().message);
        }
        routs_ = post_recv(a_.rx_depth);
        if (routs_ < a_.rx_depth) return fail("Couldn't post receive (" + std::to_string(routs_) + ")");
        return 0;
    }

    uint32_t post_recv(uint32_t n) {
        Sge s{reinterpret_cast<uint64_t>(buf_), a_.size, mr_.lkey};
        uint32_t i = 0;
        for (; i < n; ++i) {
            RecvWr wr{kRecvWrid, &s, 1, 0};
            if (!srq_->post_recv(std::span(&wr, 1))) break;
        }
        return i;
    }

    int connect(std::span<const rdma::Endpoint> peer) {
        for (uint32_t i = 0; i < num_qp_; ++i)
            if (int r = connect_qp(qp_[i], a_, peer[i], mine_[i].psn, false, "QP[" + std::to_string(i) + "]"); r) return r;
        return 0;
    }

    int exchange() {
        mine_.assign(rdma::kSrqPingpongEndpoints, rdma::Endpoint{});
        std::random_device rnd;
        for (uint32_t i = 0; i < num_qp_; ++i) {
            mine_[i].qpn = qp_[i]->qp_num();
            mine_[i].psn = uint32_t(rnd()) & 0xFFFFFF;
            mine_[i].gid = port_->gid();
            std::printf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", mine_[i].lid, mine_[i].qpn,
                        mine_[i].psn, rdma::gid_to_string(mine_[i].gid).c_str());
        }
        // The peer resolves our address while we wait on the TCP exchange: a progress thread
        // answers its ARP meanwhile.
        if (auto r = port_->start_progress_thread(-1); !r) return fail(r.error().message);
        Result<std::vector<rdma::Endpoint>> peer = std::vector<rdma::Endpoint>{};
        std::string why;
        const rdma::ExchangeWatch watch = watch_device(*dev_, why);
        if (!a_.server.empty()) {
            peer = rdma::exchange_as_client(a_.server, a_.port, mine_, rdma::kClientTimeoutMs, watch);
        } else {
            peer = rdma::exchange_as_server(a_.port, mine_, [&](std::span<const rdma::Endpoint> p) -> Result<void> {
                if (connect(p)) return Error{EIO, "Couldn't connect to remote QP"};
                return {};
            }, rdma::kServerTimeoutMs, watch);
        }
        port_->stop_progress_thread();
        if (!peer) return fail(why.empty() ? peer.error().message : why);
        for (uint32_t i = 0; i < num_qp_; ++i) {
            const rdma::Endpoint& p = (*peer)[i];
            std::printf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", p.lid, p.qpn, p.psn,
                        rdma::gid_to_string(p.gid).c_str());
        }
        std::fflush(stdout);
        if (!a_.server.empty() && connect(*peer)) return 1;
        return 0;
    }

    bool post_send(uint32_t i) {
        Sge s{reinterpret_cast<uint64_t>(buf_), a_.size, mr_.lkey};
        rdma::RdmaSendWr wr;
        wr.wr_id = kSendWrid;
        wr.sg_list = &s;
        wr.num_sge = 1;
        wr.opcode = rdma::WrOpcode::send;
        wr.send_flags = rdma::wr_signaled;
        return bool(qp_[i]->post_send(std::span(&wr, 1)));
    }

    int loop() {
        std::vector<uint64_t> pending(num_qp_, kRecvWrid);
        if (!a_.server.empty()) {
            for (uint32_t i = 0; i < num_qp_; ++i) {
                if (!post_send(i)) return fail("Couldn't post send");
                pending[i] = kSendWrid | kRecvWrid;
            }
        }
        timeval start, end;
        ::gettimeofday(&start, nullptr);
        uint32_t rcnt = 0, scnt = 0;
        std::vector<rdma::Wc> wc(a_.rx_depth + num_qp_);
        EventWatch<vfab::Device> watch(*dev_);
        std::string why;
        while (rcnt < a_.iters || scnt < a_.iters) {
            const int n = next_completions(cq_, a_.events, wc, watch, why);
            if (n < 0) return fail(why.empty() ? "poll CQ failed " + std::to_string(n) : why);
            for (int k = 0; k < n; ++k) {
                if (wc[k].status != rdma::RdmaWcStatus::success) return failed_status(wc[k]);
                const uint32_t i = qp_index(wc[k].qp_num);
                if (i == num_qp_) return fail("Couldn't find QPN " + std::to_string(wc[k].qp_num));
                if (wc[k].wr_id == kSendWrid) {
                    ++scnt;
                } else if (wc[k].wr_id == kRecvWrid) {
                    if (--routs_ <= num_qp_) {
                        routs_ += post_recv(a_.rx_depth - routs_);
                        if (routs_ < a_.rx_depth) return fail("Couldn't post receive (" + std::to_string(routs_) + ")");
                    }
                    ++rcnt;
                } else {
                    return fail("Completion for unknown wr_id " + std::to_string(wc[k].wr_id));
                }
                pending[i] &= ~wc[k].wr_id;
                if (scnt < a_.iters && !pending[i]) {
                    if (!post_send(i)) return fail("Couldn't post send");
                    pending[i] = kRecvWrid | kSendWrid;
                }
            }
        }
        ::gettimeofday(&end, nullptr);
        print_results(a_, start, end, *port_);
        return 0;
    }

    uint32_t qp_index(uint32_t qpn) const {
        for (uint32_t i = 0; i < num_qp_; ++i)
            if (qp_[i]->qp_num() == qpn) return i;
        return num_qp_;
    }

    PingpongArgs a_;
    uint32_t num_qp_;
    std::unique_ptr<vfab::Device> dev_;
    std::unique_ptr<rdma::Port> port_;
    uint8_t* buf_ = nullptr;
    dma::MemoryRegion mr_;
    rdma::Cq* cq_ = nullptr;
    rdma::Srq* srq_ = nullptr;
    std::vector<rdma::Qp*> qp_;
    std::vector<rdma::Endpoint> mine_;
    uint32_t routs_ = 0;
};

}  // namespace
}  // namespace vfab::examples

int main(int argc, char** argv) {
    vfab::set_log_handler(vfab::log_to_stderr, nullptr, vfab::LogLevel::warning);   // vfab's warnings on stderr
    using namespace vfab;
    examples::PingpongArgs a;
    uint32_t num_qp = 16;
    CLI::App app{"SRQ ping-pong on vfab's RDMA transport, wire-compatible with ibv_srq_pingpong"};
    examples::add_common_options(app, a);
    app.add_option("-q,--num-qp", num_qp, "number of QPs to use (default 16)");
    CLI11_PARSE(app, argc, argv);
    examples::SrqPingpong p(a, num_qp);
    return p.run();
}
