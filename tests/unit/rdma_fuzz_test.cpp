// Random and mutated frames into a port's receive path while an RC and a UD queue pair are
// connected, have receives posted and (the RC one) requests of its own outstanding: valid frames
// of every opcode with random fields, then bytes flipped, frames cut short or grown, and the IPv4
// checksum and ICRC made right again half of the time so that the mutations reach the transport
// itself. Nothing may crash (the ASan build runs this), and nothing may be written outside
// registered memory: the unregistered guard pages around the buffers, a memory region without
// remote rights, and the main region while it is deregistered now and then, stay as they were. The parser also gets each frame in a buffer of exactly its
// size, so that ASan sees any read past its end.
//
// VFAB_RDMA_FUZZ_FRAMES (default 30000) and VFAB_RDMA_FUZZ_SEED change the run.
#include <cstdlib>
#include <random>

#include "rdma_connect.hpp"
#include "rdma_frames.hpp"

namespace vfab::rdma::test {
namespace {

using namespace wire;

uint64_t env_or(const char* name, uint64_t dflt) {
    const char* e = std::getenv(name);
    return e && *e ? std::strtoull(e, nullptr, 0) : dflt;
}

constexpr uint32_t kQkey = 0x11111111;

// B's memory: guard | MR1 (every right) | guard | MR2 (local write only) | guard.
constexpr size_t kGuard = 4096;
constexpr size_t kMr1 = kGuard, kMr1Len = 64 * 1024;
constexpr size_t kMr2 = kMr1 + kMr1Len + kGuard, kMr2Len = 16 * 1024;
constexpr size_t kMemLen = kMr2 + kMr2Len + kGuard;
constexpr uint8_t kGuardByte = 0xA5, kMr2Byte = 0x5A;
// Inside MR1: receive buffers of the RC and the UD QP, B's own READ and atomic destinations.
constexpr size_t kRcRecv = kMr1, kUdRecv = kMr1 + 16 * 1024, kLocal = kMr1 + 32 * 1024;
constexpr uint32_t kRecvBuf = 2048, kRecvDepth = 8;

class Fuzzer {
public:
    explicit Fuzzer(uint64_t seed) : rng_(seed) {}

