// pktgen: a packet generator and counter on vfab's e1000e driver (direct API).
//
//   pktgen --tx 0000:00:02.0 --rx 0000:00:03.0 --count 100000 --size 60 [--interrupt] [--json]
//   pktgen --tx 0000:00:02.0 --rx 0000:00:03.0 --seconds 5 --progress     # a timed run
//   pktgen --tx 0000:00:02.0 --count 100000 --dst-mac 52:54:00:00:00:02   # generator only
//   pktgen --rx 0000:00:03.0 --count 100000                                # counter only
//
// The generator sends `count` UDP/IPv4 frames of `size` bytes (10.0.0.1:9 -> 10.0.0.2:9, a
// magic number and a sequence number in the payload) in batches, one doorbell per batch. The
// counter receives them, checks each (headers, checksums, sequence) and counts. Busy-polls by
// default; --interrupt sleeps on the completion queues' channels when there is nothing to do.
// With both ports, at most one receive ring of frames is in flight, so none is dropped for
// want of a buffer. The report includes the CPU time the process used per frame (getrusage).
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>
#include <vector>

#include "port.hpp"
#include "vfab/log.hpp"

namespace vfab::examples {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x76666267;   // "vfbg"
constexpr uint16_t kPort = 9;             // discard
constexpr pkt::Addr kSrcIp{{}, pkt::ipv4(10, 0, 0, 1)};
constexpr pkt::Addr kDstIp{{}, pkt::ipv4(10, 0, 0, 2)};
constexpr uint32_t kBatch = 32;

std::atomic<bool> g_stop{false};

struct Args {
    std::string tx, rx, dst_mac;
    uint64_t count = 100000;
    uint32_t size = 60;
    double timeout = 5, duration = 0;   // duration: --seconds (0: send --count frames)
    bool interrupt = false, json = false, offload = false, progress = false;
};

struct TxCounters {
    uint64_t frames = 0, bytes = 0, errors = 0;
    Clock::time_point first{}, last{};
};

struct RxCounters {
    uint64_t frames = 0, bytes = 0, lost = 0, reordered = 0, bad = 0, other = 0, next_seq = 0;
    Clock::time_point first{}, last{};
};

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// User + system CPU time of the whole process (every thread), in seconds.
double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    auto s = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
    return s(u.ru_utime) + s(u.ru_stime);
}

nlohmann::json side_json(const std::string& dev, uint64_t frames, uint64_t bytes, double s) {
    return {{"device", dev},
            {"frames", frames},
            {"bytes", bytes},
            {"seconds", s},
            {"pps", s > 0 ? double(frames) / s : 0.0},
            {"mbps", s > 0 ? double(bytes) * 8 / s / 1e6 : 0.0}};
}

void print_side(const char* what, const std::string& dev, uint64_t frames, uint64_t bytes, double s) {
    std::printf("%s %s: %llu frames, %llu bytes in %.3f s: %.0f frames/s, %.1f Mbit/s", what, dev.c_str(),
                (unsigned long long)frames, (unsigned long long)bytes, s, s > 0 ? double(frames) / s : 0.0,
                s > 0 ? double(bytes) * 8 / s / 1e6 : 0.0);
}

class Generator {
public:
    Generator(const Args& a, std::optional<Port>& tx, std::optional<Port>& rx)
        : a_(a), tx_(tx), rx_(rx), limit_(a.duration > 0 ? UINT64_MAX : a.count) {}

