// MrTable: a protection domain's memory-registration table — keys, access rights, bounds, and
// the translation of (key, address, length) into an IOVA the device can use.
//
// Keys are `index << 8 | consumer_key`: the index picks a slot, the 8-bit consumer key tells
// one registration of that slot from the next, so a key kept after deregistration fails with
// stale_key once the slot is reused (until the 8-bit key wraps, as with verbs). Slots are
// reused oldest-freed first, which makes such wrapping take as long as possible.
//
// A slot holds one of three kinds of object, sharing one key space as verbs devices do:
//   - a memory region from add() (ibv_reg_mr): valid until remove();
//   - a fast-register MR from alloc_unbound() (ibv_alloc_mr): invalid until bind(), which sets
//     its range and a new consumer key chosen by the application (IBV_WR_REG_MR); invalid
//     again after local_invalidate();
//   - a memory window from alloc_window() (ibv_alloc_mw): invalid until bind_window() narrows
//     an MR with MW_BIND to a sub-range with fewer rights. Type 2B windows are bound to one
//     queue pair (its number, when the binder gives one) and invalidated (invalidate(),
//     invalidate_window()); type 1 windows are rebound, a zero length unbinding them.
// Windows name memory for remote access only: translate() through a window needs the number
// of the queue pair the request came in on. A window translates through its MR, so it covers
// what the MR covers, blocks and all.
//
// A fast-register MR bound to blocks that do not follow each other in memory (a page list of
// scattered pages, IB spec 10.6.3.6) keeps their addresses in a BlockMap the table allocated
// with the MR (alloc_unbound's max_blocks). translate() gives a device one run of memory, so a
// range across two such blocks is `discontiguous`; translate_span() gives its first run and
// where it lies in the map, and copy_to() / copy_from() move bytes across the blocks (the RDMA
// transport copies with the CPU).
// lkey and rkey are the same number for now (one slot per registration); callers keep both so
// that this can change.
//
// Capacity is fixed at construction: add/remove/translate/bind never allocate. translate() is
// the fast path (O(1), inline, noexcept). Not thread-safe: control-path callers serialise.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "vfab/iova.hpp"
#include "vfab/result.hpp"

