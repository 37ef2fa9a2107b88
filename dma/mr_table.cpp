// MrTable: slot management and the control-path operations (see the header).
#include "vfab/dma/mr_table.hpp"

#include <cerrno>
#include <cstring>

namespace vfab::dma {

namespace {

constexpr Access kRemote = Access::remote_write | Access::remote_read | Access::remote_atomic;

// The verbs rule: a region others may write to must be writable locally too.
bool remote_write_needs_local(Access a) {
    return (a & (Access::remote_write | Access::remote_atomic)) == Access::none || has(a, Access::local_write);
}

// Whether [addr, addr + length) and [iova, iova + length) stay below 2^64.
bool fits(const MrEntry& e) {
    const uint64_t last = e.length - 1;
    return (e.zero_based() || e.addr <= UINT64_MAX - last) && e.iova.value <= UINT64_MAX - last;
}

}  // namespace

void copy_to(const BlockMap& map, uint64_t pos, const void* from, uint64_t len) noexcept {
    const auto* src = static_cast<const uint8_t*>(from);
    while (len) {
        const uint64_t b = pos / map.block_size, in = pos - b * map.block_size;
        const uint64_t n = std::min(len, map.block_size - in);
        std::memcpy(reinterpret_cast<void*>(map.blocks[b].host + in), src, n);
        src += n, pos += n, len -= n;
    }
}

void copy_from(const BlockMap& map, uint64_t pos, void* to, uint64_t len) noexcept {
    auto* dst = static_cast<uint8_t*>(to);
    while (len) {
        const uint64_t b = pos / map.block_size, in = pos - b * map.block_size;
        const uint64_t n = std::min(len, map.block_size - in);
        std::memcpy(dst, reinterpret_cast<const void*>(map.blocks[b].host + in), n);
        dst += n, pos += n, len -= n;
    }
}

const char* to_string(MrStatus s) noexcept {
    switch (s) {
    case MrStatus::ok: return "ok";
    case MrStatus::bad_key: return "bad key";
    case MrStatus::stale_key: return "stale key";
    case MrStatus::out_of_bounds: return "out of bounds";
    case MrStatus::access_denied: return "access denied";
    case MrStatus::invalid_state: return "invalid state";
    case MrStatus::discontiguous: return "not one run of memory";
    }
    return "?";
}

Result<MrTable> MrTable::create(uint32_t capacity) {
    if (capacity == 0 || capacity > kMaxCapacity)
        return Error{EINVAL, str_cat("memory-registration table: capacity ", capacity, " must be 1 to ",
                                     kMaxCapacity, " (keys hold a 24-bit index)")};
    return MrTable(capacity);
}

MrTable::MrTable(uint32_t capacity)
    : slots_(capacity), local_(capacity), capacity_(capacity), free_ring_(capacity), free_count_(capacity), maps_(capacity) {
    for (uint32_t i = 0; i < capacity; ++i) {
        free_ring_[i] = i;
        sync_local(i);
    }
}

Error MrTable::full() const {
    return Error{ENOSPC, str_cat("memory-registration table is full (", capacity(),
                                 " entries) — deregister regions or windows no longer used, or create the "
                                 "protection domain with a larger table")};
}

// Pops the oldest free slot and starts a new registration in it under a new consumer key.
uint32_t MrTable::take_slot(Kind kind, MrState state, bool sync) noexcept {
    const uint32_t index = free_ring_[free_head_];
    free_head_ = free_head_ + 1 == capacity() ? 0 : free_head_ + 1;
    --free_count_;
    Slot& s = slots_[index];
    s.key = static_cast<uint8_t>(s.key + 1);   // so keys of the slot's previous life fail
    s.kind = kind;
    s.state = state;
    if (sync) sync_local(index);
    return make_key(index, s.key);
}

MrStatus MrTable::lookup(uint32_t key, uint32_t& index) const noexcept {
    index = key_index(key);
    if (index >= capacity_ || slots_[index].state == MrState::free) return MrStatus::bad_key;
    return slots_[index].key == key_consumer(key) ? MrStatus::ok : MrStatus::stale_key;
}

Result<MrKeys> MrTable::add(const MrEntry& e) { return add(e, e.addr); }

Result<MrKeys> MrTable::add(const MrEntry& e, uint64_t host) {
    if (e.length == 0) return Error{EINVAL, "memory registration: zero length — register at least one byte"};
    if (!has(Access::all, e.access))
        return Error{EINVAL, str_cat("memory registration: unknown access bits 0x", std::hex, uint32_t(e.access))};
    if (!remote_write_needs_local(e.access))
        return Error{EINVAL, "memory registration: REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE as well"};
    if (!fits(e))
        return Error{EINVAL, str_cat("memory registration of ", e.length, " bytes at 0x", std::hex, e.addr,
                                     " (IOVA 0x", e.iova.value, ") wraps past the end of the address space")};
    if (free_count_ == 0) return full();
    const uint32_t key = take_slot(Kind::region, MrState::valid, false);   // synced once filled in
    slots_[key_index(key)].entry = e;
    slots_[key_index(key)].host = host;
    sync_local(key_index(key));
    return MrKeys{key, key};
}

MrStatus MrTable::set_access(uint32_t key, Access access) noexcept {
    uint32_t index = 0;
    if (MrStatus st = lookup(key, index); st != MrStatus::ok) return st;
    Slot& s = slots_[index];
    if (s.kind != Kind::region || s.state != MrState::valid) return MrStatus::invalid_state;
    // The region's kind of address (zero-based or not) stays; only the rights change.
    const Access zero = s.entry.access & Access::zero_based;
    access = (access & ~Access::zero_based) | zero;
    if (!has(Access::all, access) || !remote_write_needs_local(access)) return MrStatus::access_denied;
    s.entry.access = access;
    sync_local(index);
    return MrStatus::ok;
}

MrStatus MrTable::remove(uint32_t key) noexcept {
    uint32_t index = 0;
    if (MrStatus st = lookup(key, index); st != MrStatus::ok) return st;
    const uint8_t consumer = slots_[index].key;
    slots_[index] = Slot{};
    slots_[index].key = consumer;   // the next take_slot() bumps it
    sync_local(index);
    free_ring_[(free_head_ + free_count_) % capacity()] = index;
    ++free_count_;
    return MrStatus::ok;
}

MrStatus MrTable::remove_allocated(uint32_t key) noexcept {
    uint32_t index = 0;
    if (MrStatus st = lookup(key, index); st != MrStatus::ok) return st;
    return slots_[index].kind == Kind::region ? MrStatus::invalid_state : remove(key);
}

Result<uint32_t> MrTable::alloc_unbound(uint64_t max_len, uint32_t max_blocks) {
    if (max_len == 0) return Error{EINVAL, "fast-register MR: zero maximum length"};
    if (max_blocks == 0 || max_blocks > kMaxBlocks)
        return Error{EINVAL, str_cat("fast-register MR: ", max_blocks, " blocks; allow 1 to ", kMaxBlocks)};
    if (free_count_ == 0) return full();
    const uint32_t key = take_slot(Kind::fast_reg, MrState::invalid);
    const uint32_t index = key_index(key);
    slots_[index].max_len = max_len;
    // Sized here, not when bound: fast registration comes through the send queue.
    if (!maps_[index]) maps_[index] = std::make_unique<BlockMap>();
    if (maps_[index]->blocks.size() < max_blocks) maps_[index]->blocks.resize(max_blocks);
    maps_[index]->count = 0;
    slots_[index].max_blocks = max_blocks;
    return key;
}

uint32_t MrTable::max_blocks(uint32_t key) const noexcept {
    uint32_t index = 0;
    if (lookup(key, index) != MrStatus::ok || slots_[index].kind != Kind::fast_reg) return 0;
    return slots_[index].max_blocks;
}

std::span<Block> MrTable::blocks(uint32_t key, uint32_t n) noexcept {
    uint32_t index = 0;
    if (lookup(key, index) != MrStatus::ok) return {};
    const Slot& s = slots_[index];
    if (s.kind != Kind::fast_reg || s.state != MrState::invalid || n == 0 || n > s.max_blocks) return {};
    return {maps_[index]->blocks.data(), n};
}

MrStatus MrTable::bind_blocks(uint32_t key, uint8_t new_key, const MrEntry& e, uint64_t block_size,
                              uint64_t first_offset, uint32_t n) noexcept {
    uint32_t index = 0;
    if (MrStatus st = lookup(key, index); st != MrStatus::ok) return st;
    Slot& s = slots_[index];
    if (s.kind != Kind::fast_reg || s.state != MrState::invalid) return MrStatus::invalid_state;
    if (e.length == 0 || e.length > s.max_len || (!e.zero_based() && e.addr > UINT64_MAX - (e.length - 1)))
        return MrStatus::out_of_bounds;
    if (n == 0 || n > s.max_blocks || block_size == 0 || first_offset >= block_size ||
        e.length > n * block_size - first_offset)
        return MrStatus::out_of_bounds;
    if (!has(Access::all, e.access) || !remote_write_needs_local(e.access)) return MrStatus::access_denied;
    BlockMap& m = *maps_[index];
    m.block_size = block_size;
    m.first_offset = first_offset;
    m.count = n;
    make_valid(s, e, new_key);
    s.map = &m;
    sync_local(index);
    return MrStatus::ok;
}

MrStatus MrTable::bind(uint32_t key, uint8_t new_key, const MrEntry& e, uint64_t host) noexcept {
    uint32_t index = 0;
    if (MrStatus st = lookup(key, index); st != MrStatus::ok) return st;
    Slot& s = slots_[index];
    if (s.kind != Kind::fast_reg || s.state != MrState::invalid) return MrStatus::invalid_state;
    if (e.length == 0 || e.length > s.max_len || !fits(e)) return MrStatus::out_of_bounds;
    if (!has(Access::all, e.access) || !remote_write_needs_local(e.access)) return MrStatus::access_denied;
    make_valid(s, e, new_key);
    s.host = host;
    s.map = nullptr;
    sync_local(index);
    return MrStatus::ok;
}

MrStatus MrTable::local_invalidate(uint32_t key) noexcept { return set_invalid(key, false); }

Result<uint32_t> MrTable::alloc_window(WindowType type) {
    if (type != WindowType::type1 && type != WindowType::type2)
        return Error{EINVAL, "memory window: the type is 1 or 2 (type 2B)"};
    if (free_count_ == 0) return full();
    const uint32_t key = take_slot(Kind::window, MrState::invalid);
    slots_[key_index(key)].window_type = type;
    return key;
}

MrStatus MrTable::bind_window(uint32_t mr_key, uint32_t window_key, uint8_t new_key, uint64_t addr, uint64_t len,
                              Access access, uint32_t owner_qpn) noexcept {
    uint32_t w = 0, m = 0;
    if (MrStatus st = lookup(window_key, w); st != MrStatus::ok) return st;
    const bool type1 = slots_[w].window_type == WindowType::type1;
    if (slots_[w].kind != Kind::window || (!type1 && slots_[w].state != MrState::invalid)) return MrStatus::invalid_state;
    if (type1 && len == 0) {   // unbinding (IB spec 10.6.7.2): the new key names nothing
        slots_[w].state = MrState::invalid;
        slots_[w].key = new_key;
        sync_local(w);
        return MrStatus::ok;
    }
    if (MrStatus st = lookup(mr_key, m); st != MrStatus::ok) return st;
    if (slots_[m].kind == Kind::window) return MrStatus::invalid_state;
    if (len == 0) return MrStatus::out_of_bounds;
    // Checks the MR's state, bounds and MW_BIND at once, and gives the window's IOVA.
    const Translation t = translate_span(mr_key, addr, len, Access::mw_bind);
    if (t.status != MrStatus::ok) return t.status;
    // The window's rights are its own (IB spec 10.6.7.2.2): the MR needs MW_BIND (checked above)
    // and, for a window a peer may write or update, LOCAL_WRITE (C10-74), as rxe checks them.
    // LOCAL_WRITE among the window's flags means nothing for a window and is dropped.
    access = access & ~Access::local_write;
    if (!has(kRemote | Access::zero_based, access)) return MrStatus::access_denied;
    if (has(access, Access::remote_write) || has(access, Access::remote_atomic))
        if (!has(slots_[m].entry.access, Access::local_write)) return MrStatus::access_denied;
    const MrEntry& mr = slots_[m].entry;
    slots_[w].parent_key = mr_key;
    slots_[w].parent_offset = addr - mr.base();
    slots_[w].owner_qpn = type1 ? 0 : owner_qpn;
    make_valid(slots_[w], MrEntry{addr, len, t.iova, access}, new_key);
    sync_local(w);
    return MrStatus::ok;
}

MrStatus MrTable::invalidate_window(uint32_t key) noexcept { return set_invalid(key, true); }

MrStatus MrTable::invalidate(uint32_t key, uint32_t qpn) noexcept {
    uint32_t index = 0;
    if (MrStatus st = lookup(key, index); st != MrStatus::ok) return st;
    const Slot& s = slots_[index];
    if (s.kind == Kind::window &&
        (s.window_type == WindowType::type1 || (s.state == MrState::valid && s.owner_qpn && s.owner_qpn != qpn)))
        return MrStatus::invalid_state;
    return set_invalid(key, false);
}

WindowType MrTable::window_type(uint32_t key) const noexcept {
    uint32_t index = 0;
    if (lookup(key, index) != MrStatus::ok || slots_[index].kind != Kind::window) return WindowType::type2;
    return slots_[index].window_type;
}

// Valid -> invalid for what may be invalidated: fast-register MRs (unless `windows_only`) and
// windows; MRs from add() end only with remove().
MrStatus MrTable::set_invalid(uint32_t key, bool windows_only) noexcept {
    uint32_t index = 0;
    if (MrStatus st = lookup(key, index); st != MrStatus::ok) return st;
    const Kind kind = slots_[index].kind;
    if (kind == Kind::region || (windows_only && kind != Kind::window)) return MrStatus::invalid_state;
    slots_[index].state = MrState::invalid;
    sync_local(index);
    return MrStatus::ok;
}

// Binding sets the range and the consumer key the application chose.
void MrTable::make_valid(Slot& s, const MrEntry& e, uint8_t new_key) noexcept {
    s.entry = e;
    s.key = new_key;
    s.state = MrState::valid;
}

LocalTranslation MrTable::translate_local_slow(uint32_t key, uint64_t addr, uint64_t len,
                                              Access required) const noexcept {
    const Translation t = translate(key, addr, len, required);
    return {t.iova, t.host, t.status};
}

IovaTranslation MrTable::translate_iova_slow(uint32_t key, uint64_t addr, uint64_t len, Access required) const noexcept {
    const Translation t = translate(key, addr, len, required);
    return {t.iova, t.status};
}

void MrTable::sync_local(uint32_t index) noexcept {
    ++revision_;
    Slot& s = slots_[index];
    const uint32_t key = make_key(index, s.key);
    const bool inline_ok = s.state == MrState::valid && s.kind != Kind::window && !s.map;
    LocalEntry& l = local_[index];
    l.key = inline_ok ? key : key ^ 0xffffff00u;   // every index bit flipped: no WR's key
    l.access = s.entry.access;
    l.base = s.entry.base();
    l.length = s.entry.length;
    l.iova_delta = s.entry.iova.value - l.base;
    l.host_delta = s.host - l.base;
}

MrState MrTable::state(uint32_t key) const noexcept {
    const uint32_t index = key_index(key);
    return index < capacity_ ? slots_[index].state : MrState::free;
}

const MrEntry* MrTable::find(uint32_t key) const noexcept {
    uint32_t index = 0;
    return lookup(key, index) == MrStatus::ok ? &slots_[index].entry : nullptr;
}

}  // namespace vfab::dma
