// Lab benchmarks between two wired ports of one driver (e1000e 00:02.0 -> 00:03.0, virtio-net
// 00:04.0 -> 00:06.0, igb 00:05.0 -> 00:0a.0, igbvf: two VFs named with --tx and --rx), one
// JSON object per run for bench/run:
//
//   lab_bench pps --driver e1000e --batch 8 --seconds 3 [--progress] [--json]
//     64-byte frames, BATCH sends per doorbell, zero copy, one busy-polling thread. At most a
//     receive ring of frames is in flight, so a frame that does not arrive was dropped, not
//     outrun: the run then reports the loss instead of a rate (and exits 1).
//   lab_bench wakeup --driver e1000e --count 500 [--json]
//     One frame at a time, timed from just before post_send to the moment the receiving side
//     sees it: once with a thread asleep in poll(2) on the receive CQ's channel after arm()
//     (MSI-X -> eventfd -> wake-up), once with that thread busy-polling the CQ. The difference
//     is what the interrupt path costs.
//
// Both watch the ports' events (docs/reliability.md): a removal or a reset behind the driver's
// back ends the run within a few milliseconds with one line naming the port, exit status 1.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

#include "device_events.hpp"
#include "port.hpp"
#include "stats.hpp"
#include "vfab/drivers/igb.hpp"
#include "vfab/drivers/igbvf.hpp"
#include "vfab/drivers/virtio_net.hpp"
#include "vfab/log.hpp"

namespace vfab::examples {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kFrame = 64;   // as dpdk-pps (testpmd's --txpkts=64)

struct Args {
    std::string driver = "e1000e", tx, rx;
    uint32_t batch = 32, count = 500;
    int mmio_mark = -1;   // --mmio-mark N: the measured window marked for a QEMU trace (MmioMark)
    double seconds = 3;
    bool json = false, progress = false;
};

double seconds_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}
double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    auto s = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
    return s(u.ru_utime) + s(u.ru_stime);
}

// Cuts a QEMU trace of the devices' registers (bench/run's MMIO boot) into windows: writes
// 0x80 + N into the Interrupt Line byte (PCI 3.0 §6.2.4, a scratch register to the device) of
// the lab's edu device, 00:01.0, where the window starts and 0x40 + N where it ends. QEMU
// traces both writes (pci_cfg_write); bench/run counts the MMIO accesses between them.
class MmioMark {
public:
    explicit MmioMark(int n) : n_(n) {
        if (n_ >= 0) fd_ = ::open("/sys/bus/pci/devices/0000:00:01.0/config", O_WRONLY | O_CLOEXEC);
        if (n_ >= 0 && fd_ < 0) std::fprintf(stderr, "lab_bench: --mmio-mark: edu's config space: %s\n", std::strerror(errno));
    }
    ~MmioMark() {
        if (fd_ >= 0) ::close(fd_);
    }
    MmioMark(const MmioMark&) = delete;
    MmioMark& operator=(const MmioMark&) = delete;
    void begin() const { write(uint8_t(0x80 + n_)); }
    void end() const { write(uint8_t(0x40 + n_)); }

private:
    void write(uint8_t v) const {
        if (fd_ >= 0 && ::pwrite(fd_, &v, 1, 0x3c) != 1) std::fprintf(stderr, "lab_bench: --mmio-mark: %s\n", std::strerror(errno));
    }
    int n_, fd_ = -1;
};

// The two ports and the frame every send carries (raw Ethernet, a local experimental type).
template <class D>
struct Pair {
    BasicPort<D> tx, rx;
    std::vector<Sge> tsge;
    std::vector<SendWr> twr;