namespace vfab::dma {

// Access rights, with the values of enum ibv_access_flags so a verbs-compatible layer can
// pass them through. Local read is always allowed.
enum class Access : uint32_t {
    none = 0,
    local_write = 1u << 0,
    remote_write = 1u << 1,
    remote_read = 1u << 2,
    remote_atomic = 1u << 3,
    mw_bind = 1u << 4,
    zero_based = 1u << 5,
    all = (1u << 6) - 1,
};

// The rights of both.
constexpr Access operator|(Access a, Access b) noexcept { return Access(uint32_t(a) | uint32_t(b)); }
// The rights common to both.
constexpr Access operator&(Access a, Access b) noexcept { return Access(uint32_t(a) & uint32_t(b)); }
// The rights of Access::all that `a` lacks.
constexpr Access operator~(Access a) noexcept { return Access(~uint32_t(a) & uint32_t(Access::all)); }
// Adds `b`'s rights to `a`.
constexpr Access& operator|=(Access& a, Access b) noexcept { return a = a | b; }
// True when `set` holds every bit of `bits`.
constexpr bool has(Access set, Access bits) noexcept { return (set & bits) == bits; }

enum class MrStatus : uint8_t {
    ok,
    bad_key,         // index out of range, or the slot is free
    stale_key,       // the slot is in use under another consumer key
    out_of_bounds,   // [addr, addr + len) not inside the registration (or wraps past 2^64)
    access_denied,   // the registration lacks a required right
    invalid_state,   // allocated but not bound, invalidated, of the wrong kind, or a window
                     // whose MR has gone
    discontiguous,   // translate(): the range spans blocks of a fast-register MR that do not
                     // follow each other (translate_span() and copy_to() handle it)
};
// A short description ("stale key"), for messages; "?" for another value.
const char* to_string(MrStatus s) noexcept;

enum class MrState : uint8_t { free, valid, invalid };

struct MrEntry {
    uint64_t addr = 0;       // virtual start as registered
    uint64_t length = 0;
    Iova iova;               // IOVA of the first byte
    Access access = Access::none;
    // Zero-based: translate() takes addresses as offsets from 0, not virtual addresses.
    constexpr bool zero_based() const noexcept { return has(access, Access::zero_based); }
    // The address of its first byte as translate() takes addresses: 0 when zero-based.
    constexpr uint64_t base() const noexcept { return zero_based() ? 0 : addr; }
};

// enum ibv_mw_type.
enum class WindowType : uint8_t { type1 = 1, type2 = 2 };

struct MrKeys {
    uint32_t lkey = 0;
    uint32_t rkey = 0;
};

// One block of a fast-register MR bound to scattered blocks.
struct Block {
    uint64_t host = 0;   // the CPU's address of the block's first byte
    Iova iova;
};

// The blocks of a fast-register MR; `pos` in it counts from the first byte of blocks[0].
struct BlockMap {
    uint64_t block_size = 0;
    uint64_t first_offset = 0;   // where the MR starts in blocks[0]
    std::vector<Block> blocks;   // sized once, by alloc_unbound
    uint32_t count = 0;          // blocks in use
};

struct Translation {
    MrStatus status = MrStatus::bad_key;
    Iova iova;           // meaningful only when status == ok
    uint64_t host = 0;   // the CPU's address of the same byte (the RDMA transport copies there)
    uint64_t run = 0;    // bytes from iova / host that follow each other (the length asked for,
                         // unless the MR is scattered and the range crosses a block)
    const BlockMap* map = nullptr;   // translate_span() of a scattered MR: its blocks,
    uint64_t pos = 0;                // and where the first byte lies in them
};

// What translate_local() gives.
struct LocalTranslation {
    Iova iova;                          // meaningful only when status == ok
    uint64_t host = 0;                  // the CPU's address of the same byte
    MrStatus status = MrStatus::bad_key;
};

// What translate_iova() gives: 16 bytes, returned in two registers (LocalTranslation's 24 go
// through memory, which a driver's loop then reloads).
struct IovaTranslation {
    Iova iova;                          // meaningful only when status == ok
    MrStatus status = MrStatus::bad_key;
};

// Copies `len` bytes from `from` into the blocks of a scattered MR, from position `pos`
// (Translation::pos) on. Unchecked: the range must lie in the MR (translate_span() says so).
void copy_to(const BlockMap& map, uint64_t pos, const void* from, uint64_t len) noexcept;
// Copies `len` bytes out of the blocks of a scattered MR, from position `pos` on, to `to`.
// Unchecked, as copy_to().
void copy_from(const BlockMap& map, uint64_t pos, void* to, uint64_t len) noexcept;

// The key of slot `index` (below 2^24) under `consumer_key`: index << 8 | consumer_key.
constexpr uint32_t make_key(uint32_t index, uint8_t consumer_key) noexcept { return index << 8 | consumer_key; }
// The slot index of `key` (its upper 24 bits).
constexpr uint32_t key_index(uint32_t key) noexcept { return key >> 8; }
// The consumer key of `key` (its low 8 bits).
constexpr uint8_t key_consumer(uint32_t key) noexcept { return uint8_t(key & 0xff); }

class MrTable {
public:
    static constexpr uint32_t kMaxCapacity = 1u << 24;   // what a 24-bit index can address

    // A table of `capacity` slots, sized here; EINVAL unless 1 <= capacity <= kMaxCapacity.
    static Result<MrTable> create(uint32_t capacity);

    // Registers `e` (ibv_reg_mr). Errors: zero length, a range that wraps, REMOTE_WRITE or
    // REMOTE_ATOMIC without LOCAL_WRITE (as verbs requires), unknown bits, a full table.
    Result<MrKeys> add(const MrEntry& e);
    // The same with the CPU address of the entry's first byte given apart (a zero-based entry's
    // addr is 0, its memory is not).
    Result<MrKeys> add(const MrEntry& e, uint64_t host);
    // Deregisters an MR or deallocates a fast-register MR or window; its keys fail from now
    // on. Windows bound to a removed MR fail with invalid_state.
    MrStatus remove(uint32_t key) noexcept;
    // remove() for what alloc_unbound() / alloc_window() made; invalid_state for a region.
    MrStatus remove_allocated(uint32_t key) noexcept;

