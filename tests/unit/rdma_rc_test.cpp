// The RC transport between two ports on a fake wire: every operation, delivered exactly once
// with the right data, and the remote-access checks.
#include <numeric>

#include "rdma_connect.hpp"

namespace vfab::rdma::test {
namespace {

class RcTest : public ::testing::Test {
protected:
    void SetUp() override { SetUpWith(1500, 3); }
    void SetUpWith(uint32_t link_mtu, uint32_t path_mtu) {
        pair = std::make_unique<RdmaPair>(link_mtu);
        ma.assign(1 << 20, 0);
        mb.assign(1 << 20, 0);
        a = make_side(*pair->a, QpType::rc, ma);
        b = make_side(*pair->b, QpType::rc, mb);
        connect_rc(a, b, 100, 200, path_mtu);
        connect_rc(b, a, 200, 100, path_mtu);
    }
    Sge sge_a(uint64_t off, uint32_t len) { return {reinterpret_cast<uint64_t>(ma.data() + off), len, a.mr.lkey}; }
    Sge sge_b(uint64_t off, uint32_t len) { return {reinterpret_cast<uint64_t>(mb.data() + off), len, b.mr.lkey}; }
    void post_recv_b(uint64_t id, uint64_t off, uint32_t len) {
        Sge s = sge_b(off, len);
        RecvWr r{id, &s, 1, 0};
        ASSERT_TRUE(b.qp->post_recv(std::span(&r, 1)));
    }
    void fill_a(uint64_t off, uint32_t len, uint8_t seed) {
        for (uint32_t i = 0; i < len; ++i) ma[off + i] = uint8_t(seed + i * 7);
    }
    std::unique_ptr<RdmaPair> pair;
    std::vector<uint8_t> ma, mb;
    Side a, b;
};

// A receive WR whose memory is deregistered after it was posted: the SEND that reaches it writes
// nothing there (the memory may be gone), the WR completes with a local protection error, the
// sender gets a remote operational error, and both queue pairs go to the error state.
TEST_F(RcTest, AReceiveWhoseMemoryWasDeregisteredTakesNothing) {
    std::vector<uint8_t> other(8192, 0xC3);
    auto mr = pair->b->pd().register_memory(other.data(), other.size(), dma::Access::local_write);
    ASSERT_TRUE(mr) << mr.error().message;
    Sge r{reinterpret_cast<uint64_t>(other.data()), 8192, mr->lkey};
    RecvWr rw{5, &r, 1, 0};
    ASSERT_TRUE(b.qp->post_recv(std::span(&rw, 1)));
    ASSERT_TRUE(pair->b->pd().deregister(*mr));
    fill_a(0, 3000, 9);
    Sge s = sge_a(0, 3000);
    RdmaSendWr w = wr_of(WrOpcode::send, 6, &s);
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::loc_prot_err);
    EXPECT_EQ(rx[0].wr_id, 5u);
    auto tx = wait_wc(a, b, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::rem_op_err);
    EXPECT_EQ(b.qp->state(), RdmaQpState::error);
    EXPECT_TRUE(std::all_of(other.begin(), other.end(), [](uint8_t v) { return v == 0xC3; })) << "written after deregistration";
}

TEST_F(RcTest, SendOfEverySizeArrivesOnceAndWhole) {
    for (uint32_t len : {0u, 1u, 3u, 1023u, 1024u, 1025u, 4096u, 65537u}) {
        SCOPED_TRACE(len);
        fill_a(0, len, uint8_t(len));
        std::fill(mb.begin(), mb.begin() + len + 16, 0xEE);
        post_recv_b(len, 0, 1 << 17);
        Sge s = sge_a(0, len);
        RdmaSendWr w = wr_of(WrOpcode::send, 1000 + len, &s);
        ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
        auto rx = wait_wc(b, a, 1);
        ASSERT_EQ(rx.size(), 1u);
        EXPECT_EQ(rx[0].status, RdmaWcStatus::success) << to_string(rx[0].status);
        EXPECT_EQ(rx[0].opcode, RdmaWcOpcode::recv);
        EXPECT_EQ(rx[0].wr_id, len);
        EXPECT_EQ(rx[0].byte_len, len);
        EXPECT_EQ(rx[0].qp_num, b.qp->qp_num());
        EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + len, mb.begin()));
        EXPECT_EQ(mb[len], 0xEE);
        auto tx = wait_wc(a, b, 1);
        ASSERT_EQ(tx.size(), 1u);
        EXPECT_EQ(tx[0].status, RdmaWcStatus::success);
        EXPECT_EQ(tx[0].wr_id, 1000 + len);
    }
}