    static Result<Pair> open(const Args& a, PortOptions o) {
        auto tx = BasicPort<D>::open(a.tx, o);
        if (!tx) return tx.take_error();
        auto rx = BasicPort<D>::open(a.rx, o);
        if (!rx) return rx.take_error();
        Pair p{std::move(*tx), std::move(*rx), {}, {}};
        p.tsge.resize(p.tx.send_slots());
        p.twr.resize(p.tx.send_slots());
        for (uint32_t i = 0; i < p.tx.send_slots(); ++i) {
            uint8_t* f = p.tx.send_buffer(i);
            std::memset(f, 0, kFrame);
            std::memcpy(f, p.rx.mac().data(), 6);
            std::memcpy(f + 6, p.tx.mac().data(), 6);
            f[12] = 0x88, f[13] = 0xb5;
            p.tsge[i] = {reinterpret_cast<uint64_t>(f), kFrame, p.tx.lkey()};
            p.twr[i] = {i, &p.tsge[i], 1, send_signaled};
        }
        return p;
    }
};

// Every few milliseconds of a busy loop (EventWatch): the line that ends the run when either
// port's device went away or was reset.
template <class D>
class PairWatch {
public:
    explicit PairWatch(Pair<D>& p) : tx_(p.tx.device()), rx_(p.rx.device()) {}
    std::optional<std::string> stop_reason() {
        if (auto why = tx_.stop_reason()) return why;
        return rx_.stop_reason();
    }

private:
    EventWatch<typename BasicPort<D>::Device> tx_, rx_;
};

// The one line a run ends with when a port's device is gone; exit status 1.
int stopped(const std::string& why) {
    std::fprintf(stderr, "lab_bench: %s\n", why.c_str());
    return 1;
}

template <class D>
int pps(const Args& a, Pair<D>& p, nlohmann::json& out) {
    if (PostResult r = p.rx.post_all_recv(); !r) {
        std::fprintf(stderr, "lab_bench: %s: post_recv: %s\n", p.rx.name().c_str(), std::strerror(r.error));
        return 1;
    }
    const uint32_t ring = p.tx.send_slots(), window = p.rx.recv_slots();
    std::vector<Sge> rsge(p.rx.recv_slots());
    std::vector<RecvWr> rwr(p.rx.recv_slots());
    for (uint32_t i = 0; i < p.rx.recv_slots(); ++i) {
        rsge[i] = {reinterpret_cast<uint64_t>(p.rx.recv_buffer(i)), BasicPort<D>::kBuf, p.rx.lkey()};
        rwr[i] = {i, &rsge[i], 1, 0};
    }
    uint64_t posted = 0, sent = 0, received = 0, errors = 0, next = 0, line_received = 0;
    Completion wc[64];
    RecvWr again[64];
    // Receive: count, re-post the reaped buffers with one doorbell.
    auto reap_rx = [&] {
        const int n = p.rx.cq().poll(wc);
        uint32_t k = 0;
        for (int i = 0; i < n; ++i) {
            if (wc[i].opcode != WcOpcode::recv) continue;
            errors += wc[i].status != WcStatus::success;
            again[k++] = rwr[wc[i].wr_id];
        }
        received += k;
        if (k) (void)p.rx.qp().post_recv({again, k});
        return n > 0;
    };
    auto reap_tx = [&] {
        const int n = p.tx.cq().poll(wc);
        for (int i = 0; i < n; ++i) {
            if (wc[i].opcode != WcOpcode::send) continue;
            ++sent;
            errors += wc[i].status != WcStatus::success;
        }
        return n > 0;
    };
    const MmioMark mark(a.mmio_mark);
    mark.begin();   // after the receive ring's first fill: the window holds the fast path only
    const double cpu0 = cpu_seconds();
    const auto start = Clock::now();
    const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds));
    auto next_line = start + std::chrono::seconds(1);
    PairWatch<D> watch(p);
    for (uint64_t loops = 1;; ++loops) {
        if (posted - sent + a.batch <= ring && posted - received + a.batch <= window) {
            const auto first = uint32_t(next % ring);
            const uint32_t n = std::min(a.batch, ring - first);
            const PostResult r = p.tx.qp().post_send({p.twr.data() + first, n});
            posted += r.posted;
            next += r.posted;
        }
        reap_tx();
        reap_rx();
        if ((loops & 255) != 0) continue;
        if (auto why = watch.stop_reason()) return stopped(*why);
        const auto now = Clock::now();
        if (now >= end) break;
        if (a.progress && now >= next_line) {   // a new line each second: consoles may drop '\r'
            std::fprintf(stderr, "throughput %s batch %u: %.0f s / %.0f s, %.0f kpps\n", a.driver.c_str(), a.batch,
                         seconds_between(start, now), a.seconds,
                         double(received - line_received) / seconds_between(next_line - std::chrono::seconds(1), now) / 1e3);
            line_received = received;
            next_line = now + std::chrono::seconds(1);
        }
    }
    const auto stop = Clock::now();
    const uint64_t in_time = received;
    // Drain: what was posted must still arrive; give it 200 ms without progress.
    for (auto last = Clock::now(); received < posted || sent < posted;) {
        if (reap_tx() | reap_rx()) last = Clock::now();
        else if (auto why = watch.stop_reason()) return stopped(*why);
        else if (seconds_between(last, Clock::now()) > 0.2) break;
    }
    mark.end();
    const double t = seconds_between(start, stop), cpu = cpu_seconds() - cpu0;
    const uint64_t lost = posted - received;
    out = {{"bench", "pps"},         {"driver", a.driver},  {"batch", a.batch},   {"seconds", t},
           {"posted", posted},       {"sent", sent},        {"received", received}, {"lost", lost},
           {"errors", errors},       {"frame_bytes", kFrame}};
    out["pps"] = lost || errors ? nlohmann::json() : nlohmann::json(double(in_time) / t);
    out["cpu_ns_per_packet"] = received ? cpu * 1e9 / double(received) : 0.0;
    if (a.mmio_mark >= 0) out["mmio_mark"] = a.mmio_mark;
    if (!a.json) {
        if (lost || errors)
            std::printf("%s batch %u: LOST %llu of %llu frames (%llu errors) — no rate reported\n", a.driver.c_str(), a.batch,
                        (unsigned long long)lost, (unsigned long long)posted, (unsigned long long)errors);
        else
            std::printf("%s batch %u: %.0f pps received, %.0f ns CPU per packet\n", a.driver.c_str(), a.batch,
                        double(in_time) / t, out["cpu_ns_per_packet"].get<double>());
    }
    return lost || errors ? 1 : 0;
}

