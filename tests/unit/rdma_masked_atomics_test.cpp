// vfab's masked atomics (docs/rdma-atomics.md): the arithmetic of a masked add and a masked
// compare-and-swap, their MaskedAtomicETH on the wire, and end to end between two ports on a
// fake wire — with the bad inputs refused or NAKed and the target untouched.
#include <cstring>

#include "../../transport/atomics.hpp"
#include "../../transport/packet.hpp"
#include "rdma_connect.hpp"

namespace vfab::rdma::test {
namespace {

using detail::masked_sum;
using detail::masked_swap;

TEST(MaskedAtomics, AddCarriesStopAtFieldBoundaries) {
    // No boundary: one 64-bit field, a plain add (wrapping).
    EXPECT_EQ(masked_sum(40, 2, 0), 42u);
    EXPECT_EQ(masked_sum(~uint64_t(0), 1, 0), 0u);
    // Two 32-bit fields: the low one wraps without touching the high one.
    const uint64_t halves = uint64_t(1) << 31;
    EXPECT_EQ(masked_sum(0x00000001FFFFFFFFull, 0x0000000100000001ull, halves), 0x0000000200000000ull);
    // Eight byte counters, each +1: 0xFF wraps to 0 alone.
    const uint64_t bytes = 0x8080808080808080ull;
    EXPECT_EQ(masked_sum(0x01FF0203040506FFull, 0x0101010101010101ull, bytes), 0x0200030405060700ull);
    // Every bit its own field: XOR.
    EXPECT_EQ(masked_sum(0xF0F0, 0xFF00, ~uint64_t(0)), 0xF0F0ull ^ 0xFF00ull);
}

TEST(MaskedAtomics, CompareAndSwapOnlyTheMaskedBits) {
    // Compare the low byte only; swap the high byte only.
    EXPECT_EQ(masked_swap(0x11223344AABBCC42ull, 0x42, 0xFF, 0x9900000000000000ull, 0xFF00000000000000ull),
              0x99223344AABBCC42ull);
    // The compared bits differ: nothing changes.
    EXPECT_EQ(masked_swap(0x11223344AABBCC43ull, 0x42, 0xFF, 0x9900000000000000ull, 0xFF00000000000000ull),
              0x11223344AABBCC43ull);
    // Full masks: the plain CMP_AND_SWP.
    EXPECT_EQ(masked_swap(7, 7, ~uint64_t(0), 9, ~uint64_t(0)), 9u);
    EXPECT_EQ(masked_swap(7, 8, ~uint64_t(0), 9, ~uint64_t(0)), 7u);
    // No compared bits: always swaps (a masked write of a bit field).
    EXPECT_EQ(masked_swap(0xABCD, 0, 0, 0x0012, 0x00FF), 0xAB12u);
}

TEST(MaskedAtomics, TheirHeaderRoundTrips) {
    uint8_t frame[256] = {};
    const uint8_t mac_a[6] = {2, 0, 0, 0, 0, 1}, mac_b[6] = {2, 0, 0, 0, 0, 2};
    PacketHeader h;
    h.dst_mac = mac_b;
    h.src_mac = mac_a;
    h.src_ip = 0x0a000001;
    h.dst_ip = 0x0a000002;
    h.opcode = wire::op::vfab_masked_cmp_swap;
    h.dest_qp = 0x123;
    h.psn = 77;
    h.va = 0x1122334455667788;
    h.rkey = 0xabcdef01;
    h.swap_add = 1;
    h.compare = 2;
    h.swap_mask = 3;
    h.compare_mask = 4;
    write_headers(frame, h, 0);
    const uint32_t len = finish_frame(frame, 0);
    EXPECT_EQ(len, frame_size(wire::op::vfab_masked_cmp_swap, 0));
    EXPECT_EQ(len, wire::kRoceHeadroom + wire::kBth + wire::kMaskedAtomicEth + wire::kIcrc);
    Packet p;
    ASSERT_EQ(parse_frame(frame, len, 0x0a000002, p), ParseResult::roce);
    EXPECT_TRUE(p.info.has(wire::is_atomic | wire::has_masked_atomic_eth | wire::is_request));
    EXPECT_EQ(p.va, h.va);
    EXPECT_EQ(p.rkey, h.rkey);
    EXPECT_EQ(p.swap_add, 1u);
    EXPECT_EQ(p.compare, 2u);
    EXPECT_EQ(p.swap_mask, 3u);
    EXPECT_EQ(p.compare_mask, 4u);
}

class MaskedAtomicsWire : public ::testing::Test {
protected:
    void SetUp() override {
        ma.assign(1 << 16, 0);
        mb.assign(1 << 16, 0);
        a = make_side(*pair.a, QpType::rc, ma);
        b = make_side(*pair.b, QpType::rc, mb);
        reconnect(100, 200);
    }
    void reconnect(uint32_t psn_a, uint32_t psn_b) { reconnect_rc(a, b, psn_a, psn_b); }
    uint64_t& word_b(uint64_t off) { return *reinterpret_cast<uint64_t*>(mb.data() + off); }
    // A masked atomic from a on b's word at `off`: the completion; the old value in *old.
    Wc run(WrOpcode op, uint64_t off, uint64_t compare_add, uint64_t swap, uint64_t cmp_mask, uint64_t swap_mask,
           uint64_t* old = nullptr, uint32_t rkey = 0) {
        Sge res{reinterpret_cast<uint64_t>(ma.data() + 4096), 8, a.mr.lkey};
        RdmaSendWr w = wr_of(op, 9, &res);
        w.remote_addr = reinterpret_cast<uint64_t>(mb.data() + off);
        w.rkey = rkey ? rkey : b.mr.rkey;
        w.compare_add = compare_add;
        w.swap = swap;
        w.compare_add_mask = cmp_mask;
        w.swap_mask = swap_mask;
        EXPECT_TRUE(a.qp->post_send(std::span(&w, 1)));
        auto wc = wait_wc(a, b, 1);
        EXPECT_EQ(wc.size(), 1u);
        if (old) std::memcpy(old, ma.data() + 4096, 8);
        return wc.empty() ? Wc{} : wc[0];
    }
    RdmaPair pair;
    std::vector<uint8_t> ma, mb;
    Side a, b;
};

TEST_F(MaskedAtomicsWire, FetchAndAddOfFieldsAndMaskedSwapEndToEnd) {
    word_b(64) = 0x00000001FFFFFFFFull;
    uint64_t old = 0;
    Wc wc = run(WrOpcode::masked_atomic_fetch_and_add, 64, 0x0000000100000001ull, 0, uint64_t(1) << 31, 0, &old);
    EXPECT_EQ(wc.status, RdmaWcStatus::success) << to_string(wc.status);
    EXPECT_EQ(wc.opcode, RdmaWcOpcode::masked_fetch_add);
    EXPECT_EQ(old, 0x00000001FFFFFFFFull);
    EXPECT_EQ(word_b(64), 0x0000000200000000ull);

    word_b(128) = 0x11223344AABBCC42ull;
    wc = run(WrOpcode::masked_atomic_cmp_and_swp, 128, 0x42, 0x9900000000000000ull, 0xFF, 0xFF00000000000000ull, &old);
    EXPECT_EQ(wc.status, RdmaWcStatus::success);
    EXPECT_EQ(wc.opcode, RdmaWcOpcode::masked_comp_swap);
    EXPECT_EQ(old, 0x11223344AABBCC42ull);
    EXPECT_EQ(word_b(128), 0x99223344AABBCC42ull);
    // Compared bits that differ: the old value comes back, nothing is written.
    wc = run(WrOpcode::masked_atomic_cmp_and_swp, 128, 0x41, 0, 0xFF, ~uint64_t(0), &old);
    EXPECT_EQ(wc.status, RdmaWcStatus::success);
    EXPECT_EQ(old, 0x99223344AABBCC42ull);
    EXPECT_EQ(word_b(128), 0x99223344AABBCC42ull);
}

TEST_F(MaskedAtomicsWire, BadRequestsAreRefusedAndWriteNothing) {
    word_b(256) = 5;
    // Misaligned: the responder NAKs (invalid request), nothing written.
    Wc wc = run(WrOpcode::masked_atomic_fetch_and_add, 257, 1, 0, 0, 0);
    EXPECT_EQ(wc.status, RdmaWcStatus::rem_inv_req_err) << to_string(wc.status);
    EXPECT_EQ(word_b(256), 5u);
    reconnect(300, 400);   // the NAK moved both to ERR
    // A wrong rkey: remote access error, nothing written.
    wc = run(WrOpcode::masked_atomic_cmp_and_swp, 256, 5, 7, ~uint64_t(0), ~uint64_t(0), nullptr, b.mr.rkey ^ 0x100);
    EXPECT_EQ(wc.status, RdmaWcStatus::rem_access_err) << to_string(wc.status);
    EXPECT_EQ(word_b(256), 5u);
    // A result buffer under 8 bytes, or a UD queue pair: refused locally.
    reconnect(500, 600);
    Sge small{reinterpret_cast<uint64_t>(ma.data()), 4, a.mr.lkey};
    RdmaSendWr w = wr_of(WrOpcode::masked_atomic_fetch_and_add, 1, &small);
    w.remote_addr = reinterpret_cast<uint64_t>(mb.data() + 256);
    w.rkey = b.mr.rkey;
    w.compare_add = 1;
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto local = wait_wc(a, b, 1);
    ASSERT_EQ(local.size(), 1u);
    EXPECT_EQ(local[0].status, RdmaWcStatus::loc_len_err);
    EXPECT_EQ(word_b(256), 5u);
    std::vector<uint8_t> mu(4096);
    Side u = make_side(*pair.a, QpType::ud, mu);
    QpAttr x;
    x.qp_state = RdmaQpState::init;
    ASSERT_TRUE(u.qp->modify(x, attr_state | attr_pkey_index | attr_port | attr_qkey));
    x.qp_state = RdmaQpState::rtr;
    ASSERT_TRUE(u.qp->modify(x, attr_state));
    x.qp_state = RdmaQpState::rts;
    ASSERT_TRUE(u.qp->modify(x, attr_state | attr_sq_psn));
    EXPECT_EQ(u.qp->post_send(std::span(&w, 1)).error, EINVAL);
}

}  // namespace
}  // namespace vfab::rdma::test
