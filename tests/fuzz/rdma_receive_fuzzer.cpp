// libFuzzer over the RDMA transport's receive path (docs/rdma.md, "What a peer can do"). An
// input is frames toward port B, each a 16-bit little-endian length and that many bytes (what
// is left when a length does not fit is one last frame). B has an RC queue pair (expecting PSN
// 0x100 from A) and a UD one, receives posted, and three regions between guard pages: MR1,
// zero-based with every remote right (addresses 0 to 64 KiB, so that a corpus stays valid from
// run to run), MR2 with local rights only, and nothing else registered. Each frame's IPv4
// checksum and ICRC are made right before it goes in, so that mutations reach the transport
// rather than its ICRC check. After each input, the guards and MR2 must be as they were
// (else the fuzzer stops: __builtin_trap), and ASan/UBSan watch every access.
//
// VFAB_FUZZ_WRITE_SEEDS=DIR writes the seed corpus (one valid request of each kind) to DIR and
// exits: tests/fuzz/corpus/rdma_receive was made so.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "rdma_frames.hpp"

namespace vfab::rdma::fuzz {
namespace {

using namespace wire;

constexpr uint32_t kQkey = 0x11111111, kPsn = 0x100;
constexpr size_t kGuard = 4096, kMr1 = kGuard, kMr1Len = 64 * 1024;
constexpr size_t kMr2 = kMr1 + kMr1Len + kGuard, kMr2Len = 16 * 1024, kMemLen = kMr2 + kMr2Len + kGuard;
constexpr uint8_t kGuardByte = 0xA5, kMr2Byte = 0x5A;
constexpr uint32_t kRecvBuf = 2048, kRecvDepth = 8;

constexpr uint32_t kAllRemote = uint32_t(dma::Access::local_write | dma::Access::remote_write |
                                         dma::Access::remote_read | dma::Access::remote_atomic);

// The two ports, made once for the process (libFuzzer calls the target millions of times).
struct World {
    vfab::test::RdmaPair pair;
    std::vector<uint8_t> mem_b = std::vector<uint8_t>(kMemLen, kGuardByte);
    uint32_t mr1_key = 0;
    dma::MemoryRegion backing, mr2;
    Cq* cq = nullptr;
    Qp* rc = nullptr;
    Qp* ud = nullptr;
    Qp* peer = nullptr;   // A's: its number and address are what B's RC queue pair is connected to

    World() {
        std::fill(mem_b.begin() + kMr2, mem_b.begin() + kMr2 + kMr2Len, kMr2Byte);
        std::fill(mem_b.begin() + kMr1, mem_b.begin() + kMr1 + kMr1Len, 0);
        dma::ProtectionDomain& pd = pair.b->pd();
        backing = *pd.register_memory(mem_b.data() + kMr1, kMr1Len, dma::Access::local_write);
        mr1_key = *pd.alloc_mr(kMr1Len);
        if (pd.fast_register(mr1_key, mr1_key, mem_b.data() + kMr1, kMr1Len, 0,
                             dma::Access(kAllRemote) | dma::Access::zero_based) != dma::MrStatus::ok)
            std::abort();
        mr2 = *pd.register_memory(mem_b.data() + kMr2, kMr2Len, dma::Access::local_write);
        cq = *pair.b->create_cq(4096);
        RdmaQpInitAttr ia;
        ia.send_cq = ia.recv_cq = cq;
        ia.cap.max_send_wr = ia.cap.max_recv_wr = 64;
        rc = *pair.b->create_qp(ia);
        ia.qp_type = QpType::ud;
        ud = *pair.b->create_qp(ia);
        Cq* acq = *pair.a->create_cq(16);
        RdmaQpInitAttr pa;
        pa.send_cq = pa.recv_cq = acq;
        peer = *pair.a->create_qp(pa);
    }

    // Both of B's queue pairs from RESET, connected and with receives posted: every input starts
    // from the same state, so that what libFuzzer learns from it holds.
    void reset() {
        Wc wc[64];
        QpAttr x;
        x.qp_state = RdmaQpState::reset;
        (void)rc->modify(x, attr_state);
        (void)ud->modify(x, attr_state);
        while (cq->poll(wc) > 0) {
        }
        x.qp_state = RdmaQpState::init;
        x.qp_access_flags = kAllRemote;
        x.qkey = kQkey;
        (void)rc->modify(x, attr_state | attr_pkey_index | attr_port | attr_access_flags);
        (void)ud->modify(x, attr_state | attr_pkey_index | attr_port | attr_qkey);
        x.qp_state = RdmaQpState::rtr;
        x.path_mtu = 3;
        x.dest_qp_num = peer->qp_num();
        x.rq_psn = kPsn;
        x.max_dest_rd_atomic = 4;
        x.min_rnr_timer = 1;
        x.ah_attr.dgid = pair.a->gid();
        (void)rc->modify(x, attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn | attr_max_dest_rd_atomic |
                                attr_min_rnr_timer);
        (void)ud->modify(x, attr_state);
        x.qp_state = RdmaQpState::rts;
        x.sq_psn = kPsn;
        x.timeout = 14;
        x.retry_cnt = 7;
        x.rnr_retry = 7;
        x.max_rd_atomic = 4;
        (void)rc->modify(x, attr_state | attr_sq_psn | attr_timeout | attr_retry_cnt | attr_rnr_retry | attr_max_qp_rd_atomic);
        (void)ud->modify(x, attr_state | attr_sq_psn);
        for (uint32_t i = 0; i < kRecvDepth; ++i) {
            Sge s{uint64_t(i) * kRecvBuf, kRecvBuf, mr1_key};   // zero-based: offsets in MR1
            RecvWr r{i, &s, 1, 0};
            (void)rc->post_recv(std::span(&r, 1));
            (void)ud->post_recv(std::span(&r, 1));
        }
    }