// One run of `count` single frames; `irq`: the receiver sleeps on its channel, else it spins.
template <class D>
nlohmann::json wakeup_run(const Args& a, Pair<D>& p, bool irq, std::string& error) {
    std::atomic<int64_t> t0{0};          // ns since the epoch of steady_clock: the send's post
    std::atomic<uint32_t> ready{0}, done{0};
    std::atomic<bool> finished{false};
    std::string waiter_error;
    std::vector<double> us;
    uint64_t timeouts = 0, spurious = 0;
    std::thread waiter([&] {
        Completion wc[8];
        for (uint32_t i = 0; i < a.count && waiter_error.empty() && !finished.load(); ++i) {
            int n = 0;
            if (irq) {
                ready.store(i + 1);
                ready.notify_one();
                // A wake-up that finds no completion (an interrupt left over from the previous
                // frame) is counted as spurious and slept again: only the one that finds the frame counts.
                int woke = 0;
                int64_t t1 = 0;
                for (int tries = 0; n == 0 && tries < 100 && waiter_error.empty(); ++tries) {
                    if (auto r = p.rx.cq().arm(); !r) waiter_error = "arm: " + r.error().message;
                    pollfd fd{p.rx.cq().channel_fd(), POLLIN, 0};
                    woke = ::poll(&fd, 1, 1000);
                    t1 = Clock::now().time_since_epoch().count();
                    p.rx.cq().take_events();
                    n = p.rx.cq().poll(wc);
                    if (woke <= 0) break;
                    if (n == 0) ++spurious;
                }
                if (woke > 0 && n > 0) us.push_back(double(t1 - t0.load()) / 1e3);
                else ++timeouts;
            } else {
                ready.store(i + 1);
                ready.notify_one();
                for (auto give_up = Clock::now() + std::chrono::seconds(1); n == 0 && Clock::now() < give_up;)
                    n = p.rx.cq().poll(wc);
                if (n > 0) us.push_back(double(Clock::now().time_since_epoch().count() - t0.load()) / 1e3);
                else ++timeouts;
            }
            for (int k = 0; k < n; ++k)
                if (wc[k].opcode == WcOpcode::recv) (void)p.rx.post_recv(uint32_t(wc[k].wr_id));
            if (auto why = p.rx.stop_reason()) waiter_error = *why;
            done.store(i + 1);
            done.notify_one();
        }
        finished.store(true);   // wakes the sender wherever it waits
        ready.store(a.count + 1);
        ready.notify_one();
        done.store(a.count + 1);
        done.notify_one();
    });
    Completion wc[8];
    for (uint32_t i = 0; i < a.count; ++i) {
        ready.wait(i);   // sleeps (futex): a spinning sender would take a vCPU from the emulated NIC
        if (finished.load()) break;
        if (auto why = p.tx.stop_reason()) {   // once per frame (the waiter watches rx's device)
            error = *why;
            break;
        }
        if (irq) std::this_thread::sleep_for(std::chrono::milliseconds(1));   // the waiter is inside poll(2)
        t0.store(Clock::now().time_since_epoch().count());
        if (PostResult r = p.tx.qp().post_send({&p.twr[i % p.twr.size()], 1}); !r) {
            error = "post_send: " + std::string(std::strerror(r.error));
            break;
        }
        for (uint32_t d = done.load(); d < i + 1; d = done.load()) done.wait(d);
        for (auto give_up = Clock::now() + std::chrono::seconds(1); p.tx.cq().poll(wc) == 0 && Clock::now() < give_up;) {
        }
        if (!error.empty() || finished.load()) break;
    }
    finished.store(true);   // a sender that stopped early: the waiter leaves after its current wait
    waiter.join();
    if (error.empty()) error = waiter_error;
    nlohmann::json j{{"completed", us.size()}, {"timeouts", timeouts}, {"spurious_wakeups", spurious}};
    j["us"] = summary(us);
    j["histogram_us"] = log_histogram(us);
    return j;
}

