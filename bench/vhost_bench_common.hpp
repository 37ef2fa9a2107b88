// What vhost_user_bench (vfab's virtio-net driver) and dpdk_virtio_user_bench (DPDK's
// virtio_user PMD) share, so that both run the same loops and print the same lines: options,
// the 60-byte frame, the back-end's counters, the RTT histogram and the report.
//
// A driver plugs in as a Port:
//   uint32_t send(uint32_t n)            queue up to n copies of the frame; how many went
//   bool send_one(uint32_t seq)          one frame carrying seq (ping-pong)
//   uint32_t recv(uint32_t max, uint32_t* seq)   frames received (and recycled); seq of the last
//   void finish_tx()                     until every queued frame has left the TX ring
//   const std::string& error()           what failed (empty: nothing)
//   void loop_round(uint32_t burst, const Options&, LoopStats&)   one round of mode "loop"
//   void idle_polls(uint32_t n)          n polls with nothing in flight, through a function
//                                        of their own (callgrind: the cost of an empty poll)
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

// Under callgrind, mode loop zeroes the counters once the connection is up, so that only the
// loop is counted (bench/vhost_callgrind.sh); without valgrind's header, or not under
// valgrind, nothing happens.
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define VFAB_BENCH_ZERO_STATS() CALLGRIND_ZERO_STATS
#else
#define VFAB_BENCH_ZERO_STATS() ((void)0)
#endif