    int run() {
        if (rx_) {
            if (PostResult r = rx_->post_all_recv(); !r) return fail(rx_->name() + ": post_recv: " + std::strerror(r.error));
        }
        if (tx_ && !prepare_frames()) return fail(error_);
        // Printed once the receive buffers are posted: a sender started after this line loses
        // nothing for want of a buffer (on stderr with --json, which keeps stdout to the JSON).
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g s", a_.duration);
        std::string what = a_.duration > 0 ? secs : std::to_string(a_.count) + " frames";
        if (tx_) what += " of " + std::to_string(a_.size) + " bytes";
        std::fprintf(a_.json ? stderr : stdout, "pktgen: %s -> %s, %s, %s\n", tx_ ? tx_->name().c_str() : "(none)",
                     rx_ ? rx_->name().c_str() : "(none)", what.c_str(), a_.interrupt ? "interrupt mode" : "busy-poll");
        std::fflush(nullptr);
        std::vector<e1000e::CompletionQueue*> cqs;
        if (tx_) cqs.push_back(&tx_->cq());
        if (rx_) cqs.push_back(&rx_->cq());
        auto last_progress = Clock::now();
        start_ = last_progress;
        cpu_start_ = cpu_seconds();
        auto next_line = start_ + std::chrono::seconds(1);
        auto next_event_check = start_;
        uint64_t line_frames = 0;
        while (!g_stop.load(std::memory_order_relaxed)) {
            bool progress = false;
            if (tx_) {
                if (!send_some(progress) || !reap_sends(progress)) return fail(error_);
            }
            if (rx_ && !receive(progress)) return fail(error_);
            if (finished()) break;
            const auto now = Clock::now();
            if (a_.duration > 0 && limit_ == UINT64_MAX && seconds(start_, now) >= a_.duration)
                limit_ = tx_ ? sent_ : rx_stats_.frames;   // time is up: what was sent must still arrive
            if (a_.progress && now >= next_line) {   // a new line each second: consoles may drop '\r'
                const uint64_t frames = rx_ ? rx_stats_.frames : tx_stats_.frames;
                const double kpps = double(frames - line_frames) / seconds(next_line - std::chrono::seconds(1), now) / 1e3;
                if (a_.duration > 0)
                    std::fprintf(stderr, "throughput: %.0f s / %.0f s, %.0f kpps\n", seconds(start_, now), a_.duration, kpps);
                else
                    std::fprintf(stderr, "throughput: %llu / %llu frames, %.0f kpps\n", (unsigned long long)frames,
                                 (unsigned long long)a_.count, kpps);
                line_frames = frames;
                next_line = now + std::chrono::seconds(1);
            }
            // The devices' events: a removal (or a fatal error, a reset) ends the run at once, so
            // that the kernel gets the device back within milliseconds.
            if (!progress || now >= next_event_check) {
                if (auto why = stop_reason()) return fail(*why);
                next_event_check = now + std::chrono::milliseconds(10);
            }
            if (progress) {
                last_progress = now;
            } else if (seconds(last_progress, now) > a_.timeout) {
                timed_out_ = true;
                break;
            } else if (a_.interrupt && wait_for_completions(cqs, 100, error_) < 0) {
                return fail(error_);
            }
        }
        return report();
    }

private:
    // Every send buffer holds a complete frame; only the sequence number changes per send.
    bool prepare_frames() {
        pkt::Addr src = kSrcIp, dst = kDstIp;
        src.mac = tx_->mac();
        if (rx_) {
            dst.mac = rx_->mac();
        } else if (!a_.dst_mac.empty()) {
            dst.mac = *pkt::parse_mac(a_.dst_mac);
        } else {
            dst.mac = pkt::kBroadcast;
        }
        free_.reserve(tx_->send_slots());
        std::vector<uint8_t> payload(a_.size - pkt::kUdpHeaders);
        for (size_t i = 0; i < payload.size(); ++i) payload[i] = uint8_t(i);
        std::memcpy(payload.data(), &kMagic, 4);
        const auto csum = a_.offload ? pkt::UdpChecksum::offload : pkt::UdpChecksum::none;
        for (uint32_t s = 0; s < tx_->send_slots(); ++s) {
            if (pkt::build_udp({tx_->send_buffer(s), Port::kBuf}, src, kPort, dst, kPort, payload, csum) != a_.size)
                return error("cannot build a frame of " + std::to_string(a_.size) + " bytes");
            free_.push_back(s);
        }
        return true;
    }

