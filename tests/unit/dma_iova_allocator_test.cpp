// IovaAllocator: edge cases, then random allocate/reserve/free sequences checked page by page
// against a bitmap model.
#include "vfab/dma/iova_allocator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace vfab::dma {
namespace {

using vfio::IovaRange;
constexpr uint64_t kPage = 4096;

// IovaRange has no operator==; compare (start, last) pairs, which gtest also prints.
using Spans = std::vector<std::pair<uint64_t, uint64_t>>;
Spans spans(const std::vector<IovaRange>& v) {
    Spans out;
    for (const IovaRange& r : v) out.emplace_back(r.start, r.last);
    return out;
}

IovaAllocator make(std::vector<IovaRange> ranges, uint64_t page = kPage) {
    auto a = IovaAllocator::create(std::move(ranges), page);
    EXPECT_TRUE(a.ok()) << a.error().message;
    return std::move(a).value();
}

uint64_t must_allocate(IovaAllocator& a, uint64_t len, uint64_t align = 0, std::optional<Iova> pref = {}) {
    auto r = a.allocate(len, align, pref);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? r->value : ~0ull;
}

TEST(IovaAllocator, CreateShrinksSortsAndMergesRanges) {
    auto a = make({{0x20000, 0x2ffff}, {0x1800, 0x4fff}, {0x5000, 0x6fff}, {0x7001, 0x7fff}, {0x28000, 0x3ffff}});
    Spans want = {{0x2000, 0x6fff}, {0x20000, 0x3ffff}};
    EXPECT_EQ(spans(a.ranges()), want);
    EXPECT_EQ(spans(a.free_ranges()), want);
    EXPECT_EQ(a.free_bytes(), 0x5000u + 0x20000u);
    EXPECT_EQ(a.largest_free(), 0x20000u);
}

TEST(IovaAllocator, CreateRejectsBadPageSizeAndRangesWithoutAWholePage) {
    auto bad_page = IovaAllocator::create({{0, 0xffff}}, 3000);
    ASSERT_FALSE(bad_page.ok());
    EXPECT_EQ(bad_page.error().code, EINVAL);
    auto none = IovaAllocator::create({{0x1001, 0x1fff}, {0x5000, 0x5ffe}, {9, 2}}, kPage);
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.error().code, ERANGE);
    EXPECT_NE(none.error().message.find("whole 4096-byte page"), std::string::npos);
    EXPECT_FALSE(IovaAllocator::create({}, kPage).ok());
}

TEST(IovaAllocator, TopOfTheAddressSpaceNeverOverflows) {
    const uint64_t top = UINT64_MAX - 4 * kPage + 1;
    auto a = make({{top, UINT64_MAX}});
    EXPECT_EQ(a.free_bytes(), 4 * kPage);
    EXPECT_EQ(must_allocate(a, 2 * kPage, 0, Iova(top + 2 * kPage)), top + 2 * kPage);
    EXPECT_EQ(must_allocate(a, kPage), top);
    EXPECT_FALSE(a.allocate(2 * kPage).ok());
    EXPECT_FALSE(a.allocate(UINT64_MAX).ok());   // rounding up would overflow
    ASSERT_TRUE(a.free(Iova(top + 2 * kPage), 2 * kPage).ok());
    ASSERT_TRUE(a.free(Iova(top), kPage).ok());
    EXPECT_EQ(spans(a.free_ranges()), (Spans{{top, UINT64_MAX}}));
    EXPECT_FALSE(a.reserve(Iova(top), 8 * kPage).ok());   // wraps past 2^64
}

TEST(IovaAllocator, WholeSixtyFourBitSpaceSaturatesTheByteCounts) {
    auto a = make({{0, UINT64_MAX}});
    EXPECT_EQ(a.free_bytes(), UINT64_MAX);
    EXPECT_EQ(a.largest_free(), UINT64_MAX);
    EXPECT_EQ(must_allocate(a, kPage), 0u);
    EXPECT_EQ(a.free_bytes(), UINT64_MAX - kPage + 1);
}

