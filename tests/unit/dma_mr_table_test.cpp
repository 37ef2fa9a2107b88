// MrTable: keys, bounds, access, fast registration and memory windows; then random
// add/remove/bind/invalidate/translate sequences checked against a std::map model.
#include "vfab/dma/mr_table.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <random>

namespace vfab::dma {
namespace {

constexpr Access kLW = Access::local_write, kRR = Access::remote_read, kRW = Access::remote_write,
                 kRA = Access::remote_atomic, kBind = Access::mw_bind, kZero = Access::zero_based;

MrTable make(uint32_t capacity) {
    auto t = MrTable::create(capacity);
    EXPECT_TRUE(t.ok()) << t.error().message;
    return std::move(t).value();
}

uint32_t must_add(MrTable& t, MrEntry e) {
    auto k = t.add(e);
    EXPECT_TRUE(k.ok()) << k.error().message;
    return k.ok() ? k->lkey : ~0u;
}

// A remote access arriving on queue pair kQp (windows answer remote accesses only).
constexpr uint32_t kQp = 0x100;
MrStatus status(const MrTable& t, uint32_t key, uint64_t addr, uint64_t len, Access req = Access::none) {
    return t.translate(key, addr, len, req, kQp).status;
}

TEST(MrTable, CreateChecksTheCapacity) {
    EXPECT_EQ(MrTable::create(0).error().code, EINVAL);
    EXPECT_EQ(MrTable::create(MrTable::kMaxCapacity + 1).error().code, EINVAL);
    EXPECT_EQ(make(8).capacity(), 8u);
}

TEST(MrTable, KeysAreIndexAndConsumerKeyAndLkeyEqualsRkey) {
    MrTable t = make(4);
    auto k = t.add({0x1000, 0x1000, Iova(0x5000), kLW});
    ASSERT_TRUE(k.ok());
    EXPECT_EQ(k->lkey, k->rkey);
    EXPECT_EQ(key_index(k->lkey), 0u);
    EXPECT_EQ(k->lkey, make_key(0, key_consumer(k->lkey)));
    EXPECT_EQ(key_index(must_add(t, {0x1000, 1, Iova(0), kLW})), 1u);
    EXPECT_EQ(t.size(), 2u);
    EXPECT_EQ(t.state(k->lkey), MrState::valid);
    ASSERT_NE(t.find(k->lkey), nullptr);
    EXPECT_EQ(t.find(k->lkey)->iova, Iova(0x5000));
}

TEST(MrTable, TranslatesInsideTheRegionAndNowhereElse) {
    MrTable t = make(4);
    const uint32_t k = must_add(t, {0x10000, 0x2000, Iova(0x800000), kLW});
    Translation tr = t.translate(k, 0x10010, 0x100, kLW);
    EXPECT_EQ(tr.status, MrStatus::ok);
    EXPECT_EQ(tr.iova, Iova(0x800010));
    EXPECT_EQ(status(t, k, 0x10000, 0x2000), MrStatus::ok);     // exactly the region
    EXPECT_EQ(status(t, k, 0x12000, 0), MrStatus::ok);          // empty, at the end
    EXPECT_EQ(status(t, k, 0x10001, 0x2000), MrStatus::out_of_bounds);
    EXPECT_EQ(status(t, k, 0xffff, 2), MrStatus::out_of_bounds);
    EXPECT_EQ(status(t, k, 0x12000, 1), MrStatus::out_of_bounds);
    EXPECT_EQ(status(t, k, 0x10001, UINT64_MAX), MrStatus::out_of_bounds);   // addr + len wraps
    EXPECT_EQ(status(t, k, UINT64_MAX, 2), MrStatus::out_of_bounds);
    EXPECT_EQ(status(t, k, 0, 0x10001), MrStatus::out_of_bounds);   // from below into it
    EXPECT_EQ(status(t, k, 0xffff, 0), MrStatus::out_of_bounds);    // empty, before it

    // A region that ends at 2^64 exactly: an address past it wraps to 0, never inside.
    const uint64_t top = 0ull - 0x1000;
    const uint32_t hi = must_add(t, {top, 0x1000, Iova(0x900000), kLW});
    EXPECT_EQ(status(t, hi, UINT64_MAX, 1), MrStatus::ok);
    EXPECT_EQ(t.translate_local(hi, UINT64_MAX, 1, kLW).iova, Iova(0x900fff));
    EXPECT_EQ(status(t, hi, UINT64_MAX, 2), MrStatus::out_of_bounds);
    EXPECT_EQ(status(t, hi, 0, 1), MrStatus::out_of_bounds);
    EXPECT_EQ(t.translate_local(hi, 0, 1, kLW).status, MrStatus::out_of_bounds);
    EXPECT_EQ(status(t, hi, top - 1, 1), MrStatus::out_of_bounds);
}

TEST(MrTable, ZeroBasedRegionsTakeOffsets) {
    MrTable t = make(4);
    const uint32_t k = must_add(t, {0x7f0000001000, 0x3000, Iova(0x100000), kLW | kZero});
    Translation tr = t.translate(k, 0x2ff0, 0x10, kLW);
    EXPECT_EQ(tr.status, MrStatus::ok);
    EXPECT_EQ(tr.iova, Iova(0x102ff0));
    EXPECT_EQ(status(t, k, 0x7f0000001000, 1), MrStatus::out_of_bounds);   // a virtual address
    EXPECT_EQ(status(t, k, 0x2ff0, 0x11), MrStatus::out_of_bounds);
    // A zero-based region's virtual start does not limit it, even at the top of the space.
    EXPECT_TRUE(t.add({UINT64_MAX, 0x1000, Iova(0), kZero}).ok());
}

TEST(MrTable, AccessRightsAreChecked) {
    MrTable t = make(4);
    const uint32_t ro = must_add(t, {0x1000, 0x1000, Iova(0), Access::none});
    const uint32_t rr = must_add(t, {0x1000, 0x1000, Iova(0), kLW | kRR});
    EXPECT_EQ(status(t, ro, 0x1000, 8), MrStatus::ok);   // local read needs nothing
    EXPECT_EQ(status(t, ro, 0x1000, 8, kLW), MrStatus::access_denied);
    EXPECT_EQ(status(t, rr, 0x1000, 8, kLW | kRR), MrStatus::ok);
    EXPECT_EQ(status(t, rr, 0x1000, 8, kRW), MrStatus::access_denied);
    EXPECT_EQ(status(t, rr, 0x1000, 8, kRR | kRA), MrStatus::access_denied);
    EXPECT_EQ(status(t, rr, 0x3000, 8, kRW), MrStatus::out_of_bounds);   // bounds before rights
}

TEST(MrTable, AddRejectsWhatVerbsRejects) {
    MrTable t = make(4);
    EXPECT_EQ(t.add({0x1000, 0, Iova(0), kLW}).error().code, EINVAL);
    EXPECT_EQ(t.add({UINT64_MAX - 10, 12, Iova(0), kLW}).error().code, EINVAL);
    EXPECT_EQ(t.add({0, 0x1000, Iova(UINT64_MAX - 0xffe), kLW}).error().code, EINVAL);
    EXPECT_EQ(t.add({0, 0x1000, Iova(UINT64_MAX - 0xfff), kLW}).ok(), true);   // ends at the top
    auto rw = t.add({0x1000, 0x1000, Iova(0), kRW});
    ASSERT_FALSE(rw.ok());
    EXPECT_NE(rw.error().message.find("need LOCAL_WRITE"), std::string::npos);
    EXPECT_FALSE(t.add({0x1000, 0x1000, Iova(0), kRA | kRR}).ok());
    EXPECT_FALSE(t.add({0x1000, 0x1000, Iova(0), Access(1u << 7)}).ok());
    EXPECT_EQ(t.size(), 1u);
}

TEST(MrTable, AFullTableIsAClearError) {
    MrTable t = make(2);
    const uint32_t a = must_add(t, {0x1000, 1, Iova(0), kLW});
    must_add(t, {0x1000, 1, Iova(0), kLW});
    auto full = t.add({0x1000, 1, Iova(0), kLW});
    ASSERT_FALSE(full.ok());
    EXPECT_EQ(full.error().code, ENOSPC);
    EXPECT_NE(full.error().message.find("full (2 entries)"), std::string::npos);
    EXPECT_EQ(t.alloc_unbound(4096).error().code, ENOSPC);
    EXPECT_EQ(t.alloc_window().error().code, ENOSPC);
    EXPECT_EQ(t.remove(a), MrStatus::ok);
    EXPECT_TRUE(t.add({0x1000, 1, Iova(0), kLW}).ok());
}

TEST(MrTable, RemovedAndReusedKeysFail) {
    MrTable t = make(1);
    const uint32_t old = must_add(t, {0x1000, 0x1000, Iova(0), kLW});
    EXPECT_EQ(t.remove(old), MrStatus::ok);
    EXPECT_EQ(status(t, old, 0x1000, 1), MrStatus::bad_key);   // the slot is free
    EXPECT_EQ(t.remove(old), MrStatus::bad_key);
    EXPECT_EQ(t.find(old), nullptr);
    const uint32_t now = must_add(t, {0x1000, 0x1000, Iova(0), kLW});
    EXPECT_EQ(key_index(now), key_index(old));
    EXPECT_NE(now, old);
    EXPECT_EQ(status(t, old, 0x1000, 1), MrStatus::stale_key);
    EXPECT_EQ(t.remove(old), MrStatus::stale_key);
    EXPECT_EQ(status(t, now, 0x1000, 1), MrStatus::ok);
    EXPECT_EQ(status(t, make_key(1, key_consumer(now)), 0x1000, 1), MrStatus::bad_key);   // past the end
    EXPECT_EQ(status(t, UINT32_MAX, 0, 0), MrStatus::bad_key);
}

TEST(MrTable, ConsumerKeysWrapAfter256Registrations) {
    MrTable t = make(1);
    const uint32_t first = must_add(t, {0x1000, 1, Iova(0), kLW});
    uint32_t key = first;
    for (int i = 0; i < 255; ++i) {
        ASSERT_EQ(t.remove(key), MrStatus::ok);
        key = must_add(t, {0x1000, 1, Iova(0), kLW});
        EXPECT_NE(key, first);
    }
    ASSERT_EQ(t.remove(key), MrStatus::ok);
    EXPECT_EQ(must_add(t, {0x1000, 1, Iova(0), kLW}), first);   // the limit of an 8-bit key
}

TEST(MrTable, FreedSlotsAreReusedOldestFirst) {
    MrTable t = make(3);
    const uint32_t a = must_add(t, {0x1000, 1, Iova(0), kLW}), b = must_add(t, {0x1000, 1, Iova(0), kLW});
    must_add(t, {0x1000, 1, Iova(0), kLW});
    ASSERT_EQ(t.remove(b), MrStatus::ok);
    ASSERT_EQ(t.remove(a), MrStatus::ok);
    EXPECT_EQ(key_index(must_add(t, {0x1000, 1, Iova(0), kLW})), key_index(b));
    EXPECT_EQ(key_index(must_add(t, {0x1000, 1, Iova(0), kLW})), key_index(a));
}

TEST(MrTable, FastRegisterBindsInvalidatesAndRebinds) {
    MrTable t = make(4);
    auto alloc = t.alloc_unbound(0x10000);
    ASSERT_TRUE(alloc.ok());
    const uint32_t k0 = *alloc;
    EXPECT_EQ(t.state(k0), MrState::invalid);
    EXPECT_EQ(status(t, k0, 0, 1), MrStatus::invalid_state);
    const uint8_t ck = static_cast<uint8_t>(key_consumer(k0) + 1);
    const MrEntry e{0x40000, 0x8000, Iova(0x900000), kLW | kRR};
    EXPECT_EQ(t.bind(k0 ^ 1, ck, e), MrStatus::stale_key);
    EXPECT_EQ(t.bind(k0, ck, {0x40000, 0x10001, Iova(0), kLW}), MrStatus::out_of_bounds);   // > max_len
    EXPECT_EQ(t.bind(k0, ck, {0x40000, 0, Iova(0), kLW}), MrStatus::out_of_bounds);
    EXPECT_EQ(t.bind(k0, ck, {0x40000, 0x1000, Iova(0), kRW}), MrStatus::access_denied);
    ASSERT_EQ(t.bind(k0, ck, e), MrStatus::ok);
    const uint32_t k1 = make_key(key_index(k0), ck);
    EXPECT_EQ(status(t, k0, 0x40000, 1), MrStatus::stale_key);
    Translation tr = t.translate(k1, 0x47fff, 1, kRR);
    EXPECT_EQ(tr.status, MrStatus::ok);
    EXPECT_EQ(tr.iova, Iova(0x907fff));
    EXPECT_EQ(t.bind(k1, ck, e), MrStatus::invalid_state);   // bound already: invalidate first
    EXPECT_EQ(t.local_invalidate(k1), MrStatus::ok);
    EXPECT_EQ(t.local_invalidate(k1), MrStatus::ok);          // idempotent
    EXPECT_EQ(status(t, k1, 0x40000, 1), MrStatus::invalid_state);
    ASSERT_EQ(t.bind(k1, 7, {0, 0x10000, Iova(0x100000), kLW | kZero}), MrStatus::ok);
    EXPECT_EQ(t.translate(make_key(key_index(k0), 7), 0xffff, 1, kLW).iova, Iova(0x10ffff));
    EXPECT_EQ(t.remove(make_key(key_index(k0), 7)), MrStatus::ok);
}

TEST(MrTable, OrdinaryRegionsAreNotFastRegistered) {
    MrTable t = make(4);
    const uint32_t k = must_add(t, {0x1000, 0x1000, Iova(0), kLW});
    EXPECT_EQ(t.bind(k, 9, {0x1000, 0x1000, Iova(0), kLW}), MrStatus::invalid_state);
    EXPECT_EQ(t.local_invalidate(k), MrStatus::invalid_state);
    EXPECT_EQ(t.invalidate_window(k), MrStatus::invalid_state);
    EXPECT_EQ(t.alloc_unbound(0).error().code, EINVAL);
}

// ibv_rereg_mr's access change: the keys stay, the rights change, the rules of add() hold.
TEST(MrTableAccess, NewRightsKeepTheKeys) {
    MrTable t = make(4);
    const uint32_t k = must_add(t, {0x100000, 0x1000, Iova(0), kLW | kRR});
    EXPECT_EQ(status(t, k, 0x100000, 8, kRW), MrStatus::access_denied);
    ASSERT_EQ(t.set_access(k, kLW | kRW), MrStatus::ok);
    EXPECT_EQ(status(t, k, 0x100000, 8, kRW), MrStatus::ok);
    EXPECT_EQ(status(t, k, 0x100000, 8, kRR), MrStatus::access_denied);
    EXPECT_EQ(t.set_access(k, kRW), MrStatus::access_denied);   // remote write needs local write
    EXPECT_EQ(status(t, k, 0x100000, 8, kRW), MrStatus::ok);    // and nothing changed
    EXPECT_EQ(t.set_access(k ^ 1, kLW), MrStatus::stale_key);
}

class MrWindows : public ::testing::Test {
protected:
    MrTable t_ = make(8);
    uint32_t mr_ = must_add(t_, {0x100000, 0x10000, Iova(0xa00000), kLW | kRR | kRW | kBind});
    uint32_t win_ = *t_.alloc_window();
    uint32_t bound_ = make_key(key_index(win_), 0x42);

