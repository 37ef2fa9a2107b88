// RDMA figures of vfab's transport in the lab (bench/rdma_vs_rxe.sh runs them beside the
// kernel's rxe in one boot): write bandwidth, READ / SEND / WRITE latency, FETCH_ADD rate
// (bench/rdma_bench_common.hpp has the loops and what each mode measures). Three ways to run:
//
//   rdma_bench local MODE [--nics 0000:00:02.0,0000:00:03.0] [options]
//       both ends in this process over two wired lab NICs, each end on its own thread: the
//       server's on the second NIC, the client's (the initiator) on the first, their side
//       channel over 127.0.0.1 (lo is brought up if it is down)
//   rdma_bench server -d 0000:00:02.0 --ip 10.77.0.1 [--port 18600]
//       one end; serves one client (this program or bench/rdma_bench_verbs on the kernel's rxe)
//   rdma_bench client MODE 127.0.0.1 -d 0000:00:02.0 --ip 10.77.0.1 [options]
//
// Options: -s SIZE, -n ITERS, --window W, --signal K, --warmup U, --add A (atomic_rate),
// --timeout S, --label L (the result line's first field), --rx-buffers / --tx-buffers (the
// port's raw queue pair); local: --threads 1 (one thread drives both ends: the target's work
// runs inside the initiator's polls), --cpus C,T (pin the initiator's and the target's
// threads); local and server: --passive sleep (a passive target sleeps on its CQ channel
// between frames instead of busy-polling). Output: one line of key=value figures on stdout ("rdma_bench
// label=L impl=vfab mode=... "), or "rdma_bench label=L ... FAILED: why" and exit 1.
// An end's device removed or reset mid-run ends the process at once with one line naming the
// device and exit 1 (docs/reliability.md); the kernel closes the device with the process.
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <sys/ioctl.h>

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>

#include "device_events.hpp"
#include "rdma_bench_common.hpp"
#include "vfab/rdma/rdma.hpp"
#include "vfab/vfab.hpp"
#include "vfab/log.hpp"

namespace {

using namespace rdma_bench;
namespace vr = vfab::rdma;

constexpr uint32_t kAllRemote = uint32_t(vfab::dma::Access::local_write | vfab::dma::Access::remote_write |
                                         vfab::dma::Access::remote_read | vfab::dma::Access::remote_atomic);

struct VfabConfig {
    std::string bdf;
    uint32_t ip = 0;
    uint32_t rx_buffers = 256, tx_buffers = 256;
    uint32_t psn = 0x1000;
};

// One end on vfab's transport: a device, its RDMA port, a CQ, an RC QP and a buffer.
class VfabEnd {
public:
    static constexpr bool kBusyProgress = true;

    static std::unique_ptr<VfabEnd> make(const VfabConfig& c, const Params& p, std::string& err) {
        std::unique_ptr<VfabEnd> e(new VfabEnd);
        e->psn_ = c.psn;
        auto dev = vfab::Device::open(c.bdf);
        if (!dev) return fail(err, c.bdf + ": " + dev.error().message);
        e->dev_ = std::move(*dev);
        vr::PortConfig pc;
        pc.ipv4 = c.ip;
        pc.rx_buffers = c.rx_buffers;
        pc.tx_buffers = c.tx_buffers;
        auto port = vr::Port::create(*e->dev_, pc);
        if (!port) return fail(err, port.error().message);
        e->port_ = std::move(*port);
        auto cq = e->port_->create_cq(4096);
        if (!cq) return fail(err, cq.error().message);
        e->cq_ = *cq;
        vr::RdmaQpInitAttr ia;
        ia.qp_type = vr::QpType::rc;
        ia.send_cq = ia.recv_cq = e->cq_;
        ia.cap.max_send_wr = 1024;
        ia.cap.max_recv_wr = 256;
        ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
        auto qp = e->port_->create_qp(ia);
        if (!qp) return fail(err, qp.error().message);
        e->qp_ = *qp;
        e->len_ = buffer_bytes(p);
        e->buf_ = static_cast<uint8_t*>(std::aligned_alloc(4096, e->len_));
        std::memset(e->buf_, 0, e->len_);
        auto mr = e->port_->pd().register_memory(e->buf_, e->len_, vfab::dma::Access(kAllRemote));
        if (!mr) return fail(err, "register_memory: " + mr.error().message);
        e->mr_ = *mr;
        vr::QpAttr a;
        a.qp_state = vr::RdmaQpState::init;
        a.qp_access_flags = kAllRemote;
        if (auto r = e->qp_->modify(a, vr::attr_state | vr::attr_pkey_index | vr::attr_port | vr::attr_access_flags); !r)
            return fail(err, "INIT: " + r.error().message);
        return e;
    }
    ~VfabEnd() {
        if (port_) port_->stop_progress_thread();
        port_.reset();   // before the device; the QP and CQ go with the port
        dev_.reset();
        std::free(buf_);
    }

