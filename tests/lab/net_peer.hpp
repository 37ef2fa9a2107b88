// vfab's side of an IPv4 conversation with a host vfab did not write (the Linux kernel's own
// NIC driver on another lab NIC): a small ARP / IPv4 / ICMP echo / UDP responder on one vfab
// port, of any driver (BasicNetPeer<examples::BasicPort<Driver>>; NetPeer is e1000e's). It
// answers ARP requests for its address, ICMP echo requests and UDP datagrams to its echo
// port; on request it resolves an address, sends echo requests and UDP datagrams; it records
// what came back for the test to check.
//
// One thread at a time drives it (the queue pair's rule): the test's main thread, or a
// Server thread while the main thread waits on the kernel side.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "packet.hpp"
#include "port.hpp"

namespace vfab::lab {

template <class PortT>
class BasicNetPeer {
public:
    using Port = PortT;
    using Clock = std::chrono::steady_clock;

    struct EchoReply {
        uint32_t src_ip = 0;
        uint16_t id = 0, seq = 0;
        uint8_t ttl = 0;
        bool checksums_ok = false;
        std::vector<uint8_t> data;
        Clock::time_point when;
    };
    struct Datagram {
        pkt::Addr src;
        uint16_t sport = 0, dport = 0;
        bool checksums_ok = false;      // verified here, in software
        bool udp_csum_present = false;
        bool nic_csum_ok = false;       // the receiving NIC verified them (wc_ip_csum_ok)
        std::vector<uint8_t> data;
        std::vector<uint8_t> frame;     // the whole frame as received (no FCS), with keep_frames
    };
    struct Counters {
        uint64_t frames = 0;
        uint64_t arp_requests_answered = 0, arp_replies = 0;
        uint64_t echo_requests_answered = 0, echo_replies = 0;
        uint64_t udp_received = 0, udp_echoed = 0;
        uint64_t bad_checksums = 0, ignored = 0;
    };

    BasicNetPeer(Port port, uint32_t ip) : port_(std::move(port)), self_{port_.mac(), ip} {
        for (uint32_t s = 0; s < port_.send_slots(); ++s) free_.push_back(s);
    }

    // Posts the receive buffers. False with error() set on failure.
    bool start() {
        if (PostResult r = port_.post_all_recv(); !r) return fail("post_recv: " + std::string(std::strerror(r.error)));
        return true;
    }

    // Handles every completion waiting. False on a fatal error (error() says which).
    bool poll() {
        Completion wc[32];
        const int n = port_.cq().poll(wc);
        if (n < 0) return fail("poll: " + std::string(std::strerror(-n)));
        for (int i = 0; i < n; ++i) {
            const Completion& c = wc[i];
            if (c.opcode == WcOpcode::send) {
                free_.push_back(uint32_t(c.wr_id));
                if (c.status != WcStatus::success) return fail(std::string("send completion: ") + to_string(c.status));
                continue;
            }
            const auto slot = uint32_t(c.wr_id);
            if (c.status != WcStatus::success) return fail(std::string("receive completion: ") + to_string(c.status));
            ++counters.frames;
            if (!handle(port_.recv_buffer(slot), c.byte_len, c.flags & wc_ip_csum_ok)) return false;
            if (PostResult r = port_.post_recv(slot); !r) return fail("post_recv: " + std::string(std::strerror(r.error)));
        }
        idle_ = n == 0;
        return true;
    }

    // Polls until done() holds (true) or `timeout` passes or an error occurs (false). When
    // idle it sleeps on the completion channel (interrupt mode) for up to 5 ms at a time.
    bool run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
        const auto end = Clock::now() + timeout;
        while (!done()) {
            if (Clock::now() > end) return false;
            if (!poll() || !idle_wait()) return false;
        }
        return true;
    }

    // Serves (answers ARP, echo requests, UDP echo) until `stop`; false on an error.
    bool serve(const std::atomic<bool>& stop) {
        while (!stop.load(std::memory_order_relaxed))
            if (!poll() || !idle_wait()) return false;
        return true;
    }

    bool send_arp_request(uint32_t ip) {
        return transmit([&](std::span<uint8_t> f) {
            return pkt::build_arp(f, pkt::kArpRequest, self_, {{}, ip}, pkt::kBroadcast);
        });
    }

    bool send_echo_request(uint32_t ip, uint16_t id, uint16_t seq, std::span<const uint8_t> data) {
        auto mac = neighbor(ip);
        if (!mac) return fail("no ARP entry for " + pkt::to_string_ip(ip) + ": resolve it first");
        return transmit([&](std::span<uint8_t> f) {
            return pkt::build_icmp_echo(f, pkt::kIcmpEchoRequest, self_, {*mac, ip}, id, seq, data, next_ip_id_++);
        });
    }

    // With `offload` the NIC fills the IPv4 and UDP checksums (send_ip_csum).
    bool send_udp(uint32_t ip, uint16_t sport, uint16_t dport, std::span<const uint8_t> data, bool offload) {
        auto mac = neighbor(ip);
        if (!mac) return fail("no ARP entry for " + pkt::to_string_ip(ip) + ": resolve it first");
        const auto csum = offload ? pkt::UdpChecksum::offload : pkt::UdpChecksum::software;
        return transmit(
            [&](std::span<uint8_t> f) { return pkt::build_udp(f, self_, sport, {*mac, ip}, dport, data, csum, next_ip_id_++); },
            offload ? uint32_t(send_ip_csum) : 0u);
    }

    std::optional<pkt::Mac> neighbor(uint32_t ip) const {
        auto it = neighbors_.find(ip);
        if (it == neighbors_.end()) return std::nullopt;
        return it->second;
    }
    void forget(uint32_t ip) { neighbors_.erase(ip); }

