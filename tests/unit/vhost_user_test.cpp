// The vhost-user front-end against a fake back-end (vhost_user_fake_backend.hpp): the message
// sequence of the handshake and of vring setup, descriptors passed with SCM_RIGHTS (the
// back-end maps the very memory the front-end wrote), REPLY_ACK, and the ways a back-end lets
// the front-end down: none there, closing mid-setup, replies in pieces or wrong, silence,
// missing VIRTIO_F_VERSION_1.
#include "vfab/drivers/virtio/vhost_user.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>

#include "vfab/dma/dma_memory.hpp"
#include "vhost_user_fake_backend.hpp"

namespace {

using namespace vhost_fake;
using vfab::virtio::MemRegion;
using vfab::virtio::Notify;
using vfab::virtio::VhostUserFrontend;
using vfab::virtio::VhostUserOptions;
using vfab::virtio::VringConfig;
namespace vu = vfab::virtio::vhost_user;

constexpr uint64_t kVersion1 = 1ull << 32, kMrgRxbuf = 1ull << 15, kProto = 1ull << 30;

VhostUserFrontend adopt(FakeBackend& be, VhostUserOptions opts = {}) {
    int fd = be.serve_pair();
    EXPECT_GE(fd, 0);
    auto fe = VhostUserFrontend::adopt(vfab::vfio::UniqueFd(fd, vfab::vfio::Sys::real()), "fake", opts);
    EXPECT_TRUE(fe.ok()) << fe.error().message;
    return std::move(fe).value();
}

bool readable(int fd, int timeout_ms = 1000) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

// A private directory for sockets, removed with everything in it.
struct TempDir {
    std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                ("vfab-vhost-test-" + std::to_string(::getpid()) + "-" + std::to_string(++count));
    TempDir() { std::filesystem::create_directories(dir); }
    ~TempDir() { std::filesystem::remove_all(dir); }
    std::string path(const char* name) const { return (dir / name).string(); }
    static inline int count = 0;
};

// DMA memory with 4 KiB pages (no hugepages needed) holding two split rings of 256 entries.
struct Rings {
    vfab::dma::DmaMemory mem =
        std::move(vfab::dma::DmaMemory::allocate(1 << 20, {vfab::dma::PageSize::k4, -1})).value();
    VringConfig ring(uint32_t index) const {
        uint8_t* base = mem.data() + index * 0x10000;
        return VringConfig{.index = index, .size = 256, .desc = base, .avail = base + 0x1000, .used = base + 0x2000};
    }
};

TEST(VhostUser, HandshakeNegotiatesFeaturesAndProtocolFeatures) {
    FakeBackend be;
    auto fe = adopt(be);
    auto f = fe.negotiate(kVersion1 | kMrgRxbuf | vu::kFeatureAccessPlatform);
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(*f, kVersion1 | kMrgRxbuf);   // never ACCESS_PLATFORM, never bit 30
    EXPECT_EQ(fe.queue_num(), 2u);
    // MQ and REPLY_ACK taken; LOG_SHMFD and STATUS (offered, not wanted) left out.
    EXPECT_EQ(fe.protocol_features(), (1ull << vu::kProtocolMq) | (1ull << vu::kProtocolReplyAck));
    // SET_PROTOCOL_FEATURES goes before REPLY_ACK applies: a GET_FEATURES confirms it.
    std::vector<uint32_t> want = {GET_FEATURES, GET_PROTOCOL_FEATURES, SET_PROTOCOL_FEATURES, GET_FEATURES,
                                  GET_QUEUE_NUM, SET_OWNER, SET_FEATURES};
    EXPECT_EQ(be.requests(), want);
    EXPECT_EQ(be.last(SET_PROTOCOL_FEATURES).u64(), fe.protocol_features());
    EXPECT_FALSE(be.last(SET_PROTOCOL_FEATURES).need_reply());
    Msg sf = be.last(SET_FEATURES);
    EXPECT_EQ(sf.u64(), kVersion1 | kMrgRxbuf | kProto);   // bit 30 acknowledged to the back-end
    EXPECT_TRUE(sf.need_reply());
    EXPECT_TRUE(be.last(SET_OWNER).need_reply());
    for (auto& m : be.messages()) EXPECT_EQ(m.flags & 3, kFlagVersion);
}

TEST(VhostUser, MemTablePassesTheMemfdAndVringsGetTheirAddressesAndEventfds) {
    FakeBackend be;
    be.vring_base[1] = 7;
    auto fe = adopt(be);
    ASSERT_TRUE(fe.negotiate(kVersion1).ok());
    Rings rings;
    std::memcpy(rings.mem.data() + 0x80000, "shared", 7);
    MemRegion region = vfab::virtio::mem_region(rings.mem);
    auto r = fe.set_mem_table({&region, 1});
    ASSERT_TRUE(r.ok()) << r.error().message;

    Msg mt = be.last(SET_MEM_TABLE);
    ASSERT_EQ(mt.payload.size(), 8u + 32u);   // count, padding, one region
    EXPECT_EQ(mt.at<uint32_t>(0), 1u);
    auto va = reinterpret_cast<uintptr_t>(rings.mem.data());
    EXPECT_EQ(mt.at<uint64_t>(8), va);                   // guest address: IOVA = VA
    EXPECT_EQ(mt.at<uint64_t>(16), rings.mem.size());    // size
    EXPECT_EQ(mt.at<uint64_t>(24), va);                  // user address
    EXPECT_EQ(mt.at<uint64_t>(32), 0u);                  // mmap offset
    ASSERT_EQ(mt.fds.size(), 1u);
    struct stat a {}, b {};
    ASSERT_EQ(::fstat(mt.fds[0]->fd, &a), 0);
    ASSERT_EQ(::fstat(rings.mem.fd(), &b), 0);
    EXPECT_EQ(a.st_ino, b.st_ino);
    // The back-end maps the fd, as a real one does, and sees what the front-end wrote.
    void* p = ::mmap(nullptr, rings.mem.size(), PROT_READ, MAP_SHARED, mt.fds[0]->fd, 0);
    ASSERT_NE(p, MAP_FAILED);
    EXPECT_STREQ(static_cast<const char*>(p) + 0x80000, "shared");
    ::munmap(p, rings.mem.size());

    for (uint32_t q : {0u, 1u}) {
        auto s = fe.start_vring(rings.ring(q));
        ASSERT_TRUE(s.ok()) << s.error().message;
    }
    std::vector<uint32_t> per_ring = {SET_VRING_NUM, SET_VRING_BASE, SET_VRING_ADDR, SET_VRING_KICK, SET_VRING_CALL,
                                      SET_VRING_ENABLE};
    auto all = be.requests();
    std::vector<uint32_t> tail(all.end() - 12, all.end());
    std::vector<uint32_t> want = per_ring;
    want.insert(want.end(), per_ring.begin(), per_ring.end());
    EXPECT_EQ(tail, want);

    auto cfg = rings.ring(1);
    Msg addr = be.last(SET_VRING_ADDR);
    ASSERT_EQ(addr.payload.size(), 40u);
    EXPECT_EQ(addr.at<uint32_t>(0), 1u);
    EXPECT_EQ(addr.at<uint64_t>(8), reinterpret_cast<uintptr_t>(cfg.desc));    // user addresses
    EXPECT_EQ(addr.at<uint64_t>(16), reinterpret_cast<uintptr_t>(cfg.used));
    EXPECT_EQ(addr.at<uint64_t>(24), reinterpret_cast<uintptr_t>(cfg.avail));
    EXPECT_EQ(be.last(SET_VRING_NUM).at<uint32_t>(4), 256u);
    EXPECT_EQ(be.last(SET_VRING_ENABLE).at<uint32_t>(4), 1u);

    // Kick: the back-end's copy of vring 1's kick eventfd fires. Call: the other way round.
    Msg kick = be.last(SET_VRING_KICK);
    EXPECT_EQ(kick.u64(), 1u);
    ASSERT_EQ(kick.fds.size(), 1u);
    EXPECT_TRUE(fe.kick(1));
    ASSERT_TRUE(readable(kick.fds[0]->fd));
    uint64_t v = 0;
    EXPECT_EQ(::read(kick.fds[0]->fd, &v, 8), 8);
    EXPECT_EQ(v, 1u);
    Msg call = be.last(SET_VRING_CALL);
    ASSERT_EQ(call.fds.size(), 1u);
    EXPECT_FALSE(readable(fe.call_fd(1), 0));
    v = 1;
    EXPECT_EQ(::write(call.fds[0]->fd, &v, 8), 8);
    EXPECT_TRUE(readable(fe.call_fd(1)));

    auto base = fe.stop_vring(1);
    ASSERT_TRUE(base.ok()) << base.error().message;
    EXPECT_EQ(*base, 7u);
    all = be.requests();
    EXPECT_EQ(std::vector<uint32_t>(all.end() - 2, all.end()),
              (std::vector<uint32_t>{SET_VRING_ENABLE, GET_VRING_BASE}));
    EXPECT_EQ(be.last(SET_VRING_ENABLE).at<uint32_t>(4), 0u);
    EXPECT_TRUE(fe.alive());
}

TEST(VhostUser, NotifyNoneSendsTheNoFdFlag) {
    FakeBackend be;
    auto fe = adopt(be);
    ASSERT_TRUE(fe.negotiate(kVersion1).ok());
    ASSERT_TRUE(fe.set_vring_kick(3, Notify::none).ok());
    Msg m = be.last(SET_VRING_KICK);
    EXPECT_EQ(m.u64(), 3u | (1u << 8));
    EXPECT_TRUE(m.fds.empty());
    EXPECT_EQ(fe.kick_fd(3), -1);
    EXPECT_FALSE(fe.kick(3));
}

TEST(VhostUser, NoBackendSaysHowToStartOne) {
    VhostUserOptions fast;
    fast.connect_timeout_ms = 0;
    TempDir tmp;
    std::string path = tmp.path("none.sock");
    auto fe = VhostUserFrontend::connect(path, fast);
    ASSERT_FALSE(fe.ok());
    EXPECT_EQ(fe.error().code, ENOENT);
    EXPECT_NE(fe.error().message.find("no vhost-user backend at " + path), std::string::npos) << fe.error().message;
    EXPECT_NE(fe.error().message.find("dpdk-testpmd --vdev net_vhost0,iface=" + path), std::string::npos);

    // A socket file nobody listens on (a back-end that died): ECONNREFUSED, same advice.
    int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ::close(s);
    fe = VhostUserFrontend::connect(path, fast);
    ASSERT_FALSE(fe.ok());
    EXPECT_EQ(fe.error().code, ECONNREFUSED);
    EXPECT_NE(fe.error().message.find("no vhost-user backend at " + path), std::string::npos) << fe.error().message;

    auto long_path = VhostUserFrontend::connect(std::string(200, 'x'), fast);
    ASSERT_FALSE(long_path.ok());
    EXPECT_EQ(long_path.error().code, ENAMETOOLONG);
}

TEST(VhostUser, ConnectWaitsForABackendThatIsStarting) {
    TempDir tmp;
    std::string path = tmp.path("late.sock");
    FakeBackend be;
    std::thread later([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
        be.listen_on(path);
    });
    auto fe = VhostUserFrontend::connect(path);   // retries for up to a second by default
    later.join();
    ASSERT_TRUE(fe.ok()) << fe.error().message;
    EXPECT_TRUE(fe->negotiate(kVersion1).ok());
}

TEST(VhostUser, BackendClosingMidSetupFailsThatCallAndEveryLaterOne) {
    FakeBackend be;
    be.hook = [](const Msg& m, FakeBackend&) {
        return m.request == SET_MEM_TABLE ? FakeBackend::Action::close : FakeBackend::Action::fallthrough;
    };
    auto fe = adopt(be);
    ASSERT_TRUE(fe.negotiate(kVersion1).ok());
    Rings rings;
    MemRegion region = vfab::virtio::mem_region(rings.mem);
    auto r = fe.set_mem_table({&region, 1});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ECONNRESET);
    EXPECT_NE(r.error().message.find("closed the connection"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("VHOST_USER_SET_MEM_TABLE"), std::string::npos);
    EXPECT_FALSE(fe.alive());
    EXPECT_TRUE(fe.poll_hangup());
    EXPECT_NE(fe.failure().message.find("closed the connection"), std::string::npos);
    auto later = fe.set_vring_num(0, 256);
    ASSERT_FALSE(later.ok());
    EXPECT_NE(later.error().message.find("connection is down"), std::string::npos) << later.error().message;
    pollfd p{fe.socket_fd(), POLLIN | POLLRDHUP, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 1);
    EXPECT_TRUE(p.revents & (POLLHUP | POLLRDHUP));
}

TEST(VhostUser, OldBackendWithoutProtocolFeatures) {
    FakeBackend be;
    be.features = kVersion1;   // no bit 30: no GET_PROTOCOL_FEATURES, no REPLY_ACK, rings start enabled
    auto fe = adopt(be);
    auto f = fe.negotiate(kVersion1 | kMrgRxbuf);
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(*f, kVersion1);
    EXPECT_EQ(fe.protocol_features(), 0u);
    // Each command is confirmed by a GET_FEATURES round trip instead of an ack.
    EXPECT_EQ(be.requests(),
              (std::vector<uint32_t>{GET_FEATURES, SET_OWNER, GET_FEATURES, SET_FEATURES, GET_FEATURES}));
    EXPECT_EQ(be.last(SET_FEATURES).u64(), kVersion1);
    for (auto& m : be.messages()) EXPECT_FALSE(m.need_reply());
    Rings rings;
    MemRegion region = vfab::virtio::mem_region(rings.mem);
    ASSERT_TRUE(fe.set_mem_table({&region, 1}).ok());
    ASSERT_TRUE(fe.start_vring(rings.ring(0)).ok());
    EXPECT_TRUE(be.last(SET_VRING_ENABLE).payload.empty());   // never sent
    EXPECT_EQ(fe.set_vring_enable(0, true).error().code, ENOTSUP);
    EXPECT_EQ(fe.get_queue_num().error().code, ENOTSUP);
}

TEST(VhostUser, BackendWithoutVersion1IsRefused) {
    FakeBackend be;
    be.features = kProto | kMrgRxbuf;   // a legacy-only back-end
    auto fe = adopt(be);
    auto f = fe.negotiate(kVersion1 | kMrgRxbuf);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.error().code, ENOTSUP);
    EXPECT_NE(f.error().message.find("does not offer VIRTIO_F_VERSION_1"), std::string::npos) << f.error().message;
    EXPECT_EQ(be.requests(), std::vector<uint32_t>{GET_FEATURES});   // nothing set
}