TEST(IovaAllocator, PreferredAddressIsUsedWhenFreeAndAligned) {
    auto a = make({{0x100000, 0x1fffff}});
    EXPECT_EQ(must_allocate(a, 0x3000, 0, Iova(0x180000)), 0x180000u);   // IOVA = VA
    EXPECT_EQ(must_allocate(a, 0x1000, 0, Iova(0x183000)), 0x183000u);   // right after it
    // Taken, misaligned, outside the ranges, or running past the end: lowest fit instead.
    EXPECT_EQ(must_allocate(a, 0x1000, 0, Iova(0x181000)), 0x100000u);   // inside the first
    EXPECT_EQ(must_allocate(a, 0x1000, 0, Iova(0x190800)), 0x101000u);
    EXPECT_EQ(must_allocate(a, 0x1000, 0, Iova(0x7000)), 0x102000u);
    EXPECT_EQ(must_allocate(a, 0x2000, 0, Iova(0x1ff000)), 0x103000u);
    EXPECT_EQ(must_allocate(a, 0x10000, 0x10000, Iova(0x1c8000)), 0x110000u);   // not 64K-aligned
}

TEST(IovaAllocator, AlignmentIsHonouredAndSmallAlignmentsMeanAPage) {
    auto a = make({{0x1000, 0xffffff}});
    EXPECT_EQ(must_allocate(a, 0x1000), 0x1000u);
    EXPECT_EQ(must_allocate(a, 0x1000, 0x200000), 0x200000u);
    EXPECT_EQ(must_allocate(a, 0x1000, 64), 0x2000u);
    auto bad = a.allocate(0x1000, 0x3000);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error().code, EINVAL);
    EXPECT_NE(bad.error().message.find("power of two"), std::string::npos);
}

TEST(IovaAllocator, LengthsAreRoundedUpToThePage) {
    auto a = make({{0, 0xffff}});
    EXPECT_EQ(must_allocate(a, 1), 0u);
    EXPECT_EQ(must_allocate(a, kPage + 1), kPage);
    EXPECT_EQ(must_allocate(a, 1), 3 * kPage);
    ASSERT_TRUE(a.free(Iova(kPage), kPage + 1).ok());   // the same (iova, len) as allocated
    EXPECT_EQ(must_allocate(a, 2 * kPage), kPage);
}

TEST(IovaAllocator, ZeroLengthAndMisalignedAddressesAreErrors) {
    auto a = make({{0, 0xffff}});
    auto zero = a.allocate(0);
    ASSERT_FALSE(zero.ok());
    EXPECT_EQ(zero.error().code, EINVAL);
    EXPECT_NE(zero.error().message.find("zero length"), std::string::npos);
    EXPECT_EQ(a.reserve(Iova(0x1800), kPage).error().code, EINVAL);
    EXPECT_EQ(a.free(Iova(0x1800), kPage).error().code, EINVAL);
    EXPECT_EQ(a.free(Iova(0), 0).error().code, EINVAL);
}

TEST(IovaAllocator, ExhaustionSaysWhatWasAskedAndTheLargestFreeRange) {
    auto a = make({{0, 0x7fff}});
    must_allocate(a, kPage, 0, Iova(0x2000));
    auto r = a.allocate(0x6000);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ENOMEM);
    const std::string& m = r.error().message;
    EXPECT_NE(m.find("asked for 24576 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("largest free range is 20480 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("28672 bytes free in 2 ranges"), std::string::npos) << m;
}

TEST(IovaAllocator, FreeMergesWithBothNeighbours) {
    auto a = make({{0, 0xfffff}});
    uint64_t x = must_allocate(a, kPage), y = must_allocate(a, kPage), z = must_allocate(a, kPage);
    ASSERT_TRUE(a.free(Iova(y), kPage).ok());
    EXPECT_EQ(a.free_ranges().size(), 2u);
    ASSERT_TRUE(a.free(Iova(x), kPage).ok());
    EXPECT_EQ(a.free_ranges().size(), 2u);
    ASSERT_TRUE(a.free(Iova(z), kPage).ok());
    EXPECT_EQ(spans(a.free_ranges()), spans(a.ranges()));
}

TEST(IovaAllocator, DoubleFreeAndForeignFreeAreErrors) {
    auto a = make({{0x10000, 0x1ffff}});
    uint64_t x = must_allocate(a, 2 * kPage);
    ASSERT_TRUE(a.free(Iova(x), 2 * kPage).ok());
    auto twice = a.free(Iova(x), 2 * kPage);
    ASSERT_FALSE(twice.ok());
    EXPECT_NE(twice.error().message.find("freed twice"), std::string::npos);
    must_allocate(a, kPage);
    EXPECT_FALSE(a.free(Iova(x), 2 * kPage).ok());   // half of it is free
    EXPECT_EQ(a.free(Iova(0x1000), kPage).error().code, ERANGE);
    EXPECT_EQ(a.free(Iova(0x1f000), 2 * kPage).error().code, ERANGE);   // runs past the range
    EXPECT_EQ(a.free(Iova(UINT64_MAX - kPage + 1), 2 * kPage).error().code, ERANGE);
}

