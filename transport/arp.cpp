// ARP (RFC 826) for the port's address and its peers': requests, answers, the table and its
// timers; and the address handles, whose destination's ARP starts when they are made and whose
// MAC they keep once known, as a RoCE device's do (the kernel resolves the neighbour in
// create_ah and the handle keeps the MAC).
#include <arpa/inet.h>
#include <time.h>

#include "engine.hpp"

namespace vfab::rdma::detail {

using namespace wire;

namespace {
constexpr uint64_t kArpFailedHoldNs = 1000000000ull;   // a failed peer is asked again after 1 s

std::string ipv4_text(uint32_t ip) {
    const in_addr a{htonl(ip)};
    char s[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &a, s, sizeof s);
    return s;
}
}  // namespace

void PortImpl::send_arp(uint16_t op, const uint8_t* dst_mac, uint32_t dst_ip) noexcept {
    uint8_t* buf = tx_buffer();
    if (!buf) return;   // requests are repeated by the ARP timer; a lost reply is asked again
    tx_queue(buf, write_arp(buf, op, mac(), cfg_.ipv4, dst_mac, dst_ip));
    ++(op == kArpRequest ? stats_.arp_requests : stats_.arp_replies);
}

void PortImpl::on_arp(const uint8_t* f, uint32_t len) noexcept {
    ArpPacket a;
    if (!parse_arp(f, len, a)) return;
    // Learn (or refresh) the sender when we asked for it or already know it.
    bool changed = false;
    for (auto& e : arp_) {
        if (e.state != ArpEntry::empty && e.ip == a.sender_ip && a.sender_ip != 0) {
            changed = e.state != ArpEntry::known || std::memcmp(e.mac, a.sender_mac, 6) != 0;
            std::memcpy(e.mac, a.sender_mac, 6);
            e.state = ArpEntry::known;
            e.used = ++arp_uses_;
        }
    }
    if (a.op == kArpRequest && a.target_ip == cfg_.ipv4) send_arp(kArpReply, a.sender_mac, a.sender_ip);
    if (!changed) return;
    // Learnt or moved: the address handles of that peer take it, waiting or not.
    for (auto& h : ahs_)
        if (h->attr().dgid.ipv4() == a.sender_ip) {
            std::memcpy(h->mac, a.sender_mac, 6);
            h->mac_known = true;
        }
    wake_arp_waiters();
}

// A peer's MAC was learnt, changed or given up on: the queue pairs waiting for one look again.
void PortImpl::wake_arp_waiters() noexcept {
    each_qp([](QpImpl& qp) { qp.on_arp_change(); });
}

bool PortImpl::resolve(uint32_t ip, uint8_t* out, bool& failed) noexcept {
    failed = false;
    if (is_ipv4_multicast(ip)) {   // a group's address is computed, never asked for
        ipv4_multicast_mac(ip, out);
        return true;
    }
    if (ip == cfg_.ipv4) {   // this port: looped back in tx_queue()
        std::memcpy(out, mac(), 6);
        return true;
    }
    // Where a new peer goes: an empty entry; else, the table full, the one used longest ago
    // among the known (their address handles keep their MACs), else among the failed (their
    // one-second hold ends early), else among the requests under way (whose queue pairs ask
    // again at the next change: a flood of addresses never locks new peers out).
    ArpEntry* oldest[4] = {};   // by state
    for (auto& e : arp_) {
        if (e.state != ArpEntry::empty && e.ip == ip) {
            if (e.state == ArpEntry::known) {
                e.used = ++arp_uses_;
                std::memcpy(out, e.mac, 6);
                return true;
            }
            failed = e.state == ArpEntry::failed;
            return false;
        }
        ArpEntry*& o = oldest[e.state];
        if (!o || e.used < o->used) o = &e;
    }
    ArpEntry* slot = oldest[ArpEntry::empty];
    for (auto s : {ArpEntry::known, ArpEntry::failed, ArpEntry::resolving})
        if (!slot) slot = oldest[s];
    *slot = ArpEntry{ip, {}, ArpEntry::resolving, 1, now_ns() + arp_timeout_ns(), ++arp_uses_};
    note_deadline(slot->deadline);
    send_arp(kArpRequest, nullptr, ip);
    return false;
}

void PortImpl::arp_timers(uint64_t now) noexcept {
    bool changed = false;
    for (auto& e : arp_) {
        if (e.state == ArpEntry::failed && now >= e.deadline) {
            e.state = ArpEntry::empty;   // asked again the next time a queue pair needs it
        } else if (e.state == ArpEntry::resolving && now >= e.deadline) {
            if (e.attempts >= cfg_.arp_attempts) {
                e.state = ArpEntry::failed;
                e.deadline = now + kArpFailedHoldNs;
                changed = true;
            } else {
                ++e.attempts;
                e.deadline = now + arp_timeout_ns();
                send_arp(kArpRequest, nullptr, e.ip);
            }
        }
        if (e.state == ArpEntry::resolving || e.state == ArpEntry::failed) note_deadline(e.deadline);
    }
    if (changed) wake_arp_waiters();
}

// ---- address handles ----------------------------------------------------------------------------

Result<AddressHandle*> PortImpl::create_ah(const AhAttr& a) {
    Guard g(*this);
    if (!a.dgid.is_ipv4())
        return Error{EINVAL, "create_ah: the destination GID must be IPv4-mapped (::ffff:a.b.c.d); IPv6 is not carried yet"};
    const uint32_t n = live(ahs_);
    if (n >= kMaxAh) return Error{ENOSPC, str_cat("create_ah: the port has ", kMaxAh, " address handles already")};
    if (n != ahs_.size()) free_destroyed_ahs();
    ahs_.push_back(std::make_unique<AhImpl>(*this, a));
    AhImpl& h = *ahs_.back();
    bool failed = false;
    (void)h.mac_ready(failed);   // ARP starts now, not at the first send
    tx_flush();                  // its request leaves now
    return &h;
}

// Destroyed handles that no WR still to be sent names are freed (their WRs read them when they
// leave); the others wait for a later create_ah.
void PortImpl::free_destroyed_ahs() noexcept {
    std::erase_if(ahs_, [&](const std::unique_ptr<AhImpl>& h) {
        if (!h->destroyed) return false;
        bool named = false;
        each_qp([&](QpImpl& qp) { named = named || (qp.type() == QpType::ud && qp.holds_ah(h.get())); });
        return !named;
    });
}

bool AhImpl::learn_mac(bool& failed) const noexcept {
    mac_known = port_.resolve(attr_.dgid.ipv4(), mac, failed);
    return mac_known;
}

Result<void> AhImpl::destroy() {
    PortImpl::Guard g(port_);
    if (destroyed) return Error{ENODEV, "address handle already destroyed"};
    destroyed = true;
    return {};
}

Result<void> AhImpl::wait_resolved(uint32_t limit_ms) {
    const uint32_t ip = attr_.dgid.ipv4();
    const uint64_t until = now_ns() + uint64_t(limit_ms) * 1000000u;
    for (;;) {
        bool failed = false;
        {
            PortImpl::Guard g(port_);
            if (mac_ready(failed)) return {};
        }
        if (failed)
            return Error{EHOSTUNREACH, str_cat(ipv4_text(ip), " did not answer ARP (", port_.arp_attempts(),
                                               " requests); is the peer up, on this link, with that address?")};
        if (now_ns() >= until) return Error{ETIMEDOUT, str_cat("no ARP answer from ", ipv4_text(ip), " within ", limit_ms, " ms")};
        // The answer comes through progress: the program's own here, unless the thread runs.
        if (port_.progress_thread_runs() || port_.progress() == 0) {
            const timespec nap{0, 20000};
            nanosleep(&nap, nullptr);
        }
    }
}

}  // namespace vfab::rdma::detail
