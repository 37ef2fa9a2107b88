// RC over a wire that drops, duplicates, reorders and corrupts frames: thousands of operations
// of every kind complete exactly once, in order, successfully and with the right data, and every
// receive once with the right bytes; then the ways an RC QP gives up (retry_cnt, rnr_retry, ARP)
// end in error completions, never in a hang.
//
// VFAB_RDMA_LOSS_OPS sets the operations of the main runs (default 10000: all four faults at 5%,
// path MTU 1024 and 256); the others do a quarter of it.
#include <algorithm>
#include <cstdlib>
#include <deque>
#include <random>
#include <thread>

#include "../../transport/engine.hpp"
#include "rdma_connect.hpp"

namespace vfab::rdma::test {
namespace {

using vfab::test::Faults;

uint64_t loss_ops() {
    const char* e = std::getenv("VFAB_RDMA_LOSS_OPS");
    return e && *e ? std::strtoull(e, nullptr, 10) : 10000;
}

// Both sides' memory: what each is as requester and as responder.
constexpr uint32_t kSlot = 64 * 1024;        // the largest message
constexpr uint32_t kWindow = 16;             // operations outstanding per flow
constexpr uint32_t kRecvSlots = 16;          // receives posted ahead
constexpr uint64_t kSrc = 0;                 // 128 KiB of random bytes: SEND/WRITE source, READ target
constexpr uint64_t kRecv = 2 * kSlot;        // receive buffers
constexpr uint64_t kWrite = kRecv + uint64_t(kRecvSlots) * kSlot;    // WRITE targets
constexpr uint64_t kRead = kWrite + uint64_t(kWindow) * kSlot;       // READ destinations
constexpr uint64_t kAtomicRes = kRead + uint64_t(kWindow) * kSlot;   // atomics' original values
constexpr uint64_t kCounter = kAtomicRes + 8 * kWindow;              // FETCH_ADD's word
constexpr uint64_t kCasWord = kCounter + 8;                          // CMP_SWAP's word
constexpr uint64_t kMemSize = kCasWord + 8;

// One direction of traffic: `req` posts, `resp` serves and receives.
class Flow {
public:
    Flow(Side& req, Side& resp, uint64_t total, uint32_t seed) : req_(req), resp_(resp), total_(total), rng_(seed) {}

    void post_some() {
        while (recv_posted_ - recv_done_ < kRecvSlots) {
            Sge s = sge(resp_, kRecv + (recv_posted_ % kRecvSlots) * kSlot, kSlot);
            RecvWr r{recv_posted_, &s, 1, 0};
            ASSERT_TRUE(resp_.qp->post_recv(std::span(&r, 1)));
            ++recv_posted_;
        }
        while (posted_ < total_ && posted_ - done_ < kWindow) post_one();
    }

    void on_send_wc(const Wc& wc) {
        ASSERT_FALSE(outstanding_.empty()) << "a completion nobody waits for: wr_id " << wc.wr_id;
        const Op op = outstanding_.front();
        outstanding_.pop_front();
        ASSERT_EQ(wc.wr_id, op.id) << "completions in posting order";
        ASSERT_EQ(wc.status, RdmaWcStatus::success) << to_string(wc.status) << " op " << op.id << " opcode " << int(op.opcode);
        ASSERT_EQ(wc.qp_num, req_.qp->qp_num());
        const uint8_t* rq = req_.mem->data();
        const uint8_t* rs = resp_.mem->data();
        switch (op.opcode) {
        case WrOpcode::send:
        case WrOpcode::send_with_imm: ASSERT_EQ(wc.opcode, RdmaWcOpcode::send); break;
        case WrOpcode::rdma_write:
        case WrOpcode::rdma_write_with_imm:
            ASSERT_EQ(wc.opcode, RdmaWcOpcode::rdma_write);
            ASSERT_EQ(std::memcmp(rs + kWrite + op.slot * kSlot, rq + kSrc + op.off, op.len), 0)
                << "WRITE " << op.id << " of " << op.len;
            break;
        case WrOpcode::rdma_read:
            ASSERT_EQ(wc.opcode, RdmaWcOpcode::rdma_read);
            ASSERT_EQ(std::memcmp(rq + kRead + op.slot * kSlot, rs + kSrc + op.off, op.len), 0)
                << "READ " << op.id << " of " << op.len;
            break;
        case WrOpcode::atomic_fetch_and_add:
        case WrOpcode::atomic_cmp_and_swp: {
            ASSERT_EQ(wc.opcode, op.opcode == WrOpcode::atomic_fetch_and_add ? RdmaWcOpcode::fetch_add : RdmaWcOpcode::comp_swap);
            uint64_t orig;
            std::memcpy(&orig, rq + kAtomicRes + op.slot * 8, 8);
            ASSERT_EQ(orig, op.expect) << "atomic " << op.id;
            break;
        }
        default: FAIL();
        }
        ++done_;
    }

