// A hostile RC peer, frame by frame: requests written here (not by vfab's requester) go into
// port B, whose queue pair is connected to a peer that never answers by itself; B's answers are
// read off the wire. Revoking a key must take effect for every packet that arrives after it —
// the rest of a multi-packet WRITE, a repeated READ, READ responses not yet sent — and DMA
// lengths over 2^31 are refused (IB spec 9.4.3, 9.7.5.1.2, C9-88 and 10.6.7).
#include <chrono>
#include <cstring>

#include "rdma_connect.hpp"
#include "rdma_frames.hpp"

namespace vfab::rdma::test {
namespace {

using namespace wire;

// What B answered: an opcode, its PSN, the AETH syndrome and the payload.
struct Answer {
    uint8_t opcode = 0;
    uint32_t psn = 0;
    uint8_t syndrome = 0;
    std::vector<uint8_t> payload;
    bool nak() const { return opcode == op::acknowledge && (syndrome & aeth::kTypeMask) == aeth::kNak; }
};

class HostilePeer : public ::testing::Test {
protected:
    void SetUp() override {
        pair = std::make_unique<RdmaPair>();
        ma.assign(4096, 0);
        mb.assign(kMemB, 0x55);
        a = make_side(*pair->a, QpType::rc, ma);   // only its number: port A never runs
        b = make_side(*pair->b, QpType::rc, mb);
        connect_rc(b, a, 200, 100);   // B expects PSN 100 from A, sends from 200
        // A's address answered, as A's port would (it never runs here).
        uint8_t arp[64] = {};
        const uint32_t n = write_arp(arp, kArpReply, kMacA, kIpA, kMacB, kIpB);
        pair->wire.inject(1, arp, n);
        b.port->progress();
        // A second region, to name in a duplicate that does not match its original.
        other.assign(4096, 0x77);
        other_mr = *pair->b->pd().register_memory(other.data(), other.size(), dma::Access(kAllRemote));
    }
    // A request from A to B's queue pair (payload `len` bytes of `fill`), at PSN `psn`.
    // B's port then runs `rounds` times.
    void request(uint8_t opcode, uint32_t psn, uint64_t va, uint32_t rkey, uint32_t dma_len, uint32_t len = 0,
                 uint8_t fill = 0xEE, int rounds = 4, bool ack_req = true, uint8_t syndrome = 0) {
        PacketHeader h;
        h.src_port = 0xC001;
        h.opcode = opcode;
        h.ack_req = ack_req;
        h.syndrome = syndrome;
        h.dest_qp = b.qp->qp_num();
        h.psn = psn;
        h.va = va;
        h.rkey = rkey;
        h.dma_len = dma_len;
        const std::vector<uint8_t> payload(len, fill);
        const std::vector<uint8_t> f = frame_a_to_b(h, payload.data(), len);
        pair->wire.inject(1, f.data(), uint32_t(f.size()));
        for (int i = 0; i < rounds; ++i) b.port->progress();
    }
    // Every frame B sent since the last call, parsed.
    std::vector<Answer> answers() {
        std::vector<Answer> out;
        std::lock_guard g(pair->wire.mu);
        for (auto& f : pair->wire.in_flight[0]) {
            Packet p;
            if (parse_frame(f.data(), uint32_t(f.size()), kIpA, p) != ParseResult::roce) continue;
            Answer ans{p.opcode, p.psn, p.syndrome, std::vector<uint8_t>(p.payload, p.payload + p.payload_len)};
            out.push_back(std::move(ans));
        }
        pair->wire.in_flight[0].clear();
        return out;
    }
    uint64_t va_b(size_t off) const { return reinterpret_cast<uint64_t>(mb.data() + off); }
    bool b_untouched(size_t from, size_t to) const {
        return std::all_of(mb.begin() + ptrdiff_t(from), mb.begin() + ptrdiff_t(to), [](uint8_t x) { return x == 0x55; });
    }
    static constexpr size_t kMemB = 4 << 20;
    std::unique_ptr<RdmaPair> pair;
    std::vector<uint8_t> ma, mb, other;
    dma::MemoryRegion other_mr;
    Side a, b;
};

// WRITE FIRST lands; the key is revoked; MIDDLE and LAST must not land (they did, through the
// target saved at FIRST).
TEST_F(HostilePeer, TheRestOfAWriteAfterDeregistrationIsRefused) {
    request(op::write_first, 100, va_b(0), b.mr.rkey, 3 * 1024, 1024, 0x11);
    EXPECT_FALSE(b_untouched(0, 1024)) << "FIRST landed";
    ASSERT_TRUE(pair->b->pd().deregister(b.mr));
    (void)answers();
    request(op::write_middle, 101, 0, 0, 0, 1024, 0x22);
    request(op::write_last, 102, 0, 0, 0, 1024, 0x33);
    EXPECT_TRUE(b_untouched(1024, 3 * 1024)) << "MIDDLE or LAST landed after the key was revoked";
    auto ans = answers();
    ASSERT_FALSE(ans.empty());
    EXPECT_TRUE(ans.front().nak() && ans.front().syndrome == aeth::kNakRemoteAccessError)
        << "a remote access error NAK, got opcode " << int(ans.front().opcode) << " syndrome " << int(ans.front().syndrome);
    EXPECT_EQ(b.qp->state(), RdmaQpState::error);
}

// A READ answered; the key is revoked; the same READ again (a duplicate) must be refused, not
// answered from the saved state (after deregistration the memory may be freed).
TEST_F(HostilePeer, ARepeatedReadAfterDeregistrationIsRefused) {
    std::memset(mb.data(), 0x42, 64);
    request(op::read_request, 100, va_b(0), b.mr.rkey, 64);
    auto first = answers();
    ASSERT_EQ(first.size(), 1u);
    EXPECT_EQ(first[0].opcode, op::read_response_only);
    ASSERT_TRUE(pair->b->pd().deregister(b.mr));
    request(op::read_request, 100, va_b(0), b.mr.rkey, 64);
    auto again = answers();
    for (const Answer& x : again) EXPECT_NE(x.opcode, op::read_response_only) << "the duplicate was answered with data";
    ASSERT_FALSE(again.empty());
    EXPECT_TRUE(again.front().nak()) << "opcode " << int(again.front().opcode);
}

// A duplicate READ must name what the original did (the same key, within its range): one
// naming another region is an invalid request.
TEST_F(HostilePeer, ADuplicateReadOfOtherMemoryIsRefused) {
    request(op::read_request, 100, va_b(0), b.mr.rkey, 64);
    ASSERT_EQ(answers().size(), 1u);
    request(op::read_request, 100, reinterpret_cast<uint64_t>(other.data()), other_mr.rkey, 64);
    auto ans = answers();
    ASSERT_FALSE(ans.empty());
    EXPECT_TRUE(ans.front().nak() && ans.front().syndrome == aeth::kNakInvalidRequest)
        << "opcode " << int(ans.front().opcode) << " syndrome " << int(ans.front().syndrome);
}

// A 4 MiB READ meets B's send buffers all in use; the key revoked while its responses wait
// stops them.
TEST_F(HostilePeer, ReadResponsesNotYetSentStopAfterDeregistration) {
    pair->dev_b.hold_sends = true;   // B's send buffers run out: responses wait
    request(op::read_request, 100, va_b(0), b.mr.rkey, uint32_t(kMemB), 0, 0, 1);
    const size_t sent = answers().size();
    ASSERT_GT(sent, 0u);
    ASSERT_LT(sent, kMemB / 1024) << "the test needs responses still to send";
    ASSERT_TRUE(pair->b->pd().deregister(b.mr));
    pair->dev_b.release_sends();
    size_t more = 0;
    for (int i = 0; i < 50; ++i) {
        b.port->progress();
        for (const Answer& ans : answers()) more += ans.opcode != op::acknowledge;
    }
    EXPECT_EQ(more, 0u) << "READ responses went out after the key was revoked";
}

// DMA lengths over 2^31 are invalid requests (9.4.3: the DMA length is at most 2^31), whatever
// the memory: refused before any bounds arithmetic.
TEST_F(HostilePeer, ADmaLengthOver2GiBIsAnInvalidRequest) {
    request(op::read_request, 100, va_b(0), b.mr.rkey, 0x80000001u);
    auto ans = answers();
    ASSERT_FALSE(ans.empty());
    EXPECT_TRUE(ans.front().nak() && ans.front().syndrome == aeth::kNakInvalidRequest)
        << "opcode " << int(ans.front().opcode) << " syndrome " << int(ans.front().syndrome);
}

// A duplicate SEND or WRITE is acknowledged again whether or not it asks (C9-105: the ACK of
// the original may be what was lost).
TEST_F(HostilePeer, ADuplicateWriteIsAcknowledgedEvenUnasked) {
    request(op::write_only, 100, va_b(0), b.mr.rkey, 64, 64);
    ASSERT_EQ(answers().size(), 1u);
    request(op::write_only, 100, va_b(0), b.mr.rkey, 64, 64, 0xEE, 4, false);
    auto ans = answers();
    ASSERT_EQ(ans.size(), 1u) << "no ACK for the duplicate";
    EXPECT_EQ(ans[0].opcode, op::acknowledge);
    EXPECT_EQ(ans[0].psn, 100u);
}

// A responder with no READ/atomic resources (max_dest_rd_atomic 0) refuses a READ as an invalid
// request (as rxe does) instead of answering it.
TEST(HostilePeerResources, AReadWithoutResponderResourcesIsAnInvalidRequest) {
    RdmaPair pair;
    std::vector<uint8_t> ma(4096), mb(4096);
    Side a = make_side(*pair.a, QpType::rc, ma), b = make_side(*pair.b, QpType::rc, mb);
    connect_rc_rtr(b, a, 100, 3, 0);
    connect_rc(a, b, 100, 200);
    Sge s{reinterpret_cast<uint64_t>(ma.data()), 64, a.mr.lkey};
    RdmaSendWr w = wr_of(WrOpcode::rdma_read, 1, &s);
    w.remote_addr = reinterpret_cast<uint64_t>(mb.data());
    w.rkey = b.mr.rkey;
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto tx = wait_wc(a, b, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::rem_inv_req_err) << to_string(tx[0].status);
}

// B as requester: a fatal NAK whose PSN is older than anything outstanding (a stale copy) is
// ignored; the WR outstanding completes with the ACK that follows.
TEST_F(HostilePeer, AStaleFatalNakIsIgnored) {
    // B sends from PSN 200 (SetUp)
    Sge s{reinterpret_cast<uint64_t>(mb.data()), 64, b.mr.lkey};
    RdmaSendWr w = wr_of(WrOpcode::send, 1, &s);
    ASSERT_TRUE(b.qp->post_send(std::span(&w, 1)));
    request(op::acknowledge, 200, 0, 0, 0, 0, 0, 4, false, aeth::kAckNoCredits);
    Wc wc;
    ASSERT_EQ(b.cq->poll(std::span(&wc, 1)), 1);
    EXPECT_EQ(wc.status, RdmaWcStatus::success);
    w.wr_id = 2;
    ASSERT_TRUE(b.qp->post_send(std::span(&w, 1)));   // PSN 201
    request(op::acknowledge, 199, 0, 0, 0, 0, 0, 4, false, aeth::kNakRemoteAccessError);
    EXPECT_EQ(b.cq->poll(std::span(&wc, 1)), 0) << "the stale NAK failed WR " << wc.wr_id << ": " << to_string(wc.status);
    EXPECT_EQ(b.qp->state(), RdmaQpState::rts);
    request(op::acknowledge, 201, 0, 0, 0, 0, 0, 4, false, aeth::kAckNoCredits);
    ASSERT_EQ(b.cq->poll(std::span(&wc, 1)), 1);
    EXPECT_EQ(wc.wr_id, 2u);
    EXPECT_EQ(wc.status, RdmaWcStatus::success);
}

// retry_cnt 7 is seven retries (IB spec 9.7.6.1.3 and table 97: only rnr_retry 7 means for
// ever): a peer that never answers ends the WR with retry_exc_err.
TEST_F(HostilePeer, RetryCount7IsFinite) {
    // SetUp: timeout 8 (1 ms), retry_cnt 7
    Sge s{reinterpret_cast<uint64_t>(mb.data()), 64, b.mr.lkey};
    RdmaSendWr w = wr_of(WrOpcode::send, 1, &s);
    ASSERT_TRUE(b.qp->post_send(std::span(&w, 1)));
    Wc wc;
    int n = 0;
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
         (n = b.cq->poll(std::span(&wc, 1))) == 0 && std::chrono::steady_clock::now() < end;)
        (void)answers();
    ASSERT_EQ(n, 1) << "still retrying after 10 s";
    EXPECT_EQ(wc.status, RdmaWcStatus::retry_exc_err);
}

// A LAST packet carries at least one byte (a message a multiple of the MTU ends with a full
// packet; rxe refuses an empty LAST too): an empty one is an invalid request.
TEST_F(HostilePeer, AnEmptyLastPacketIsAnInvalidRequest) {
    request(op::write_first, 100, va_b(0), b.mr.rkey, 1024, 1024, 0x11);
    (void)answers();
    request(op::write_last, 101, 0, 0, 0, 0);
    auto ans = answers();
    ASSERT_FALSE(ans.empty());
    EXPECT_TRUE(ans.front().nak() && ans.front().syndrome == aeth::kNakInvalidRequest)
        << "opcode " << int(ans.front().opcode) << " syndrome " << int(ans.front().syndrome);
}

// Responses leave in PSN order (9.7.5.1.1) when send buffers run short: the ACK of a SEND that
// follows a long READ goes after the READ's responses, not before them.
TEST_F(HostilePeer, ResponsesLeaveInPsnOrderWhenBuffersRunShort) {
    Sge r{reinterpret_cast<uint64_t>(mb.data()), 4096, b.mr.lkey};
    RecvWr rw{1, &r, 1, 0};
    ASSERT_TRUE(b.qp->post_recv(std::span(&rw, 1)));
    pair->dev_b.hold_sends = true;   // B's send buffers run out during the READ's responses
    constexpr uint32_t kReadPkts = 1024;   // 1 MiB at MTU 1024
    request(op::read_request, 100, va_b(0), b.mr.rkey, kReadPkts * 1024, 0, 0, 1);
    request(op::send_only, 100 + kReadPkts, 0, 0, 0, 64, 0x44, 1);
    pair->dev_b.release_sends();
    std::vector<Answer> all;
    for (int i = 0; i < 200 && (all.empty() || all.back().opcode != op::acknowledge); ++i) {
        b.port->progress();
        for (Answer& x : answers()) all.push_back(std::move(x));
    }
    ASSERT_FALSE(all.empty());
    uint32_t last = 99;
    for (const Answer& x : all) {
        ASSERT_GE(psn_diff(x.psn, last), 0) << "PSN " << x.psn << " (opcode " << int(x.opcode) << ") after " << last;
        last = x.psn;
    }
    EXPECT_EQ(all.back().opcode, op::acknowledge);
    EXPECT_EQ(all.back().psn, 100 + kReadPkts);
}

// The application deregisters and frees memory a peer is writing while B's progress thread
// runs the responder: deregister() waits for the copy under way (the port's lock is the key
// table's writer lock), and no packet after it lands. ASan sees a write to the freed buffer
// otherwise.
TEST(KeyTable, DeregistrationWaitsForTheProgressThreadsCopy) {
    RdmaPair pair;
    std::vector<uint8_t> ma(1 << 16, 0x3c), mb(4096);
    Side a = make_side(*pair.a, QpType::rc, ma), b = make_side(*pair.b, QpType::rc, mb);
    connect_rc(a, b, 1, 2);
    connect_rc(b, a, 2, 1);
    ASSERT_TRUE(pair.b->start_progress_thread(-1));
    constexpr uint32_t kLen = 1 << 16;
    int refused = 0;
    for (uint32_t i = 0; i < 200; ++i) {
        auto buf = std::make_unique<uint8_t[]>(kLen);
        auto mr = pair.b->pd().register_memory(buf.get(), kLen, dma::Access(kAllRemote));
        ASSERT_TRUE(mr) << mr.error().message;
        Sge s{reinterpret_cast<uint64_t>(ma.data()), kLen, a.mr.lkey};
        RdmaSendWr w = wr_of(WrOpcode::rdma_write, i, &s);
        w.remote_addr = reinterpret_cast<uint64_t>(buf.get());
        w.rkey = mr->rkey;
        ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
        for (uint32_t k = 0; k < i % 16; ++k) a.port->progress();   // some packets on their way
        ASSERT_TRUE(pair.b->pd().deregister(*mr));
        buf.reset();   // freed: nothing may write here any more
        Wc wc;
        for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
             a.cq->poll(std::span(&wc, 1)) == 0 && std::chrono::steady_clock::now() < end;) {
        }
        if (wc.status != RdmaWcStatus::success) {
            ++refused;
            reconnect_rc(a, b, 1000 * i, 1000 * i + 500);
        }
    }
    pair.b->stop_progress_thread();
    GTEST_LOG_(INFO) << refused << " of 200 WRITEs refused part-way";
}

