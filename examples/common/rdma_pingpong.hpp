// rc_pingpong and ud_pingpong: rdma-core's ibv_rc_pingpong / ibv_ud_pingpong on vfab's RDMA
// transport — the same options, the same TCP exchange (vfab/rdma/exchange.hpp) and the same
// message pattern, so either side may be the unmodified rdma-core tool on a kernel RDMA device
// (the Linux kernel's rxe, say) and the other vfab on any NIC it drives.
//
// The pattern: the server posts rx_depth receives; the client sends first; each side sends
// its next message once its last send and a receive completed, until both sent and received
// `iters` messages. vfab needs what a kernel device has of its own: the PCI address of the
// NIC (-d) and the IPv4 address vfab answers for on that link (--ip, never a kernel
// interface's address).
#pragma once

#include <arpa/inet.h>
#include <poll.h>
#include <sys/time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "device_events.hpp"
#include "vfab/rdma/exchange.hpp"
#include "vfab/rdma/rdma.hpp"
#include "vfab/rdma/wire.hpp"
#include "vfab/log.hpp"
#include "vfab/vfab.hpp"

namespace vfab::examples {

struct PingpongArgs {
    std::string device, ip, server;
    uint16_t port = rdma::kPingpongPort;
    int ib_port = 1, gid_index = 0, sl = 0;
    uint32_t size = 4096, mtu = 1024, rx_depth = 500, iters = 1000;
    bool events = false, validate = false;
};

inline constexpr uint64_t kRecvWrid = 1, kSendWrid = 2;
inline constexpr uint32_t kUdQkey = 0x11111111;   // the Q_Key ibv_ud_pingpong uses
inline constexpr uint32_t kGrh = 40;

inline int fail(const std::string& what) {
    std::fprintf(stderr, "%s\n", what.c_str());
    return 1;
}

inline uint32_t mtu_code(uint32_t bytes) {
    for (uint32_t c = 1; c <= 5; ++c)
        if ((128u << c) == bytes) return c;
    return 0;
}

// ---- what rc_pingpong, ud_pingpong and srq_pingpong share --------------------------------------

// The device (-d) and an RDMA port on it answering for --ip; 0, or 1 with the reason printed.
inline int open_port(const PingpongArgs& a, std::unique_ptr<vfab::Device>& dev, std::unique_ptr<rdma::Port>& port) {
    in_addr ip{};
    if (::inet_pton(AF_INET, a.ip.c_str(), &ip) != 1) return fail("--ip: '" + a.ip + "' is not an IPv4 address");
    if (mtu_code(a.mtu) == 0) return fail("-m: the MTU is 256, 512, 1024, 2048 or 4096");
    auto d = vfab::Device::open(a.device);
    if (!d) return fail(d.error().message);
    dev = std::move(*d);
    rdma::PortConfig pc;
    pc.ipv4 = ntohl(ip.s_addr);
    auto p = rdma::Port::create(*dev, pc);
    if (!p) return fail(p.error().message);
    port = std::move(*p);
    return 0;
}

// RTR and RTS towards `peer` with the pingpong tools' attributes (UD: no peer in the QP).
inline int connect_qp(rdma::Qp* qp, const PingpongArgs& a, const rdma::Endpoint& peer, uint32_t my_psn, bool ud,
                      const std::string& which = "QP") {
    rdma::QpAttr at;
    at.qp_state = rdma::RdmaQpState::rtr;
    at.path_mtu = mtu_code(a.mtu);
    at.dest_qp_num = peer.qpn;
    at.rq_psn = peer.psn;
    at.max_dest_rd_atomic = 1;
    at.min_rnr_timer = 12;
    at.ah_attr.dgid = peer.gid;
    at.ah_attr.hop_limit = 1;
    uint32_t mask = rdma::attr_state;
    if (!ud)
        mask |= rdma::attr_av | rdma::attr_path_mtu | rdma::attr_dest_qpn | rdma::attr_rq_psn |
                rdma::attr_max_dest_rd_atomic | rdma::attr_min_rnr_timer;
    if (auto r = qp->modify(at, mask); !r) return fail("Failed to modify " + which + " to RTR: " + r.error().message);
    at.qp_state = rdma::RdmaQpState::rts;
    at.timeout = 14;
    at.retry_cnt = 7;
    at.rnr_retry = 7;
    at.sq_psn = my_psn;
    at.max_rd_atomic = 1;
    mask = rdma::attr_state | rdma::attr_sq_psn;
    if (!ud) mask |= rdma::attr_timeout | rdma::attr_retry_cnt | rdma::attr_rnr_retry | rdma::attr_max_qp_rd_atomic;
    if (auto r = qp->modify(at, mask); !r) return fail("Failed to modify " + which + " to RTS: " + r.error().message);
    return 0;
}

// Completions: busy-polls, or with -e sleeps on the CQ's channel. -1 with `why` set when the
// device is going away (removal, fatal error, reset: the run ends and the device is closed).
inline int next_completions(rdma::Cq* cq, bool events, std::span<rdma::Wc> wc, EventWatch<vfab::Device>& watch,
                            std::string& why) {
    int n = cq->poll(wc);
    if (n == 0)
        if (auto stop = watch.stop_reason()) {
            why = *stop;
            return -1;
        }
    if (n || !events) return n;
    if (auto r = cq->arm(); !r) return -1;
    pollfd p{cq->channel_fd(), POLLIN, 0};
    (void)::poll(&p, 1, 100);
    cq->take_events();
    return cq->poll(wc);
}

// The device's events while the address exchange waits on the peer: a removal, fatal error or
// reset stops the exchange (ECANCELED) with `why` set, instead of keeping the kernel's removal
// waiting for a peer that may never come.
inline rdma::ExchangeWatch watch_device(vfab::Device& dev, std::string& why) {
    return {dev.event_fd(), [&dev, &why] {
                if (auto stop = stop_reason(dev, dev.attr().address.to_string())) why = *stop;
                return why.empty();
            }};
}

inline int failed_status(const rdma::Wc& wc) {
    return fail(std::string("Failed status ") + rdma::to_string(wc.status) + " (" + std::to_string(uint32_t(wc.status)) +
                ") for wr_id " + std::to_string(wc.wr_id));
}

// The tools' two result lines; then the port runs a while, so that the last acknowledgements
// go out before the queue pairs go away.
inline void print_results(const PingpongArgs& a, const timeval& start, const timeval& end, rdma::Port& port) {
    const double usec = double(end.tv_sec - start.tv_sec) * 1e6 + double(end.tv_usec - start.tv_usec);
    const long long bytes = (long long)a.size * a.iters * 2;
    std::printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1e6, double(bytes) * 8. / usec);
    std::printf("%u iters in %.2f seconds = %.2f usec/iter\n", a.iters, usec / 1e6, usec / a.iters);
    for (int i = 0; i < 1000; ++i) port.progress();
}

