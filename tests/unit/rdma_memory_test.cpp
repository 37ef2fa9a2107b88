// The memory-management work requests over two ports on a fake wire: fast registration
// (REG_MR), local and remote invalidation, memory windows of type 1 and 2B, consumer keys and
// zero-based addresses — and every bad input ending in an error completion (or a NAK for a
// peer's access) with the target's memory untouched.
#include <functional>

#include "rdma_connect.hpp"

namespace vfab::rdma::test {
namespace {

using dma::Access;

constexpr uint32_t kRemoteRw = uint32_t(Access::local_write | Access::remote_write | Access::remote_read);

class MemoryTest : public ::testing::Test {
protected:
    void SetUp() override {
        ma.assign(1 << 18, 0);
        mb.assign(1 << 18, 0);
        a = make_side(*pair.a, QpType::rc, ma);
        b = make_side(*pair.b, QpType::rc, mb);
        reconnect(100, 200);
        // b's memory again, with the right to bind windows.
        auto mr = pair.b->pd().register_memory(mb.data(), mb.size(), Access(kRemoteRw) | Access::mw_bind);
        ASSERT_TRUE(mr) << mr.error().message;
        bindable = *mr;
        // ... and read-only: windows over it may not be written (IB spec C10-74).
        auto ro = pair.b->pd().register_memory(mb.data(), mb.size(), Access::remote_read | Access::mw_bind);
        ASSERT_TRUE(ro) << ro.error().message;
        bindable_ro = *ro;
    }
    // Both QPs through RESET and connected again (after an error moved them to ERR).
    void reconnect(uint32_t psn_a, uint32_t psn_b) { reconnect_rc(a, b, psn_a, psn_b); }
    Sge sge_a(uint64_t off, uint32_t len) { return {reinterpret_cast<uint64_t>(ma.data() + off), len, a.mr.lkey}; }
    uint64_t addr_b(uint64_t off) { return reinterpret_cast<uint64_t>(mb.data() + off); }

    // One WR on `s`'s QP; its completion (running both ports).
    Wc run(Side& s, Side& other, const RdmaSendWr& w) {
        EXPECT_TRUE(s.qp->post_send(std::span(&w, 1)));
        auto wc = wait_wc(s, other, 1);
        EXPECT_EQ(wc.size(), 1u);
        return wc.empty() ? Wc{} : wc[0];
    }
    // a writes `len` bytes of 0xAB to (rkey, remote_addr): the status a sees.
    RdmaWcStatus write_from_a(uint32_t rkey, uint64_t remote_addr, uint32_t len = 64) {
        std::fill(ma.begin(), ma.begin() + len, 0xAB);
        Sge s = sge_a(0, len);
        RdmaSendWr w = wr_of(WrOpcode::rdma_write, 7, &s);
        w.rkey = rkey;
        w.remote_addr = remote_addr;
        return run(a, b, w).status;
    }
    // REG_MR on b's QP: `len` bytes of mb from `off`, in blocks of `block` bytes.
    RdmaSendWr reg_mr_b(uint32_t key, uint64_t off, uint64_t len, uint32_t block, uint32_t access, uint64_t iova) {
        const uint64_t start = addr_b(off) & ~uint64_t(block - 1);
        info.first_offset = uint32_t(addr_b(off) - start);
        info.num_blocks = uint32_t((info.first_offset + len + block - 1) / block);
        blocks.resize(info.num_blocks);
        for (uint32_t i = 0; i < info.num_blocks; ++i) blocks[i] = start + uint64_t(i) * block;
        info.blocks = blocks.data();
        info.block_size = block;
        info.access = access;
        info.length = len;
        info.iova = iova;
        RdmaSendWr w = wr_of(WrOpcode::reg_mr, 1, nullptr, 0);
        w.mem_key = key;
        w.new_key = next_key(key);
        w.reg = &info;
        return w;
    }
    // BIND_MW of window `mw` (its next key), as `info` says.
    static RdmaSendWr bind_wr(uint32_t mw, const MwBindInfo& info) {
        RdmaSendWr w = wr_of(WrOpcode::bind_mw, 3, nullptr, 0);
        w.mem_key = mw;
        w.new_key = next_key(mw);
        w.bind = info;
        return w;
    }
    bool untouched(uint64_t off, uint64_t len) {
        return std::all_of(mb.begin() + off, mb.begin() + off + len, [](uint8_t x) { return x == 0; });
    }