    void on_recv_wc(const Wc& wc) {
        ASSERT_EQ(wc.wr_id, recv_done_) << "receives complete in posting order";
        ASSERT_FALSE(recv_expect_.empty()) << "a receive completed with no message for it";
        const Op op = recv_expect_.front();
        recv_expect_.pop_front();
        ASSERT_EQ(wc.status, RdmaWcStatus::success) << to_string(wc.status);
        ASSERT_EQ(wc.qp_num, resp_.qp->qp_num());
        ASSERT_EQ(wc.byte_len, op.len) << "message " << op.id;
        const bool write = op.opcode == WrOpcode::rdma_write_with_imm;
        ASSERT_EQ(wc.opcode, write ? RdmaWcOpcode::recv_rdma_with_imm : RdmaWcOpcode::recv);
        if (op.opcode == WrOpcode::send) {
            ASSERT_EQ(wc.wc_flags, 0u);
        } else {
            ASSERT_EQ(wc.wc_flags, uint32_t(wc_with_imm));
            ASSERT_EQ(wc.imm_data, op.imm);
        }
        if (!write) {
            ASSERT_EQ(std::memcmp(resp_.mem->data() + kRecv + (wc.wr_id % kRecvSlots) * kSlot,
                                  req_.mem->data() + kSrc + op.off, op.len),
                      0)
                << "SEND " << op.id << " of " << op.len;
        }
        ++recv_done_;
    }