    bool send_some(bool& progress) {
        const uint32_t flags = send_signaled | (a_.offload ? uint32_t(send_ip_csum) : 0u);
        SendWr wrs[kBatch];
        Sge sges[kBatch];
        uint32_t n = 0;
        const uint64_t window = rx_ ? rx_->recv_slots() : UINT64_MAX;
        while (n < kBatch && sent_ + n < limit_ && !free_.empty() && (sent_ + n) - rx_stats_.frames < window) {
            const uint32_t slot = free_.back();
            free_.pop_back();
            uint8_t* f = tx_->send_buffer(slot);
            const uint64_t seq = sent_ + n;
            std::memcpy(f + pkt::kUdpHeaders + 4, &seq, sizeof seq);
            sges[n] = {reinterpret_cast<uint64_t>(f), a_.size, tx_->lkey()};
            wrs[n] = {slot, &sges[n], 1, flags};
            ++n;
        }
        if (n == 0) return true;
        if (sent_ == 0) tx_stats_.first = Clock::now();
        PostResult r = tx_->qp().post_send({wrs, n});
        for (uint32_t i = r.posted; i < n; ++i) free_.push_back(uint32_t(wrs[i].wr_id));
        sent_ += r.posted;
        progress |= r.posted > 0;
        if (r.error != 0 && r.error != ENOMEM) return error(tx_->name() + ": post_send: " + std::strerror(r.error));
        return true;
    }

    bool reap_sends(bool& progress) {
        Completion wc[64];
        const int n = tx_->cq().poll(wc);
        if (n < 0) return error(tx_->name() + ": poll: " + std::strerror(-n));
        for (int i = 0; i < n; ++i) {
            if (wc[i].opcode != WcOpcode::send) continue;
            free_.push_back(uint32_t(wc[i].wr_id));
            if (wc[i].status != WcStatus::success) {
                ++tx_stats_.errors;
                continue;
            }
            ++tx_stats_.frames;
            tx_stats_.bytes += wc[i].byte_len;
        }
        if (n > 0) {
            tx_stats_.last = Clock::now();
            progress = true;
        }
        return true;
    }

    bool receive(bool& progress) {
        Completion wc[64];
        const int n = rx_->cq().poll(wc);
        if (n < 0) return error(rx_->name() + ": poll: " + std::strerror(-n));
        // The buffers go back in one post: one doorbell (an MMIO write) per poll, not per frame.
        Sge sges[64];
        RecvWr wrs[64];
        uint32_t k = 0;
        for (int i = 0; i < n; ++i) {
            if (wc[i].opcode != WcOpcode::recv) continue;
            const auto slot = uint32_t(wc[i].wr_id);
            if (wc[i].status == WcStatus::success) count_frame(rx_->recv_buffer(slot), wc[i].byte_len);
            else ++rx_stats_.bad;
            sges[k] = {reinterpret_cast<uint64_t>(rx_->recv_buffer(slot)), Port::kBuf, rx_->lkey()};
            wrs[k] = {slot, &sges[k], 1, 0};
            ++k;
        }
        if (k) {
            if (PostResult r = rx_->qp().post_recv({wrs, k}); !r)
                return error(rx_->name() + ": post_recv: " + std::strerror(r.error));
        }
        if (n > 0) progress = true;
        return true;
    }

    void count_frame(const uint8_t* f, uint32_t len) {
        const pkt::Frame p = pkt::parse({f, len});
        uint32_t magic = 0;
        if (p.kind == pkt::Kind::udp && p.dport == kPort && p.payload.size() >= 12) std::memcpy(&magic, p.payload.data(), 4);
        if (magic != kMagic) {
            ++rx_stats_.other;   // not ours: the NIC also sees broadcasts and the like
            return;
        }
        if (!p.checksums_ok()) {
            ++rx_stats_.bad;
            return;
        }
        uint64_t seq;
        std::memcpy(&seq, p.payload.data() + 4, sizeof seq);
        const auto now = Clock::now();
        if (rx_stats_.frames == 0) rx_stats_.first = now;
        rx_stats_.last = now;
        ++rx_stats_.frames;
        rx_stats_.bytes += len;
        if (seq >= rx_stats_.next_seq) {
            rx_stats_.lost += seq - rx_stats_.next_seq;
            rx_stats_.next_seq = seq + 1;
        } else {
            ++rx_stats_.reordered;
            if (rx_stats_.lost) --rx_stats_.lost;   // counted as lost when its successor came
        }
    }

    bool finished() const {
        const bool tx_done = !tx_ || tx_stats_.frames + tx_stats_.errors >= limit_;
        const bool rx_done = !rx_ || rx_stats_.frames >= limit_;
        return tx_done && rx_done;
    }

