// IovaAllocator: a free list of [start, last] ranges keyed by start (see the header).
#include "vfab/dma/iova_allocator.hpp"

#include <algorithm>
#include <cerrno>
#include <iterator>

#include "vfab/dma/align.hpp"

namespace vfab::dma {

namespace {

std::string hex(uint64_t v) { return str_cat("0x", std::hex, v); }

std::string describe(uint64_t first, uint64_t last) { return str_cat("[", hex(first), ", ", hex(last), "]"); }

// Bytes in [first, last]; saturates for the one range that holds 2^64 bytes.
uint64_t range_bytes(uint64_t first, uint64_t last) {
    return last - first == UINT64_MAX ? UINT64_MAX : last - first + 1;
}

uint64_t add_saturating(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// Shrinks `r` to whole pages; false when no whole page is left.
bool shrink_to_pages(vfio::IovaRange& r, uint64_t page) {
    uint64_t first = 0;
    if (r.last < r.start || !align_up(r.start, page, first)) return false;
    // The page ending at UINT64_MAX is whole (2^64 is page-aligned); otherwise round last + 1 down.
    uint64_t end = r.last == UINT64_MAX ? 0 : (r.last + 1) & ~(page - 1);
    uint64_t last = end - 1;   // wraps to UINT64_MAX for the top page, as intended
    if (end == 0 && r.last != UINT64_MAX) return false;
    if (last < first) return false;
    r = {first, last};
    return true;
}

// Sorts ranges and merges the ones that overlap or touch.
std::vector<vfio::IovaRange> merge_ranges(std::vector<vfio::IovaRange> in) {
    std::sort(in.begin(), in.end(), [](auto& a, auto& b) { return a.start < b.start; });
    std::vector<vfio::IovaRange> out;
    for (const vfio::IovaRange& r : in) {
        if (!out.empty() && (out.back().last == UINT64_MAX || r.start <= out.back().last + 1))
            out.back().last = std::max(out.back().last, r.last);
        else
            out.push_back(r);
    }
    return out;
}

}  // namespace

Result<IovaAllocator> IovaAllocator::create(std::vector<vfio::IovaRange> ranges, uint64_t page_size) {
    if (!is_pow2(page_size))
        return Error{EINVAL, str_cat("IOVA allocator: page size ", page_size, " is not a power of two")};
    std::vector<vfio::IovaRange> whole;
    for (vfio::IovaRange r : ranges)
        if (shrink_to_pages(r, page_size)) whole.push_back(r);
    if (whole.empty())
        return Error{ERANGE, str_cat("IOVA allocator: none of the ", ranges.size(), " IOVA ranges holds a whole ",
                                     page_size, "-byte page — check the IOMMU's reported ranges")};
    return IovaAllocator(merge_ranges(std::move(whole)), page_size);
}

IovaAllocator::IovaAllocator(std::vector<vfio::IovaRange> allowed, uint64_t page)
    : allowed_(std::move(allowed)), page_(page) {
    for (const vfio::IovaRange& r : allowed_) free_.emplace(r.start, r.last);
}

Result<uint64_t> IovaAllocator::page_length(uint64_t len, const char* what) const {
    uint64_t rounded = 0;
    if (len == 0) return Error{EINVAL, str_cat("IOVA ", what, ": zero length — pass the size of the memory")};
    if (!align_up(len, page_, rounded))
        return Error{EINVAL, str_cat("IOVA ", what, ": length ", len, " does not fit the 64-bit IOVA space")};
    return rounded;
}

IovaAllocator::FreeMap::iterator IovaAllocator::free_range_holding(uint64_t first, uint64_t last) {
    auto it = free_.upper_bound(first);
    if (it == free_.begin()) return free_.end();
    --it;
    return it->second >= last ? it : free_.end();
}

// Takes [first, last] out of the free range at `it`, keeping what is left on either side.
void IovaAllocator::carve(FreeMap::iterator it, uint64_t first, uint64_t last) {
    const uint64_t start = it->first, end = it->second;
    free_.erase(it);
    if (start < first) free_.emplace(start, first - 1);
    if (last < end) free_.emplace(last + 1, end);
}

bool IovaAllocator::in_allowed(uint64_t first, uint64_t last) const {
    return std::any_of(allowed_.begin(), allowed_.end(),
                       [&](const vfio::IovaRange& r) { return r.start <= first && last <= r.last; });
}

std::optional<uint64_t> IovaAllocator::first_fit(uint64_t len, uint64_t align) const {
    for (const auto& [start, last] : free_) {
        uint64_t a = 0;
        if (align_up(start, align, a) && a <= last && last - a >= len - 1) return a;
    }
    return std::nullopt;
}

Error IovaAllocator::exhausted(uint64_t len, uint64_t align) const {
    return Error{ENOMEM, str_cat("IOVA space exhausted: asked for ", len, " bytes aligned to ", align,
                                 "; the largest free range is ", largest_free(), " bytes (", free_bytes(),
                                 " bytes free in ", free_.size(), " ranges) — free unused DMA memory or ask for less")};
}

Result<Iova> IovaAllocator::allocate(uint64_t len, uint64_t align, std::optional<Iova> preferred) {
    auto rounded = page_length(len, "allocation");
    if (!rounded) return rounded.take_error();
    len = *rounded;
    if (align != 0 && !is_pow2(align))
        return Error{EINVAL, str_cat("IOVA allocation: alignment ", align, " is not a power of two")};
    align = std::max(align, page_);
    if (preferred) {
        const uint64_t p = preferred->value;
        if (is_aligned(p, align) && p <= UINT64_MAX - (len - 1)) {
            if (auto it = free_range_holding(p, p + len - 1); it != free_.end()) {
                carve(it, p, p + len - 1);
                return Iova(p);
            }
        }
    }
    std::optional<uint64_t> a = first_fit(len, align);
    if (!a) return exhausted(len, align);
    carve(free_range_holding(*a, *a + len - 1), *a, *a + len - 1);
    return Iova(*a);
}

Result<void> IovaAllocator::reserve(Iova iova, uint64_t len) {
    const uint64_t first = iova.value;
    if (!is_aligned(first, page_))
        return Error{EINVAL, str_cat("IOVA reserve: ", hex(first), " is not aligned to the page size (", page_, ")")};
    auto rounded = page_length(len, "reserve");
    if (!rounded) return rounded.take_error();
    if (first > UINT64_MAX - (*rounded - 1))
        return Error{ERANGE, str_cat("IOVA reserve: ", hex(first), " + ", *rounded, " bytes wraps past 2^64")};
    const uint64_t last = first + (*rounded - 1);
    if (auto it = free_range_holding(first, last); it != free_.end()) {
        carve(it, first, last);
        return {};
    }
    if (!in_allowed(first, last))
        return Error{ERANGE, str_cat("IOVA reserve: ", describe(first, last),
                                     " is outside the IOMMU's usable ranges — only addresses the device can reach are tracked")};
    return Error{EEXIST, str_cat("IOVA reserve: ", describe(first, last),
                                 " overlaps an allocated or reserved range — free that first")};
}

Result<void> IovaAllocator::free(Iova iova, uint64_t len) {
    uint64_t first = iova.value;
    if (!is_aligned(first, page_))
        return Error{EINVAL, str_cat("IOVA free: ", hex(first), " is not aligned to the page size (", page_,
                                     ") — pass the address allocate() returned")};
    auto rounded = page_length(len, "free");
    if (!rounded) return rounded.take_error();
    if (first > UINT64_MAX - (*rounded - 1) || !in_allowed(first, first + (*rounded - 1)))
        return Error{ERANGE, str_cat("IOVA free: ", hex(first), " + ", *rounded,
                                     " bytes is outside the usable ranges — it was never allocated here")};
    uint64_t last = first + (*rounded - 1);
    auto next = free_.upper_bound(last);   // the first free range after [first, last]
    if (next != free_.begin()) {
        auto prev = std::prev(next);
        if (prev->second >= first)
            return Error{EINVAL, str_cat("IOVA free: ", describe(first, last), " overlaps the free range ",
                                         describe(prev->first, prev->second), " — freed twice, or a wrong length?")};
        if (prev->second + 1 == first) {   // touches the range below: absorb it
            first = prev->first;
            free_.erase(prev);
        }
    }
    if (next != free_.end() && last != UINT64_MAX && next->first == last + 1) {   // and the one above
        last = next->second;
        free_.erase(next);
    }
    free_.emplace(first, last);
    return {};
}

std::vector<vfio::IovaRange> IovaAllocator::free_ranges() const {
    std::vector<vfio::IovaRange> out;
    out.reserve(free_.size());
    for (const auto& [start, last] : free_) out.push_back({start, last});
    return out;
}

uint64_t IovaAllocator::free_bytes() const {
    uint64_t total = 0;
    for (const auto& [start, last] : free_) total = add_saturating(total, range_bytes(start, last));
    return total;
}

uint64_t IovaAllocator::largest_free() const {
    uint64_t best = 0;
    for (const auto& [start, last] : free_) best = std::max(best, range_bytes(start, last));
    return best;
}

}  // namespace vfab::dma