    bool finished() const { return done_ == total_ && recv_expect_.empty(); }
    // After the run: the words every atomic went through.
    void check_atomics() const {
        uint64_t counter, cas;
        std::memcpy(&counter, resp_.mem->data() + kCounter, 8);
        std::memcpy(&cas, resp_.mem->data() + kCasWord, 8);
        EXPECT_EQ(counter, fetch_adds_) << "each FETCH_ADD ran exactly once";
        EXPECT_EQ(cas, cas_value_) << "the CMP_SWAP chain";
    }
    uint64_t done() const { return done_; }
    uint64_t receives() const { return recv_done_; }
    uint64_t counts[7] = {};

private:
    struct Op {
        uint64_t id;
        WrOpcode opcode;
        uint32_t len, off, slot, imm;
        uint64_t expect;
    };
    static Sge sge(Side& s, uint64_t off, uint32_t len) {
        return {reinterpret_cast<uint64_t>(s.mem->data() + off), len, s.mr.lkey};
    }
    uint32_t pick_len() {
        const uint32_t r = rng_() % 100;
        if (r < 10) return 0;
        if (r < 45) return 1 + rng_() % 64;
        if (r < 80) return 65 + rng_() % 1500;
        if (r < 96) return 1500 + rng_() % 8192;
        return 8192 + rng_() % (kSlot - 8192 + 1);
    }
    void post_one() {
        static constexpr WrOpcode kOps[7] = {WrOpcode::send, WrOpcode::send_with_imm, WrOpcode::rdma_write,
                                             WrOpcode::rdma_write_with_imm, WrOpcode::rdma_read,
                                             WrOpcode::atomic_cmp_and_swp, WrOpcode::atomic_fetch_and_add};
        const uint32_t k = rng_() % 7;
        Op op{posted_, kOps[k], 0, 0, uint32_t(posted_ % kWindow), 0, 0};
        ++counts[k];
        Sge s{};
        RdmaSendWr w = wr_of(op.opcode, op.id, &s);
        switch (op.opcode) {
        case WrOpcode::send:
        case WrOpcode::send_with_imm:
        case WrOpcode::rdma_write:
        case WrOpcode::rdma_write_with_imm:
        case WrOpcode::rdma_read:
            op.len = pick_len();
            op.off = rng_() % (2 * kSlot - op.len + 1);
            break;
        default: op.len = 8; break;
        }
        switch (op.opcode) {
        case WrOpcode::send_with_imm:
        case WrOpcode::rdma_write_with_imm:
            op.imm = uint32_t(rng_());
            w.imm_data = op.imm;
            [[fallthrough]];
        case WrOpcode::send:
            s = sge(req_, kSrc + op.off, op.len);
            if (op.opcode != WrOpcode::rdma_write_with_imm) {
                recv_expect_.push_back(op);
                break;
            }
            [[fallthrough]];
        case WrOpcode::rdma_write:
            s = sge(req_, kSrc + op.off, op.len);
            w.remote_addr = reinterpret_cast<uint64_t>(resp_.mem->data() + kWrite + op.slot * kSlot);
            w.rkey = resp_.mr.rkey;
            if (op.opcode == WrOpcode::rdma_write_with_imm) recv_expect_.push_back(op);
            break;
        case WrOpcode::rdma_read:
            s = sge(req_, kRead + op.slot * kSlot, op.len);
            w.remote_addr = reinterpret_cast<uint64_t>(resp_.mem->data() + kSrc + op.off);
            w.rkey = resp_.mr.rkey;
            break;
        case WrOpcode::atomic_fetch_and_add:
            s = sge(req_, kAtomicRes + op.slot * 8, 8);
            w.remote_addr = reinterpret_cast<uint64_t>(resp_.mem->data() + kCounter);
            w.rkey = resp_.mr.rkey;
            w.compare_add = 1;
            op.expect = fetch_adds_++;
            break;
        case WrOpcode::atomic_cmp_and_swp:
            s = sge(req_, kAtomicRes + op.slot * 8, 8);
            w.remote_addr = reinterpret_cast<uint64_t>(resp_.mem->data() + kCasWord);
            w.rkey = resp_.mr.rkey;
            op.expect = cas_value_;
            if (rng_() % 8 == 0) {   // one that must fail: the word stays
                w.compare_add = cas_value_ + 1000;
                w.swap = 0xDEAD;
            } else {
                w.compare_add = cas_value_;
                w.swap = ++cas_value_;
            }
            break;
        default: break;
        }
        std::memset(req_.mem->data() + kAtomicRes + op.slot * 8, 0xFF, 8);
        outstanding_.push_back(op);
        const PostResult r = req_.qp->post_send(std::span(&w, 1));
        ASSERT_TRUE(r) << "post_send: " << r.error;
        ++posted_;
    }