TEST(IovaAllocator, ReserveMarksRangesUsed) {
    auto a = make({{0, 0xffff}});
    ASSERT_TRUE(a.reserve(Iova(0), 2 * kPage).ok());
    EXPECT_EQ(must_allocate(a, kPage, 0, Iova(0)), 2 * kPage);
    EXPECT_EQ(a.reserve(Iova(kPage), kPage).error().code, EEXIST);
    EXPECT_EQ(a.reserve(Iova(0xf000), 2 * kPage).error().code, ERANGE);
    EXPECT_EQ(a.reserve(Iova(0x20000), kPage).error().code, ERANGE);
    ASSERT_TRUE(a.free(Iova(0), 2 * kPage).ok());   // reserved ranges are freed like allocations
    EXPECT_EQ(must_allocate(a, 2 * kPage), 0u);
}

// ---- Random sequences against a model: one bool per page, true = used --------------------

struct Model {
    std::vector<IovaRange> allowed;
    std::vector<bool> used;   // indexed by page number; pages outside `allowed` stay true

    explicit Model(std::vector<IovaRange> ranges) : allowed(std::move(ranges)) {
        used.assign(allowed.back().last / kPage + 1, true);
        for (const IovaRange& r : allowed) set(r.start, r.last - r.start + 1, false);
    }
    void set(uint64_t iova, uint64_t len, bool v) {
        for (uint64_t p = iova / kPage; p < (iova + len) / kPage; ++p) used[p] = v;
    }
    bool all(uint64_t iova, uint64_t len, bool v) const {
        if ((iova + len) / kPage > used.size()) return !v;   // past the model: all used
        for (uint64_t p = iova / kPage; p < (iova + len) / kPage; ++p)
            if (used[p] != v) return false;
        return true;
    }
    bool inside(uint64_t iova, uint64_t len) const {
        return std::any_of(allowed.begin(), allowed.end(), [&](auto& r) { return r.contains(iova, len); });
    }
    // The lowest aligned address where `len` bytes are free, found by scanning.
    std::optional<uint64_t> lowest_fit(uint64_t len, uint64_t align) const {
        for (const IovaRange& r : allowed)
            for (uint64_t a = (r.start + align - 1) & ~(align - 1); a + len - 1 <= r.last; a += align)
                if (all(a, len, false)) return a;
        return std::nullopt;
    }
    // The maximal runs of free pages: what the allocator's free list must be, exactly.
    std::vector<IovaRange> free_runs() const {
        std::vector<IovaRange> runs;
        for (uint64_t p = 0; p < used.size(); ++p) {
            if (used[p]) continue;
            if (!runs.empty() && runs.back().last + 1 == p * kPage) runs.back().last += kPage;
            else runs.push_back({p * kPage, p * kPage + kPage - 1});
        }
        return runs;
    }
};

struct Live {
    uint64_t iova, len;   // len as passed (not rounded)
};

uint64_t rounded(uint64_t len) { return (len + kPage - 1) & ~(kPage - 1); }

class IovaAllocatorRandom : public ::testing::Test {
protected:
    std::vector<IovaRange> ranges_ = {{0x1000, 0xc8fff}, {0x100000, 0x22bfff}, {0x400000, 0x5f3fff}};
    IovaAllocator alloc_ = make(ranges_);
    Model model_{ranges_};
    std::vector<Live> live_;
    std::vector<Live> freed_;
    std::mt19937_64 rng_{20240611};
    int preferred_hits_ = 0, exhausted_ = 0;