template <class D>
int wakeup(const Args& a, Pair<D>& p, nlohmann::json& out) {
    if (PostResult r = p.rx.post_all_recv(); !r) {
        std::fprintf(stderr, "lab_bench: %s: post_recv: %s\n", p.rx.name().c_str(), std::strerror(r.error));
        return 1;
    }
    std::string error;
    out = {{"bench", "wakeup"}, {"driver", a.driver}, {"count", a.count}};
    out["poll"] = wakeup_run(a, p, false, error);
    if (error.empty()) out["interrupt"] = wakeup_run(a, p, true, error);
    if (auto why = PairWatch<D>(p).stop_reason()) return stopped(*why);   // a timeout or failed post may be its symptom
    if (!error.empty()) {
        std::fprintf(stderr, "lab_bench: wakeup: %s\n", error.c_str());
        return 1;
    }
    const double irq = out["interrupt"]["us"]["median"], poll = out["poll"]["us"]["median"];
    out["interrupt_path_us"] = irq - poll;
    if (!a.json)
        std::printf("%s send -> receiver, one frame: busy-poll median %.1f us (p99 %.1f), interrupt wake-up median %.1f us "
                    "(p99 %.1f): the interrupt path costs %.1f us; %llu spurious wake-ups in %u\n",
                    a.driver.c_str(), poll, out["poll"]["us"]["p99"].get<double>(), irq,
                    out["interrupt"]["us"]["p99"].get<double>(), irq - poll,
                    (unsigned long long)out["interrupt"]["spurious_wakeups"].get<uint64_t>(), a.count);
    const uint64_t lost = out["poll"]["timeouts"].get<uint64_t>() + out["interrupt"]["timeouts"].get<uint64_t>();
    if (lost) std::fprintf(stderr, "lab_bench: wakeup: %llu frames never arrived or never woke the waiter\n", (unsigned long long)lost);
    return lost ? 1 : 0;
}

template <class D>
int run_driver(const std::string& which, const Args& a, PortOptions o) {
    auto p = Pair<D>::open(a, o);
    if (!p) {
        std::fprintf(stderr, "lab_bench: %s\n", p.error().message.c_str());
        return 1;
    }
    nlohmann::json out;
    const int rc = which == "pps" ? pps(a, *p, out) : wakeup(a, *p, out);
    if (a.json && !out.is_null()) std::cout << out.dump() << std::endl;
    return rc;
}