    Side& req_;
    Side& resp_;
    const uint64_t total_;
    std::mt19937 rng_;
    uint64_t posted_ = 0, done_ = 0;
    uint64_t recv_posted_ = 0, recv_done_ = 0;
    uint64_t fetch_adds_ = 0, cas_value_ = 0;
    std::deque<Op> outstanding_, recv_expect_;
};

struct LossCase {
    const char* name;
    Faults faults;
    uint32_t path_mtu;     // enum ibv_mtu
    uint32_t ops_divisor;  // of loss_ops()
    bool both_ways;
};

void PrintTo(const LossCase& c, std::ostream* os) { *os << c.name; }

class LossTest : public ::testing::TestWithParam<LossCase> {};

TEST_P(LossTest, EveryOperationOnceInOrderWithItsData) {
    const LossCase& c = GetParam();
    RdmaPair pair;
    std::vector<uint8_t> ma(kMemSize), mb(kMemSize);
    std::mt19937 fill(7);
    for (uint64_t i = 0; i < 2 * kSlot; ++i) {
        ma[kSrc + i] = uint8_t(fill());
        mb[kSrc + i] = uint8_t(fill());
    }
    Side a = make_side(*pair.a, QpType::rc, ma);
    Side b = make_side(*pair.b, QpType::rc, mb);
    // ACK timeout 8 (1 ms): short, yet not so short that a slow round of this loop (ASan, a
    // busy host) times out seven times in a row — retry_cnt 7 is seven retries. PSNs that wrap.
    connect_rc(a, b, 0xFFFF00, 0x000100, c.path_mtu, /*timeout=*/8);
    connect_rc(b, a, 0x000100, 0xFFFF00, c.path_mtu, 8);
    pair.wire.faults = c.faults;

    const uint64_t n = std::max<uint64_t>(loss_ops() / c.ops_divisor, 1);
    Flow ab(a, b, n, 1), ba(b, a, c.both_ways ? n : 0, 2);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    Wc wc[64];
    auto dispatch = [&](Side& s, Flow& as_req, Flow& as_resp) {
        const int k = s.cq->poll(wc);
        ASSERT_GE(k, 0);
        for (int i = 0; i < k; ++i) {
            if (wc[i].opcode == RdmaWcOpcode::recv || wc[i].opcode == RdmaWcOpcode::recv_rdma_with_imm) as_resp.on_recv_wc(wc[i]);
            else as_req.on_send_wc(wc[i]);
            if (::testing::Test::HasFatalFailure()) return;
        }
    };
    while (!(ab.finished() && ba.finished())) {
        ASSERT_LT(std::chrono::steady_clock::now(), end)
            << "stuck: a->b " << ab.done() << "/" << n << ", b->a " << ba.done() << ", a state "
            << to_string(a.qp->state()) << ", b state " << to_string(b.qp->state());
        ab.post_some();
        ba.post_some();
        ASSERT_NO_FATAL_FAILURE(dispatch(a, ab, ba));
        ASSERT_NO_FATAL_FAILURE(dispatch(b, ba, ab));
    }
    // Nothing completes a second time, however long the ports keep running.
    pair.wire.faults = {};
    for (int i = 0; i < 200; ++i) {
        EXPECT_EQ(a.cq->poll(wc), 0);
        EXPECT_EQ(b.cq->poll(wc), 0);
    }
    ab.check_atomics();
    ba.check_atomics();
    EXPECT_EQ(a.qp->state(), RdmaQpState::rts);
    EXPECT_EQ(b.qp->state(), RdmaQpState::rts);
    for (int k = 0; k < 7; ++k) EXPECT_GT(ab.counts[k], n / 20) << "every kind of operation, kind " << k;
    const auto& w = pair.wire;
    if (c.faults.drop) { EXPECT_GT(w.dropped, 0u); }
    if (c.faults.duplicate) { EXPECT_GT(w.duplicated, 0u); }
    if (c.faults.reorder) { EXPECT_GT(w.reordered, 0u); }
    if (c.faults.corrupt) { EXPECT_GT(pair.a->stats().rx_icrc_errors + pair.b->stats().rx_icrc_errors, 0u); }
    RecordProperty("retransmits", int(pair.a->stats().retransmits + pair.b->stats().retransmits));
}

INSTANTIATE_TEST_SUITE_P(
    Faults, LossTest,
    ::testing::Values(LossCase{"all5pct_mtu1024", {5, 5, 5, 5}, 3, 1, false},
                      LossCase{"all5pct_mtu256", {5, 5, 5, 5}, 1, 1, false},
                      LossCase{"all5pct_both_ways", {5, 5, 5, 5}, 3, 4, true},
                      LossCase{"drop_mtu1024", {10, 0, 0, 0}, 3, 4, false},
                      LossCase{"drop_mtu256", {10, 0, 0, 0}, 1, 4, false},
                      LossCase{"duplicate_mtu1024", {0, 10, 0, 0}, 3, 4, false},
                      LossCase{"duplicate_mtu256", {0, 10, 0, 0}, 1, 4, false},
                      LossCase{"reorder_mtu1024", {0, 0, 10, 0}, 3, 4, false},
                      LossCase{"reorder_mtu256", {0, 0, 10, 0}, 1, 4, false},
                      LossCase{"corrupt_mtu1024", {0, 0, 0, 10}, 3, 4, false},
                      LossCase{"corrupt_mtu256", {0, 0, 0, 10}, 1, 4, false}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- giving up ---------------------------------------------------------------------------------------

class GiveUpTest : public ::testing::Test {
protected:
    void SetUp() override {
        ma.assign(1 << 16, 0);
        mb.assign(1 << 16, 0);
        a = make_side(*pair.a, QpType::rc, ma);
        b = make_side(*pair.b, QpType::rc, mb);
    }
    // a's retry_cnt, rnr_retry and ACK timeout (4: 65 us) as given; both sides' ARP done by one
    // exchange.
    void connect(uint8_t retry_cnt, uint8_t rnr_retry, uint8_t timeout = 4) {
        connect_rc(a, b, 100, 200, 3, timeout, retry_cnt, rnr_retry);
        connect_rc(b, a, 200, 100, 3, 4);
        Sge s = sge_a(0, 4);
        RdmaSendWr w = wr_of(WrOpcode::rdma_write, 999, &s);
        w.remote_addr = reinterpret_cast<uint64_t>(mb.data());
        w.rkey = b.mr.rkey;
        ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
        auto tx = wait_wc(a, b, 1);
        ASSERT_EQ(tx.size(), 1u);
        ASSERT_EQ(tx[0].status, RdmaWcStatus::success);
    }
    Sge sge_a(uint64_t off, uint32_t len) { return {reinterpret_cast<uint64_t>(ma.data() + off), len, a.mr.lkey}; }
    void post_sends(uint64_t first_id, int n, WrOpcode op = WrOpcode::send) {
        for (int i = 0; i < n; ++i) {
            Sge s = sge_a(0, 100);
            RdmaSendWr w = wr_of(op, first_id + i, &s);
            w.remote_addr = reinterpret_cast<uint64_t>(mb.data());
            w.rkey = b.mr.rkey;
            ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
        }
    }
    void expect_first_fails_rest_flushed(const std::vector<Wc>& tx, RdmaWcStatus first, uint32_t vendor_err = 0) {
        ASSERT_FALSE(tx.empty());
        EXPECT_EQ(tx[0].status, first) << to_string(tx[0].status);
        if (vendor_err) { EXPECT_EQ(tx[0].vendor_err, vendor_err); }
        for (size_t i = 1; i < tx.size(); ++i) {
            EXPECT_EQ(tx[i].status, RdmaWcStatus::wr_flush_err) << i;
            EXPECT_EQ(tx[i].wr_id, tx[0].wr_id + i);
        }
        EXPECT_EQ(a.qp->state(), RdmaQpState::error);
    }
    // A port's drop hook that drops nothing and counts the RNR NAKs going by.
    static bool count_rnr_naks(void* ctx, const uint8_t* f, uint32_t len) {
        constexpr size_t kBth = wire::kRoceHeadroom;
        if (len >= kBth + wire::kBth + wire::kAeth && f[kBth] == wire::op::acknowledge &&
            (f[kBth + wire::kBth] & wire::aeth::kTypeMask) == wire::aeth::kRnrNak)
            ++*static_cast<uint32_t*>(ctx);
        return false;
    }
    RdmaPair pair;
    std::vector<uint8_t> ma, mb;
    Side a, b;
};

TEST_F(GiveUpTest, RetryCountExhaustedWhenThePeerIsGone) {
    ASSERT_NO_FATAL_FAILURE(connect(/*retry_cnt=*/3, 7));
    pair.wire.faults.drop = 100;
    post_sends(1, 5);
    const uint64_t before = pair.a->stats().retransmits;
    auto tx = wait_wc(a, b, 5, std::chrono::seconds(5));
    ASSERT_EQ(tx.size(), 5u);
    EXPECT_EQ(tx[0].wr_id, 1u);
    expect_first_fails_rest_flushed(tx, RdmaWcStatus::retry_exc_err);
    EXPECT_EQ(pair.a->stats().retransmits - before, 3u) << "retry_cnt retransmissions, then the error";
}

TEST_F(GiveUpTest, RetryCountZeroGivesUpAtTheFirstTimeout) {
    ASSERT_NO_FATAL_FAILURE(connect(/*retry_cnt=*/0, 7));
    pair.wire.faults.drop = 100;
    post_sends(1, 2, WrOpcode::rdma_read);
    auto tx = wait_wc(a, b, 2, std::chrono::seconds(5));
    ASSERT_EQ(tx.size(), 2u);
    expect_first_fails_rest_flushed(tx, RdmaWcStatus::retry_exc_err);
}

TEST_F(GiveUpTest, RnrRetryExhaustedWithNoReceivePosted) {
    ASSERT_NO_FATAL_FAILURE(connect(7, /*rnr_retry=*/2));
    uint32_t rnr_naks = 0;
    pair.a->set_rx_drop_hook(count_rnr_naks, &rnr_naks);
    post_sends(1, 3);
    auto tx = wait_wc(a, b, 3, std::chrono::seconds(5));
    ASSERT_EQ(tx.size(), 3u);
    expect_first_fails_rest_flushed(tx, RdmaWcStatus::rnr_retry_exc_err);
    EXPECT_EQ(tx[0].vendor_err, uint32_t(wire::aeth::kRnrNak | 1)) << "the RNR NAK's syndrome (timer code 1)";
    EXPECT_EQ(rnr_naks, 3u) << "the first RNR NAK and rnr_retry more";
    pair.a->set_rx_drop_hook(nullptr, nullptr);
}

// A copy of a SEND that the ACK timer sent again before the first RNR NAK came back is NAKed
// too; that second RNR NAK (the same PSN, the wait already running) spends no RNR retry, so
// with rnr_retry 1 the message still succeeds once a receive is posted.
TEST_F(GiveUpTest, AnRnrNakForACopyOfTheRequestIsNoNewRetry) {
    ASSERT_NO_FATAL_FAILURE(connect(7, /*rnr_retry=*/1));   // ACK timeout 65 us
    uint32_t rnr_naks = 0;
    pair.a->set_rx_drop_hook(count_rnr_naks, &rnr_naks);
    post_sends(1, 1);
    pair.a->progress();                                          // the SEND goes out
    std::this_thread::sleep_for(std::chrono::milliseconds(20));   // past the timer, coarse clock and all
    pair.a->progress();                                          // its ACK timer: a copy goes out
    pair.b->progress();                                          // no receive: two RNR NAKs
    for (int i = 0; i < 10 && rnr_naks < 2; ++i) pair.a->progress();
    // Two at least: where posting and the first progress() take longer than the ACK timeout
    // (a sanitizer build on a slow machine), the first progress() already sent a copy.
    ASSERT_GE(rnr_naks, 2u) << "the copy was NAKed too";
    Sge r{reinterpret_cast<uint64_t>(mb.data()), 4096, b.mr.lkey};
    RecvWr rw{1, &r, 1, 0};
    ASSERT_TRUE(b.qp->post_recv(std::span(&rw, 1)));
    auto tx = wait_wc(a, b, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::success) << to_string(tx[0].status);
    pair.a->set_rx_drop_hook(nullptr, nullptr);
}

// The RNR retry count is per message (as the transport retry count): messages that each meet
// one RNR NAK all succeed with rnr_retry 1.
TEST_F(GiveUpTest, RnrRetryCountIsPerMessage) {
    // An ACK timeout of 67 ms: no copy of a SEND goes out before its RNR NAK comes back, however
    // slow the build (a sanitizer's is), so each message meets exactly one RNR NAK.
    ASSERT_NO_FATAL_FAILURE(connect(7, /*rnr_retry=*/1, /*timeout=*/14));
    uint32_t rnr_naks = 0;
    pair.a->set_rx_drop_hook(count_rnr_naks, &rnr_naks);
    for (uint64_t id = 1; id <= 5; ++id) {
        SCOPED_TRACE(id);
        post_sends(id, 1);
        for (int i = 0; i < 100 && rnr_naks < id; ++i) {
            pair.a->progress();
            pair.b->progress();
        }
        ASSERT_EQ(rnr_naks, id) << "one RNR NAK for each message";
        Sge r{reinterpret_cast<uint64_t>(mb.data()), 4096, b.mr.lkey};
        RecvWr rw{id, &r, 1, 0};
        ASSERT_TRUE(b.qp->post_recv(std::span(&rw, 1)));
        auto tx = wait_wc(a, b, 1);
        ASSERT_EQ(tx.size(), 1u);
        EXPECT_EQ(tx[0].status, RdmaWcStatus::success) << to_string(tx[0].status);
        auto rx = wait_wc(b, a, 1);
        ASSERT_EQ(rx.size(), 1u);
    }
    pair.a->set_rx_drop_hook(nullptr, nullptr);
}

// READ responses lost in a long READ, with atomics posted behind it up to max_rd_atomic: the
// responder must still hold what it needs to answer the READ again.
TEST(LongRead, LostResponseWithAtomicsBehind) {
    RdmaPair pair;
    std::vector<uint8_t> ma(1 << 18), mb(1 << 18);
    for (size_t i = 0; i < mb.size(); ++i) mb[i] = uint8_t(i * 7 + i / 256);
    Side a = make_side(*pair.a, QpType::rc, ma);
    Side b = make_side(*pair.b, QpType::rc, mb);
    connect_rc(a, b, 0, 0, /*mtu 256*/ 1, /*timeout=*/6);
    connect_rc(b, a, 0, 0, 1, 6);
    // Responses 100 to 127 of the READ at PSN 0 are lost, each once: the requester learns of
    // it from its timer, after what it posted behind the READ has gone out.
    struct Dropper {
        bool dropped[28] = {};
        bool done() const { return std::all_of(std::begin(dropped), std::end(dropped), [](bool x) { return x; }); }
    } drop;
    pair.a->set_rx_drop_hook(
        [](void* ctx, const uint8_t* f, uint32_t len) {
            auto* d = static_cast<Dropper*>(ctx);
            constexpr size_t kBth = wire::kRoceHeadroom;
            if (len < kBth + wire::kBth || f[kBth] < wire::op::read_response_first ||
                f[kBth] > wire::op::read_response_only)
                return false;
            const uint32_t psn = wire::load24(f + kBth + 9);
            if (psn < 100 || psn >= 128 || d->dropped[psn - 100]) return false;
            d->dropped[psn - 100] = true;
            return true;
        },
        &drop);
    constexpr uint32_t kLen = 200 * 256;   // 200 responses
    Sge r{reinterpret_cast<uint64_t>(ma.data()), kLen, a.mr.lkey};
    RdmaSendWr w[4] = {wr_of(WrOpcode::rdma_read, 1, &r)};
    w[0].remote_addr = reinterpret_cast<uint64_t>(mb.data());
    w[0].rkey = b.mr.rkey;
    Sge res[3];
    for (int i = 1; i < 4; ++i) {
        res[i - 1] = {reinterpret_cast<uint64_t>(ma.data() + 128 * 1024 + 8 * i), 8, a.mr.lkey};
        w[i] = wr_of(WrOpcode::atomic_fetch_and_add, uint64_t(1 + i), &res[i - 1]);
        w[i].remote_addr = reinterpret_cast<uint64_t>(mb.data() + 200 * 1024);
        w[i].rkey = b.mr.rkey;
        w[i].compare_add = 1;
    }
    const uint64_t before = *reinterpret_cast<uint64_t*>(mb.data() + 200 * 1024);
    ASSERT_TRUE(a.qp->post_send(w));
    auto tx = wait_wc(a, b, 4, std::chrono::seconds(5));
    EXPECT_TRUE(drop.done());
    ASSERT_EQ(tx.size(), 4u);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(tx[i].status, RdmaWcStatus::success) << i;
    EXPECT_EQ(std::memcmp(ma.data(), mb.data(), kLen), 0);
    EXPECT_EQ(*reinterpret_cast<uint64_t*>(mb.data() + 200 * 1024), before + 3);
    pair.a->set_rx_drop_hook(nullptr, nullptr);
}

TEST_F(GiveUpTest, PeerThatNeverAnswersArp) {
    QpAttr x;
    x.qp_state = RdmaQpState::init;
    x.qp_access_flags = kAllRemote;
    ASSERT_TRUE(a.qp->modify(x, attr_state | attr_pkey_index | attr_port | attr_access_flags));
    x.qp_state = RdmaQpState::rtr;
    x.dest_qp_num = 0x123;
    x.ah_attr.dgid = Gid::from_ipv4(0x0a000063);   // 10.0.0.99: nobody
    ASSERT_TRUE(a.qp->modify(x, attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn |
                                    attr_max_dest_rd_atomic | attr_min_rnr_timer));
    x.qp_state = RdmaQpState::rts;
    x.timeout = 4;
    ASSERT_TRUE(a.qp->modify(x, attr_state | attr_sq_psn | attr_timeout | attr_retry_cnt | attr_rnr_retry |
                                    attr_max_qp_rd_atomic));
    post_sends(1, 3);
    auto tx = wait_wc(a, b, 3, std::chrono::seconds(5));
    ASSERT_EQ(tx.size(), 3u);
    EXPECT_EQ(tx[0].wr_id, 1u);
    expect_first_fails_rest_flushed(tx, RdmaWcStatus::retry_exc_err, detail::kVendorErrArpUnresolved);
    EXPECT_GE(pair.a->stats().arp_requests, 4u);
}

}  // namespace
}  // namespace vfab::rdma::test