    // A frame toward B: most often a RoCEv2 packet of a random opcode with random fields,
    // sometimes ARP or noise; then mutated.
    std::vector<uint8_t> frame(uint32_t brc, uint32_t bud, uint32_t mr1_rkey, uint32_t mr2_rkey, uint64_t mr1_va,
                               uint64_t mr2_va, uint32_t req_psn, uint32_t resp_psn) {
        std::vector<uint8_t> f(1600);
        uint32_t len = 0;
        const uint32_t kind = pct();
        if (kind < 75) {
            PacketHeader h;
            h.dst_mac = kMacB;
            h.src_mac = kMacA;
            h.src_ip = pct() < 90 ? kIpA : uint32_t(rng_());
            h.dst_ip = pct() < 97 ? kIpB : uint32_t(rng_());
            h.src_port = uint16_t(0xC000 | rng_());
            const uint32_t d = pct();
            h.dest_qp = d < 45 ? brc : d < 90 ? bud : d < 95 ? uint32_t(rng_() & 0xFFFFFF) : 0;
            h.opcode = h.dest_qp == bud && pct() < 70 ? (rng_() & 1 ? op::ud_send_only : op::ud_send_only_imm)
                       : pct() < 97                   ? kOpcodes[rng_() % std::size(kOpcodes)]
                                                      : uint8_t(rng_());
            // Now and then a whole SEND or WRITE of several packets, in order (each may still
            // be mutated), so that the states between FIRST and LAST are reached.
            if (plan_left_ == 0 && pct() < 5) {
                plan_left_ = 2 + rng_() % 5;
                plan_write_ = rng_() & 1;
                plan_psn_ = req_psn;
                plan_len_ = (plan_left_ - 1) * 1024 + rng_() % 1025;
            }
            uint32_t planned_payload = 0;
            bool planned = false;
            if (plan_left_ > 0) {
                const bool first = plan_psn_ == req_psn || pct() < 5, last = plan_left_ == 1;
                const uint32_t done = (plan_len_ / 1024 + 1 - plan_left_) * 1024;
                h.dest_qp = brc;
                h.psn = plan_psn_;
                plan_psn_ = psn_add(plan_psn_, 1);
                --plan_left_;
                planned = true;
                planned_payload = last ? plan_len_ - std::min(plan_len_, done) : 1024;
                const bool imm = plan_len_ & 1;
                h.opcode = plan_write_ ? (first ? op::write_first : last ? (imm ? op::write_last_imm : op::write_last) : op::write_middle)
                                       : (first ? op::send_first : last ? (imm ? op::send_last_imm : op::send_last) : op::send_middle);
                if (first && last) h.opcode = plan_write_ ? op::write_only : op::send_only;
            }
            const OpInfo info = op_info(h.opcode);
            // Requests near the PSN the responder expects, responses near the requester's.
            if (planned) {
            } else if (info.has(is_response)) {
                h.psn = pct() < 80 ? psn_add(resp_psn, kPsnMask - uint32_t(rng_() % 8)) : uint32_t(rng_());
            } else {
                h.psn = pct() < 85 ? req_psn : psn_add(req_psn, uint32_t(rng_() % 16) - 8);
            }
            h.solicited = rng_() & 1;
            h.ack_req = pct() < 85;   // the answers tell the fuzzer the PSN B expects
            const uint32_t v = pct();
            const uint64_t mr1_end = mr1_va + kMr1Len;
            h.va = v < 50   ? mr1_va + rng_() % kMr1Len
                   : v < 65 ? mr1_end - rng_() % 64 + (rng_() % 2) * 32   // at the end, and past it
                   : v < 75 ? mr1_va - 1 - rng_() % 64                    // just before
                   : v < 85 ? mr2_va + rng_() % kMr2Len
                            : (uint64_t(rng_()) << 32 | rng_());
            const uint32_t k = pct();
            h.rkey = k < 60 ? mr1_rkey : k < 80 ? mr2_rkey : k < 90 ? mr1_rkey ^ 1 : uint32_t(rng_());
            if (sparse_len_ && !planned && pct() < 12) {
                // The zero-based MR of more than 4 GiB over one aliased megabyte: addresses
                // around 2^32, anywhere, at its end and past it, across its 1 MiB blocks.
                h.rkey = pct() < 90 ? sparse_rkey_ : sparse_rkey_ ^ 1;
                const uint32_t w = pct();
                h.va = w < 40   ? (uint64_t{1} << 32) - 4096 + rng_() % 8192
                       : w < 70 ? rng_() % sparse_len_
                       : w < 85 ? sparse_len_ - rng_() % 4096
                                : sparse_len_ + rng_() % 4096;
            }
            if (info.has(has_atomic_eth) && pct() < 70) h.va &= ~uint64_t(7);
            h.dma_len = planned ? plan_len_ : pct() < 85 ? rng_() % 4096 : uint32_t(rng_());
            const bool write_only = h.opcode == op::write_only || h.opcode == op::write_only_imm;
            h.swap_add = rng_();
            h.compare = pct() < 50 ? 0 : rng_();
            h.syndrome = uint8_t(rng_());
            h.msn = rng_() & 0xFFFFFF;
            h.atomic_orig = rng_();
            h.imm_be = rng_();
            h.inv_rkey = pct() < 50 ? mr1_rkey : uint32_t(rng_());
            h.qkey = pct() < 70 ? kQkey : uint32_t(rng_());
            h.src_qp = rng_() & 0xFFFFFF;
            const uint32_t payload = planned                ? planned_payload
                                     : info.has(has_payload) ? (pct() < 90 ? rng_() % 1025 : rng_() % 1400)
                                                             : 0;
            if (write_only && pct() < 60) h.dma_len = payload;   // a WRITE that fits its RETH
            uint8_t* data = write_headers(f.data(), h, payload);
            for (uint32_t i = 0; i < payload; ++i) data[i] = uint8_t(rng_());
            len = finish_frame(f.data(), payload);
        } else if (kind < 82) {
            const uint8_t mac[6] = {0x02, 0, 0, 0, 0, uint8_t(rng_())};
            len = write_arp(f.data(), uint16_t(1 + rng_() % 3), mac, pct() < 50 ? kIpA : uint32_t(rng_()),
                            pct() < 50 ? nullptr : mac, pct() < 70 ? kIpB : uint32_t(rng_()));
        } else if (kind < 92) {
            len = rng_() % 1600;
            for (uint32_t i = 0; i < len; ++i) f[i] = uint8_t(rng_());
            if (len >= 14) store16(f.data() + 12, kEtherTypeIpv4);
        } else {
            len = rng_() % 1600;
            for (uint32_t i = 0; i < len; ++i) f[i] = uint8_t(rng_());
        }
        f.resize(len);
        mutate(f);
        return f;
    }