int run(int argc, char** argv) {
    CLI::App app{"lab_bench: packets per second and interrupt wake-up latency between two wired ports"};
    app.name("lab_bench");
    app.require_subcommand(1);
    app.failure_message([](const CLI::App*, const CLI::Error& e) {
        return std::string("lab_bench: ") + e.what() + " (see lab_bench --help)\n";
    });
    Args a;
    auto common = [&](CLI::App* c) {
        c->add_option("--driver", a.driver, "e1000e, virtio-net, igb or igbvf")
            ->capture_default_str()
            ->check(CLI::IsMember({"e1000e", "virtio-net", "igb", "igbvf"}));
        c->add_option("--tx", a.tx, "Sending port (default: the lab's first port of the driver)");
        c->add_option("--rx", a.rx, "Receiving port (default: the lab's second port)");
        c->add_flag("--json", a.json, "One JSON object on stdout");
    };
    CLI::App* pps_cmd = app.add_subcommand("pps", "Packets per second at a batch size, one busy-polling thread");
    common(pps_cmd);
    pps_cmd->add_option("--batch", a.batch, "Sends per doorbell (1..64)")->capture_default_str()->check(CLI::Range(1u, 64u));
    pps_cmd->add_option("--seconds", a.seconds, "Length of the run (0.5..600)")->capture_default_str()->check(CLI::Range(0.5, 600.0));
    pps_cmd->add_flag("--progress", a.progress, "A progress line (on stderr) every second");
    pps_cmd->add_option("--mmio-mark", a.mmio_mark, "Mark the run for a QEMU trace: 0x80+N / 0x40+N into edu's config byte 0x3c (bench/run)")
        ->check(CLI::Range(0, 63));
    CLI::App* wake_cmd = app.add_subcommand("wakeup", "Send-to-receiver latency: interrupt wake-up against busy polling");
    common(wake_cmd);
    wake_cmd->add_option("--count", a.count, "Frames in each mode (1..100000)")->capture_default_str()->check(CLI::Range(1u, 100000u));
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    const bool virtio = a.driver == "virtio-net", on_igb = a.driver == "igb", vf = a.driver == "igbvf";
    if (vf && (a.tx.empty() || a.rx.empty())) {
        std::fprintf(stderr, "lab_bench: igbvf: name two VFs wired together with --tx and --rx\n");
        return 2;
    }
    if (a.tx.empty()) a.tx = virtio ? "0000:00:04.0" : on_igb ? "0000:00:05.0" : "0000:00:02.0";
    if (a.rx.empty()) a.rx = virtio ? "0000:00:06.0" : on_igb ? "0000:00:0a.0" : "0000:00:03.0";
    if (a.tx == a.rx) {
        std::fprintf(stderr, "lab_bench: --tx and --rx name the same port; they must be two ports wired together\n");
        return 2;
    }
    const std::string which = pps_cmd->parsed() ? "pps" : "wakeup";
    // virtio-net: each WR is a two-descriptor chain, so 128 WRs fill a 256-entry virtqueue.
    if (virtio) return run_driver<virtio_net::Driver>(which, a, {.send_slots = 128, .recv_slots = 127});
    if (on_igb) return run_driver<igb::Driver>(which, a, {.send_slots = 512, .recv_slots = 511});
    if (vf) return run_driver<igbvf::Driver>(which, a, {.send_slots = 512, .recv_slots = 511});
    return run_driver<e1000e::Driver>(which, a, {.send_slots = 512, .recv_slots = 511});
}

}  // namespace
}  // namespace vfab::examples

int main(int argc, char** argv) {
    vfab::set_log_handler(vfab::log_to_stderr, nullptr, vfab::LogLevel::warning);   // vfab's warnings on stderr
    try {
        return vfab::examples::run(argc, argv);
    } catch (const std::exception& e) {   // out of memory and the like: setup only
        std::fprintf(stderr, "lab_bench: %s\n", e.what());
        return 1;
    }
}