    MrStatus bind(uint64_t addr, uint64_t len, Access a) { return t_.bind_window(mr_, win_, 0x42, addr, len, a); }
};

TEST_F(MrWindows, NarrowBoundsAndRights) {
    EXPECT_EQ(status(t_, win_, 0x100000, 1), MrStatus::invalid_state);   // not bound yet
    ASSERT_EQ(bind(0x104000, 0x1000, kRR), MrStatus::ok);
    Translation tr = t_.translate(bound_, 0x104800, 0x800, kRR, kQp);
    EXPECT_EQ(tr.status, MrStatus::ok);
    EXPECT_EQ(tr.iova, Iova(0xa04800));
    EXPECT_EQ(status(t_, bound_, 0x103fff, 1, kRR), MrStatus::out_of_bounds);   // in the MR, not the window
    EXPECT_EQ(status(t_, bound_, 0x104000, 8, kRW), MrStatus::access_denied);    // the MR has it, the window not
    EXPECT_EQ(status(t_, win_, 0x104000, 8, kRR), MrStatus::stale_key);
    EXPECT_EQ(status(t_, mr_, 0x100000, 0x10000, kRW), MrStatus::ok);             // the MR is unchanged
}

TEST_F(MrWindows, BindChecksTheRegion) {
    EXPECT_EQ(bind(0x10f000, 0x2000, kRR), MrStatus::out_of_bounds);
    EXPECT_EQ(bind(0x104000, 0, kRR), MrStatus::out_of_bounds);
    EXPECT_EQ(bind(0x104000, 0x1000, kBind), MrStatus::access_denied);    // not a window right
    EXPECT_EQ(t_.bind_window(mr_ ^ 1, win_, 1, 0x104000, 1, kRR), MrStatus::stale_key);
    EXPECT_EQ(t_.bind_window(win_, win_, 1, 0x104000, 1, kRR), MrStatus::invalid_state);
    EXPECT_EQ(t_.bind_window(mr_, mr_, 1, 0x104000, 1, kRR), MrStatus::invalid_state);
    const uint32_t plain = must_add(t_, {0x100000, 0x10000, Iova(0), kLW | kRR});
    EXPECT_EQ(t_.bind_window(plain, win_, 1, 0x104000, 1, kRR), MrStatus::access_denied);   // no MW_BIND
    // A window's remote rights are its own, not the MR's; one a peer may write or update needs
    // an MR with local write (IB spec C10-74), as rxe checks it.
    const uint32_t ro = must_add(t_, {0x100000, 0x10000, Iova(0), kRR | kBind});
    EXPECT_EQ(t_.bind_window(ro, win_, 1, 0x104000, 1, kRW), MrStatus::access_denied);
    EXPECT_EQ(t_.bind_window(ro, win_, 1, 0x104000, 1, kRA), MrStatus::access_denied);
    ASSERT_EQ(bind(0x104000, 0x1000, kLW | kRA), MrStatus::ok);   // atomics the MR itself lacks; LOCAL_WRITE ignored
    EXPECT_EQ(status(t_, bound_, 0x104000, 8, kRA), MrStatus::ok);
    EXPECT_EQ(t_.bind_window(mr_, bound_, 1, 0x104000, 1, kRR), MrStatus::invalid_state);   // bound already
}

TEST_F(MrWindows, InvalidationAndTheRegionGoingAwayRevoke) {
    ASSERT_EQ(bind(0x100000, 0x1000, kRW), MrStatus::ok);
    EXPECT_EQ(t_.invalidate_window(bound_), MrStatus::ok);
    EXPECT_EQ(status(t_, bound_, 0x100000, 1, kRW), MrStatus::invalid_state);
    ASSERT_EQ(t_.bind_window(mr_, bound_, 0x43, 0x100000, 0x1000, kRW), MrStatus::ok);   // rebind, new key
    const uint32_t again = make_key(key_index(win_), 0x43);
    EXPECT_EQ(status(t_, again, 0x100000, 1, kRW), MrStatus::ok);
    EXPECT_EQ(t_.local_invalidate(again), MrStatus::ok);   // also works on windows
    ASSERT_EQ(t_.bind_window(mr_, again, 0x44, 0x100000, 0x1000, kRW), MrStatus::ok);
    const uint32_t third = make_key(key_index(win_), 0x44);
    ASSERT_EQ(t_.remove(mr_), MrStatus::ok);
    EXPECT_EQ(status(t_, third, 0x100000, 1, kRW), MrStatus::invalid_state);
    must_add(t_, {0x100000, 0x10000, Iova(0), kLW | kRW | kBind});   // another MR, maybe the same slot
    EXPECT_EQ(status(t_, third, 0x100000, 1, kRW), MrStatus::invalid_state);
    EXPECT_EQ(t_.remove(third), MrStatus::ok);
}

// A WR's own buffer never goes through a window: translate_local refuses one as translate
// does for a local use, whatever its state, and the MR under it still translates.
TEST_F(MrWindows, LocalTranslationRefusesWindows) {
    EXPECT_EQ(t_.translate_local(win_, 0x100000, 1, Access::none).status, MrStatus::invalid_state);
    ASSERT_EQ(bind(0x104000, 0x1000, kRR), MrStatus::ok);
    EXPECT_EQ(t_.translate_local(bound_, 0x104000, 1, Access::none).status, MrStatus::invalid_state);
    EXPECT_EQ(t_.translate_local(win_, 0x104000, 1, Access::none).status, MrStatus::stale_key);
    const LocalTranslation mr = t_.translate_local(mr_, 0x104000, 0x1000, kLW);
    EXPECT_EQ(mr.status, MrStatus::ok);
    EXPECT_EQ(mr.iova, Iova(0xa04000));
    EXPECT_EQ(mr.host, 0x104000u);
    EXPECT_EQ(t_.translate_local(make_key(1000, 0), 0, 1, Access::none).status, MrStatus::bad_key);   // past the table
}

TEST_F(MrWindows, ZeroBasedWindowsAndWindowsOnZeroBasedRegions) {
    ASSERT_EQ(bind(0x108000, 0x2000, kRR | kZero), MrStatus::ok);
    Translation tr = t_.translate(bound_, 0x10, 0x10, kRR, kQp);
    EXPECT_EQ(tr.status, MrStatus::ok);
    EXPECT_EQ(tr.iova, Iova(0xa08010));
    EXPECT_EQ(status(t_, bound_, 0x1fff, 2, kRR), MrStatus::out_of_bounds);
    const uint32_t zmr = must_add(t_, {0x7f0000000000, 0x4000, Iova(0xb00000), kLW | kRW | kBind | kZero});
    const uint32_t w2 = *t_.alloc_window();
    ASSERT_EQ(t_.bind_window(zmr, w2, 5, 0x1000, 0x1000, kRW), MrStatus::ok);   // addr is an offset
    tr = t_.translate(make_key(key_index(w2), 5), 0x1004, 4, kRW, kQp);
    EXPECT_EQ(tr.status, MrStatus::ok);
    EXPECT_EQ(tr.iova, Iova(0xb01004));
}

TEST(MrTable, StatusesHaveNames) {
    EXPECT_STREQ(to_string(MrStatus::ok), "ok");
    EXPECT_STREQ(to_string(MrStatus::stale_key), "stale key");
    EXPECT_STREQ(to_string(MrStatus::invalid_state), "invalid state");
}

// ---- Random sequences against a model ------------------------------------------------------

struct ModelEntry {
    MrEntry e;
    bool valid = true;   // fast-register MRs may be invalid
    bool fast = false;
};

class MrTableRandom : public ::testing::Test {
protected:
    static constexpr uint32_t kCap = 48;
    MrTable t_ = make(kCap);
    std::map<uint32_t, ModelEntry> model_;   // the current key of every slot in use
    std::vector<uint32_t> seen_;             // every key ever handed out
    std::set<uint32_t> issued_;              // the same, to find repeats
    std::mt19937_64 rng_{77};
    int outcomes_[6] = {};                   // translations by MrStatus