    uint32_t pct() { return rng_() % 100; }
    std::mt19937_64& rng() { return rng_; }
    // A zero-based MR of `len` bytes under `rkey` that frames aim at too.
    void set_sparse(uint32_t rkey, uint64_t len) { sparse_rkey_ = rkey, sparse_len_ = len; }

private:
    static constexpr uint8_t kOpcodes[] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C,
                                           0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17, 0x64, 0x65};

    void mutate(std::vector<uint8_t>& f) {
        if (pct() < 50 && !f.empty()) {
            const uint32_t flips = 1 + rng_() % 8;
            for (uint32_t i = 0; i < flips; ++i) {
                // Mostly in the headers (where the transport looks), sometimes anywhere.
                const size_t span = pct() < 70 ? std::min<size_t>(f.size(), kRoceHeadroom + kBth + 32) : f.size();
                f[rng_() % span] ^= uint8_t(1u << (rng_() % 8));
            }
        }
        if (pct() < 10) f.resize(rng_() % (f.size() + 1));
        if (pct() < 5) {
            const size_t extra = rng_() % 64;
            for (size_t i = 0; i < extra; ++i) f.push_back(uint8_t(rng_()));
        }
        if (pct() < 50) fix_up(f);
    }

    // The IPv4 checksum and the ICRC made right for whatever the headers now say, where the
    // frame holds them; sometimes the IP and UDP lengths first made to fit the frame.
    void fix_up(std::vector<uint8_t>& f) {
        if (f.size() < kEthHeader + kIpv4Header) return;
        uint8_t* ip = f.data() + kEthHeader;
        if (pct() < 30 && f.size() >= kRoceHeadroom) {
            store16(ip + 2, uint16_t(f.size() - kEthHeader));
            store16(ip + kIpv4Header + 4, uint16_t(f.size() - kEthHeader - kIpv4Header));
        }
        fix_checksums(f);
    }