TEST_F(RcTest, SendWithImmediateAndScatterGather) {
    fill_a(0, 3000, 9);
    post_recv_b(1, 0, 8192);
    Sge s[3] = {sge_a(0, 1000), sge_a(1000, 1000), sge_a(2000, 1000)};
    RdmaSendWr w = wr_of(WrOpcode::send_with_imm, 2, s, 3);
    w.imm_data = 0x78563412;
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::success);
    EXPECT_EQ(rx[0].wc_flags & wc_with_imm, wc_with_imm);
    EXPECT_EQ(rx[0].imm_data, 0x78563412u);
    EXPECT_EQ(rx[0].byte_len, 3000u);
    EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + 3000, mb.begin()));
}

TEST_F(RcTest, InlineSend) {
    const char msg[] = "inline data is copied at post time";
    post_recv_b(1, 0, 4096);
    Sge s{reinterpret_cast<uint64_t>(msg), sizeof msg, 0};
    RdmaSendWr w = wr_of(WrOpcode::send, 2, &s);
    w.send_flags |= wr_inline;
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].byte_len, sizeof msg);
    EXPECT_EQ(std::memcmp(mb.data(), msg, sizeof msg), 0);
}

TEST_F(RcTest, WriteReadAndAtomics) {
    const uint32_t len = 100000;
    fill_a(0, len, 3);
    Sge s = sge_a(0, len);
    RdmaSendWr w = wr_of(WrOpcode::rdma_write, 1, &s);
    w.remote_addr = reinterpret_cast<uint64_t>(mb.data() + 4096);
    w.rkey = b.mr.rkey;
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto tx = wait_wc(a, b, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::success);
    EXPECT_EQ(tx[0].opcode, RdmaWcOpcode::rdma_write);
    EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + len, mb.begin() + 4096));

    // READ it back into another place of A's memory.
    Sge r = sge_a(200000, len);
    RdmaSendWr rd = wr_of(WrOpcode::rdma_read, 2, &r);
    rd.remote_addr = reinterpret_cast<uint64_t>(mb.data() + 4096);
    rd.rkey = b.mr.rkey;
    ASSERT_TRUE(a.qp->post_send(std::span(&rd, 1)));
    tx = wait_wc(a, b, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::success);
    EXPECT_EQ(tx[0].opcode, RdmaWcOpcode::rdma_read);
    EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + len, ma.begin() + 200000));

    // Atomics on an 8-byte word of B.
    uint64_t* word = reinterpret_cast<uint64_t*>(mb.data() + 512000);
    *word = 40;
    Sge res = sge_a(300000, 8);
    RdmaSendWr fa = wr_of(WrOpcode::atomic_fetch_and_add, 3, &res);
    fa.remote_addr = reinterpret_cast<uint64_t>(word);
    fa.rkey = b.mr.rkey;
    fa.compare_add = 2;
    ASSERT_TRUE(a.qp->post_send(std::span(&fa, 1)));
    tx = wait_wc(a, b, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::success);
    EXPECT_EQ(tx[0].opcode, RdmaWcOpcode::fetch_add);
    uint64_t got;
    std::memcpy(&got, ma.data() + 300000, 8);
    EXPECT_EQ(got, 40u);
    EXPECT_EQ(*word, 42u);

    RdmaSendWr cs = wr_of(WrOpcode::atomic_cmp_and_swp, 4, &res);
    cs.remote_addr = reinterpret_cast<uint64_t>(word);
    cs.rkey = b.mr.rkey;
    cs.compare_add = 42;
    cs.swap = 0x1122334455667788;
    ASSERT_TRUE(a.qp->post_send(std::span(&cs, 1)));
    tx = wait_wc(a, b, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::success);
    std::memcpy(&got, ma.data() + 300000, 8);
    EXPECT_EQ(got, 42u);
    EXPECT_EQ(*word, 0x1122334455667788u);
}