TEST(VhostUser, RepliesInPiecesAreReassembled) {
    FakeBackend be;
    be.hook = [](const Msg& m, FakeBackend& b) {
        if (m.request != GET_FEATURES) return FakeBackend::Action::fallthrough;
        uint32_t h[3] = {GET_FEATURES, kFlagVersion | kFlagReply, 8};
        uint8_t bytes[20];
        std::memcpy(bytes, h, 12);
        std::memcpy(bytes + 12, &b.features, 8);
        size_t off = 0;
        for (size_t n : {1, 6, 5, 1, 7}) {   // torn everywhere, header and payload
            b.write_raw(bytes + off, n);
            off += n;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return FakeBackend::Action::handled;
    };
    auto fe = adopt(be);
    auto f = fe.get_features();
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(*f, be.features);
    EXPECT_TRUE(fe.alive());
}

TEST(VhostUser, ShortReplyThenCloseIsAnError) {
    FakeBackend be;
    be.hook = [](const Msg&, FakeBackend& b) {
        uint32_t h[3] = {GET_FEATURES, kFlagVersion | kFlagReply, 8};
        b.write_raw(h, sizeof h);
        b.write_raw("\x01\x02\x03", 3);   // 3 of the 8 payload bytes
        return FakeBackend::Action::close;
    };
    auto fe = adopt(be);
    auto f = fe.get_features();
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.error().message.find("closed the connection"), std::string::npos) << f.error().message;
    EXPECT_FALSE(fe.alive());
}