    // The IOVA of `addr` when [addr, addr + len) lies inside the registration behind `key` and
    // it grants `required`. Through a window (remote accesses only: `remote_qpn` is the queue
    // pair the request came in on, 0 for a local use, which windows refuse): the window's
    // bounds and rights, its queue pair for type 2B, then its MR's liveness.
    // A range that is not one run of memory is `discontiguous` (see translate_span).
    Translation translate(uint32_t key, uint64_t addr, uint64_t len, Access required,
                          uint32_t remote_qpn = 0) const noexcept;
    // translate() for those who copy with the CPU: a range across scattered blocks is ok, with
    // its first run in iova / host / run and the rest through map and pos (copy_to, copy_from).
    Translation translate_span(uint32_t key, uint64_t addr, uint64_t len, Access required,
                               uint32_t remote_qpn = 0) const noexcept;
    // translate() for a work request's own buffer (no window), for the drivers' fast paths:
    // the same checks and the same status, the IOVA and the CPU's address only. A region
    // or a fast-register MR of one run is checked inline; anything else (an error, a scattered
    // MR) takes translate().
    [[gnu::always_inline]] LocalTranslation translate_local(uint32_t key, uint64_t addr, uint64_t len,
                                                            Access required) const noexcept;
    // translate_local() without the CPU's address: for a driver that only hands the IOVA to
    // its device (the e1000 family).
    [[gnu::always_inline]] IovaTranslation translate_iova(uint32_t key, uint64_t addr, uint64_t len,
                                                          Access required) const noexcept;

    // alloc_unbound()'s default `max_blocks` (kMaxBlocks is the most it accepts).
    static constexpr uint32_t kDefaultMaxBlocks = 256;
    static constexpr uint32_t kMaxBlocks = 1u << 20;
    // Fast registration (ibv_alloc_mr): a slot of at most `max_len` bytes, invalid until bound,
    // which may be bound to up to `max_blocks` scattered blocks (blocks that follow each other
    // are one run: bind() them, whatever their number). Returns its key. EINVAL for max_len 0
    // or max_blocks outside 1..kMaxBlocks, ENOSPC when full. Allocates the block map.
    Result<uint32_t> alloc_unbound(uint64_t max_len, uint32_t max_blocks = kDefaultMaxBlocks);
    // Binds the unbound MR `key` to `e` under the new consumer key `new_key` (the application
    // picks it, usually key + 1); the MR's key is then make_key(key_index(key), new_key).
    // invalid_state unless `key` is an unbound fast-register MR; out_of_bounds for a length of
    // 0, above max_len or wrapping; access_denied for rights add() would refuse.
    MrStatus bind(uint32_t key, uint8_t new_key, const MrEntry& e) noexcept { return bind(key, new_key, e, e.addr); }
    // The same with `host`, the CPU's address of the first byte, given apart (e.addr unless
    // the MR's addresses are not its own, as a zero-based MR's are not).
    MrStatus bind(uint32_t key, uint8_t new_key, const MrEntry& e, uint64_t host) noexcept;
    // For scattered blocks: the first `n` entries of the MR's block map, for the caller to fill
    // (each block's CPU address and IOVA) before bind_blocks(). Empty when `key` is not an
    // unbound fast-register MR, or n is 0 or exceeds its max_blocks.
    std::span<Block> blocks(uint32_t key, uint32_t n) noexcept;
    // Binds the MR to e.length bytes from `first_offset` into the `n` blocks of `block_size`
    // bytes filled through blocks() (e.iova is unused). Status as bind(); out_of_bounds too when
    // the blocks cannot hold the range or n exceeds max_blocks.
    MrStatus bind_blocks(uint32_t key, uint8_t new_key, const MrEntry& e, uint64_t block_size, uint64_t first_offset,
                         uint32_t n) noexcept;
    uint32_t max_blocks(uint32_t key) const noexcept;   // of a fast-register MR; 0 otherwise
    // Valid -> invalid for fast-register MRs and windows (idempotent); invalid_state for
    // MRs from add(), which only remove() ends.
    MrStatus local_invalidate(uint32_t key) noexcept;