    Info info() const {
        Info i;
        i.qpn = qp_->qp_num();
        i.psn = psn_;
        std::memcpy(i.gid, port_->gid().raw, 16);
        i.rkey = mr_.rkey;
        i.addr = reinterpret_cast<uint64_t>(buf_);
        i.len = len_;
        return i;
    }

    std::string connect(const Info& peer) {
        vr::QpAttr a;
        a.qp_state = vr::RdmaQpState::rtr;
        a.path_mtu = std::min<uint32_t>(port_->active_mtu(), 3);   // 1024, as rxe on a 1500-byte link
        a.dest_qp_num = peer.qpn;
        a.rq_psn = peer.psn;
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 12;
        std::memcpy(a.ah_attr.dgid.raw, peer.gid, 16);
        a.ah_attr.hop_limit = 64;
        if (auto r = qp_->modify(a, vr::attr_state | vr::attr_av | vr::attr_path_mtu | vr::attr_dest_qpn | vr::attr_rq_psn |
                                        vr::attr_max_dest_rd_atomic | vr::attr_min_rnr_timer);
            !r)
            return "RTR: " + r.error().message;
        a.qp_state = vr::RdmaQpState::rts;
        a.sq_psn = psn_;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 16;
        if (auto r = qp_->modify(a, vr::attr_state | vr::attr_sq_psn | vr::attr_timeout | vr::attr_retry_cnt |
                                        vr::attr_rnr_retry | vr::attr_max_qp_rd_atomic);
            !r)
            return "RTS: " + r.error().message;
        return {};
    }

    uint8_t* buf() { return buf_; }