    // Slow path only: a fast-path failure ends the run.
    bool error(std::string why) {
        error_ = std::move(why);
        return false;
    }
    // One line on stderr and exit status 1; a device event, if one is waiting, says it better.
    int fail(const std::string& why) {
        const std::optional<std::string> event = stop_reason();
        std::fprintf(stderr, "pktgen: %s\n", (event ? *event : why).c_str());
        return 1;
    }
    std::optional<std::string> stop_reason() {
        if (tx_)
            if (auto why = tx_->stop_reason()) return why;
        if (rx_)
            if (auto why = rx_->stop_reason()) return why;
        return std::nullopt;
    }

    int report() {
        const double tx_s = seconds(tx_stats_.first, tx_stats_.last), rx_s = seconds(rx_stats_.first, rx_stats_.last);
        const double cpu_s = cpu_seconds() - cpu_start_;
        const uint64_t frames = rx_ ? rx_stats_.frames : tx_stats_.frames;
        const uint64_t target = limit_ == UINT64_MAX ? sent_ : limit_;
        uint64_t missed = 0;
        if (rx_) missed = rx_->device().stats().rx_missed;
        nlohmann::json j;
        j["mode"] = a_.interrupt ? "interrupt" : "poll";
        j["size"] = a_.size;
        j["count"] = target;
        if (a_.duration > 0) j["duration"] = a_.duration;
        j["cpu"] = {{"seconds", cpu_s}, {"ns_per_frame", frames ? cpu_s * 1e9 / double(frames) : 0.0}};
        if (tx_) {
            j["tx"] = side_json(tx_->name(), tx_stats_.frames, tx_stats_.bytes, tx_s);
            j["tx"]["errors"] = tx_stats_.errors;
            j["tx"]["offload"] = a_.offload;
        }
        if (rx_) {
            j["rx"] = side_json(rx_->name(), rx_stats_.frames, rx_stats_.bytes, rx_s);
            j["rx"]["lost"] = rx_stats_.lost;
            j["rx"]["out_of_order"] = rx_stats_.reordered;
            j["rx"]["bad"] = rx_stats_.bad;
            j["rx"]["other"] = rx_stats_.other;
            j["rx"]["missed"] = missed;
        }
        bool ok = (!tx_ || (tx_stats_.frames == target && tx_stats_.errors == 0)) &&
                  (!rx_ || (rx_stats_.frames == target && rx_stats_.lost == 0 && rx_stats_.bad == 0));
        j["ok"] = ok;
        if (a_.json) {
            std::cout << j.dump(2) << std::endl;
        } else {
            if (tx_) {
                print_side("tx", tx_->name(), tx_stats_.frames, tx_stats_.bytes, tx_s);
                std::printf("; %llu errors\n", (unsigned long long)tx_stats_.errors);
            }
            if (rx_) {
                print_side("rx", rx_->name(), rx_stats_.frames, rx_stats_.bytes, rx_s);
                std::printf("; lost %llu, out of order %llu, bad %llu, not ours %llu, dropped by the NIC %llu\n",
                            (unsigned long long)rx_stats_.lost, (unsigned long long)rx_stats_.reordered,
                            (unsigned long long)rx_stats_.bad, (unsigned long long)rx_stats_.other,
                            (unsigned long long)missed);
            }
            std::printf("cpu: %.2f s user+system, %.0f ns per frame%s\n", cpu_s,
                        frames ? cpu_s * 1e9 / double(frames) : 0.0,
                        a_.interrupt ? "" : " (busy polling: the CPU is never idle, so this is about 1 / rate)");
        }
        if (g_stop) {
            std::fprintf(stderr, "pktgen: interrupted\n");
            return 1;
        }
        if (timed_out_) {
            std::fprintf(stderr, "pktgen: no progress for %.1f s: sent %llu, received %llu of %llu frames\n", a_.timeout,
                         (unsigned long long)tx_stats_.frames, (unsigned long long)rx_stats_.frames,
                         (unsigned long long)target);
            return 1;
        }
        if (!ok) std::fprintf(stderr, "pktgen: frames were lost, bad or failed to send\n");
        return ok ? 0 : 1;
    }