// The options the tools share, plus vfab's -d (a PCI address) and --ip.
inline void add_common_options(CLI::App& app, PingpongArgs& a) {
    app.add_option("-p,--port", a.port, "listen on / connect to TCP port (default 18515)");
    app.add_option("-d,--ib-dev", a.device, "the NIC: its PCI address, bound to vfio-pci")->required();
    app.add_option("--ip", a.ip, "the IPv4 address vfab answers for on that link")->required();
    app.add_option("-i,--ib-port", a.ib_port, "port number (1)");
    app.add_option("-s,--size", a.size, "size of message to exchange");
    app.add_option("-m,--mtu", a.mtu, "path MTU (default 1024)");
    app.add_option("-r,--rx-depth", a.rx_depth, "number of receives to post at a time (default 500)");
    app.add_option("-n,--iters", a.iters, "number of exchanges (default 1000)");
    app.add_option("-l,--sl", a.sl, "service level (default 0)");
    app.add_option("-g,--gid-idx", a.gid_index, "local port GID index (vfab's port has one: 0)");
    app.add_flag("-e,--events", a.events, "sleep on CQ events (default poll)");
    app.add_option("servername", a.server, "the server (omit to be the server)");
}

// One side of the ping-pong: device, port, CQ, QP, the buffer and its registration.
class Pingpong {
public:
    Pingpong(const PingpongArgs& a, rdma::QpType type) : a_(a), type_(type) {}