TEST_F(RcTest, WriteWithImmediateConsumesAReceive) {
    fill_a(0, 5000, 1);
    post_recv_b(77, 0, 0);
    Sge s = sge_a(0, 5000);
    RdmaSendWr w = wr_of(WrOpcode::rdma_write_with_imm, 1, &s);
    w.remote_addr = reinterpret_cast<uint64_t>(mb.data() + 8);
    w.rkey = b.mr.rkey;
    w.imm_data = 0xabcd;
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].opcode, RdmaWcOpcode::recv_rdma_with_imm);
    EXPECT_EQ(rx[0].wr_id, 77u);
    EXPECT_EQ(rx[0].imm_data, 0xabcdu);
    EXPECT_EQ(rx[0].byte_len, 5000u);
    EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + 5000, mb.begin() + 8));
}

TEST_F(RcTest, BadRkeyIsNakedAndNothingIsWritten) {
    std::fill(mb.begin(), mb.end(), 0x55);
    fill_a(0, 3000, 1);
    Sge s = sge_a(0, 3000);
    RdmaSendWr w = wr_of(WrOpcode::rdma_write, 1, &s);
    w.remote_addr = reinterpret_cast<uint64_t>(mb.data());
    w.rkey = b.mr.rkey ^ 0x100;   // another slot
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto tx = wait_wc(a, b, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::rem_access_err) << to_string(tx[0].status);
    EXPECT_EQ(a.qp->state(), RdmaQpState::error);
    EXPECT_EQ(b.qp->state(), RdmaQpState::error);
    EXPECT_TRUE(std::all_of(mb.begin(), mb.end(), [](uint8_t x) { return x == 0x55; }));
}

TEST_F(RcTest, OutOfBoundsReadAndMisalignedAtomicAreRefused) {
    Sge r = sge_a(0, 4096);
    RdmaSendWr rd = wr_of(WrOpcode::rdma_read, 1, &r);
    rd.remote_addr = reinterpret_cast<uint64_t>(mb.data() + mb.size() - 100);   // runs past the MR
    rd.rkey = b.mr.rkey;
    ASSERT_TRUE(a.qp->post_send(std::span(&rd, 1)));
    auto tx = wait_wc(a, b, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::rem_access_err);
}

TEST_F(RcTest, MisalignedAtomicIsAnInvalidRequest) {
    Sge res = sge_a(0, 8);
    RdmaSendWr fa = wr_of(WrOpcode::atomic_fetch_and_add, 3, &res);
    fa.remote_addr = reinterpret_cast<uint64_t>(mb.data() + 4);
    fa.rkey = b.mr.rkey;
    ASSERT_TRUE(a.qp->post_send(std::span(&fa, 1)));
    auto tx = wait_wc(a, b, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::rem_inv_req_err);
}

TEST_F(RcTest, SendWithoutReceiveWaitsForOne) {
    fill_a(0, 100, 1);
    Sge s = sge_a(0, 100);
    RdmaSendWr w = wr_of(WrOpcode::send, 1, &s);
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    EXPECT_TRUE(wait_wc(b, a, 1, std::chrono::milliseconds(30)).empty());   // RNR NAKs meanwhile
    post_recv_b(5, 0, 4096);
    auto rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::success);
    EXPECT_EQ(rx[0].byte_len, 100u);
}

}  // namespace
}  // namespace vfab::rdma::test