    const Args& a_;
    std::optional<Port>& tx_;
    std::optional<Port>& rx_;
    std::vector<uint32_t> free_;
    uint64_t limit_;   // frames to send (and receive); with --seconds set when time is up
    uint64_t sent_ = 0;
    Clock::time_point start_{};
    double cpu_start_ = 0;
    TxCounters tx_stats_;
    RxCounters rx_stats_;
    bool timed_out_ = false;
    std::string error_;
};

int run(int argc, char** argv) {
    CLI::App app{"pktgen: send and count UDP frames through vfab's e1000e driver"};
    app.name("pktgen");
    app.failure_message([](const CLI::App*, const CLI::Error& e) {
        return std::string("pktgen: ") + e.what() + " (see pktgen --help)\n";
    });
    Args a;
    app.add_option("--tx", a.tx, "Port that sends (PCI address bound to vfio-pci)");
    app.add_option("--rx", a.rx, "Port that receives and counts");
    auto* count = app.add_option("--count", a.count, "Frames to send / to receive")->capture_default_str()->check(CLI::PositiveNumber);
    app.add_option("--seconds", a.duration, "Send for this long instead of --count frames (0.1..3600)")
        ->check(CLI::Range(0.1, 3600.0))
        ->excludes(count);
    app.add_option("--size", a.size, "Frame size in bytes, without the FCS (60..1514)")
        ->capture_default_str()
        ->check(CLI::Range(60u, 1514u));
    app.add_option("--dst-mac", a.dst_mac, "Destination MAC when there is no --rx (default: broadcast)");
    app.add_option("--timeout", a.timeout, "Seconds without progress before giving up")->capture_default_str()->check(CLI::PositiveNumber);
    app.add_flag("--interrupt", a.interrupt, "Sleep on the completion channels instead of busy-polling");
    app.add_flag("--offload", a.offload, "Let the NIC fill the IPv4 and UDP checksums");
    app.add_flag("--json", a.json, "Print the results as JSON");
    app.add_flag("--progress", a.progress, "Print a progress line (on stderr) every second");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    if (a.tx.empty() && a.rx.empty()) {
        std::fprintf(stderr, "pktgen: name a port with --tx, --rx or both (see pktgen --help)\n");
        return 2;
    }
    if (!a.tx.empty() && a.tx == a.rx) {
        std::fprintf(stderr, "pktgen: --tx and --rx name the same port; the generator sends to another port\n");
        return 2;
    }
    if (!a.dst_mac.empty() && !pkt::parse_mac(a.dst_mac)) {
        std::fprintf(stderr, "pktgen: --dst-mac '%s' is not a MAC address (want 52:54:00:00:00:02)\n", a.dst_mac.c_str());
        return 2;
    }
    std::optional<Port> tx, rx;
    for (auto [bdf, port] : {std::pair{&a.tx, &tx}, std::pair{&a.rx, &rx}}) {
        if (bdf->empty()) continue;
        auto p = Port::open(*bdf);
        if (!p) {
            std::fprintf(stderr, "pktgen: %s\n", p.error().message.c_str());
            return 1;
        }
        port->emplace(std::move(*p));
        const uint32_t max = (*port)->device().attr().mtu + e1000e::kEthHeader;
        if (a.size > max) {
            std::fprintf(stderr, "pktgen: --size %u is larger than %s's largest frame (%u bytes)\n", a.size,
                         (*port)->name().c_str(), max);
            return 2;
        }
    }
    std::signal(SIGINT, [](int) { g_stop = true; });
    std::signal(SIGTERM, [](int) { g_stop = true; });
    return Generator(a, tx, rx).run();
}

}  // namespace
}  // namespace vfab::examples

int main(int argc, char** argv) {
    vfab::set_log_handler(vfab::log_to_stderr, nullptr, vfab::LogLevel::warning);   // vfab's warnings on stderr
    try {
        return vfab::examples::run(argc, argv);
    } catch (const std::exception& e) {   // out of memory and the like: setup only
        std::fprintf(stderr, "pktgen: %s\n", e.what());
        return 1;
    }
}