TEST(VhostUser, WrongRepliesPutTheConnectionDown) {
    for (int kind : {0, 1, 2}) {
        FakeBackend be;
        be.hook = [kind](const Msg& m, FakeBackend& b) {
            uint64_t v = 0;
            uint32_t h[3] = {kind == 0 ? GET_PROTOCOL_FEATURES : m.request,   // 0: a reply to another request
                             kind == 1 ? kFlagVersion : kFlagVersion | kFlagReply,   // 1: no reply flag
                             kind == 2 ? 4u : 8u};                                   // 2: wrong size
            b.write_raw(h, sizeof h);
            b.write_raw(&v, h[2]);
            return FakeBackend::Action::handled;
        };
        auto fe = adopt(be);
        auto f = fe.get_features();
        ASSERT_FALSE(f.ok()) << kind;
        EXPECT_EQ(f.error().code, EPROTO) << f.error().message;
        EXPECT_FALSE(fe.alive());
    }
}

TEST(VhostUser, SilentBackendTimesOut) {
    FakeBackend be;
    be.hook = [](const Msg&, FakeBackend&) { return FakeBackend::Action::handled; };   // never answers
    VhostUserOptions opts;
    opts.reply_timeout_ms = 100;
    auto fe = adopt(be, opts);
    auto t0 = std::chrono::steady_clock::now();
    auto f = fe.get_features();
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.error().code, ETIMEDOUT);
    EXPECT_NE(f.error().message.find("did not answer VHOST_USER_GET_FEATURES within 100 ms"), std::string::npos)
        << f.error().message;
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(90));
    EXPECT_FALSE(fe.alive());
}