// A queue pair that does not take WRITEs (or READs, or atomics) refuses one as an invalid
// request — an operation this queue pair does not support, as rxe answers it — not as a
// remote access error, which names keys and their rights (9.7.5.2.4); the application hears
// of it by an affiliated asynchronous error (qp_req_err).
TEST_F(HostilePeer, AnOperationTheQueuePairDoesNotTakeIsAnInvalidRequest) {
    const struct {
        uint8_t opcode;
        uint32_t dma_len, len;
    } cases[] = {{op::write_only, 64, 64}, {op::read_request, 64, 0}, {op::fetch_add, 8, 0}};
    for (const auto& c : cases) {
        SCOPED_TRACE(int(c.opcode));
        QpAttr x;
        x.qp_access_flags = uint32_t(dma::Access::local_write);   // no remote access at all
        ASSERT_TRUE(b.qp->modify(x, attr_access_flags));
        (void)answers();
        for (AsyncEvent e; pair->b->get_async_event(e);) {
        }
        request(c.opcode, 100, va_b(0), b.mr.rkey, c.dma_len, c.len, 0x66);
        auto ans = answers();
        ASSERT_FALSE(ans.empty());
        EXPECT_TRUE(ans.front().nak() && ans.front().syndrome == aeth::kNakInvalidRequest)
            << "opcode " << int(ans.front().opcode) << " syndrome " << int(ans.front().syndrome);
        EXPECT_TRUE(b_untouched(0, 64));
        EXPECT_EQ(b.qp->state(), RdmaQpState::error);
        bool req_err = false;
        for (AsyncEvent e; pair->b->get_async_event(e);) req_err |= e.type == AsyncEventType::qp_req_err && e.qp == b.qp;
        EXPECT_TRUE(req_err);
        x.qp_state = RdmaQpState::reset;
        ASSERT_TRUE(b.qp->modify(x, attr_state));
        connect_rc(b, a, 200, 100);
    }
}