    bool post(Op op, uint64_t wr_id, uint32_t local_off, uint32_t len, uint64_t raddr, uint32_t rkey, bool signaled,
              uint64_t add) {
        vfab::Sge s{reinterpret_cast<uint64_t>(buf_ + local_off), len, mr_.lkey};
        vr::RdmaSendWr w;
        w.wr_id = wr_id;
        w.sg_list = &s;
        w.num_sge = 1;
        w.opcode = op == Op::write  ? vr::WrOpcode::rdma_write
                   : op == Op::read ? vr::WrOpcode::rdma_read
                   : op == Op::send ? vr::WrOpcode::send
                                    : vr::WrOpcode::atomic_fetch_and_add;
        w.send_flags = signaled ? uint32_t(vr::wr_signaled) : 0u;
        w.remote_addr = raddr;
        w.rkey = rkey;
        w.compare_add = add;
        return bool(qp_->post_send(std::span(&w, 1)));
    }
    // A REG_MR of the buffer's first `len` bytes (4 KiB blocks) and a LOCAL_INV of it, posted
    // together; the LOCAL_INV's completion ends the cycle.
    bool register_cycle(uint32_t len) {
        if (!fast_key_) {
            auto k = port_->pd().alloc_mr(len_);
            if (!k) return false;
            fast_key_ = *k;
            for (uint64_t off = 0; off < len_; off += 4096) blocks_.push_back(reinterpret_cast<uint64_t>(buf_) + off);
        }
        vr::RegMrInfo info{blocks_.data(), uint32_t(blocks_.size()), 4096, 0, kAllRemote, len, reinterpret_cast<uint64_t>(buf_)};
        vr::RdmaSendWr w[2];
        w[0].opcode = vr::WrOpcode::reg_mr;
        w[0].mem_key = fast_key_;
        w[0].new_key = fast_key_ = vr::next_key(fast_key_);
        w[0].reg = &info;
        w[1].wr_id = 1;
        w[1].opcode = vr::WrOpcode::local_inv;
        w[1].send_flags = vr::wr_signaled;
        w[1].imm_data = fast_key_;
        if (!qp_->post_send(w)) return false;
        vr::Wc wc;
        int n = 0;
        for (int spins = 0; n == 0 && spins < 1000000; ++spins) n = cq_->poll(std::span(&wc, 1));
        return n == 1 && wc.status == vr::RdmaWcStatus::success;
    }
    bool post_recv(uint64_t wr_id, uint32_t local_off, uint32_t len) {
        vfab::Sge s{reinterpret_cast<uint64_t>(buf_ + local_off), len, mr_.lkey};
        vfab::RecvWr r{wr_id, &s, 1, 0};
        return bool(qp_->post_recv(std::span(&r, 1)));
    }
    int poll(Cqe* out, int n) {
        if ((++polls_ & 4095) == 0) check_device();   // a counter: no clock read in the measured loops
        if (partner_) partner_();
        vr::Wc wc[64];
        const int k = cq_->poll(std::span(wc, size_t(std::min(n, 64))));
        for (int i = 0; i < k; ++i) {
            out[i].wr_id = wc[i].wr_id;
            out[i].ok = wc[i].status == vr::RdmaWcStatus::success;
            out[i].recv = wc[i].opcode == vr::RdmaWcOpcode::recv || wc[i].opcode == vr::RdmaWcOpcode::recv_rdma_with_imm;
            if (!out[i].ok) out[i].status = vr::to_string(wc[i].status);
        }
        return k;
    }
    void progress() {
        if ((++polls_ & 4095) == 0) check_device();
        port_->progress();
        if (partner_) partner_();
    }
    // A passive target's sleep: on the CQ's channel (a received frame, a deadline) and on `fd`.
    void idle(int fd) {
        check_device();
        if (!cq_->arm()) return;
        pollfd p[2] = {{cq_->channel_fd(), POLLIN, 0}, {fd, POLLIN, 0}};
        (void)::poll(p, 2, 100);
        cq_->take_events();
        while (port_->progress() > 0) {
        }
    }
    // One thread for both ends: `step` (the other end's work) runs in every poll and progress.
    void set_partner(std::function<void()> step) { partner_ = std::move(step); }
    void start_answering() { (void)port_->start_progress_thread(-1); }
    void stop_answering() { port_->stop_progress_thread(); }
    std::string extra() const {
        const vr::PortStats s = port_->stats();
        char b[200];
        std::snprintf(b, sizeof b, "tx_frames=%llu rx_frames=%llu retransmits=%llu rx_dropped=%llu naks_sent=%llu",
                      (unsigned long long)s.tx_frames, (unsigned long long)s.rx_frames, (unsigned long long)s.retransmits,
                      (unsigned long long)s.rx_dropped, (unsigned long long)s.naks_sent);
        return b;
    }

private:
    VfabEnd() = default;
    // The device's events (examples/common/device_events.hpp): on a removal or reset, the one
    // line and the end of the process; its exit closes the device, which lets a removal finish.
    void check_device() {
        if (auto why = vfab::examples::stop_reason(*dev_, dev_->attr().address.to_string())) {
            std::fprintf(stderr, "rdma_bench: %s\n", why->c_str());
            std::fflush(nullptr);
            std::_Exit(1);
        }
    }
    static std::unique_ptr<VfabEnd> fail(std::string& err, const std::string& what) {
        err = what;
        return nullptr;
    }
    std::unique_ptr<vfab::Device> dev_;
    std::unique_ptr<vr::Port> port_;
    vr::Cq* cq_ = nullptr;
    vr::Qp* qp_ = nullptr;
    uint8_t* buf_ = nullptr;
    uint32_t len_ = 0, psn_ = 0;
    vfab::dma::MemoryRegion mr_;
    uint32_t fast_key_ = 0;           // reg_rate: the MR REG_MR binds, its current key
    std::vector<uint64_t> blocks_;    // the buffer in 4 KiB blocks
    std::function<void()> partner_;
    uint64_t polls_ = 0;
};

bool parse_ip(const std::string& s, uint32_t& ip) {
    in_addr a{};
    if (::inet_pton(AF_INET, s.c_str(), &a) != 1) return false;
    ip = ntohl(a.s_addr);
    return true;
}

// The lab's init leaves lo down; the local mode's side channel runs over it.
void ensure_lo_up() {
    const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    if (s >= 0 && ::ioctl(s, SIOCGIFFLAGS, &ifr) == 0 && !(ifr.ifr_flags & IFF_UP)) {
        ifr.ifr_flags = short(ifr.ifr_flags | IFF_UP);
        (void)::ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    if (s >= 0) ::close(s);
}

// Pins the calling thread to `cpu` (-1: leaves it).
void pin(int cpu) {
    if (cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
        std::fprintf(stderr, "rdma_bench: cannot pin a thread to CPU %d\n", cpu);
}

int report(const std::string& label, const std::string& where, const Params& p, const Outcome& o,
           const std::string& extra) {
    std::string line = "rdma_bench label=" + label + " impl=vfab " + where + " " + format_params(p);
    if (!o.error.empty()) {
        std::printf("%s FAILED: %s\n", line.c_str(), o.error.c_str());
        std::fflush(stdout);
        return 1;
    }
    std::printf("%s %s %s\n", line.c_str(), o.fields.c_str(), extra.c_str());
    std::fflush(stdout);
    return 0;
}

Outcome serve_one(uint16_t port, const VfabConfig& c, bool sleep, std::string* extra, int listener = -1) {
    std::string err;
    const int ls = listener >= 0 ? listener : listen_on(port, err);
    if (ls < 0) return {err, ""};
    Channel ch = accept_one(ls, 120000, err);
    if (listener < 0) ::close(ls);
    if (!ch.ok()) return {err, ""};
    Outcome o = run_server<VfabEnd>(ch, [&](const Params& p, std::string& e) { return VfabEnd::make(c, p, e); }, sleep);
    if (extra) *extra = o.fields;
    return o;
}

// Both ends driven by one thread: the target's work runs inside the initiator's polls (its
// port's progress; for send_lat and write_lat it also answers, as run_server's loops do).
Outcome local_one_thread(const VfabConfig& cc, const VfabConfig& sc, const Params& p, std::string& extra) {
    std::string err;
    auto c = VfabEnd::make(cc, p, err);
    if (!c) return {err, ""};
    auto s = VfabEnd::make(sc, p, err);
    if (!s) return {"target: " + err, ""};
    if (p.mode == "send_lat")
        for (uint32_t k = 0; k < 64; ++k)
            if (!c->post_recv(k, p.size, p.size) || !s->post_recv(k, p.size, p.size)) return {"post_recv refused", ""};
    const Info ci = c->info(), si = s->info();
    if (std::string e = c->connect(si); !e.empty()) return {e, ""};
    if (std::string e = s->connect(ci); !e.empty()) return {"target: " + e, ""};
    uint64_t answered = 0;
    uint8_t seen = 0;
    std::string step_error;
    Cqe cqe[16];
    if (p.mode == "send_lat") {
        c->set_partner([&] {
            const int n = s->poll(cqe, 16);
            for (int i = 0; i < n; ++i) {
                if (!cqe[i].ok) step_error = "target: " + cqe[i].status;
                if (!cqe[i].recv) continue;
                const bool sig = (answered + 1) % 16 == 0;
                if (!s->post_recv(answered, p.size, p.size) || !s->post(Op::send, answered, 0, p.size, 0, 0, sig, 0))
                    step_error = "target: post refused";
                ++answered;
            }
        });
    } else if (p.mode == "write_lat") {
        c->set_partner([&] {
            const int n = s->poll(cqe, 16);
            for (int i = 0; i < n; ++i)
                if (!cqe[i].ok) step_error = "target: " + cqe[i].status;
            const uint8_t m = load_byte(s->buf() + 2 * p.size - 1);
            if (m == seen) return;
            seen = m;
            s->buf()[p.size - 1] = m;
            const bool sig = (answered + 1) % 16 == 0;
            if (!s->post(Op::write, answered, 0, p.size, ci.addr + p.size, ci.rkey, sig, 0)) step_error = "target: post refused";
            ++answered;
        });
    } else {
        c->set_partner([&] { s->progress(); });
    }
    Outcome o = run_initiator(*c, p, si);
    for (int k = 0; k < 2000; ++k) c->progress();   // the last acknowledgements
    c->set_partner(nullptr);
    if (o.error.empty()) o.error = step_error;
    if (o.error.empty() && p.mode == "atomic_rate") {
        uint64_t counter;
        std::memcpy(&counter, s->buf(), 8);
        o.error = check_counter(p, counter);
    }
    extra = c->extra();
    std::istringstream srv(s->extra());
    for (std::string w; srv >> w;) extra += " srv_" + w;
    return o;
}

int run(int argc, char** argv) {
    CLI::App app{"rdma_bench: RDMA write bandwidth, READ/SEND/WRITE latency and FETCH_ADD rate over vfab's transport"};
    app.name("rdma_bench");
    app.require_subcommand(1);
    Params p;
    std::string mode = "write_bw", label = "vfab", nics = "0000:00:02.0,0000:00:03.0", ips = "10.88.0.1,10.88.0.2";
    std::string host, bdf, ip, passive = "poll", cpus;
    int threads = 2;
    uint16_t port = 18600;
    VfabConfig cfg;
    auto measure = [&](CLI::App* c) {
        c->add_option("MODE", mode, "write_bw, read_lat, send_lat, write_lat, atomic_rate or reg_rate")->required()->check(
            CLI::IsMember({"write_bw", "read_lat", "send_lat", "write_lat", "atomic_rate", "reg_rate"}));
        c->add_option("-s,--size", p.size, "Message size in bytes")->capture_default_str()->check(CLI::Range(1u, 1u << 24));
        c->add_option("-n,--iters", p.iters, "Messages (after the warm-up)")->capture_default_str()->check(CLI::Range(uint64_t(1), uint64_t(1) << 32));
        c->add_option("--window", p.window, "Outstanding WRITEs / FETCH_ADDs at most")->capture_default_str()->check(CLI::Range(1u, 512u));
        c->add_option("--signal", p.signal, "A completion every K WRITEs (and the last)")->capture_default_str()->check(CLI::Range(1u, 512u));
        c->add_option("--warmup", p.warmup, "Messages before the measurement")->capture_default_str();
        c->add_option("--add", p.add, "FETCH_ADD's addend")->capture_default_str();
        c->add_option("--timeout", p.timeout_s, "Seconds a run may take")->capture_default_str()->check(CLI::Range(1.0, 3600.0));
    };
    auto common = [&](CLI::App* c) {
        c->add_option("--port", port, "TCP port of the side channel")->capture_default_str();
        c->add_option("--label", label, "First field of the result line")->capture_default_str();
        c->add_option("--rx-buffers", cfg.rx_buffers, "Receive buffers of the port's raw queue pair")->capture_default_str();
        c->add_option("--tx-buffers", cfg.tx_buffers, "Send buffers of the port's raw queue pair")->capture_default_str();
    };
    CLI::App* local = app.add_subcommand("local", "Both ends in this process, over two wired NICs");
    measure(local);
    common(local);
    local->add_option("--nics", nics, "Initiator's NIC,target's NIC")->capture_default_str();
    local->add_option("--ips", ips, "Their IPv4 addresses (vfab's own)")->capture_default_str();
    local->add_option("--threads", threads, "2: a thread for each end; 1: one thread runs both")
        ->capture_default_str()->check(CLI::Range(1, 2));
    local->add_option("--passive", passive, "A passive target (write_bw, read_lat, atomic_rate) busy-polls (poll) or sleeps on its CQ channel between frames (sleep)")
        ->capture_default_str()->check(CLI::IsMember({"poll", "sleep"}));
    local->add_option("--cpus", cpus, "CPUs of the initiator's and the target's thread, e.g. 1,0 (default: not pinned)");
    CLI::App* server = app.add_subcommand("server", "One end: serve one client");
    common(server);
    server->add_option("-d,--device", bdf, "The NIC (PCI address, bound to vfio-pci)")->required();
    server->add_option("--ip", ip, "vfab's IPv4 address on that link")->required();
    server->add_option("--passive", passive, "As a passive target: busy-poll (poll) or sleep on the CQ channel (sleep)")
        ->capture_default_str()->check(CLI::IsMember({"poll", "sleep"}));
    CLI::App* client = app.add_subcommand("client", "One end: the initiator, against a server");
    measure(client);
    common(client);
    client->add_option("HOST", host, "The server's side channel (IPv4)")->required();
    client->add_option("-d,--device", bdf, "The NIC (PCI address, bound to vfio-pci)")->required();
    client->add_option("--ip", ip, "vfab's IPv4 address on that link")->required();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    p.mode = mode;
    if (p.signal > p.window) p.signal = p.window;

    if (server->parsed()) {
        cfg.bdf = bdf;
        cfg.psn = 0x2000;
        if (!parse_ip(ip, cfg.ip)) return std::fprintf(stderr, "rdma_bench: --ip %s is not IPv4\n", ip.c_str()), 2;
        const Outcome o = serve_one(port, cfg, passive == "sleep", nullptr);
        if (!o.error.empty()) {
            std::printf("rdma_bench label=%s impl=vfab role=server FAILED: %s\n", label.c_str(), o.error.c_str());
            return 1;
        }
        std::printf("rdma_bench label=%s impl=vfab role=server %s\n", label.c_str(), o.fields.c_str());
        return 0;
    }

    std::string err;
    if (client->parsed()) {
        cfg.bdf = bdf;
        if (!parse_ip(ip, cfg.ip)) return std::fprintf(stderr, "rdma_bench: --ip %s is not IPv4\n", ip.c_str()), 2;
        auto e = VfabEnd::make(cfg, p, err);
        if (!e) return report(label, "role=client", p, {err, ""}, "");
        Channel ch = connect_to(host, port, 30000, err);
        if (!ch.ok()) return report(label, "role=client", p, {err, ""}, "");
        const Outcome o = run_client(*e, ch, p);
        return report(label, "role=client", p, o, e->extra());
    }

    // local: the server's end on the second NIC in a thread, the client's on the first.
    const size_t comma = nics.find(','), comma_ip = ips.find(',');
    if (comma == std::string::npos || comma_ip == std::string::npos)
        return std::fprintf(stderr, "rdma_bench: --nics and --ips take two values, comma-separated\n"), 2;
    VfabConfig sc = cfg;
    cfg.bdf = nics.substr(0, comma);
    sc.bdf = nics.substr(comma + 1);
    sc.psn = 0x2000;
    if (!parse_ip(ips.substr(0, comma_ip), cfg.ip) || !parse_ip(ips.substr(comma_ip + 1), sc.ip))
        return std::fprintf(stderr, "rdma_bench: --ips: two IPv4 addresses\n"), 2;
    int cpu_c = -1, cpu_s = -1;
    if (!cpus.empty() && std::sscanf(cpus.c_str(), "%d,%d", &cpu_c, &cpu_s) != 2)
        return std::fprintf(stderr, "rdma_bench: --cpus takes two CPU numbers, comma-separated\n"), 2;
    pin(cpu_c);
    const std::string where = "role=local nics=" + nics + " threads=" + std::to_string(threads) + " passive=" + passive +
                              (cpus.empty() ? "" : " cpus=" + cpus);
    if (threads == 1) {
        std::string extra;
        const Outcome o = local_one_thread(cfg, sc, p, extra);
        return report(label, where, p, o, extra);
    }
    ensure_lo_up();
    const int ls = listen_on(port, err);
    if (ls < 0) return report(label, "role=local", p, {err, ""}, "");
    Outcome server_out;
    std::string server_extra;
    std::thread st([&] {
        pin(cpu_s);
        server_out = serve_one(port, sc, passive == "sleep", &server_extra, ls);
    });
    auto e = VfabEnd::make(cfg, p, err);
    Outcome o;
    if (!e) {
        o.error = err;
        // The server waits for a client: give it one that closes at once.
        Channel(connect_to("127.0.0.1", port, 1000, err));
    } else {
        Channel ch = connect_to("127.0.0.1", port, 30000, err);
        o = ch.ok() ? run_client(*e, ch, p) : Outcome{err, ""};
    }
    st.join();
    ::close(ls);
    if (o.error.empty() && !server_out.error.empty()) o.error = "server: " + server_out.error;
    std::string extra = e ? e->extra() : "";
    std::istringstream srv(server_extra);   // the target's port counters, prefixed
    for (std::string w; srv >> w;)
        if (w.rfind("server_mode=", 0) != 0) extra += " srv_" + w;
    e.reset();
    return report(label, where, p, o, extra);
}

}  // namespace

int main(int argc, char** argv) {
    vfab::set_log_handler(vfab::log_to_stderr, nullptr, vfab::LogLevel::warning);   // vfab's warnings on stderr
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rdma_bench: %s\n", e.what());
        return 1;
    }
}