    RdmaPair pair;
    std::vector<uint8_t> ma, mb;
    Side a, b;
    dma::MemoryRegion bindable, bindable_ro;
    RegMrInfo info;
    std::vector<uint64_t> blocks;
};

// register_memory with ZERO_BASED: a peer names offsets from 0, and the bytes land at the
// memory's own CPU address (the MR table keeps it apart from the entry's base of 0).
TEST_F(MemoryTest, ZeroBasedRegistrationWritesWhereTheMemoryIs) {
    auto mr = pair.b->pd().register_memory(mb.data() + 8192, 4096, Access(kRemoteRw) | Access::zero_based);
    ASSERT_TRUE(mr) << mr.error().message;
    const dma::Translation t = pair.b->pd().translate(mr->rkey, 100, 8, Access::remote_write);
    ASSERT_EQ(t.status, dma::MrStatus::ok);
    EXPECT_EQ(t.host, reinterpret_cast<uint64_t>(mb.data() + 8192 + 100));
    EXPECT_EQ(write_from_a(mr->rkey, 100), RdmaWcStatus::success);
    EXPECT_EQ(mb[8192 + 100], 0xAB);
    EXPECT_EQ(mb[8192 + 163], 0xAB);
    EXPECT_EQ(mb[100], 0);
}

TEST_F(MemoryTest, FastRegisteredMrTakesRemoteWritesUntilInvalidated) {
    const uint32_t key = *pair.b->pd().alloc_mr(1 << 16);
    EXPECT_EQ(pair.b->pd().table().state(key), dma::MrState::invalid);   // an L_Key with no memory
    EXPECT_EQ(write_from_a(key, 0x1000000), RdmaWcStatus::rem_access_err);
    reconnect(300, 400);   // the NAK moved both QPs to ERR: start again
    // 16 KiB of mb from offset 4096 + 100, in 4 KiB pages, answering to 0x1000000.
    const Wc reg = run(b, a, reg_mr_b(key, 4196, 16384, 4096, kRemoteRw, 0x1000000));
    ASSERT_EQ(reg.status, RdmaWcStatus::success) << to_string(reg.status) << " vendor_err " << std::hex << reg.vendor_err;
    EXPECT_EQ(reg.opcode, RdmaWcOpcode::reg_mr);
    const uint32_t rkey = next_key(key);
    EXPECT_EQ(write_from_a(rkey, 0x1000000 + 10), RdmaWcStatus::success);
    EXPECT_TRUE(std::all_of(mb.begin() + 4206, mb.begin() + 4206 + 64, [](uint8_t x) { return x == 0xAB; }));
    EXPECT_EQ(write_from_a(key, 0x1000000), RdmaWcStatus::rem_access_err) << "the key before the registration is stale";
}

TEST_F(MemoryTest, LocalInvalidateRevokesAndAStaleKeyFails) {
    const uint32_t key = *pair.b->pd().alloc_mr(1 << 16);
    ASSERT_EQ(run(b, a, reg_mr_b(key, 0, 8192, 4096, kRemoteRw, addr_b(0))).status, RdmaWcStatus::success);
    const uint32_t k1 = next_key(key);
    ASSERT_EQ(write_from_a(k1, addr_b(0)), RdmaWcStatus::success);
    RdmaSendWr inv = wr_of(WrOpcode::local_inv, 2, nullptr, 0);
    inv.imm_data = k1;
    const Wc done = run(b, a, inv);
    EXPECT_EQ(done.status, RdmaWcStatus::success);
    EXPECT_EQ(done.opcode, RdmaWcOpcode::local_inv);
    std::fill(mb.begin(), mb.end(), 0);
    EXPECT_EQ(write_from_a(k1, addr_b(0)), RdmaWcStatus::rem_access_err);
    EXPECT_TRUE(untouched(0, mb.size()));
}

TEST_F(MemoryTest, ReRegistrationBumpsTheConsumerKeyAndZeroBasedAddressesCountFromZero) {
    const uint32_t key = *pair.b->pd().alloc_mr(1 << 16);
    ASSERT_EQ(run(b, a, reg_mr_b(key, 0, 4096, 4096, kRemoteRw, addr_b(0))).status, RdmaWcStatus::success);
    const uint32_t k1 = next_key(key);
    RdmaSendWr inv = wr_of(WrOpcode::local_inv, 2, nullptr, 0);
    inv.imm_data = k1;
    ASSERT_EQ(run(b, a, inv).status, RdmaWcStatus::success);
    // Again, zero-based, over 8 KiB from offset 8192.
    ASSERT_EQ(run(b, a, reg_mr_b(k1, 8192, 8192, 4096, kRemoteRw | uint32_t(Access::zero_based), 0)).status,
              RdmaWcStatus::success);
    const uint32_t k2 = next_key(k1);
    EXPECT_EQ(write_from_a(k2, 100), RdmaWcStatus::success);   // offset 100 of the MR
    EXPECT_EQ(mb[8192 + 100], 0xAB);
    std::fill(mb.begin(), mb.end(), 0);
    EXPECT_EQ(write_from_a(k2, 8192 - 10, 64), RdmaWcStatus::rem_access_err);   // past its end
    reconnect(500, 600);
    EXPECT_EQ(write_from_a(k1, addr_b(0)), RdmaWcStatus::rem_access_err);   // the first key is stale
    EXPECT_TRUE(untouched(0, mb.size()));
}

// A bad block list, memory the domain does not map, or a key in the wrong state: an error
// completion, the QP in ERR, and the MR still invalid.
TEST_F(MemoryTest, BadRegistrationsEndInAnErrorCompletionAndLeaveTheKeyInvalid) {
    struct Case {
        const char* what;
        uint32_t vendor_err;
        std::function<void(RdmaSendWr&)> spoil;
    };
    static std::vector<uint8_t> elsewhere(8192);   // never registered: the device cannot reach it
    const uint64_t far[2] = {reinterpret_cast<uint64_t>(elsewhere.data()), reinterpret_cast<uint64_t>(elsewhere.data()) + 4096};
    const std::vector<Case> cases = {
        {"offset past the first block", kVendorErrBadBlockList, [&](RdmaSendWr&) { info.first_offset = 4096; }},
        {"longer than its blocks", kVendorErrBadBlockList, [&](RdmaSendWr&) { info.length = 3 * 4096; }},
        {"no blocks", kVendorErrBadBlockList, [&](RdmaSendWr&) { info.num_blocks = 0; }},
        {"more scattered blocks than the MR allows", kVendorErrTooManyBlocks, [&](RdmaSendWr&) { blocks[1] += 8192; }},
        {"a scattered block the domain does not map", kVendorErrMemory | uint32_t(dma::MrStatus::out_of_bounds),
         [&](RdmaSendWr&) { blocks[1] = far[1]; }},
        {"memory the domain does not map", kVendorErrMemory | uint32_t(dma::MrStatus::out_of_bounds),
         [&](RdmaSendWr&) { info.blocks = far, info.first_offset = 0; }},
        {"a new key of another index", kVendorErrMemory | uint32_t(dma::MrStatus::bad_key),
         [&](RdmaSendWr& w) { w.new_key += 0x100; }},
        {"unknown access bits", kVendorErrMemory | uint32_t(dma::MrStatus::access_denied),
         [&](RdmaSendWr&) { info.access = 0x8000; }},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        reconnect(700, 800);
        const uint32_t key = *pair.b->pd().alloc_mr(1 << 16, c.vendor_err == kVendorErrTooManyBlocks ? 1 : 4);
        RdmaSendWr w = reg_mr_b(key, 0, 8192, 4096, kRemoteRw, addr_b(0));
        c.spoil(w);
        const Wc wc = run(b, a, w);
        EXPECT_EQ(wc.status, RdmaWcStatus::loc_qp_op_err);
        EXPECT_EQ(wc.vendor_err, c.vendor_err) << std::hex << wc.vendor_err;
        EXPECT_EQ(b.qp->state(), RdmaQpState::error);
        EXPECT_EQ(pair.b->pd().table().state(key), dma::MrState::invalid);
        EXPECT_TRUE(pair.b->pd().dealloc(key));
    }
}

TEST_F(MemoryTest, Type2BWindowNarrowsAndIsInvalidatedRemotely) {
    const uint32_t mw = *pair.b->pd().alloc_mw(dma::WindowType::type2);
    const RdmaSendWr bind = bind_wr(mw, {bindable.lkey, uint32_t(Access::remote_write), addr_b(4096), 4096});
    const Wc bound = run(b, a, bind);
    ASSERT_EQ(bound.status, RdmaWcStatus::success) << std::hex << bound.vendor_err;
    EXPECT_EQ(bound.opcode, RdmaWcOpcode::bind_mw);
    const uint32_t rkey = next_key(mw);
    EXPECT_EQ(write_from_a(rkey, addr_b(4096 + 100)), RdmaWcStatus::success);
    EXPECT_EQ(mb[4196], 0xAB);
    // a invalidates it with SEND_WITH_INV: b's receive reports the key.
    Sge r{addr_b(1 << 17), 256, b.mr.lkey};
    RecvWr rw{9, &r, 1, 0};
    ASSERT_TRUE(b.qp->post_recv(std::span(&rw, 1)));
    Sge s = sge_a(0, 16);
    RdmaSendWr inv = wr_of(WrOpcode::send_with_inv, 4, &s);
    inv.imm_data = rkey;
    ASSERT_EQ(run(a, b, inv).status, RdmaWcStatus::success);
    auto rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::success);
    EXPECT_EQ(rx[0].wc_flags & wc_with_inv, wc_with_inv);
    EXPECT_EQ(rx[0].imm_data, rkey);
    std::fill(mb.begin(), mb.end(), 0);
    EXPECT_EQ(write_from_a(rkey, addr_b(4096)), RdmaWcStatus::rem_access_err);
    EXPECT_TRUE(untouched(0, mb.size()));
}

TEST_F(MemoryTest, Type2BWindowRefusesAccessesOutsideItAndOnOtherQueuePairs) {
    const uint32_t mw = *pair.b->pd().alloc_mw(dma::WindowType::type2);
    const RdmaSendWr bind = bind_wr(mw, {bindable.lkey, uint32_t(Access::remote_write), addr_b(4096), 4096});
    ASSERT_EQ(run(b, a, bind).status, RdmaWcStatus::success);
    const uint32_t rkey = next_key(mw);
    // A second connection between the ports: the window is b's first QP's, not this one's.
    std::vector<uint8_t> mc(1 << 16), md(1 << 16);
    Side c = make_side(*pair.a, QpType::rc, mc), d = make_side(*pair.b, QpType::rc, md);
    connect_rc(c, d, 1, 2);
    connect_rc(d, c, 2, 1);
    Sge s{reinterpret_cast<uint64_t>(mc.data()), 64, c.mr.lkey};
    RdmaSendWr w = wr_of(WrOpcode::rdma_write, 1, &s);
    w.rkey = rkey;
    w.remote_addr = addr_b(4096);
    EXPECT_EQ(run(c, d, w).status, RdmaWcStatus::rem_access_err);
    EXPECT_TRUE(untouched(0, mb.size()));
    EXPECT_EQ(write_from_a(rkey, addr_b(4096 + 4096 - 8), 64), RdmaWcStatus::rem_access_err);   // past its end
    EXPECT_TRUE(untouched(0, mb.size()));
}

TEST_F(MemoryTest, BadBindsEndInMwBindErr) {
    const uint32_t mw = *pair.b->pd().alloc_mw(dma::WindowType::type2);
    struct Case {
        const char* what;
        MwBindInfo info;
    };
    const std::vector<Case> cases = {
        {"an MR without MW_BIND", {b.mr.lkey, uint32_t(Access::remote_write), addr_b(0), 4096}},
        {"past the MR's end", {bindable.lkey, uint32_t(Access::remote_write), addr_b(mb.size() - 100), 4096}},
        {"remote write over an MR without local write (C10-74)", {bindable_ro.lkey, uint32_t(Access::remote_write), addr_b(0), 4096}},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        reconnect(900, 901);
        const RdmaSendWr bind = bind_wr(mw, c.info);
        const Wc wc = run(b, a, bind);
        EXPECT_EQ(wc.status, RdmaWcStatus::mw_bind_err);
        EXPECT_EQ(b.qp->state(), RdmaQpState::error);
        EXPECT_EQ(pair.b->pd().table().state(mw), dma::MrState::invalid);
    }
    // A type 1 window is not bound by a work request, nor a type 2 one by bind_mw().
    reconnect(902, 903);
    const uint32_t mw1 = *pair.b->pd().alloc_mw(dma::WindowType::type1);
    const RdmaSendWr bind = bind_wr(mw1, {bindable.lkey, uint32_t(Access::remote_write), addr_b(0), 4096});
    EXPECT_EQ(run(b, a, bind).status, RdmaWcStatus::mw_bind_err);
    reconnect(904, 905);
    auto r = b.qp->bind_mw(mw, bind.bind, 1, wr_signaled);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, EINVAL);
}