    uint64_t pick(uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng_); }

    Access random_access() {
        Access a = Access(pick(0, 15)) & (kLW | kRR | kRW | kRA);
        if ((a & (kRW | kRA)) != Access::none) a |= kLW;
        return pick(0, 3) == 0 ? a | kZero : a;
    }
    MrEntry random_entry() {
        const uint64_t len = pick(1, 1 << 20);
        const uint64_t addr = pick(0, 1) ? pick(0, 1ull << 47) : UINT64_MAX - len + 1 - pick(0, 4096);
        return {addr, len, Iova(pick(0, 1ull << 40) & ~0xfffull), random_access()};
    }
    bool index_in_use(uint32_t index) const {
        for (auto& [k, m] : model_) if (key_index(k) == index) return true;
        return false;
    }
    uint32_t random_key() {
        const uint64_t dice = pick(0, 9);
        if (dice < 6 && !model_.empty()) return std::next(model_.begin(), pick(0, model_.size() - 1))->first;
        if (dice < 9 && !seen_.empty()) return seen_[pick(0, seen_.size() - 1)];
        return static_cast<uint32_t>(pick(0, UINT32_MAX));
    }

    // What translate() must say, computed independently (128-bit sums, no early outs shared).
    Translation expected(uint32_t key, uint64_t addr, uint64_t len, Access req) const {
        auto it = model_.find(key);
        if (it == model_.end())
            return {index_in_use(key_index(key)) ? MrStatus::stale_key : MrStatus::bad_key, {}};
        const ModelEntry& m = it->second;
        if (!m.valid) return {MrStatus::invalid_state, {}};
        const unsigned __int128 base = m.e.zero_based() ? 0 : m.e.addr;
        if (addr < base || (unsigned __int128)addr + len > base + m.e.length) return {MrStatus::out_of_bounds, {}};
        if ((uint32_t(req) & ~uint32_t(m.e.access)) != 0) return {MrStatus::access_denied, {}};
        return {MrStatus::ok, Iova(m.e.iova.value + uint64_t(addr - base))};
    }