    int run() {
        const bool ud = type_ == rdma::QpType::ud;
        if (int r = open_port(a_, dev_, port_); r) return r;
        if (ud && a_.size > rdma::wire::mtu_bytes(port_->active_mtu()))
            return fail("Requested size larger than port MTU (" + std::to_string(rdma::wire::mtu_bytes(port_->active_mtu())) + ")");
        if (auto r = setup(); r) return r;
        if (auto r = exchange(); r) return r;
        return loop();
    }

private:
    int setup() {
        const bool ud = type_ == rdma::QpType::ud;
        const size_t page = size_t(::sysconf(_SC_PAGESIZE));
        buf_len_ = a_.size + (ud ? kGrh : 0);
        buf_ = static_cast<uint8_t*>(std::aligned_alloc(page, (buf_len_ + page - 1) / page * page));
        std::memset(buf_, ud ? 0x7b : 0, buf_len_);
        auto mr = port_->pd().register_memory(buf_, buf_len_, dma::Access::local_write);
        if (!mr) return fail("Couldn't register MR: " + mr.error().message);
        mr_ = *mr;
        auto cq = port_->create_cq(a_.rx_depth + 1);
        if (!cq) return fail("Couldn't create CQ: " + cq.error().message);
        cq_ = *cq;
        rdma::RdmaQpInitAttr ia;
        ia.qp_type = type_;
        ia.send_cq = ia.recv_cq = cq_;
        ia.cap.max_send_wr = 1;
        ia.cap.max_recv_wr = a_.rx_depth;
        ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
        auto qp = port_->create_qp(ia);
        if (!qp) return fail("Couldn't create QP: " + qp.error().message);
        qp_ = *qp;
        rdma::QpAttr at;
        at.qp_state = rdma::RdmaQpState::init;
        at.port_num = uint8_t(a_.ib_port);
        at.qkey = kUdQkey;
        const uint32_t mask = rdma::attr_state | rdma::attr_pkey_index | rdma::attr_port |
                              (ud ? rdma::attr_qkey : rdma::attr_access_flags);
        if (auto r = qp_->modify(at, mask); !r) return fail("Failed to modify QP to INIT: " + r.error().message);
        routs_ = post_recv(a_.rx_depth);
        if (routs_ < a_.rx_depth) return fail("Couldn't post receive (" + std::to_string(routs_) + ")");
        return 0;
    }

    uint32_t post_recv(uint32_t n) {
        Sge s{reinterpret_cast<uint64_t>(buf_), buf_len_, mr_.lkey};
        uint32_t i = 0;
        for (; i < n; ++i) {
            RecvWr wr{kRecvWrid, &s, 1, 0};
            if (!qp_->post_recv(std::span(&wr, 1))) break;
        }
        return i;
    }

    int connect(const rdma::Endpoint& peer) {
        const bool ud = type_ == rdma::QpType::ud;
        if (int r = connect_qp(qp_, a_, peer, my_.psn, ud); r) return r;
        if (ud) {
            rdma::AhAttr ah;
            ah.dgid = peer.gid;
            ah.hop_limit = 64;
            auto h = port_->create_ah(ah);
            if (!h) return fail("Failed to create AH: " + h.error().message);
            ah_ = *h;
        }
        remote_qpn_ = peer.qpn;
        return 0;
    }