namespace vfab::bench::vhost {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kFrameLen = 60;      // the smallest Ethernet frame without FCS
constexpr uint32_t kSeqOffset = 14;     // the sequence number, right after the Ethernet header
constexpr uint32_t kMaxBurst = 512;     // vfab's 1024-entry virtqueue holds 512 two-descriptor WRs

struct Options {
    std::string socket, mode = "tx", ring = "packed", backend_stats;
    uint32_t burst = 32;
    double seconds = 1;
    uint64_t packets = 0;        // stop after this many instead (0: by time); mode loop: per round
    uint32_t wait_ms = 100;      // ping-pong: an answer later than this counts as lost
    uint32_t settle_us = 0;      // loop: spin this long between posting and polling
    bool json = false;
};

// The options both programs take; `extra` adds a program's own. Returns an exit code when
// the program should stop (help, usage error: 2), nothing when it should run.
template <class Extra>
std::optional<int> parse_options(const char* name, int argc, char** argv, Options& o, Extra&& extra) {
    CLI::App app{std::string(name) + ": 60-byte frames over vhost-user against a DPDK vhost back-end"};
    app.name(name);
    app.failure_message([name](const CLI::App*, const CLI::Error& e) {
        return std::string(name) + ": " + e.what() + " (see " + name + " --help)\n";
    });
    app.add_option("--socket", o.socket, "The back-end's vhost-user socket")->required();
    app.add_option("--mode", o.mode,
                   "tx: send for --seconds (back-end rxonly); rx: receive (back-end txonly); pingpong: one "
                   "frame out and back at a time (back-end io/macswap); loop: bursts out and back (io)")
        ->capture_default_str()
        ->check(CLI::IsMember({"tx", "rx", "pingpong", "loop"}));
    app.add_option("--ring", o.ring, "Virtqueue format")->capture_default_str()->check(CLI::IsMember({"split", "packed"}));
    app.add_option("--burst", o.burst, "Frames per post / rx_burst / tx_burst")
        ->capture_default_str()
        ->check(CLI::Range(1u, kMaxBurst));
    app.add_option("--seconds", o.seconds, "How long to run")->capture_default_str()->check(CLI::Range(0.01, 3600.0));
    app.add_option("--packets", o.packets, "Stop after this many packets instead (0: run --seconds)")
        ->capture_default_str()
        ->check(CLI::Range(uint64_t(0), uint64_t(1) << 40));
    app.add_option("--wait-ms", o.wait_ms, "pingpong: how long to wait for an answer")
        ->capture_default_str()
        ->check(CLI::Range(1u, 10000u));
    app.add_option("--settle-us", o.settle_us, "loop: spin between posting and polling (fewer empty polls)")
        ->capture_default_str()
        ->check(CLI::Range(0u, 100000u));
    app.add_option("--backend-stats", o.backend_stats,
                   "Command printing the back-end's counters (rx_packets= tx_packets=), e.g. "
                   "'scripts/vhost-backend stats --dir DIR': tx and rx then report its side");
    app.add_flag("--json", o.json, "Print the result as JSON");
    extra(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    return std::nullopt;
}

// The frame every mode sends: to 02:00:00:00:00:02 from `mac`, EtherType 0x88b5 (local
// experimental), a sequence number, zeros.
inline void build_frame(uint8_t* p, const uint8_t* mac, uint32_t seq) {
    static constexpr uint8_t dst[6] = {0x02, 0, 0, 0, 0, 0x02};
    std::memset(p, 0, kFrameLen);
    std::memcpy(p, dst, 6);
    std::memcpy(p + 6, mac, 6);
    p[12] = 0x88;
    p[13] = 0xb5;
    std::memcpy(p + kSeqOffset, &seq, 4);
}
inline uint32_t frame_seq(const uint8_t* p) {
    uint32_t s;
    std::memcpy(&s, p + kSeqOffset, 4);
    return s;
}

struct BackendCounters {
    uint64_t rx = 0, tx = 0;   // rx: taken from the driver's TX ring; tx: put in its RX ring
    // Frames the back-end had no room for in the driver's RX ring (DPDK's vhost PMD counts
    // them as TX errors): 0 means the driver took all the back-end made.
    uint64_t tx_missed = 0;
};

// Runs the --backend-stats command (outside any timed section: it talks to testpmd).
inline std::optional<BackendCounters> backend_counters(const std::string& cmd) {
    if (cmd.empty()) return std::nullopt;
    FILE* f = ::popen((cmd + " 2>/dev/null").c_str(), "r");
    if (!f) return std::nullopt;
    std::string out;
    char buf[512];
    while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
    if (::pclose(f) != 0) return std::nullopt;
    auto field = [&](const char* key) -> std::optional<uint64_t> {
        const auto p = out.find(std::string(key) + "=");
        if (p == std::string::npos) return std::nullopt;
        return std::strtoull(out.c_str() + p + std::strlen(key) + 1, nullptr, 10);
    };
    auto rx = field("rx_packets"), tx = field("tx_packets"), missed = field("tx_errors");
    if (!rx || !tx) return std::nullopt;
    return BackendCounters{*rx, *tx, missed.value_or(0)};
}

// Round-trip times in 10 ns bins up to 1 ms; longer ones only count towards the maximum and
// the share above 1 ms. No allocation while measuring.
class RttHistogram {
public:
    static constexpr uint32_t kBinNs = 10, kBins = 100000;
    RttHistogram() : bins_(kBins + 1, 0) {}
    void add(uint64_t ns) {
        ++bins_[std::min<uint64_t>(ns / kBinNs, kBins)];
        ++count_;
        max_ = std::max(max_, ns);
        min_ = std::min(min_, ns);
    }
    uint64_t count() const { return count_; }
    // Nearest rank; a bin reports its upper edge (the maximum for the overflow bin).
    double percentile_us(double q) const {
        if (count_ == 0) return 0;
        const auto rank = std::max<uint64_t>(1, uint64_t(q * double(count_) + 0.999999));
        uint64_t seen = 0;
        for (uint32_t i = 0; i <= kBins; ++i) {
            seen += bins_[i];
            if (seen >= rank) return i == kBins ? max_us() : double((i + 1) * kBinNs) / 1000.0;
        }
        return max_us();
    }
    double max_us() const { return double(max_) / 1000.0; }
    double min_us() const { return count_ ? double(min_) / 1000.0 : 0; }

private:
    std::vector<uint64_t> bins_;
    uint64_t count_ = 0, max_ = 0, min_ = UINT64_MAX;
};

// Mode loop: what one round reports (the driver's calls, for instructions per packet).
struct LoopStats {
    uint64_t packets = 0;       // frames that went out and came back
    uint64_t polls = 0;         // poll / rx_burst calls
    uint64_t empty_polls = 0;   // ... that returned nothing
    bool failed = false;
};

struct Report {
    std::string driver, error;
    uint64_t sent = 0, received = 0, lost = 0;
    double elapsed = 0;
    std::optional<BackendCounters> backend;   // the back-end's counters over the run
    LoopStats loop;
    RttHistogram rtt;
    nlohmann::json info = nlohmann::json::object();   // the driver's own facts (features, devargs)
};

template <class Port>
bool done(const Port& p, const Options& o, Clock::time_point start, uint64_t packets) {
    if (!p.error().empty()) return true;
    return o.packets ? packets >= o.packets : std::chrono::duration<double>(Clock::now() - start).count() >= o.seconds;
}

template <class Port>
void run_tx(Port& p, const Options& o, Report& r) {
    const auto start = Clock::now();
    // The clock is read once per burst: 32 frames cost well over a clock read.
    while (!done(p, o, start, r.sent)) r.sent += p.send(o.packets ? uint32_t(std::min<uint64_t>(o.burst, o.packets - r.sent)) : o.burst);
    r.elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    p.finish_tx();
}

template <class Port>
void run_rx(Port& p, const Options& o, Report& r) {
    const auto start = Clock::now();
    while (!done(p, o, start, r.received)) r.received += p.recv(o.burst, nullptr);
    r.elapsed = std::chrono::duration<double>(Clock::now() - start).count();
}

template <class Port>
void run_pingpong(Port& p, const Options& o, Report& r) {
    const auto start = Clock::now();
    uint32_t seq = 0;
    while (!done(p, o, start, r.rtt.count() + r.lost) && r.error.empty()) {
        ++seq;
        const auto t0 = Clock::now();
        if (!p.send_one(seq)) {
            r.error = "the TX ring stayed full";
            break;
        }
        ++r.sent;
        for (;;) {
            uint32_t got_seq = 0;
            const uint32_t n = p.recv(1, &got_seq);
            const auto t1 = Clock::now();
            r.received += n;
            if (n && got_seq == seq) {
                r.rtt.add(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
                break;
            }
            if (t1 - t0 > std::chrono::milliseconds(o.wait_ms)) {
                ++r.lost;   // a late answer is then ignored: its seq is not the next one's
                break;
            }
        }
    }
    r.elapsed = std::chrono::duration<double>(Clock::now() - start).count();
}

// Callgrind divides what the counted functions cost by the packets; empty polls (how many
// depends on the back-end's timing, not on the driver) are counted, and kIdlePolls more
// afterwards, with nothing in flight, measure what one costs.
constexpr uint32_t kIdlePolls = 1000;

template <class Port>
void run_loop(Port& p, const Options& o, Report& r) {
    VFAB_BENCH_ZERO_STATS();
    const auto start = Clock::now();
    while (!done(p, o, start, r.loop.packets) && !r.loop.failed) p.loop_round(o.burst, o, r.loop);
    r.elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    r.sent = r.received = r.loop.packets;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));   // nothing may still be coming
    p.idle_polls(kIdlePolls);
}

// Before timing anything: the back-end's device must be ready and the first frame through,
// so that the connection's set-up is not part of the figures. False after 5 s.
template <class Port>
bool warm_up(Port& p, const Options& o) {
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    if (o.mode == "tx") {   // the back-end (rxonly) counts it: that is the only sign
        const auto before = backend_counters(o.backend_stats);
        if (!p.send_one(0)) return false;
        p.finish_tx();
        if (!before) return std::this_thread::sleep_for(std::chrono::milliseconds(200)), true;
        while (Clock::now() < deadline) {
            if (auto now = backend_counters(o.backend_stats); now && now->rx > before->rx) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return false;
    }
    if (o.mode != "rx" && !p.send_one(0)) return false;   // io/macswap: it comes back
    while (Clock::now() < deadline && p.error().empty())
        if (p.recv(1, nullptr)) return true;
    return false;
}

// Runs the mode, reading the back-end's counters before and after (they lag by what is still
// in flight: wait a little for it to finish counting).
template <class Port>
Report run_bench(Port& p, const Options& o, const char* driver) {
    Report r;
    r.driver = driver;
    if (!warm_up(p, o)) {
        r.error = p.error().empty() ? "no traffic with the back-end within 5 s (is it running, in the right mode?)"
                                    : p.error();
        return r;
    }
    const auto before = backend_counters(o.backend_stats);
    if (o.mode == "tx") run_tx(p, o, r);
    else if (o.mode == "rx") run_rx(p, o, r);
    else if (o.mode == "pingpong") run_pingpong(p, o, r);
    else run_loop(p, o, r);
    if (r.error.empty()) r.error = p.error();
    if (r.loop.failed && r.error.empty()) r.error = "a loop round got fewer frames back than it sent within 1 s";
    if (before) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (const auto after = backend_counters(o.backend_stats))
            r.backend = BackendCounters{after->rx - before->rx, after->tx - before->tx, after->tx_missed - before->tx_missed};
    }
    return r;
}

// One line of key=value pairs (what bench/vhost_vs_dpdk.sh reads), or JSON. Mpps: tx counts
// what the back-end received when its counters are known, rx what the driver received.
inline int print_report(const Report& r, const Options& o) {
    const bool have_be = r.backend.has_value();
    const uint64_t tx_count = o.mode == "tx" && have_be ? r.backend->rx : o.mode == "tx" ? r.sent : r.received;
    const double mpps = r.elapsed > 0 ? double(tx_count) / r.elapsed / 1e6 : 0;
    const int64_t tx_loss = have_be ? int64_t(r.sent) - int64_t(r.backend->rx) : 0;
    nlohmann::json j{{"driver", r.driver}, {"mode", o.mode},          {"ring", o.ring},       {"burst", o.burst},
                     {"seconds", r.elapsed}, {"sent", r.sent},         {"received", r.received}, {"mpps", mpps}};
    if (have_be)
        j["backend"] = {{"rx_packets", r.backend->rx}, {"tx_packets", r.backend->tx}, {"tx_missed", r.backend->tx_missed}};
    if (o.mode == "tx" && have_be) j["loss"] = tx_loss;
    if (o.mode == "pingpong") {
        j["lost"] = r.lost;
        j["rtt_us"] = {{"min", r.rtt.min_us()},
                       {"median", r.rtt.percentile_us(0.5)},
                       {"p99", r.rtt.percentile_us(0.99)},
                       {"p999", r.rtt.percentile_us(0.999)},
                       {"max", r.rtt.max_us()}};
    }
    if (o.mode == "loop") j["polls"] = r.loop.polls, j["empty_polls"] = r.loop.empty_polls, j["idle_polls"] = kIdlePolls;
    for (const auto& [k, v] : r.info.items()) j[k] = v;
    if (!r.error.empty()) j["error"] = r.error;
    if (o.json) {
        std::cout << j.dump(2) << std::endl;
    } else {
        std::string line;
        for (const auto& [k, v] : j.items()) {
            if (k == "error") continue;   // free text: on stderr
            if (v.is_object()) {
                for (const auto& [k2, v2] : v.items()) line += k + "_" + k2 + "=" + v2.dump() + " ";
            } else {
                line += k + "=" + (v.is_string() ? v.get<std::string>() : v.dump()) + " ";
            }
        }
        line += r.error.empty() ? "ok=1" : "ok=0";
        std::cout << line << std::endl;
    }
    if (!r.error.empty()) std::fprintf(stderr, "%s: %s\n", r.driver.c_str(), r.error.c_str());
    if (o.mode == "tx" && have_be && tx_loss != 0)
        std::fprintf(stderr, "%s: sent %llu frames, the back-end received %llu\n", r.driver.c_str(),
                     (unsigned long long)r.sent, (unsigned long long)r.backend->rx);
    return r.error.empty() ? 0 : 1;
}

}  // namespace vfab::bench::vhost