TEST(VhostUser, ReplyAckRefusalIsReportedAndTheConnectionStays) {
    FakeBackend be;
    be.hook = [](const Msg& m, FakeBackend& b) {
        if (m.request != SET_VRING_NUM) return FakeBackend::Action::fallthrough;
        EXPECT_TRUE(m.need_reply());
        b.reply_u64(m, 1);
        return FakeBackend::Action::handled;
    };
    auto fe = adopt(be);
    ASSERT_TRUE(fe.negotiate(kVersion1).ok());
    auto r = fe.set_vring_num(0, 256);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("refused VHOST_USER_SET_VRING_NUM (status 1)"), std::string::npos)
        << r.error().message;
    EXPECT_TRUE(fe.alive());
    EXPECT_TRUE(fe.set_vring_base(0, 0).ok());
}

TEST(VhostUser, HangupWhileIdleIsSeenWithoutACall) {
    FakeBackend be;
    auto fe = adopt(be);
    ASSERT_TRUE(fe.negotiate(kVersion1).ok());
    EXPECT_TRUE(fe.alive());
    be.hang_up();
    pollfd p{fe.socket_fd(), POLLRDHUP, 0};   // what a driver's epoll set would watch
    ASSERT_EQ(::poll(&p, 1, 1000), 1);
    EXPECT_FALSE(fe.alive());
    EXPECT_NE(fe.failure().message.find("hung up"), std::string::npos);
}

