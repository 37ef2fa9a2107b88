// The connection manager of one port (IB spec 12.9, the communication state machine; docs/cm.md):
// connections by local communication ID, listeners by service ID, MADs sent again on their
// timeout and given up after their retries. The active side sends a REQ and, on the REP, an RTU;
// the passive side hears a connect request, accepts with a REP and is established by the RTU.
// A REQ for a service nobody listens on is rejected (REJ 8). Progress is the caller's
// (progress()); what happened comes out as events (next_event()).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "ledger.hpp"
#include "mad_port.hpp"

namespace vfab::cm {

using ConnId = uint32_t;   // the local communication ID

enum class EventType : uint8_t {
    connect_request,   // passive: a REQ for a service listened on (`req`); accept() or reject()
    established,       // active: the REP came (`rep`), the RTU went; passive: the RTU came
    rejected,          // the peer sent REJ (`reason`)
    unreachable,       // the peer never answered the REQ (or REP) through its retries
    disconnected,      // a DREQ came (answered) or ours was answered or timed out
    sidr_request,      // passive: a SIDR_REQ for a service listened on (`sidr_req`); sidr_reply()
    sidr_reply,        // active: the SIDR_REP came (`sidr_rep`)
};

struct Event {
    EventType type = EventType::connect_request;
    ConnId conn = 0;
    uint32_t peer_ip = 0;
    uint16_t reason = 0;   // rejected: RejReason
    Req req;               // connect_request
    Rep rep;               // established, active side
    Rej rej;               // rejected: the REJ with its private data
    SidrReq sidr_req;      // sidr_request
    SidrRep sidr_rep;      // sidr_reply
};

struct ManagerConfig {
    uint64_t ca_guid = 0;               // this port's: the peer tells repeated REQs by it
    uint8_t response_timeout = 20;      // the CM response timeout we give (4.096 µs × 2^t)
    uint8_t max_retries = 15;           // sends of a REQ or REP after the first
    uint64_t retry_ns = 0;              // tests: a fixed retransmission interval instead
    // The port's connection ledger (ledger.hpp; empty: none): connections an earlier process
    // left established are disconnected (DREQ) when the manager opens.
    std::string ledger_path;
};

class Manager {
public:
    static Result<std::unique_ptr<Manager>> open(rdma::Port& port, const ManagerConfig& cfg);

    // Connect requests for `service_id` come as events. EEXIST: listened on already.
    Result<void> listen(uint64_t service_id);
    void unlisten(uint64_t service_id);   // its connect requests are refused from now on (REJ 8)
    // Sends `req` (its comm ID, CA GUID and timeouts filled in here) to the CM at `peer_ip`.
    Result<ConnId> connect(uint32_t peer_ip, Req req);
    // Passive: answers a connect request with `rep` (comm IDs and CA GUID filled in here).
    Result<void> accept(ConnId conn, Rep rep);
    // Passive: refuses a connect request (REJ `reason`, RejReason::consumer for an application's,
    // with up to kRejPrivate bytes of the application's).
    Result<void> reject(ConnId conn, uint16_t reason, std::span<const uint8_t> private_data = {});
    // Service ID resolution for UD (12.11): sends `req` (its request ID filled in here) to the CM at
    // `peer_ip`; the SIDR_REP comes as a sidr_reply event, or unreachable after the retries.
    Result<ConnId> resolve(uint32_t peer_ip, SidrReq req);
    // Passive: answers a SIDR request (`rep`'s request ID and service ID filled in here).
    Result<void> sidr_answer(ConnId conn, SidrRep rep);
    // Sends DREQ for an established connection.
    Result<void> disconnect(ConnId conn);
    // The connection's owner is gone (rdma_destroy_id, the program exiting): an established
    // connection is disconnected (DREQ), one being set up is rejected (REJ 28, or REJ 4 before
    // the REP); no more events come for it.
    void release(ConnId conn);

    void progress();   // received MADs, then due retransmissions and timeouts
    bool next_event(Event& out);
    MadPort& mads() noexcept { return *mads_; }
    // Why the ledger is not kept (empty when it is, or none was asked for), and how many
    // connections of an earlier process it disconnected.
    const std::string& ledger_error() const noexcept { return ledger_error_; }
    size_t stale_disconnected() const noexcept { return stale_; }

private:
    enum class State : uint8_t { req_sent, req_rcvd, rep_sent, established, dreq_sent, sidr_sent, sidr_rcvd, closed };
    struct Conn {
        ConnId id = 0;
        uint32_t remote_id = 0;
        uint32_t peer_ip = 0;
        uint32_t remote_qpn = 0;
        uint64_t service_id = 0;   // a SIDR request's
        uint64_t tid = 0;
        State state = State::closed;
        Message last;              // sent, and sent again on its timeout
        uint64_t deadline = 0;     // 0: no timer
        uint64_t timeout_ns = 0;
        uint32_t retries_left = 0;
        bool released = false;     // its owner is gone: no events
        bool in_ledger = false;
    };
    Manager(const ManagerConfig& cfg, std::unique_ptr<MadPort> mads) : cfg_(cfg), mads_(std::move(mads)) {}
    Conn* find(ConnId id) noexcept;
    Conn* find_remote(uint32_t peer_ip, uint32_t remote_id) noexcept;
    void send(Conn& c, const Message& m, bool timed);
    void on_message(const MadPort::Received& r);
    void on_req(const Req& m, const MadPort::Received& r);
    void on_rep(const Rep& m);
    void on_rtu(const Rtu& m);
    void on_rej(const Rej& m, const MadPort::Received& r);
    void on_dreq(const Dreq& m, const MadPort::Received& r);
    void on_drep(const Drep& m);
    void on_mra(const Mra& m);
    void on_sidr_req(const SidrReq& m, const MadPort::Received& r);
    void on_sidr_rep(const SidrRep& m);
    void emit(const Conn& c, Event e);
    void set_established(Conn& c);
    void disconnect_stale(const Ledger::Entry& e);
    void expire(Conn& c);
    uint64_t timeout_for(uint8_t code) const noexcept;

    ManagerConfig cfg_;
    std::unique_ptr<MadPort> mads_;
    std::unique_ptr<Ledger> ledger_;
    std::string ledger_error_;
    size_t stale_ = 0;
    std::vector<uint64_t> listening_;
    std::vector<Conn> conns_;
    std::deque<Event> events_;
    uint32_t next_id_ = 1;
};

}  // namespace vfab::cm
