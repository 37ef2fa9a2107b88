// pingpong: round-trip latency between two ports driven by vfab's e1000e driver (direct API).
//
//   pingpong --ping 0000:00:02.0 --pong 0000:00:03.0 --count 1000 [--size 64] [--interrupt] [--json] [--progress]
//   pingpong --pong 0000:00:03.0 --count 1000                      # the answering side alone
//   pingpong --ping 0000:00:02.0 --count 1000 --peer-mac 52:54:00:00:00:02
//
// The ping side sends a small UDP/IPv4 frame (10.0.0.1 -> 10.0.0.2:7, a magic number and a
// sequence number in the payload), waits for the answer and times the round trip. The pong
// side answers from the receive buffer itself: it swaps the Ethernet and IP addresses and the
// UDP ports in place (no checksum changes) and sends that buffer back, zero copy, reposting it
// for receive once the send completed. With both ports in one process each gets its own thread.
// Prints min / median / p99 / p99.9 / max of the round-trip times; --json adds a histogram.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <thread>
#include <vector>

#include "port.hpp"
#include "stats.hpp"
#include "vfab/log.hpp"

namespace vfab::examples {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x76667070;   // "vfpp"
constexpr uint16_t kEchoPort = 7, kPingPort = 40007;
constexpr uint64_t kSendTag = 1ull << 32;  // pong: a wr_id for a send from receive slot N

struct Args {
    std::string ping, pong, peer_mac;
    uint32_t count = 1000, size = 64, wait_ms = 1000;
    double timeout = 10;
    bool interrupt = false, json = false, progress = false;
};

// Interrupt mode: how the sleeps on the completion channel ended.
struct Sleeps {
    uint64_t woken = 0;      // the channel fired
    uint64_t timeouts = 0;   // kTimerMs passed without it
    uint64_t missed = 0;     // ... although a completion was there: a notification that never came
    uint64_t idle_polls = 0;   // busy-polling: polls that found nothing (clock_due())
    nlohmann::json to_json() const { return {{"woken", woken}, {"timeouts", timeouts}, {"missed", missed}}; }
};
// A sleep ends after this long even without a notification (then the queue is polled anyway).
constexpr int kTimerMs = 10;
// Busy-polling, the clock (device events, time-outs) is looked at once per this many polls
// that found nothing: reading it is a system call where the TSC is not usable (the lab's TCG
// guest reads the HPET), which would otherwise sit between a poll and the frame it waits for.
constexpr uint64_t kIdlePollsPerClockRead = 64;
// Whether this empty poll should look at the clock: every one when sleeping in between.
bool clock_due(const Sleeps& s, bool interrupt) { return interrupt || s.idle_polls % kIdlePollsPerClockRead == 0; }

// Waits for the next completions: busy-polls, or sleeps on the channel in interrupt mode.
// Returns how many, or -1 with `error` set — also when the device is going away (removal,
// fatal error, reset), which a poll that found nothing checks through `events` (at most every
// 5 ms, and busy-polling once per kIdlePollsPerClockRead empty polls: more often would put
// system calls between a busy poll and its answer).
int next_completions(Port& p, std::span<Completion> wc, bool interrupt, Sleeps& sleeps, EventWatch<Port::Device>& events,
                     std::string& error) {
    int n = p.cq().poll(wc);
    if (n == 0 && !interrupt) ++sleeps.idle_polls;
    if (n == 0 && clock_due(sleeps, interrupt))
        if (auto why = events.stop_reason()) {
            error = *why;
            return -1;
        }
    if (n == 0 && interrupt) {
        e1000e::CompletionQueue* cq = &p.cq();
        const int woke = wait_for_completions({&cq, 1}, kTimerMs, error);
        if (woke < 0) return -1;
        n = p.cq().poll(wc);
        if (woke) {
            ++sleeps.woken;
        } else {
            ++sleeps.timeouts;
            if (n > 0) ++sleeps.missed;
        }
    }
    if (n < 0) error = p.name() + ": poll: " + std::strerror(-n);
    return n;
}

struct PongResult {
    uint64_t answered = 0, ignored = 0;
    Sleeps sleeps;
    std::string error;
};

// Answers pings until `count` were answered, `stop` is set or `timeout` s pass without one.
PongResult pong(Port& p, const Args& a, const std::atomic<bool>& stop) {
    PongResult res;
    EventWatch<Port::Device> events(p.device());
    if (PostResult r = p.post_all_recv(); !r) {
        res.error = p.name() + ": post_recv: " + std::strerror(r.error);
        return res;
    }
    Completion wc[32];
    auto last = Clock::now();   // when a check of the clock last saw a new answer
    uint64_t answered_then = 0;
    while (res.answered < a.count && !stop.load(std::memory_order_relaxed)) {
        const int n = next_completions(p, wc, a.interrupt, res.sleeps, events, res.error);
        if (n < 0) return res;
        for (int i = 0; i < n; ++i) {
            const Completion& c = wc[i];
            if (c.opcode == WcOpcode::send) {   // the answer left: its buffer receives again
                if (c.status != WcStatus::success) {
                    res.error = p.name() + ": send completion: " + to_string(c.status);
                    return res;
                }
                if (PostResult r = p.post_recv(uint32_t(c.wr_id)); !r) {
                    res.error = p.name() + ": post_recv: " + std::strerror(r.error);
                    return res;
                }
                continue;
            }
            const auto slot = uint32_t(c.wr_id);
            uint8_t* f = p.recv_buffer(slot);
            const pkt::Frame fr = c.status == WcStatus::success ? pkt::parse({f, c.byte_len}) : pkt::Frame{};
            uint32_t magic = 0;
            if (fr.payload.size() >= 8) std::memcpy(&magic, fr.payload.data(), 4);
            if (fr.kind != pkt::Kind::udp || fr.dport != kEchoPort || magic != kMagic) {
                ++res.ignored;
                if (PostResult r = p.post_recv(slot); !r) {
                    res.error = p.name() + ": post_recv: " + std::strerror(r.error);
                    return res;
                }
                continue;
            }
            // Swap in place: Ethernet addresses, IPv4 addresses, UDP ports.
            uint8_t tmp[6];
            std::memcpy(tmp, f, 6);
            std::memcpy(f, f + 6, 6);
            std::memcpy(f + 6, tmp, 6);
            uint8_t* ip = f + pkt::kEthLen;
            std::swap_ranges(ip + 12, ip + 16, ip + 16);
            uint8_t* udp = ip + pkt::kIpv4Len;
            std::swap_ranges(udp, udp + 2, udp + 2);
            if (PostResult r = p.send(kSendTag | slot, f, c.byte_len); !r) {
                res.error = p.name() + ": post_send: " + std::strerror(r.error);
                return res;
            }
            ++res.answered;
        }
        if (n == 0 && clock_due(res.sleeps, a.interrupt)) {   // no clock read on the answer's path
            const auto now = Clock::now();
            if (res.answered != answered_then) {
                answered_then = res.answered;
                last = now;
            } else if (std::chrono::duration<double>(now - last).count() > a.timeout) {
                res.error = p.name() + ": no ping for " + std::to_string(a.timeout) + " s";
                return res;
            }
        }
    }
    return res;
}

struct PingResult {
    std::vector<double> rtt_us;   // one per answered round trip
    uint64_t lost = 0, ignored = 0;
    Sleeps sleeps;
    std::string error;
};

PingResult ping(Port& p, const Args& a, const pkt::Mac& peer) {
    PingResult res;
    EventWatch<Port::Device> events(p.device());
    res.rtt_us.reserve(a.count);
    if (PostResult r = p.post_all_recv(); !r) {
        res.error = p.name() + ": post_recv: " + std::strerror(r.error);
        return res;
    }
    const pkt::Addr src{p.mac(), pkt::ipv4(10, 0, 0, 1)}, dst{peer, pkt::ipv4(10, 0, 0, 2)};
    std::vector<uint8_t> payload(a.size - pkt::kUdpHeaders, 0);
    std::memcpy(payload.data(), &kMagic, 4);
    std::vector<bool> busy(p.send_slots(), false);
    Completion wc[32];
    auto next_progress = Clock::now() + std::chrono::seconds(1);
    for (uint32_t seq = 0; seq < a.count; ++seq) {
        if (a.progress && Clock::now() >= next_progress) {   // one line a second: consoles may drop '\r'
            next_progress = Clock::now() + std::chrono::seconds(1);
            std::vector<double> sorted = res.rtt_us;
            std::sort(sorted.begin(), sorted.end());
            std::fprintf(stderr, "ping-pong: %u / %u round trips, median %.1f us so far\n", seq, a.count,
                         percentile(sorted, 0.5));
        }
        const uint32_t slot = seq % p.send_slots();
        while (busy[slot]) {   // a send not completed yet (only when the wire stalls)
            const int n = next_completions(p, wc, a.interrupt, res.sleeps, events, res.error);
            if (n < 0) return res;
            for (int i = 0; i < n; ++i) {
                if (wc[i].opcode == WcOpcode::send) {
                    busy[uint32_t(wc[i].wr_id)] = false;
                } else if (PostResult r = p.post_recv(uint32_t(wc[i].wr_id)); !r) {   // a stray frame
                    res.error = p.name() + ": post_recv: " + std::strerror(r.error);
                    return res;
                }
            }
        }
        std::memcpy(payload.data() + 4, &seq, 4);
        uint8_t* f = p.send_buffer(slot);
        const size_t len = pkt::build_udp({f, Port::kBuf}, src, kPingPort, dst, kEchoPort, payload);
        const auto t0 = Clock::now();
        if (PostResult r = p.send(slot, f, uint32_t(len)); !r) {
            res.error = p.name() + ": post_send: " + std::strerror(r.error);
            return res;
        }
        busy[slot] = true;
        bool answered = false;
        while (!answered) {
            const int n = next_completions(p, wc, a.interrupt, res.sleeps, events, res.error);
            if (n < 0) return res;
            const auto t1 = n > 0 ? Clock::now() : t0;   // the clock only when something came
            for (int i = 0; i < n; ++i) {
                const Completion& c = wc[i];
                if (c.opcode == WcOpcode::send) {
                    busy[uint32_t(c.wr_id)] = false;
                    if (c.status != WcStatus::success) {
                        res.error = p.name() + ": send completion: " + to_string(c.status);
                        return res;
                    }
                    continue;
                }
                const auto rslot = uint32_t(c.wr_id);
                const pkt::Frame fr = c.status == WcStatus::success ? pkt::parse({p.recv_buffer(rslot), c.byte_len}) : pkt::Frame{};
                uint32_t magic = 0, got = 0;
                if (fr.payload.size() >= 8) {
                    std::memcpy(&magic, fr.payload.data(), 4);
                    std::memcpy(&got, fr.payload.data() + 4, 4);
                }
                if (fr.kind == pkt::Kind::udp && fr.sport == kEchoPort && magic == kMagic && got == seq &&
                    fr.checksums_ok()) {
                    res.rtt_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
                    answered = true;
                } else {
                    ++res.ignored;   // a late answer to an earlier ping, or not ours
                }
                if (PostResult r = p.post_recv(rslot); !r) {
                    res.error = p.name() + ": post_recv: " + std::strerror(r.error);
                    return res;
                }
            }
            if (!answered && (n > 0 || clock_due(res.sleeps, a.interrupt)) &&
                std::chrono::duration<double, std::milli>(Clock::now() - t0).count() > a.wait_ms) {
                ++res.lost;
                break;
            }
        }
    }
    return res;
}

int run(int argc, char** argv) {
    CLI::App app{"pingpong: round-trip latency between two ports through vfab's e1000e driver"};
    app.name("pingpong");
    app.failure_message([](const CLI::App*, const CLI::Error& e) {
        return std::string("pingpong: ") + e.what() + " (see pingpong --help)\n";
    });
    Args a;
    app.add_option("--ping", a.ping, "Port that sends pings and times the answers (PCI address on vfio-pci)");
    app.add_option("--pong", a.pong, "Port that answers");
    app.add_option("--count", a.count, "Round trips")->capture_default_str()->check(CLI::PositiveNumber);
    app.add_option("--size", a.size, "Frame size in bytes, without the FCS (60..1514)")
        ->capture_default_str()
        ->check(CLI::Range(60u, 1514u));
    app.add_option("--peer-mac", a.peer_mac, "The answering port's MAC when there is no --pong (default: broadcast)");
    app.add_option("--wait-ms", a.wait_ms, "How long a ping waits for its answer")->capture_default_str()->check(CLI::PositiveNumber);
    app.add_option("--timeout", a.timeout, "Seconds the pong side waits for a ping")->capture_default_str()->check(CLI::PositiveNumber);
    app.add_flag("--interrupt", a.interrupt, "Sleep on the completion channels instead of busy-polling");
    app.add_flag("--json", a.json, "Print the results as JSON (with a log-spaced histogram of the round trips)");
    app.add_flag("--progress", a.progress, "Print a progress line (on stderr) every second");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    if (a.ping.empty() && a.pong.empty()) {
        std::fprintf(stderr, "pingpong: name a port with --ping, --pong or both (see pingpong --help)\n");
        return 2;
    }
    if (!a.ping.empty() && a.ping == a.pong) {
        std::fprintf(stderr, "pingpong: --ping and --pong name the same port; they must be two ports wired together\n");
        return 2;
    }
    std::optional<pkt::Mac> peer_mac = a.peer_mac.empty() ? pkt::kBroadcast : pkt::parse_mac(a.peer_mac);
    if (!peer_mac) {
        std::fprintf(stderr, "pingpong: --peer-mac '%s' is not a MAC address (want 52:54:00:00:00:02)\n", a.peer_mac.c_str());
        return 2;
    }
    std::optional<Port> pinger, ponger;
    for (auto [bdf, port] : {std::pair{&a.ping, &pinger}, std::pair{&a.pong, &ponger}}) {
        if (bdf->empty()) continue;
        auto p = Port::open(*bdf, {.send_slots = 64, .recv_slots = 255});
        if (!p) {
            std::fprintf(stderr, "pingpong: %s\n", p.error().message.c_str());
            return 1;
        }
        port->emplace(std::move(*p));
        if (a.size > (*port)->device().attr().mtu + e1000e::kEthHeader) {
            std::fprintf(stderr, "pingpong: --size %u is larger than %s's largest frame\n", a.size, (*port)->name().c_str());
            return 2;
        }
    }
    if (ponger) peer_mac = ponger->mac();
    const char* mode = a.interrupt ? "interrupt mode" : "busy-poll";

    if (!pinger) {   // the answering side alone
        std::atomic<bool> never{false};
        PongResult r = pong(*ponger, a, never);
        if (a.json) std::cout << nlohmann::json{{"answered", r.answered}, {"ignored", r.ignored}}.dump(2) << std::endl;
        else std::printf("pong %s: answered %llu pings (%s)\n", ponger->name().c_str(), (unsigned long long)r.answered, mode);
        if (!r.error.empty()) std::fprintf(stderr, "pingpong: %s\n", r.error.c_str());
        return r.error.empty() ? 0 : 1;
    }

    std::atomic<bool> stop{false};
    PongResult pong_res;
    std::thread pong_thread;
    if (ponger) pong_thread = std::thread([&] { pong_res = pong(*ponger, a, stop); });
    PingResult res = ping(*pinger, a, *peer_mac);
    stop = true;
    if (pong_thread.joinable()) pong_thread.join();

    std::vector<double> s = res.rtt_us;
    const nlohmann::json rtt = summary(s);
    nlohmann::json j{{"mode", a.interrupt ? "interrupt" : "poll"},
                     {"size", a.size},
                     {"count", a.count},
                     {"completed", s.size()},
                     {"lost", res.lost},
                     {"rtt_us", rtt},
                     {"histogram_us", log_histogram(s)}};
    if (ponger) j["pong"] = {{"device", ponger->name()}, {"answered", pong_res.answered}, {"ignored", pong_res.ignored}};
    if (a.interrupt) {
        j["sleeps"] = res.sleeps.to_json();
        if (ponger) j["pong"]["sleeps"] = pong_res.sleeps.to_json();
    }
    if (a.json) {
        std::cout << j.dump(2) << std::endl;
    } else {
        std::printf("pingpong: %s -> %s, %zu of %u round trips of %u bytes (%s)\n", pinger->name().c_str(),
                    ponger ? ponger->name().c_str() : pkt::to_string(*peer_mac).c_str(), s.size(), a.count, a.size, mode);
        std::printf("rtt: min %.1f us, median %.1f us, p99 %.1f us, p99.9 %.1f us, max %.1f us, mean %.1f us; lost %llu\n",
                    rtt["min"].get<double>(), rtt["median"].get<double>(), rtt["p99"].get<double>(),
                    rtt["p999"].get<double>(), rtt["max"].get<double>(), rtt["mean"].get<double>(),
                    (unsigned long long)res.lost);
        if (a.interrupt)
            std::printf("sleeps (ping side): %llu woken by the channel, %llu ended by the %d ms timer, %llu of them "
                        "with a completion waiting (a missed notification)\n",
                        (unsigned long long)res.sleeps.woken, (unsigned long long)res.sleeps.timeouts, kTimerMs,
                        (unsigned long long)res.sleeps.missed);
    }
    int rc = 0;
    for (const std::string* e : {&res.error, &pong_res.error}) {
        if (e->empty()) continue;
        std::fprintf(stderr, "pingpong: %s\n", e->c_str());
        rc = 1;
    }
    if (res.lost) {
        std::fprintf(stderr, "pingpong: %llu of %u pings got no answer within %u ms\n", (unsigned long long)res.lost, a.count,
                     a.wait_ms);
        rc = 1;
    }
    return rc;
}

}  // namespace
}  // namespace vfab::examples

int main(int argc, char** argv) {
    vfab::set_log_handler(vfab::log_to_stderr, nullptr, vfab::LogLevel::warning);   // vfab's warnings on stderr
    try {
        return vfab::examples::run(argc, argv);
    } catch (const std::exception& e) {   // out of memory and the like: setup only
        std::fprintf(stderr, "pingpong: %s\n", e.what());
        return 1;
    }
}