TEST_F(MemoryTest, Type1WindowIsBoundByTheVerbReboundAndUnbound) {
    const uint32_t mw = *pair.b->pd().alloc_mw(dma::WindowType::type1);
    auto k1 = b.qp->bind_mw(mw, {bindable.lkey, uint32_t(Access::remote_write), addr_b(0), 4096}, 5, wr_signaled);
    ASSERT_TRUE(k1) << k1.error().message;
    EXPECT_EQ(*k1, next_key(mw));
    auto wc = wait_wc(b, a, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].opcode, RdmaWcOpcode::bind_mw);
    EXPECT_EQ(write_from_a(*k1, addr_b(0)), RdmaWcStatus::success);
    auto k2 = b.qp->bind_mw(*k1, {bindable.lkey, uint32_t(Access::remote_write), addr_b(8192), 4096}, 6, 0);
    ASSERT_TRUE(k2);
    EXPECT_EQ(write_from_a(*k2, addr_b(8192)), RdmaWcStatus::success);
    auto k3 = b.qp->bind_mw(*k2, {bindable.lkey, 0, 0, 0}, 7, 0);   // length 0: unbound
    ASSERT_TRUE(k3);
    std::fill(mb.begin(), mb.end(), 0);
    EXPECT_EQ(write_from_a(*k2, addr_b(8192)), RdmaWcStatus::rem_access_err);
    EXPECT_TRUE(untouched(0, mb.size()));
}