    // ibv_rereg_mr's access change (IBV_REREG_MR_CHANGE_ACCESS alone): the valid region `key`
    // keeps its keys and memory, its rights become `access` (add()'s rules: access_denied when
    // they break them; whether it is zero-based stays). invalid_state for anything but a region.
    // Windows bound to it keep their own rights.
    MrStatus set_access(uint32_t key, Access access) noexcept;

    // Memory windows.
    Result<uint32_t> alloc_window(WindowType type = WindowType::type2);
    // Binds window `window_key` to [addr, addr + len) of MR `mr_key`, which must be valid, have
    // MW_BIND, contain the range, and have LOCAL_WRITE when `access` has REMOTE_WRITE or
    // REMOTE_ATOMIC (IB spec C10-74). `access`: remote rights and ZERO_BASED (LOCAL_WRITE is
    // ignored). `addr` is in the MR's address space (an offset when it is zero-based).
    // The window's key becomes make_key(key_index(window_key), new_key). A type 2B window must
    // be unbound and is tied to queue pair `owner_qpn` (0: to none); a type 1 window may be
    // bound already (rebinding replaces it), and a zero length unbinds it.
    MrStatus bind_window(uint32_t mr_key, uint32_t window_key, uint8_t new_key, uint64_t addr, uint64_t len,
                         Access access, uint32_t owner_qpn = 0) noexcept;
    // Valid -> invalid for a window of either type (idempotent), with no queue-pair check;
    // invalid_state for MRs of any kind.
    MrStatus invalidate_window(uint32_t key) noexcept;
    // Invalidation by a work request (LOCAL_INV) or a peer's SEND_WITH_INV on queue pair `qpn`:
    // fast-register MRs, and type 2B windows bound to that queue pair. Regions (remove() ends
    // them) and type 1 windows (rebound with length 0) give invalid_state.
    MrStatus invalidate(uint32_t key, uint32_t qpn) noexcept;
    WindowType window_type(uint32_t key) const noexcept;   // of a current window's key; type2 otherwise

    // Inspection (diagnostics, tests, the control path).
    MrState state(uint32_t key) const noexcept;   // of the key's slot, whatever its consumer key
    const MrEntry* find(uint32_t key) const noexcept;   // the entry when `key` is current, else null
    // The number of slots, fixed at create(): regions, fast-register MRs and windows together.
    uint32_t capacity() const noexcept { return capacity_; }
    // Slots in use, valid or not.
    uint32_t size() const noexcept { return capacity() - free_count_; }
    // A count of the changes to the table's slots: a translation made while it had a value still
    // holds while it has it. Registration, binding, rights changes, invalidation and removal
    // all change it (the RDMA responder keeps a multi-packet WRITE's translation while it holds).
    uint64_t revision() const noexcept { return revision_; }

private:
    enum class Kind : uint8_t { region, fast_reg, window };
    struct Slot {
        MrEntry entry;
        uint64_t max_len = 0;     // fast-register MRs: the most bind() may cover,
        uint32_t max_blocks = 0;  // in at most this many scattered blocks
        uint32_t parent_key = 0;  // windows: the MR they are bound to
        uint32_t owner_qpn = 0;   // type 2B windows: the queue pair bound to (0: none)
        uint64_t parent_offset = 0;   // windows: where they start in their MR's range
        WindowType window_type = WindowType::type2;
        uint64_t host = 0;        // the CPU's address of the entry's first byte
        const BlockMap* map = nullptr;   // fast-register MRs bound to scattered blocks
        uint8_t key = 0;          // the current consumer key
        MrState state = MrState::free;
        Kind kind = Kind::region;
    };