TEST(VhostUser, SendingToAVanishedBackendGivesEpipeNotSigpipe) {
    FakeBackend be;
    auto fe = adopt(be);
    ASSERT_TRUE(fe.negotiate(kVersion1).ok());
    be.stop();   // closes its end entirely
    // Without MSG_NOSIGNAL this would kill the test with SIGPIPE.
    auto r = fe.set_owner();
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.error().code == EPIPE || r.error().code == ECONNRESET) << r.error().message;
    EXPECT_FALSE(fe.alive());
}

TEST(VhostUser, BadArgumentsAreRefusedBeforeAnythingIsSent) {
    FakeBackend be;
    auto fe = adopt(be);
    ASSERT_TRUE(fe.negotiate(kVersion1).ok());
    size_t sent = be.messages().size();
    Rings rings;
    auto cfg = rings.ring(0);
    EXPECT_EQ(fe.set_vring_num(0, 100).error().code, EINVAL);   // not a power of 2
    EXPECT_EQ(fe.set_vring_num(300, 256).error().code, EINVAL);   // index beyond 8 bits
    EXPECT_EQ(fe.set_vring_addr(0, cfg.desc, cfg.avail, cfg.used).error().code, EINVAL);   // no memory table yet
    EXPECT_EQ(fe.set_mem_table({}).error().code, EINVAL);
    MemRegion r = vfab::virtio::mem_region(rings.mem);
    MemRegion nine[9] = {r, r, r, r, r, r, r, r, r};
    EXPECT_EQ(fe.set_mem_table(nine).error().code, EINVAL);
    MemRegion overlap[2] = {r, r};
    overlap[1].guest_addr += r.size;   // user ranges still overlap
    auto ov = fe.set_mem_table(overlap);
    EXPECT_NE(ov.error().message.find("overlap"), std::string::npos) << ov.error().message;
    EXPECT_EQ(be.messages().size(), sent);

    ASSERT_TRUE(fe.set_mem_table({&r, 1}).ok());
    ASSERT_TRUE(fe.set_vring_num(0, 256).ok());
    sent = be.messages().size();
    uint8_t outside[64];
    auto e = fe.set_vring_addr(0, outside, cfg.avail, cfg.used);
    EXPECT_NE(e.error().message.find("not inside the memory table"), std::string::npos) << e.error().message;
    // The whole used ring (4 + 8 * 256 bytes) must lie inside.
    auto* end = rings.mem.data() + rings.mem.size();
    EXPECT_EQ(fe.set_vring_addr(0, cfg.desc, cfg.avail, end - 1024).error().code, EINVAL);
    auto* misaligned = static_cast<const uint8_t*>(cfg.desc) + 8;
    EXPECT_EQ(fe.set_vring_addr(0, misaligned, cfg.avail, cfg.used).error().code, EINVAL);
    EXPECT_EQ(be.messages().size(), sent);
}