    uint64_t pick(uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng_); }

    void allocate_one() {
        const uint64_t len = pick(1, 8 * kPage);
        const uint64_t align = kPage << pick(0, 4);
        std::optional<Iova> pref;
        if (pick(0, 2) == 0) pref = Iova(pick(0, 0x600000) & ~(pick(0, 3) ? align - 1 : kPage - 1));
        auto r = alloc_.allocate(len, align, pref);
        const uint64_t rl = rounded(len);
        std::optional<uint64_t> want;
        if (pref && pref->value % align == 0 && model_.inside(pref->value, rl) && model_.all(pref->value, rl, false))
            want = pref->value;
        else
            want = model_.lowest_fit(rl, align);
        if (!want) {
            ASSERT_FALSE(r.ok());
            EXPECT_EQ(r.error().code, ENOMEM);
            ++exhausted_;
            return;
        }
        ASSERT_TRUE(r.ok()) << r.error().message;
        ASSERT_EQ(r->value, *want);
        preferred_hits_ += pref && *pref == *r;
        ASSERT_EQ(r->value % align, 0u);
        ASSERT_TRUE(model_.inside(r->value, rl));
        ASSERT_TRUE(model_.all(r->value, rl, false)) << "overlaps a live range";
        model_.set(r->value, rl, true);
        live_.push_back({r->value, len});
    }

    void reserve_one() {
        const uint64_t iova = pick(0, 0x600000) & ~(kPage - 1), len = pick(1, 4) * kPage;
        auto r = alloc_.reserve(Iova(iova), len);
        const bool inside = model_.inside(iova, len);
        if (inside && model_.all(iova, len, false)) {
            ASSERT_TRUE(r.ok()) << r.error().message;
            model_.set(iova, len, true);
            live_.push_back({iova, len});
        } else {
            ASSERT_FALSE(r.ok());
            EXPECT_EQ(r.error().code, inside ? EEXIST : ERANGE);
        }
    }

    void free_one() {
        if (live_.empty()) return;
        const size_t i = pick(0, live_.size() - 1);
        Live l = live_[i];
        live_[i] = live_.back();
        live_.pop_back();
        auto r = alloc_.free(Iova(l.iova), l.len);
        ASSERT_TRUE(r.ok()) << r.error().message;
        model_.set(l.iova, rounded(l.len), false);
        freed_.push_back(l);
    }

    // Frees a range freed before: an error unless all of it has been handed out again.
    void free_stale() {
        if (freed_.empty()) return;
        const Live l = freed_[pick(0, freed_.size() - 1)];
        if (model_.all(l.iova, rounded(l.len), true)) return;
        EXPECT_FALSE(alloc_.free(Iova(l.iova), l.len).ok());
    }
};

TEST_F(IovaAllocatorRandom, TenThousandOpsMatchABitmapModel) {
    for (int op = 0; op < 10000; ++op) {
        const uint64_t dice = pick(0, 99);
        if (dice < 45) allocate_one();
        else if (dice < 50) reserve_one();
        else if (dice < 95) free_one();
        else free_stale();
        if (HasFatalFailure()) return;
        if (op % 250 == 0) {
            ASSERT_EQ(spans(alloc_.free_ranges()), spans(model_.free_runs())) << "after op " << op;
        }
    }
    EXPECT_GT(freed_.size(), 1000u);
    EXPECT_GT(preferred_hits_, 100);   // both policies and running out were exercised
    EXPECT_GT(exhausted_, 10);
    std::shuffle(live_.begin(), live_.end(), rng_);
    while (!live_.empty()) free_one();
    // Everything freed: the free list is the allowed ranges again, not a pile of fragments.
    EXPECT_EQ(spans(alloc_.free_ranges()), spans(ranges_));
    EXPECT_EQ(alloc_.free_bytes(), 0xc8000u + 0x12c000u + 0x1f4000u);
}

TEST_F(IovaAllocatorRandom, FillingUpAndDrainingLeavesNoFragments) {
    // Small allocations until exhausted, then free every other one, then the rest.
    while (alloc_.allocate(kPage).ok()) {}
    EXPECT_EQ(alloc_.free_bytes(), 0u);
    EXPECT_EQ(alloc_.largest_free(), 0u);
    for (const IovaRange& r : ranges_)
        for (uint64_t a = r.start; a < r.last; a += 2 * kPage) ASSERT_TRUE(alloc_.free(Iova(a), kPage).ok());
    EXPECT_EQ(alloc_.largest_free(), kPage);
    for (const IovaRange& r : ranges_)
        for (uint64_t a = r.start + kPage; a < r.last; a += 2 * kPage) ASSERT_TRUE(alloc_.free(Iova(a), kPage).ok());
    EXPECT_EQ(spans(alloc_.free_ranges()), spans(ranges_));
}

}  // namespace
}  // namespace vfab::dma