    explicit MrTable(uint32_t capacity);
    MrStatus lookup(uint32_t key, uint32_t& index) const noexcept;
    // `sync`: refresh its LocalEntry now (false: the caller does, once the slot is filled in).
    uint32_t take_slot(Kind kind, MrState state, bool sync = true) noexcept;
    Error full() const;
    MrStatus set_invalid(uint32_t key, bool windows_only) noexcept;
    static void make_valid(Slot& s, const MrEntry& e, uint8_t new_key) noexcept;
    // translate_local() past its inline test (an error, a scattered MR): translate(), out of
    // line so that the drivers' loops keep their registers.
    [[gnu::cold, gnu::noinline]] LocalTranslation translate_local_slow(uint32_t key, uint64_t addr, uint64_t len,
                                                                       Access required) const noexcept;
    [[gnu::cold, gnu::noinline]] IovaTranslation translate_iova_slow(uint32_t key, uint64_t addr, uint64_t len,
                                                                     Access required) const noexcept;
    struct LocalEntry;
    // translate_local()'s inline test: the entry when `key` names a valid region or single-run
    // MR (one compare), [addr, addr + len) lies in it and it grants `required`; else null.
    [[gnu::always_inline]] const LocalEntry* local_hit(uint32_t key, uint64_t addr, uint64_t len,
                                                       Access required) const noexcept;
    // Recomputes local_[index] from slot `index`: after every change to the slot.
    void sync_local(uint32_t index) noexcept;
    static Translation resolve(const Slot& s, uint64_t addr, uint64_t len, Access required) noexcept;
    static Translation at(const Slot& s, uint64_t off, uint64_t len) noexcept;
    static bool offset_in(const MrEntry& e, uint64_t addr, uint64_t len, uint64_t& off) noexcept;
    static bool in_range(uint64_t base, uint64_t length, uint64_t addr, uint64_t len, uint64_t& off) noexcept;

    // translate_local's inline test, by slot index, 40 bytes each: the key a WR must carry
    // while the slot is a valid region or single-run fast-register MR (else a key of another
    // index, which no WR's key equals), where the range starts (0 when zero-based), its length
    // and rights, and what turns an address in it into its IOVA and CPU address (differences,
    // modulo 2^64). sync_local() keeps it.
    struct LocalEntry {
        uint32_t key = 0;
        Access access = Access::none;
        uint64_t base = 0, length = 0;
        uint64_t iova_delta = 0, host_delta = 0;
    };