    void add_one() {
        const MrEntry e = random_entry();
        const bool fast = pick(0, 3) == 0;
        if (model_.size() == kCap) {
            EXPECT_EQ(fast ? t_.alloc_unbound(e.length).error().code : t_.add(e).error().code, ENOSPC);
            return;
        }
        const uint32_t key = fast ? *t_.alloc_unbound(e.length) : t_.add(e)->lkey;
        // Each slot is reused far fewer than 256 times here, so no key may come back.
        ASSERT_TRUE(issued_.insert(key).second) << "key reissued: " << std::hex << key;
        model_[key] = {e, !fast, fast};
        seen_.push_back(key);
    }
    void remove_one() {
        const uint32_t key = random_key();
        const MrStatus want = model_.count(key) ? MrStatus::ok : expected(key, 0, 0, Access::none).status;
        ASSERT_EQ(t_.remove(key), want) << std::hex << key;
        model_.erase(key);
    }
    // Fast-register MRs: invalidate a valid one, or bind an invalid one under the next key.
    void flip_one() {
        const uint32_t key = random_key();
        auto it = model_.find(key);
        if (it == model_.end() || !it->second.fast) return;
        ModelEntry m = it->second;
        if (m.valid) {
            ASSERT_EQ(t_.local_invalidate(key), MrStatus::ok);
            model_[key].valid = false;
            return;
        }
        const uint8_t ck = static_cast<uint8_t>(key_consumer(key) + 1);
        ASSERT_EQ(t_.bind(key, ck, m.e), MrStatus::ok);
        model_.erase(it);
        const uint32_t now = make_key(key_index(key), ck);
        ASSERT_TRUE(issued_.insert(now).second);
        model_[now] = {m.e, true, true};
        seen_.push_back(now);
    }
    void translate_one() {
        const uint32_t key = random_key();
        auto it = model_.find(key);
        const MrEntry e = it != model_.end() ? it->second.e : random_entry();
        const uint64_t base = e.zero_based() ? 0 : e.addr;
        const uint64_t addr = base + e.length / 2 - pick(0, e.length / 2 + 64) + pick(0, e.length / 2 + 64);
        const uint64_t len = pick(0, 7) == 0 ? UINT64_MAX - pick(0, 8) : pick(0, e.length / 2 + 64);
        const Access req = Access(pick(0, 15)) & (kLW | kRR | kRW | kRA);
        const Translation got = t_.translate(key, addr, len, req), want = expected(key, addr, len, req);
        ASSERT_EQ(got.status, want.status) << std::hex << "key " << key << " addr " << addr << " len " << len;
        ++outcomes_[int(got.status)];
        if (want.status == MrStatus::ok) {
            ASSERT_EQ(got.iova, want.iova);
        }
        // The drivers' inline path answers the same, the CPU address included.
        const LocalTranslation local = t_.translate_local(key, addr, len, req);
        ASSERT_EQ(local.status, got.status) << std::hex << "key " << key << " addr " << addr << " len " << len;
        if (got.status == MrStatus::ok) {
            ASSERT_EQ(local.iova, got.iova);
            ASSERT_EQ(local.host, got.host);
        }
    }
};

TEST_F(MrTableRandom, TenThousandOpsMatchAMapModel) {
    for (int op = 0; op < 10000; ++op) {
        const uint64_t dice = pick(0, 99);
        if (dice < 20) add_one();
        else if (dice < 35) remove_one();
        else if (dice < 45) flip_one();
        else translate_one();
        if (HasFatalFailure()) return;
        ASSERT_EQ(t_.size(), model_.size());
    }
    // The sequence reached every outcome, not only failures.
    for (int st = 0; st < 6; ++st) EXPECT_GT(outcomes_[st], 20) << to_string(MrStatus(st));
    EXPECT_GT(seen_.size(), 1000u);
}

TEST_F(MrWindows, WindowsAnswerRemoteAccessesOnly) {
    ASSERT_EQ(bind(0x104000, 0x1000, kRR), MrStatus::ok);
    EXPECT_EQ(t_.translate(bound_, 0x104000, 8, kRR).status, MrStatus::invalid_state);   // a local use (lkey)
    EXPECT_EQ(t_.translate(bound_, 0x104000, 8, kRR, kQp).status, MrStatus::ok);
}

TEST_F(MrWindows, Type2BWindowsBelongToTheirQueuePair) {
    ASSERT_EQ(t_.bind_window(mr_, win_, 0x42, 0x104000, 0x1000, kRW, kQp), MrStatus::ok);
    EXPECT_EQ(status(t_, bound_, 0x104000, 8, kRW), MrStatus::ok);
    EXPECT_EQ(t_.translate(bound_, 0x104000, 8, kRW, kQp + 1).status, MrStatus::invalid_state);   // another QP
    EXPECT_EQ(t_.invalidate(bound_, kQp + 1), MrStatus::invalid_state);   // nor may it invalidate it
    EXPECT_EQ(status(t_, bound_, 0x104000, 8, kRW), MrStatus::ok);
    EXPECT_EQ(t_.invalidate(bound_, kQp), MrStatus::ok);
    EXPECT_EQ(status(t_, bound_, 0x104000, 8, kRW), MrStatus::invalid_state);
    EXPECT_EQ(t_.invalidate(mr_, kQp), MrStatus::invalid_state);   // a region: only remove() ends it
}

TEST_F(MrWindows, Type1WindowsAreReboundAndUnboundWithZeroLength) {
    const uint32_t w1 = *t_.alloc_window(WindowType::type1);
    EXPECT_EQ(t_.window_type(w1), WindowType::type1);
    ASSERT_EQ(t_.bind_window(mr_, w1, 1, 0x104000, 0x1000, kRR, kQp), MrStatus::ok);
    const uint32_t k1 = make_key(key_index(w1), 1);
    EXPECT_EQ(t_.translate(k1, 0x104000, 8, kRR, kQp + 7).status, MrStatus::ok);   // any QP of the domain
    ASSERT_EQ(t_.bind_window(mr_, k1, 2, 0x108000, 0x1000, kRR), MrStatus::ok);   // rebound while bound
    const uint32_t k2 = make_key(key_index(w1), 2);
    EXPECT_EQ(status(t_, k1, 0x104000, 8, kRR), MrStatus::stale_key);
    EXPECT_EQ(status(t_, k2, 0x108000, 8, kRR), MrStatus::ok);
    EXPECT_EQ(t_.invalidate(k2, kQp), MrStatus::invalid_state);   // not by invalidation
    ASSERT_EQ(t_.bind_window(mr_, k2, 3, 0, 0, kRR), MrStatus::ok);   // zero length: unbound
    EXPECT_EQ(status(t_, make_key(key_index(w1), 3), 0x108000, 8, kRR), MrStatus::invalid_state);
    EXPECT_EQ(status(t_, k2, 0x108000, 8, kRR), MrStatus::stale_key);
    EXPECT_EQ(t_.alloc_window(WindowType(3)).error().code, EINVAL);
}

}  // namespace
}  // namespace vfab::dma