TEST_F(MemoryTest, AWindowKeyIsNoLocalKey) {
    const uint32_t mw = *pair.b->pd().alloc_mw(dma::WindowType::type1);
    auto k = b.qp->bind_mw(mw, {bindable.lkey, uint32_t(Access::remote_write), addr_b(0), 4096}, 5, 0);
    ASSERT_TRUE(k);
    Sge s{addr_b(0), 64, *k};
    RdmaSendWr w = wr_of(WrOpcode::rdma_write, 1, &s);
    w.rkey = a.mr.rkey;
    w.remote_addr = reinterpret_cast<uint64_t>(ma.data());
    EXPECT_EQ(run(b, a, w).status, RdmaWcStatus::loc_prot_err);
}

// A fenced LOCAL_INV waits for the READ before it; an unfenced one takes effect when posted.
TEST_F(MemoryTest, LocalInvalidateWaitsForEarlierReadsOnlyWhenFenced) {
    for (bool fenced : {true, false}) {
        SCOPED_TRACE(fenced ? "fenced" : "unfenced");
        reconnect(1000 + fenced, 2000 + fenced);
        const uint32_t key = *pair.a->pd().alloc_mr(1 << 16);
        // a's fast-registered MR takes a READ of b's memory, then is invalidated.
        const uint64_t start = reinterpret_cast<uint64_t>(ma.data() + 65536) & ~uint64_t(4095);
        const uint64_t blk[1] = {start};
        RegMrInfo ri{blk, 1, 4096, 0, uint32_t(Access::local_write), 4096, start};
        RdmaSendWr reg = wr_of(WrOpcode::reg_mr, 1, nullptr, 0);
        reg.mem_key = key;
        reg.new_key = next_key(key);
        reg.reg = &ri;
        for (uint32_t i = 0; i < 4096; ++i) mb[i] = uint8_t(i * 13 + fenced);
        Sge dst{start, 4096, next_key(key)};
        RdmaSendWr rd = wr_of(WrOpcode::rdma_read, 2, &dst);
        rd.rkey = b.mr.rkey;
        rd.remote_addr = addr_b(0);
        RdmaSendWr inv = wr_of(WrOpcode::local_inv, 3, nullptr, 0);
        inv.imm_data = next_key(key);
        if (fenced) inv.send_flags |= wr_fence;
        RdmaSendWr wrs[3] = {reg, rd, inv};
        ASSERT_TRUE(a.qp->post_send(wrs));
        EXPECT_EQ(pair.a->pd().table().state(next_key(key)), fenced ? dma::MrState::valid : dma::MrState::invalid)
            << "right after posting";
        auto wc = wait_wc(a, b, 3);
        ASSERT_EQ(wc.size(), 3u);
        for (const Wc& c : wc) EXPECT_EQ(c.status, RdmaWcStatus::success) << c.wr_id;
        EXPECT_EQ(wc[1].opcode, RdmaWcOpcode::rdma_read);
        EXPECT_EQ(wc[2].opcode, RdmaWcOpcode::local_inv);
        EXPECT_EQ(pair.a->pd().table().state(next_key(key)), dma::MrState::invalid);
        EXPECT_TRUE(std::equal(mb.begin(), mb.begin() + 4096, reinterpret_cast<uint8_t*>(start)));
        EXPECT_TRUE(pair.a->pd().dealloc(next_key(key)));
    }
}