    std::vector<Slot> slots_;
    std::vector<LocalEntry> local_;
    uint32_t capacity_ = 0;   // slots_.size(), kept apart: the fast path's bound, one load
    uint64_t revision_ = 0;   // sync_local() counts
    // Free slot indices as a FIFO ring: reusing the oldest-freed slot keeps stale keys
    // detectable for as long as possible.
    std::vector<uint32_t> free_ring_;
    uint32_t free_head_ = 0;
    uint32_t free_count_ = 0;
    // By slot index: the blocks of fast-register MRs, allocated by alloc_unbound and kept for
    // the table's life (a WR in flight may still walk them after the MR is freed).
    std::vector<std::unique_ptr<BlockMap>> maps_;
};

// ---- fast path ---------------------------------------------------------------------------

// The memory `off` bytes into the slot's range, `len` bytes long.
inline Translation MrTable::at(const Slot& s, uint64_t off, uint64_t len) noexcept {
    if (!s.map) return {MrStatus::ok, s.entry.iova + off, s.host + off, len};
    const BlockMap& m = *s.map;
    const uint64_t pos = m.first_offset + off;
    if (len == 0) return {MrStatus::ok, {}, 0, 0, &m, pos};
    const uint64_t b = pos / m.block_size, in = pos - b * m.block_size;
    return {MrStatus::ok, m.blocks[b].iova + in, m.blocks[b].host + in, std::min(len, m.block_size - in), &m, pos};
}

// Whether [addr, addr + len) lies inside [base, base + length), and where it starts in it.
// Two compares and no sum that can wrap: len <= length, then off <= what is left before the
// end (an addr below base makes off wrap above any length: no range ends past 2^64; a zero
// len at 0 counts as at the end of one that ends at 2^64 exactly, as at any end).
inline bool MrTable::in_range(uint64_t base, uint64_t length, uint64_t addr, uint64_t len, uint64_t& off) noexcept {
    off = addr - base;
    return len <= length && off <= length - len;
}

// in_range() of the entry's range (`addr` an offset when it is zero-based).
inline bool MrTable::offset_in(const MrEntry& e, uint64_t addr, uint64_t len, uint64_t& off) noexcept {
    return in_range(e.base(), e.length, addr, len, off);
}

inline Translation MrTable::resolve(const Slot& s, uint64_t addr, uint64_t len, Access required) noexcept {
    const MrEntry& e = s.entry;
    uint64_t off;
    if (!offset_in(e, addr, len, off)) return {MrStatus::out_of_bounds, {}};
    if (!has(e.access, required)) return {MrStatus::access_denied, {}};
    return at(s, off, len);
}

inline Translation MrTable::translate_span(uint32_t key, uint64_t addr, uint64_t len, Access required,
                                          uint32_t remote_qpn) const noexcept {
    const uint32_t index = key_index(key);
    if (index >= capacity_) return {MrStatus::bad_key, {}};
    const Slot& s = slots_[index];
    if (s.state == MrState::free) return {MrStatus::bad_key, {}};
    if (s.key != key_consumer(key)) return {MrStatus::stale_key, {}};
    if (s.state != MrState::valid) return {MrStatus::invalid_state, {}};
    if (s.kind != Kind::window) return resolve(s, addr, len, required);
    // A window: its bounds and rights, its queue pair, then the same bytes of its MR.
    const MrEntry& w = s.entry;
    uint64_t off;
    if (!offset_in(w, addr, len, off)) return {MrStatus::out_of_bounds, {}};
    if (!has(w.access, required)) return {MrStatus::access_denied, {}};
    if (remote_qpn == 0 || (s.owner_qpn && s.owner_qpn != remote_qpn)) return {MrStatus::invalid_state, {}};
    const Slot& mr = slots_[key_index(s.parent_key)];
    if (mr.state != MrState::valid || mr.key != key_consumer(s.parent_key)) return {MrStatus::invalid_state, {}};
    return at(mr, s.parent_offset + off, len);
}

inline Translation MrTable::translate(uint32_t key, uint64_t addr, uint64_t len, Access required,
                                     uint32_t remote_qpn) const noexcept {
    Translation t = translate_span(key, addr, len, required, remote_qpn);
    if (t.run < len && t.status == MrStatus::ok) t.status = MrStatus::discontiguous;
    return t;
}

inline const MrTable::LocalEntry* MrTable::local_hit(uint32_t key, uint64_t addr, uint64_t len,
                                                    Access required) const noexcept {
    const uint32_t index = key_index(key);
    if (index >= capacity_) [[unlikely]]
        return nullptr;
    // resolve()'s checks for a valid region or single-run MR under the current key, its
    // bounds and rights.
    const LocalEntry& l = local_.data()[index];
    uint64_t off;
    if (l.key == key && in_range(l.base, l.length, addr, len, off) && has(l.access, required)) [[likely]]
        return &l;
    return nullptr;
}

inline LocalTranslation MrTable::translate_local(uint32_t key, uint64_t addr, uint64_t len,
                                                Access required) const noexcept {
    if (const LocalEntry* l = local_hit(key, addr, len, required)) [[likely]]
        return {Iova(addr + l->iova_delta), addr + l->host_delta, MrStatus::ok};
    return translate_local_slow(key, addr, len, required);
}

inline IovaTranslation MrTable::translate_iova(uint32_t key, uint64_t addr, uint64_t len,
                                              Access required) const noexcept {
    if (const LocalEntry* l = local_hit(key, addr, len, required)) [[likely]]
        return {Iova(addr + l->iova_delta), MrStatus::ok};
    return translate_iova_slow(key, addr, len, required);
}

}  // namespace vfab::dma