// Until the peer answers ARP, an RC responder answers where a request came from — but only a
// request at the expected PSN teaches it the peer's MAC: frames from the peer's address at
// other PSNs (a sender that does not know the connection) are dropped unanswered, and never
// redirect the answers.
TEST_F(HostilePeer, OnlyARequestInSequenceTeachesThePeersMac) {
    constexpr uint32_t kSilentIp = 0x0A0000C7;   // 10.0.0.199: never answers ARP
    constexpr uint8_t kEvilMac[6] = {0x02, 0xEE, 0xEE, 0xEE, 0xEE, 0x01};
    constexpr uint8_t kPeerMac[6] = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
    std::vector<uint8_t> mc(4096, 0);
    Side c = make_side(*pair->b, QpType::rc, mc);
    QpAttr x;
    x.qp_state = RdmaQpState::init;
    x.qp_access_flags = kAllRemote;
    ASSERT_TRUE(c.qp->modify(x, attr_state | attr_pkey_index | attr_port | attr_access_flags));
    x.qp_state = RdmaQpState::rtr;
    x.path_mtu = 3;
    x.dest_qp_num = 0x123;
    x.rq_psn = 500;
    x.max_dest_rd_atomic = 4;
    x.min_rnr_timer = 1;
    x.ah_attr.dgid = Gid::from_ipv4(kSilentIp);
    ASSERT_TRUE(c.qp->modify(x, attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn |
                                    attr_max_dest_rd_atomic | attr_min_rnr_timer));
    auto from_peer = [&](const uint8_t* mac, uint32_t psn) {
        PacketHeader h;
        h.dst_mac = kMacB;
        h.src_mac = mac;
        h.src_ip = kSilentIp;
        h.dst_ip = kIpB;
        h.src_port = 0xC002;
        h.opcode = op::write_only;
        h.ack_req = true;
        h.dest_qp = c.qp->qp_num();
        h.psn = psn;
        h.va = reinterpret_cast<uint64_t>(mc.data());
        h.rkey = c.mr.rkey;
        h.dma_len = 8;
        std::vector<uint8_t> f(256);
        std::memset(write_headers(f.data(), h, 8), 0x5A, 8);
        f.resize(finish_frame(f.data(), 8));
        pair->wire.inject(1, f.data(), uint32_t(f.size()));
        for (int i = 0; i < 4; ++i) pair->b->progress();
    };
    auto acks_to = [&](const uint8_t* mac) {
        int n = 0, elsewhere = 0;
        std::lock_guard g(pair->wire.mu);
        for (auto& f : pair->wire.in_flight[0]) {
            Packet p;
            if (parse_frame(f.data(), uint32_t(f.size()), kSilentIp, p) != ParseResult::roce) continue;
            ++(std::memcmp(f.data(), mac, 6) == 0 ? n : elsewhere);
        }
        pair->wire.in_flight[0].clear();
        EXPECT_EQ(elsewhere, 0) << "an answer went to another MAC";
        return n;
    };
    (void)acks_to(kPeerMac);
    from_peer(kEvilMac, 400);   // a duplicate's PSN
    from_peer(kEvilMac, 600);   // ahead: a gap
    EXPECT_EQ(acks_to(kEvilMac), 0) << "answered a sender that does not know the PSNs";
    EXPECT_EQ(mc[0], 0);
    from_peer(kPeerMac, 500);   // the expected PSN: this is the peer
    EXPECT_EQ(mc[0], 0x5A);
    EXPECT_EQ(acks_to(kPeerMac), 1) << "the ACK goes to the MAC the request came from";
    from_peer(kEvilMac, 499);   // a duplicate from elsewhere: answered to the peer's MAC, not to it
    EXPECT_EQ(acks_to(kPeerMac), 1);
}

}  // namespace
}  // namespace vfab::rdma::test