namespace vfab::dma {
namespace {

// A fast-register MR over scattered blocks: each byte where its block is, one run for a device,
// copies across blocks, windows through it, the block limit.
TEST(MrTableBlocks, ScatteredBlocksTranslateInListOrder) {
    MrTable t = make(8);
    std::vector<uint8_t> mem(4 * 256);
    const auto at = [&](uint32_t block) { return reinterpret_cast<uint64_t>(mem.data()) + block * 256; };
    EXPECT_EQ(t.alloc_unbound(4096, 0).error().code, EINVAL);
    EXPECT_EQ(t.alloc_unbound(4096, MrTable::kMaxBlocks + 1).error().code, EINVAL);
    const uint32_t key = *t.alloc_unbound(4096, 3);
    EXPECT_EQ(t.max_blocks(key), 3u);
    EXPECT_TRUE(t.blocks(key, 4).empty()) << "more than max_blocks";
    std::span<Block> b = t.blocks(key, 3);
    ASSERT_EQ(b.size(), 3u);
    const uint32_t order[3] = {3, 0, 2};   // blocks of mem, out of order
    for (uint32_t i = 0; i < 3; ++i) b[i] = {at(order[i]), Iova(0x10000 + order[i] * 0x1000)};
    // 600 bytes from offset 16 of the first block, answering to 0x5000.
    ASSERT_EQ(t.bind_blocks(key, 7, MrEntry{0x5000, 600, {}, kLW | kRW | kBind}, 256, 16, 3), MrStatus::ok);
    const uint32_t k = make_key(key_index(key), 7);
    const Translation one = t.translate(k, 0x5000 + 10, 8, kRW);
    ASSERT_EQ(one.status, MrStatus::ok);
    EXPECT_EQ(one.host, at(3) + 26);
    EXPECT_EQ(one.iova.value, 0x13000u + 26);
    EXPECT_EQ(t.translate(k, 0x5000 + 236, 8, kRW).status, MrStatus::discontiguous) << "across blocks 0 and 1";
    // The drivers' inline path takes translate()'s for scattered blocks: the same answers.
    const LocalTranslation local = t.translate_local(k, 0x5000 + 10, 8, kRW);
    EXPECT_EQ(local.status, MrStatus::ok);
    EXPECT_EQ(local.host, one.host);
    EXPECT_EQ(local.iova, one.iova);
    EXPECT_EQ(t.translate_local(k, 0x5000 + 236, 8, kRW).status, MrStatus::discontiguous);
    EXPECT_EQ(t.translate(k, 0x5000 + 595, 8, kRW).status, MrStatus::out_of_bounds);
    const Translation span = t.translate_span(k, 0x5000 + 236, 300, kRW);
    ASSERT_EQ(span.status, MrStatus::ok);
    EXPECT_EQ(span.run, 4u);
    EXPECT_EQ(span.host, at(3) + 252);
    ASSERT_NE(span.map, nullptr);
    std::vector<uint8_t> from(300);
    for (uint32_t i = 0; i < 300; ++i) from[i] = uint8_t(i + 1);
    copy_to(*span.map, span.pos, from.data(), from.size());
    EXPECT_EQ(mem[3 * 256 + 252], 1);
    EXPECT_EQ(mem[3 * 256 + 255], 4);
    EXPECT_EQ(mem[0], 5);                  // block 1 of the list is mem's block 0
    EXPECT_EQ(mem[255], uint8_t(4 + 256));
    EXPECT_EQ(mem[2 * 256 + 0], uint8_t(4 + 256 + 1));
    std::vector<uint8_t> back(300);
    copy_from(*span.map, span.pos, back.data(), back.size());
    EXPECT_EQ(back, from);
    // A window over bytes 200..400 of the MR translates through it.
    const uint32_t w = *t.alloc_window();
    ASSERT_EQ(t.bind_window(k, w, 1, 0x5000 + 200, 200, kRW), MrStatus::ok);
    const Translation through = t.translate_span(make_key(key_index(w), 1), 0x5000 + 250, 20, kRW, kQp);
    ASSERT_EQ(through.status, MrStatus::ok);
    EXPECT_EQ(through.host, at(0) + (16 + 250 - 256));
    // Invalidated, then bound again to one run: no map.
    ASSERT_EQ(t.local_invalidate(k), MrStatus::ok);
    EXPECT_EQ(t.translate_local(k, 0x5000 + 10, 8, kRW).status, MrStatus::invalid_state);
    ASSERT_EQ(t.bind(k, 8, MrEntry{0x5000, 100, Iova(0x20000), kLW}, at(1)), MrStatus::ok);
    EXPECT_EQ(t.translate_span(make_key(key_index(key), 8), 0x5000, 100, kLW).map, nullptr);
    const LocalTranslation rebound = t.translate_local(make_key(key_index(key), 8), 0x5000 + 4, 8, kLW);
    EXPECT_EQ(rebound.status, MrStatus::ok);
    EXPECT_EQ(rebound.host, at(1) + 4);
    EXPECT_EQ(rebound.iova.value, 0x20004u);
    EXPECT_EQ(t.translate_local(k, 0x5000 + 4, 8, kLW).status, MrStatus::stale_key);
}

TEST(MrTableBlocks, BindBlocksChecksItsList) {
    MrTable t = make(4);
    const uint32_t key = *t.alloc_unbound(1000, 2);
    ASSERT_EQ(t.blocks(key, 2).size(), 2u);
    const MrEntry e{0, 500, {}, kLW | kZero};
    EXPECT_EQ(t.bind_blocks(key, 1, e, 256, 16, 2), MrStatus::out_of_bounds)
        << "500 bytes from offset 16 need 3 blocks of 256";
    EXPECT_EQ(t.bind_blocks(key, 1, e, 256, 256, 2), MrStatus::out_of_bounds) << "offset past the first block";
    EXPECT_EQ(t.bind_blocks(key, 1, MrEntry{0, 2000, {}, kLW}, 1024, 0, 2), MrStatus::out_of_bounds)
        << "longer than the MR's max_len";
    EXPECT_EQ(t.bind_blocks(key, 1, MrEntry{0, 300, {}, kRW}, 256, 0, 2), MrStatus::access_denied)
        << "REMOTE_WRITE without LOCAL_WRITE";
    const uint32_t region = must_add(t, MrEntry{0x1000, 64, Iova(0x1000), kLW});
    EXPECT_TRUE(t.blocks(region, 1).empty()) << "a region has no block map";
    EXPECT_EQ(t.max_blocks(region), 0u);
}

}  // namespace
}  // namespace vfab::dma