TEST(VhostUser, ConfigSpaceAndReset) {
    FakeBackend be;
    be.protocol_features |= (1ull << vu::kProtocolConfig) | (1ull << vu::kProtocolResetDevice);
    auto fe = adopt(be);
    ASSERT_TRUE(fe.negotiate(kVersion1).ok());
    auto mac = fe.get_config(0, 6);
    ASSERT_TRUE(mac.ok()) << mac.error().message;
    EXPECT_EQ(*mac, (std::vector<uint8_t>{0x50, 0x51, 0x52, 0x53, 0x54, 0x55}));
    Msg m = be.last(GET_CONFIG);
    EXPECT_EQ(m.payload.size(), 12u + 6u);
    EXPECT_EQ(m.at<uint32_t>(4), 6u);
    ASSERT_TRUE(fe.reset().ok());
    EXPECT_EQ(be.requests().back(), RESET_DEVICE);
    EXPECT_EQ(fe.features(), 0u);

    FakeBackend plain;   // no RESET_DEVICE: the deprecated RESET_OWNER
    auto fe2 = adopt(plain);
    ASSERT_TRUE(fe2.negotiate(kVersion1).ok());
    EXPECT_EQ(fe2.get_config(0, 6).error().code, ENOTSUP);
    ASSERT_TRUE(fe2.reset().ok());
    EXPECT_EQ(plain.requests().back(), RESET_OWNER);
}

TEST(VhostUser, MemRegionOfDmaMemoryAtAnIova) {
    Rings rings;
    MemRegion r = vfab::virtio::mem_region(rings.mem, vfab::Iova(0x100000000));
    EXPECT_EQ(r.fd, rings.mem.fd());
    EXPECT_EQ(r.guest_addr, 0x100000000u);
    EXPECT_EQ(r.user_addr, reinterpret_cast<uintptr_t>(rings.mem.data()));
    EXPECT_EQ(r.size, rings.mem.size());
    EXPECT_EQ(r.mmap_offset, 0u);
    EXPECT_STREQ(vu::request_name(vu::Request::set_vring_addr), "VHOST_USER_SET_VRING_ADDR");
}

}  // namespace