    int exchange() {
        my_.qpn = qp_->qp_num();
        my_.psn = uint32_t(std::random_device{}()) & 0xFFFFFF;
        my_.gid = port_->gid();
        std::printf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", my_.lid, my_.qpn, my_.psn,
                    rdma::gid_to_string(my_.gid).c_str());
        // The peer resolves our address when it connects, while we wait on the TCP exchange: a
        // progress thread answers its ARP meanwhile (rxe gives up after a second).
        if (auto r = port_->start_progress_thread(-1); !r) return fail(r.error().message);
        Result<rdma::Endpoint> peer = rdma::Endpoint{};
        std::string why;
        const rdma::ExchangeWatch watch = watch_device(*dev_, why);
        if (!a_.server.empty()) {
            peer = rdma::exchange_as_client(a_.server, a_.port, my_, rdma::kClientTimeoutMs, watch);
        } else {
            peer = rdma::exchange_as_server(a_.port, my_, [&](const rdma::Endpoint& p) -> Result<void> {
                if (connect(p)) return Error{EIO, "Couldn't connect to remote QP"};
                return {};
            }, rdma::kServerTimeoutMs, watch);
        }
        port_->stop_progress_thread();
        if (!peer) return fail(why.empty() ? peer.error().message : why);
        std::printf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", peer->lid, peer->qpn, peer->psn,
                    rdma::gid_to_string(peer->gid).c_str());
        std::fflush(stdout);
        if (!a_.server.empty() && connect(*peer)) return 1;
        return 0;
    }

    bool post_send() {
        const bool ud = type_ == rdma::QpType::ud;
        Sge s{reinterpret_cast<uint64_t>(buf_ + (ud ? kGrh : 0)), a_.size, mr_.lkey};
        rdma::RdmaSendWr wr;
        wr.wr_id = kSendWrid;
        wr.sg_list = &s;
        wr.num_sge = 1;
        wr.opcode = rdma::WrOpcode::send;
        wr.send_flags = rdma::wr_signaled;
        wr.ah = ah_;
        wr.remote_qpn = remote_qpn_;
        wr.remote_qkey = kUdQkey;
        return bool(qp_->post_send(std::span(&wr, 1)));
    }

    int loop() {
        const bool client = !a_.server.empty();
        uint64_t pending = kRecvWrid;
        if (client) {
            if (!post_send()) return fail("Couldn't post send");
            pending |= kSendWrid;
        }
        timeval start, end;
        ::gettimeofday(&start, nullptr);
        uint32_t rcnt = 0, scnt = 0;
        rdma::Wc wc[2];
        EventWatch<vfab::Device> watch(*dev_);
        std::string why;
        while (rcnt < a_.iters || scnt < a_.iters) {
            const int n = next_completions(cq_, a_.events, wc, watch, why);
            if (n < 0) return fail(why.empty() ? "poll CQ failed " + std::to_string(n) : why);
            for (int i = 0; i < n; ++i) {
                if (wc[i].status != rdma::RdmaWcStatus::success) return failed_status(wc[i]);
                if (wc[i].wr_id == kSendWrid) {
                    ++scnt;
                } else if (wc[i].wr_id == kRecvWrid) {
                    if (--routs_ <= 1) {
                        routs_ += post_recv(a_.rx_depth - routs_);
                        if (routs_ < a_.rx_depth) return fail("Couldn't post receive (" + std::to_string(routs_) + ")");
                    }
                    ++rcnt;
                } else {
                    return fail("Completion for unknown wr_id " + std::to_string(wc[i].wr_id));
                }
                pending &= ~wc[i].wr_id;
                if (scnt < a_.iters && !pending) {
                    if (!post_send()) return fail("Couldn't post send");
                    pending = kRecvWrid | kSendWrid;
                }
            }
        }
        ::gettimeofday(&end, nullptr);
        print_results(a_, start, end, *port_);
        return 0;
    }

public:
    ~Pingpong() {
        port_.reset();   // before the device; the queue pairs and CQs go with the port
        std::free(buf_);
    }

private:
    PingpongArgs a_;
    rdma::QpType type_;
    std::unique_ptr<vfab::Device> dev_;
    std::unique_ptr<rdma::Port> port_;
    uint8_t* buf_ = nullptr;
    uint32_t buf_len_ = 0;
    dma::MemoryRegion mr_;
    rdma::Cq* cq_ = nullptr;
    rdma::Qp* qp_ = nullptr;
    rdma::AddressHandle* ah_ = nullptr;
    uint32_t remote_qpn_ = 0;
    uint32_t routs_ = 0;
    rdma::Endpoint my_;
};

// The options of ibv_rc_pingpong / ibv_ud_pingpong, plus vfab's -d (a PCI address) and --ip.
inline int pingpong_main(int argc, char** argv, rdma::QpType type, uint32_t default_size) {
    set_log_handler(log_to_stderr, nullptr, LogLevel::warning);   // vfab's warnings on stderr
    PingpongArgs a;
    a.size = default_size;
    CLI::App app{type == rdma::QpType::rc ? "RC ping-pong on vfab's RDMA transport, wire-compatible with ibv_rc_pingpong"
                                          : "UD ping-pong on vfab's RDMA transport, wire-compatible with ibv_ud_pingpong"};
    add_common_options(app, a);
    app.add_flag("-c,--chk", a.validate, "validate received buffer (accepted; the buffer holds zeros)");
    CLI11_PARSE(app, argc, argv);
    Pingpong p(a, type);
    return p.run();
}

}  // namespace vfab::examples