namespace vfab::rdma::test {
namespace {

// A slot used again gets a new number (qp_numbers.hpp): a WRITE still in flight for the queue
// pair that had the slot before (a retransmission of an old connection) is dropped, not taken
// by the new queue pair, which is connected with the same PSNs.
TEST_F(HostilePeer, APacketForTheLastNumberOfAReusedSlotIsDropped) {
    const uint32_t old_qpn = b.qp->qp_num();
    ASSERT_TRUE(b.qp->destroy());
    std::vector<uint8_t> mc(4096, 0x55);
    Side c = make_side(*pair->b, QpType::rc, mc);
    EXPECT_NE(c.qp->qp_num(), old_qpn);
    connect_rc(c, a, 200, 100);
    (void)answers();
    auto write_to = [&](uint32_t qpn) {
        PacketHeader h;
        h.src_port = 0xC001;
        h.opcode = op::write_only;
        h.ack_req = true;
        h.dest_qp = qpn;
        h.psn = 100;
        h.va = reinterpret_cast<uint64_t>(mc.data());
        h.rkey = c.mr.rkey;
        h.dma_len = 8;
        const uint8_t payload[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        const std::vector<uint8_t> f = frame_a_to_b(h, payload, 8);
        pair->wire.inject(1, f.data(), uint32_t(f.size()));
        for (int i = 0; i < 4; ++i) pair->b->progress();
    };
    const uint64_t dropped = pair->b->stats().rx_dropped;
    write_to(old_qpn);
    EXPECT_EQ(mc[0], 0x55) << "the old connection's WRITE reached the new queue pair";
    EXPECT_TRUE(answers().empty());
    EXPECT_EQ(pair->b->stats().rx_dropped, dropped + 1);
    write_to(c.qp->qp_num());
    EXPECT_EQ(mc[0], 1) << "the new queue pair's own WRITE lands";
}

}  // namespace
}  // namespace vfab::rdma::test