    const pkt::Addr& self() const { return self_; }
    Port& port() { return port_; }
    const std::string& error() const { return error_; }

    uint16_t echo_port = 7;   // UDP datagrams to this port are sent back (RFC 862)
    bool keep_frames = false;  // Datagram::frame: keep each datagram's whole frame (captures)
    Counters counters;
    std::vector<EchoReply> echo_replies;
    std::vector<Datagram> datagrams;   // every UDP datagram to this address

private:
    bool fail(std::string why) {
        if (error_.empty()) error_ = port_.name() + ": " + std::move(why);
        return false;
    }

    bool idle_wait() {
        if (!idle_) return true;
        typename Port::CompletionQueue* cq = &port_.cq();
        std::string err;
        if (examples::wait_for_completions<typename Port::CompletionQueue>({&cq, 1}, 5, err) < 0) return fail(err);
        return true;
    }

    // Builds a frame into a free send buffer with `build` and sends it.
    template <class Build>
    bool transmit(Build&& build, uint32_t flags = 0) {
        const auto end = Clock::now() + std::chrono::seconds(2);
        while (free_.empty()) {   // every send buffer in flight: wait for completions
            if (!poll()) return false;
            if (Clock::now() > end) return fail("no send completion for 2 s");
        }
        const uint32_t slot = free_.back();
        uint8_t* f = port_.send_buffer(slot);
        const size_t len = build(std::span<uint8_t>(f, Port::kBuf));
        if (len == 0) return fail("frame does not fit in a buffer");
        if (PostResult r = port_.send(slot, f, uint32_t(len), send_signaled | flags); !r)
            return fail("post_send: " + std::string(std::strerror(r.error)));
        free_.pop_back();
        return true;
    }

    bool handle(const uint8_t* f, uint32_t len, bool nic_csum_ok) {
        const pkt::Frame p = pkt::parse({f, len});
        if (p.kind == pkt::Kind::arp) return handle_arp(p);
        if ((p.kind != pkt::Kind::icmp && p.kind != pkt::Kind::udp) || p.ip_dst != self_.ip) {
            ++counters.ignored;   // IPv6, multicast, broadcast, not for us
            return true;
        }
        if (!p.checksums_ok()) {
            ++counters.bad_checksums;
            return true;
        }
        if (p.kind == pkt::Kind::icmp) return handle_icmp(p);
        ++counters.udp_received;
        datagrams.push_back({p.src(), p.sport, p.dport, p.checksums_ok(), p.udp_csum_present, nic_csum_ok,
                             {p.payload.begin(), p.payload.end()}, {}});
        if (keep_frames) datagrams.back().frame.assign(f, f + len);
        if (p.dport != echo_port) return true;
        const pkt::Addr to = p.src();
        const uint16_t sport = p.dport, dport = p.sport;
        const std::span<const uint8_t> data = p.payload;   // still in the receive buffer
        if (!transmit([&](std::span<uint8_t> out) { return pkt::build_udp(out, self_, sport, to, dport, data); }))
            return false;
        ++counters.udp_echoed;
        return true;
    }

    bool handle_arp(const pkt::Frame& p) {
        if (p.arp_op == pkt::kArpReply) {
            ++counters.arp_replies;
            neighbors_[p.arp_sender.ip] = p.arp_sender.mac;
            return true;
        }
        if (p.arp_op != pkt::kArpRequest || p.arp_target.ip != self_.ip) {
            ++counters.ignored;
            return true;
        }
        neighbors_[p.arp_sender.ip] = p.arp_sender.mac;   // RFC 826: learn the asker
        const pkt::Addr asker = p.arp_sender;
        if (!transmit([&](std::span<uint8_t> out) { return pkt::build_arp(out, pkt::kArpReply, self_, asker, asker.mac); }))
            return false;
        ++counters.arp_requests_answered;
        return true;
    }

    bool handle_icmp(const pkt::Frame& p) {
        if (p.icmp_type == pkt::kIcmpEchoReply) {
            ++counters.echo_replies;
            echo_replies.push_back({p.ip_src, p.icmp_id, p.icmp_seq, p.ttl, p.checksums_ok(),
                                    {p.payload.begin(), p.payload.end()}, Clock::now()});
            return true;
        }
        if (p.icmp_type != pkt::kIcmpEchoRequest || p.icmp_code != 0) {
            ++counters.ignored;
            return true;
        }
        const pkt::Addr to = p.src();
        const uint16_t id = p.icmp_id, seq = p.icmp_seq;
        const std::span<const uint8_t> data = p.payload;   // still in the receive buffer
        if (!transmit([&](std::span<uint8_t> out) {
                return pkt::build_icmp_echo(out, pkt::kIcmpEchoReply, self_, to, id, seq, data, next_ip_id_++);
            }))
            return false;
        ++counters.echo_requests_answered;
        return true;
    }

    Port port_;
    pkt::Addr self_;
    std::vector<uint32_t> free_;   // send buffers not in flight
    std::map<uint32_t, pkt::Mac> neighbors_;
    std::string error_;
    uint16_t next_ip_id_ = 1;
    bool idle_ = false;
};

using NetPeer = BasicNetPeer<examples::Port>;

// Runs peer.serve() on its own thread for its lifetime; the destructor stops and joins it.
template <class Peer>
class Server {
public:
    explicit Server(Peer& peer) : thread_([this, &peer] { ok_ = peer.serve(stop_); }) {}
    ~Server() { stop(); }
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;
    // Stops serving; false if serving failed (the peer's error() says why).
    bool stop() {
        stop_ = true;
        if (thread_.joinable()) thread_.join();
        return ok_;
    }

private:
    std::atomic<bool> stop_{false};
    bool ok_ = true;
    std::thread thread_;
};

}  // namespace vfab::lab