// Memory WRs need no packet: they complete while the peer's address is still unresolved.
TEST_F(MemoryTest, MemoryWorkRequestsDoNotWaitForThePeer) {
    std::vector<uint8_t> mc(1 << 16);
    Side c = make_side(*pair.a, QpType::rc, mc);
    QpAttr x;   // to 10.0.0.254, which no one answers ARP for
    x.qp_state = RdmaQpState::init;
    ASSERT_TRUE(c.qp->modify(x, attr_state | attr_pkey_index | attr_port | attr_access_flags));
    x.qp_state = RdmaQpState::rtr;
    x.path_mtu = 3;
    x.dest_qp_num = 0x123;
    x.ah_attr.dgid = Gid::from_ipv4(0x0a0000fe);
    ASSERT_TRUE(c.qp->modify(x, attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn |
                                    attr_max_dest_rd_atomic | attr_min_rnr_timer));
    x.qp_state = RdmaQpState::rts;
    ASSERT_TRUE(c.qp->modify(x, attr_state | attr_sq_psn | attr_timeout | attr_retry_cnt | attr_rnr_retry |
                                    attr_max_qp_rd_atomic));
    const uint32_t key = *pair.a->pd().alloc_mr(1 << 16);
    const uint64_t blk[1] = {reinterpret_cast<uint64_t>(mc.data())};
    RegMrInfo ri{blk, 1, 4096, 0, uint32_t(Access::local_write), 4096, blk[0]};
    RdmaSendWr reg = wr_of(WrOpcode::reg_mr, 1, nullptr, 0);
    reg.mem_key = key;
    reg.new_key = next_key(key);
    reg.reg = &ri;
    ASSERT_TRUE(c.qp->post_send(std::span(&reg, 1)));
    Wc wc;
    ASSERT_EQ(c.cq->poll(std::span(&wc, 1)), 1);
    EXPECT_EQ(wc.status, RdmaWcStatus::success);
    EXPECT_EQ(wc.opcode, RdmaWcOpcode::reg_mr);
}