    std::mt19937_64 rng_;
    uint32_t sparse_rkey_ = 0;
    uint64_t sparse_len_ = 0;
    uint32_t plan_left_ = 0, plan_psn_ = 0, plan_len_ = 0;   // a multi-packet message under way
    bool plan_write_ = false;
};

// The parser on a buffer of exactly the frame's size: what it reports lies inside the frame.
void parse_exactly(const std::vector<uint8_t>& f) {
    std::vector<uint8_t> exact(f);   // a heap block of f.size() bytes: ASan guards its end
    Packet p;
    const ParseResult r = parse_frame(exact.data(), uint32_t(exact.size()), kIpB, p);
    if (r == ParseResult::roce) {
        ASSERT_GE(p.payload, exact.data() + kRoceHeadroom + kBth);
        ASSERT_LE(p.payload + p.payload_len + p.pad + kIcrc, exact.data() + exact.size());
        uint32_t sum = 0;
        for (uint32_t i = 0; i < p.payload_len; ++i) sum += p.payload[i];
        (void)sum;
        ASSERT_TRUE(p.info.valid());
    }
    ArpPacket a;
    if (parse_arp(exact.data(), uint32_t(exact.size()), a)) {
        ASSERT_LE(a.sender_mac + 6, exact.data() + exact.size());
    }
}

class FuzzTest : public ::testing::Test {
protected:
    void SetUp() override {
        mem_b.assign(kMemLen, kGuardByte);
        std::fill(mem_b.begin() + kMr2, mem_b.begin() + kMr2 + kMr2Len, kMr2Byte);
        std::fill(mem_b.begin() + kMr1, mem_b.begin() + kMr1 + kMr1Len, 0);
        mem_a.assign(1 << 16, 0x33);
        auto& pd_b = pair.b->pd();
        mr1 = *pd_b.register_memory(mem_b.data() + kMr1, kMr1Len, dma::Access(kAllRemote));
        mr2 = *pd_b.register_memory(mem_b.data() + kMr2, kMr2Len, dma::Access::local_write);
        // MR3: zero-based, 4 GiB and a block, every 1 MiB block the same megabyte of
        // `sparse` (between guards), so that offsets past 2^32 are reached for real.
        sparse.assign(kSparseBlock + 2 * kGuard, kGuardByte);
        sparse_mr = *pd_b.register_memory(sparse.data() + kGuard, kSparseBlock, dma::Access::local_write);
        auto key = pd_b.alloc_mr(kSparseLen, kSparseBlocks);
        ASSERT_TRUE(key) << key.error().message;
        std::vector<uint64_t> blocks(kSparseBlocks, reinterpret_cast<uint64_t>(sparse.data() + kGuard));
        ASSERT_EQ(pd_b.fast_register_blocks(*key, *key, blocks.data(), kSparseBlocks, kSparseBlock, 0, kSparseLen, 0,
                                            dma::Access(kAllRemote) | dma::Access::zero_based),
                  dma::MrStatus::ok);
        sparse_rkey = *key;
        arc = make_side(*pair.a, QpType::rc, mem_a);
        aud = make_side(*pair.a, QpType::ud, mem_a2);
        brc.port = bud.port = pair.b.get();
        brc.cq = bud.cq = *pair.b->create_cq(8192);
        RdmaQpInitAttr ia;
        ia.send_cq = ia.recv_cq = brc.cq;
        ia.cap.max_send_wr = ia.cap.max_recv_wr = 64;
        brc.qp = *pair.b->create_qp(ia);
        ia.qp_type = QpType::ud;
        bud.qp = *pair.b->create_qp(ia);
        brc.mem = bud.mem = &mem_b;
        brc.mr = bud.mr = mr1;
        reconnect_rc();
        QpAttr x;
        x.qp_state = RdmaQpState::init;
        x.qkey = kQkey;
        ASSERT_TRUE(bud.qp->modify(x, attr_state | attr_pkey_index | attr_port | attr_qkey));
        x.qp_state = RdmaQpState::rtr;
        ASSERT_TRUE(bud.qp->modify(x, attr_state));
        x.qp_state = RdmaQpState::rts;
        ASSERT_TRUE(bud.qp->modify(x, attr_state | attr_sq_psn));
    }
    void reconnect_rc() {
        QpAttr z;
        z.qp_state = RdmaQpState::reset;
        ASSERT_TRUE(brc.qp->modify(z, attr_state));
        ASSERT_TRUE(arc.qp->modify(z, attr_state));
        b_sq_psn = uint32_t(fuzz_rng()) & kPsnMask;
        connect_rc(brc, arc, b_sq_psn, req_psn, 3, /*timeout=*/6, /*retry=*/7);
        connect_rc(arc, brc, req_psn, b_sq_psn, 3, 6, 7);
        if (fuzz_rng() % 4 == 0) {   // B grants only some remote rights this time
            QpAttr x;
            x.qp_state = RdmaQpState::rts;
            x.qp_access_flags = uint32_t(fuzz_rng()) & kAllRemote;
            ASSERT_TRUE(brc.qp->modify(x, attr_state | attr_access_flags));
        }
        rc_posted = 0;
        b_outstanding = 0;
    }
    void keep_receives_posted() {
        while (rc_posted < kRecvDepth) {
            Sge s{reinterpret_cast<uint64_t>(mem_b.data() + kRcRecv + (rc_seq % kRecvDepth) * kRecvBuf), kRecvBuf, mr1.lkey};
            RecvWr r{rc_seq++, &s, 1, 0};
            if (!brc.qp->post_recv(std::span(&r, 1))) break;
            ++rc_posted;
        }
        while (ud_posted < kRecvDepth) {
            // Every eighth too small for the GRH and a long datagram.
            const uint32_t len = ud_seq % kRecvDepth == 7 ? 100 : kRecvBuf;
            Sge s{reinterpret_cast<uint64_t>(mem_b.data() + kUdRecv + (ud_seq % kRecvDepth) * kRecvBuf), len, mr1.lkey};
            RecvWr r{(1ull << 40) + ud_seq++, &s, 1, 0};
            if (!bud.qp->post_recv(std::span(&r, 1))) break;
            ++ud_posted;
        }
    }
    // B's own requests to A: READs and atomics whose responses the fuzzer imitates.
    void b_requests() {
        if (brc.qp->state() != RdmaQpState::rts || b_outstanding >= 4) return;
        Sge s{reinterpret_cast<uint64_t>(mem_b.data() + kLocal + (b_seq % 4) * 4096), 3000, mr1.lkey};
        RdmaSendWr w = wr_of(b_seq % 2 ? WrOpcode::rdma_read : WrOpcode::atomic_fetch_and_add, 1ull << 41 | b_seq, &s);
        if (w.opcode == WrOpcode::atomic_fetch_and_add) s.length = 8;
        w.remote_addr = reinterpret_cast<uint64_t>(mem_a.data() + 8 * (b_seq % 64));
        w.rkey = arc.mr.rkey;
        w.compare_add = 1;
        if (brc.qp->post_send(std::span(&w, 1))) {
            ++b_outstanding;
            b_next_psn = psn_add(b_next_psn, w.opcode == WrOpcode::rdma_read ? 3 : 1);
        }
        ++b_seq;
    }
    void drain() {
        Wc wc[64];
        for (int n; (n = brc.cq->poll(wc)) > 0;)
            for (int i = 0; i < n; ++i) {
                if (wc[i].wr_id >> 41) --b_outstanding;
                else if (wc[i].wr_id >> 40) --ud_posted;
                else --rc_posted;
            }
        for (Cq* cq : {arc.cq, aud.cq})
            while (cq->poll(wc) > 0) {
            }
    }
    void expect_untouched() {
        const auto guard = [&](size_t from, size_t len) {
            for (size_t i = from; i < from + len; ++i)
                if (mem_b[i] != kGuardByte) return i;
            return size_t(0);
        };
        ASSERT_EQ(guard(0, kGuard), 0u) << "written before MR1";
        ASSERT_EQ(guard(kMr1 + kMr1Len, kGuard), 0u) << "written between MR1 and MR2";
        ASSERT_EQ(guard(kMr2 + kMr2Len, kGuard), 0u) << "written after MR2";
        for (size_t i = kMr2; i < kMr2 + kMr2Len; ++i) ASSERT_EQ(mem_b[i], kMr2Byte) << "MR2 (no remote rights) byte " << i;
        for (size_t i = 0; i < kGuard; ++i) {
            ASSERT_EQ(sparse[i], kGuardByte) << "written before the sparse MR's megabyte";
            ASSERT_EQ(sparse[kGuard + kSparseBlock + i], kGuardByte) << "written after the sparse MR's megabyte";
        }
    }