    bool intact() const {
        for (size_t i = 0; i < kGuard; ++i)
            if (mem_b[i] != kGuardByte || mem_b[kMr1 + kMr1Len + i] != kGuardByte || mem_b[kMr2 + kMr2Len + i] != kGuardByte)
                return false;
        for (size_t i = kMr2; i < kMr2 + kMr2Len; ++i)
            if (mem_b[i] != kMr2Byte) return false;
        return true;
    }
};

World& world() {
    static World* w = new World;   // never destroyed: the fuzzer exits without unwinding
    return *w;
}

// A request from A to B's RC (or UD) queue pair, as the seed corpus holds them.
std::vector<uint8_t> request(uint8_t opcode, uint32_t psn, uint64_t va, uint32_t len, uint32_t dma_len, bool to_ud = false) {
    World& w = world();
    PacketHeader h;
    h.src_port = 0xC001;
    h.opcode = opcode;
    h.ack_req = true;
    h.dest_qp = to_ud ? w.ud->qp_num() : w.rc->qp_num();
    h.psn = psn;
    h.va = va;
    h.rkey = w.mr1_key;
    h.dma_len = dma_len;
    h.swap_add = 1;
    h.qkey = kQkey;
    h.src_qp = w.peer->qp_num();
    h.inv_rkey = w.mr1_key;
    const std::vector<uint8_t> payload(len, 0x42);
    return test::frame_a_to_b(h, payload.data(), len);
}

void write_seeds(const char* dir) {
    struct Seed {
        const char* name;
        std::vector<std::vector<uint8_t>> frames;
    };
    const Seed seeds[] = {
        {"send_only", {request(op::send_only, kPsn, 0, 100, 0)}},
        {"send_first_last", {request(op::send_first, kPsn, 0, 1024, 0), request(op::send_last, kPsn + 1, 0, 300, 0)}},
        {"send_with_inv", {request(op::send_only_inv, kPsn, 0, 16, 0)}},
        {"write_only", {request(op::write_only, kPsn, 4096, 64, 64)}},
        {"write_first_middle_last",
         {request(op::write_first, kPsn, 8192, 1024, 3000), request(op::write_middle, kPsn + 1, 0, 1024, 0),
          request(op::write_last_imm, kPsn + 2, 0, 952, 0)}},
        {"read", {request(op::read_request, kPsn, 100, 0, 5000)}},
        {"read_twice", {request(op::read_request, kPsn, 100, 0, 64), request(op::read_request, kPsn, 100, 0, 64)}},
        {"fetch_add", {request(op::fetch_add, kPsn, 64, 0, 8)}},
        {"cmp_swap", {request(op::cmp_swap, kPsn, 128, 0, 8)}},
        {"ud_send", {request(op::ud_send_only, 0, 0, 200, 0, true)}},
    };
    for (const Seed& s : seeds) {
        std::string bytes;
        for (const auto& f : s.frames) {
            bytes.push_back(char(f.size() & 0xff));
            bytes.push_back(char(f.size() >> 8));
            bytes.append(reinterpret_cast<const char*>(f.data()), f.size());
        }
        const std::string path = std::string(dir) + "/" + s.name;
        FILE* out = std::fopen(path.c_str(), "wb");
        if (!out || std::fwrite(bytes.data(), 1, bytes.size(), out) != bytes.size()) std::abort();
        std::fclose(out);
    }
}

}  // namespace
}  // namespace vfab::rdma::fuzz

using namespace vfab::rdma::fuzz;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    if (const char* dir = std::getenv("VFAB_FUZZ_WRITE_SEEDS")) {
        ::mkdir(dir, 0755);
        world().reset();
        write_seeds(dir);
        std::exit(0);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    World& w = world();
    w.reset();
    for (size_t at = 0; at < size;) {
        size_t len = size - at;
        if (len >= 2 && size_t(data[at] | data[at + 1] << 8) <= len - 2) {
            len = size_t(data[at] | data[at + 1] << 8);
            at += 2;
        }
        std::vector<uint8_t> f(data + at, data + at + len);
        at += len;
        vfab::rdma::test::fix_checksums(f);
        w.pair.wire.inject(1, f.data(), uint32_t(f.size()));
        for (int i = 0; i < 2; ++i) w.pair.b->progress();
    }
    // B's answers to A are dropped: A's port never runs, the wire toward it is emptied.
    {
        std::lock_guard g(w.pair.wire.mu);
        w.pair.wire.in_flight[0].clear();
    }
    if (!w.intact()) __builtin_trap();   // written outside what a peer may touch
    return 0;
}