// A page list of scattered pages (IB spec 10.6.3.6): the MR's bytes run through them in list
// order, for WRITE, READ, atomics, receives and sends, and a window over it.
TEST_F(MemoryTest, ScatteredPagesMakeOneRegionInListOrder) {
    constexpr uint32_t kPage = 4096, kFirst = 104, kLen = 3 * kPage - kFirst - 50;
    const uint32_t pages[3] = {7, 2, 5};   // pages of mb, out of order and apart
    const uint64_t base = (addr_b(0) + kPage - 1) & ~uint64_t(kPage - 1);   // mb's first whole page
    const uint64_t skip = base - addr_b(0);
    auto mb_at = [&](uint32_t off) -> uint8_t& {   // the byte `off` into the MR
        const uint32_t pos = kFirst + off;
        return mb[skip + pages[pos / kPage] * kPage + pos % kPage];
    };
    const uint32_t key = *pair.b->pd().alloc_mr(1 << 16, 4);
    blocks = {base + pages[0] * kPage, base + pages[1] * kPage, base + pages[2] * kPage};
    info = {blocks.data(), 3, kPage, kFirst,
            kRemoteRw | uint32_t(Access::remote_atomic | Access::mw_bind | Access::zero_based), kLen, 0};
    RdmaSendWr reg = wr_of(WrOpcode::reg_mr, 1, nullptr, 0);
    reg.mem_key = key;
    reg.new_key = next_key(key);
    reg.reg = &info;
    const Wc done = run(b, a, reg);
    ASSERT_EQ(done.status, RdmaWcStatus::success) << std::hex << done.vendor_err;
    const uint32_t k = next_key(key);
    const dma::MrTable& table = pair.b->pd().table();
    EXPECT_EQ(table.translate(k, kPage - kFirst - 8, 8, Access::remote_write, 1).status, dma::MrStatus::ok);
    EXPECT_EQ(table.translate(k, kPage - kFirst - 8, 16, Access::none).status, dma::MrStatus::discontiguous)
        << "a device gets one run of memory";

    // WRITE the whole MR (several packets), from its offset 0.
    for (uint32_t i = 0; i < kLen; ++i) ma[i] = uint8_t(i * 7 + 1);
    Sge s = sge_a(0, kLen);
    RdmaSendWr w = wr_of(WrOpcode::rdma_write, 2, &s);
    w.rkey = k;
    w.remote_addr = 0;
    ASSERT_EQ(run(a, b, w).status, RdmaWcStatus::success);
    for (uint32_t i = 0; i < kLen; ++i) ASSERT_EQ(mb_at(i), uint8_t(i * 7 + 1)) << i;
    EXPECT_TRUE(untouched(0, skip + 2 * kPage) && untouched(skip + 3 * kPage, 2 * kPage)) << "pages not in the list";
    EXPECT_EQ(mb[skip + 7 * kPage + kFirst - 1], 0) << "before the first offset";

    // READ it back, across blocks.
    Sge back = sge_a(1 << 16, kLen);
    RdmaSendWr rd = wr_of(WrOpcode::rdma_read, 3, &back);
    rd.rkey = k;
    rd.remote_addr = 0;
    ASSERT_EQ(run(a, b, rd).status, RdmaWcStatus::success);
    EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + kLen, ma.begin() + (1 << 16)));

    // Fetch-and-add in the third block.
    const uint32_t at = 2 * kPage - kFirst + 64;
    uint64_t before;
    std::memcpy(&before, &mb_at(at), 8);
    Sge orig = sge_a(1 << 17, 8);
    RdmaSendWr fa = wr_of(WrOpcode::atomic_fetch_and_add, 4, &orig);
    fa.rkey = k;
    fa.remote_addr = at;
    fa.compare_add = 5;
    ASSERT_EQ(run(a, b, fa).status, RdmaWcStatus::success);
    uint64_t after, got;
    std::memcpy(&after, &mb_at(at), 8);
    std::memcpy(&got, ma.data() + (1 << 17), 8);
    EXPECT_EQ(got, before);
    EXPECT_EQ(after, before + 5);

    // b receives a SEND into the scattered MR (its lkey), across the first two blocks.
    Sge r{kPage - kFirst - 300, 600, k};
    RecvWr rw{9, &r, 1, 0};
    ASSERT_TRUE(b.qp->post_recv(std::span(&rw, 1)));
    for (uint32_t i = 0; i < 600; ++i) ma[i] = uint8_t(255 - i);
    Sge snd = sge_a(0, 600);
    ASSERT_EQ(run(a, b, wr_of(WrOpcode::send, 5, &snd)).status, RdmaWcStatus::success);
    for (uint32_t i = 0; i < 600; ++i) ASSERT_EQ(mb_at(kPage - kFirst - 300 + i), uint8_t(255 - i)) << i;

    // A window over the last 5000 bytes (zero-based, as its MR): its offset 0 is the MR's
    // kLen - 5000, across the last two blocks.
    const uint32_t mw = *pair.b->pd().alloc_mw(dma::WindowType::type2);
    const Wc bound =
        run(b, a, bind_wr(mw, {k, uint32_t(Access::remote_write | Access::zero_based), kLen - 5000, 5000}));
    ASSERT_EQ(bound.status, RdmaWcStatus::success) << std::hex << bound.vendor_err;
    for (uint32_t i = 0; i < 5000; ++i) ma[i] = uint8_t(i * 3);
    Sge ws = sge_a(0, 5000);
    RdmaSendWr ww = wr_of(WrOpcode::rdma_write, 6, &ws);
    ww.rkey = next_key(mw);
    ww.remote_addr = 0;
    ASSERT_EQ(run(a, b, ww).status, RdmaWcStatus::success);
    for (uint32_t i = 0; i < 5000; ++i) ASSERT_EQ(mb_at(kLen - 5000 + i), uint8_t(i * 3)) << i;
}

TEST_F(MemoryTest, DeallocRefusesRegionsAndFreedKeys) {
    auto r = pair.b->pd().dealloc(b.mr.lkey);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("deregister"), std::string::npos) << r.error().message;
    const uint32_t mw = *pair.b->pd().alloc_mw(dma::WindowType::type2);
    EXPECT_TRUE(pair.b->pd().dealloc(mw));
    EXPECT_FALSE(pair.b->pd().dealloc(mw));
    EXPECT_EQ(pair.b->pd().alloc_mw(dma::WindowType(0)).error().code, EINVAL);
}

}  // namespace
}  // namespace vfab::rdma::test