    // A's drop hook, dropping nothing: B's ACKs, NAKs and read responses move the PSN of the
    // fuzzer's next request to the one B expects.
    static bool follow_responder(void* ctx, const uint8_t* f, uint32_t len) {
        constexpr size_t kB = kRoceHeadroom;
        if (len < kB + kBth + kAeth || load16(f + 12) != kEtherTypeIpv4 || load16(f + kEthHeader + kIpv4Header + 2) != kRoceUdpPort)
            return false;
        uint32_t& next = *static_cast<uint32_t*>(ctx);
        const uint8_t opcode = f[kB];
        const uint32_t psn = load24(f + kB + 9);
        const uint8_t syndrome = f[kB + kBth];
        if (opcode == op::acknowledge && (syndrome == aeth::kNakPsnSeqError || (syndrome & aeth::kTypeMask) == aeth::kRnrNak))
            next = psn;
        else if (op_info(opcode).has(is_response) && psn_diff(psn_add(psn, 1), next) > 0)
            next = psn_add(psn, 1);
        return false;
    }

    RdmaPair pair;
    std::vector<uint8_t> mem_b, mem_a, mem_a2 = std::vector<uint8_t>(4096);
    dma::MemoryRegion mr1, mr2, sparse_mr;
    static constexpr uint64_t kSparseBlock = 1 << 20;
    static constexpr uint32_t kSparseBlocks = 4097;
    static constexpr uint64_t kSparseLen = kSparseBlock * kSparseBlocks;   // 4 GiB + 1 MiB
    std::vector<uint8_t> sparse;
    uint32_t sparse_rkey = 0;
    Side arc, aud, brc, bud;
    std::mt19937_64 fuzz_rng{env_or("VFAB_RDMA_FUZZ_SEED", 0x5eed)};
    uint32_t req_psn = 0x100, b_sq_psn = 0, b_next_psn = 0;
    uint32_t rc_posted = 0, ud_posted = 0, b_outstanding = 0;
    uint64_t rc_seq = 0, ud_seq = 0, b_seq = 0;
};

TEST_F(FuzzTest, MutatedFramesNeitherCrashNorWriteOutsideRegisteredMemory) {
    const uint64_t frames = env_or("VFAB_RDMA_FUZZ_FRAMES", 30000);
    const uint64_t seed = env_or("VFAB_RDMA_FUZZ_SEED", 0x5eed);
    SCOPED_TRACE(testing::Message() << "VFAB_RDMA_FUZZ_SEED=" << seed);
    Fuzzer fz(seed);
    fz.set_sparse(sparse_rkey, kSparseLen);
    b_next_psn = b_sq_psn;
    // What B answers tells the PSN it expects: the fuzzer's requests follow it.
    pair.a->set_rx_drop_hook(follow_responder, &req_psn);
    uint64_t reconnects = 0, revocations = 0;
    std::vector<uint8_t> revoked_copy;
    const uint64_t roce_before = pair.b->stats().rx_roce;
    for (uint64_t i = 0; i < frames; ++i) {
        if (brc.qp->state() == RdmaQpState::error || arc.qp->state() == RdmaQpState::error) {
            ASSERT_NO_FATAL_FAILURE(reconnect_rc());
            b_next_psn = b_sq_psn;
            ++reconnects;
        }
        if (bud.qp->state() == RdmaQpState::error) {
            QpAttr x;
            x.qp_state = RdmaQpState::reset;
            ASSERT_TRUE(bud.qp->modify(x, attr_state));
            x.qp_state = RdmaQpState::init;
            x.qkey = kQkey;
            ASSERT_TRUE(bud.qp->modify(x, attr_state | attr_pkey_index | attr_port | attr_qkey));
            x.qp_state = RdmaQpState::rtr;
            ASSERT_TRUE(bud.qp->modify(x, attr_state));
            x.qp_state = RdmaQpState::rts;
            ASSERT_TRUE(bud.qp->modify(x, attr_state | attr_sq_psn));
            ud_posted = 0;
        }
        if ((i / 2000) % 4 != 3) keep_receives_posted();   // and now and then none (RNR NAKs)
        if (i % 16 == 0) b_requests();
        const std::vector<uint8_t> f =
            fz.frame(brc.qp->qp_num(), bud.qp->qp_num(), mr1.rkey, mr2.rkey, reinterpret_cast<uint64_t>(mem_b.data() + kMr1),
                     reinterpret_cast<uint64_t>(mem_b.data() + kMr2), req_psn, b_next_psn);
        ASSERT_NO_FATAL_FAILURE(parse_exactly(f));
        // Revocations interleaved with the traffic: now and then MR1 is deregistered for 500
        // frames (the fuzzer still names its old key; B's receives and READ destinations are
        // in it) and none of its bytes may change meanwhile; then it is registered again.
        if (i % 3000 == 1500) {
            ASSERT_TRUE(pair.b->pd().deregister(mr1));
            revoked_copy.assign(mem_b.begin() + kMr1, mem_b.begin() + kMr1 + kMr1Len);
            ++revocations;
        } else if (i % 3000 == 2000) {
            ASSERT_TRUE(std::equal(revoked_copy.begin(), revoked_copy.end(), mem_b.begin() + kMr1))
                << "MR1 changed while deregistered, by frame " << i << " or before";
            mr1 = *pair.b->pd().register_memory(mem_b.data() + kMr1, kMr1Len, dma::Access(kAllRemote));
            brc.mr = bud.mr = mr1;
        }
        pair.wire.inject(1, f.data(), uint32_t(f.size()));
        pair.b->progress();
        pair.a->progress();
        drain();
        if (i % 1000 == 0) {
            ASSERT_NO_FATAL_FAILURE(expect_untouched()) << "after frame " << i;
        }
    }
    for (int i = 0; i < 100; ++i) {
        pair.a->progress();
        pair.b->progress();
        drain();
    }
    ASSERT_NO_FATAL_FAILURE(expect_untouched());
    pair.a->set_rx_drop_hook(nullptr, nullptr);
    const PortStats s = pair.b->stats();
    // The run reached the transport, not only the parser's refusals.
    EXPECT_GT(s.rx_roce - roce_before, frames / 10);
    EXPECT_GT(s.rx_dropped, 0u);
    EXPECT_GT(s.rx_icrc_errors, 0u);
    EXPECT_GT(s.naks_sent, 0u);
    EXPECT_GT(reconnects, 0u);
    EXPECT_GT(revocations, 0u);
    EXPECT_TRUE(std::any_of(sparse.begin() + kGuard, sparse.begin() + kGuard + kSparseBlock, [](uint8_t x) { return x != kGuardByte; }))
        << "no WRITE reached the sparse MR";
    RecordProperty("reconnects", int(reconnects));
}

// A peer that is told the truth about MR2's key and address still cannot touch it: WRITE, READ
// and atomics through it are NAKed and nothing moves.
TEST_F(FuzzTest, MemoryWithoutRemoteRightsIsNeverTouched) {
    pair.b->progress();
    for (WrOpcode op : {WrOpcode::rdma_write, WrOpcode::rdma_read, WrOpcode::atomic_fetch_and_add,
                        WrOpcode::atomic_cmp_and_swp}) {
        SCOPED_TRACE(int(op));
        Sge s{reinterpret_cast<uint64_t>(mem_a.data()), op == WrOpcode::rdma_write || op == WrOpcode::rdma_read ? 512u : 8u,
              arc.mr.lkey};
        RdmaSendWr w = wr_of(op, 1, &s);
        w.remote_addr = reinterpret_cast<uint64_t>(mem_b.data() + kMr2 + 64);
        w.rkey = mr2.rkey;
        w.compare_add = kMr2Byte * 0x0101010101010101ull;   // CMP_SWAP would match
        w.swap = 0;
        ASSERT_TRUE(arc.qp->post_send(std::span(&w, 1)));
        auto tx = wait_wc(arc, brc, 1);
        ASSERT_EQ(tx.size(), 1u);
        EXPECT_EQ(tx[0].status, RdmaWcStatus::rem_access_err) << to_string(tx[0].status);
        ASSERT_NO_FATAL_FAILURE(expect_untouched());
        if (op == WrOpcode::rdma_read) {
            EXPECT_EQ(mem_a[0], 0x33) << "nothing of MR2 was read";
        }
        ASSERT_NO_FATAL_FAILURE(reconnect_rc());
    }
}

}  // namespace
}  // namespace vfab::rdma::test
