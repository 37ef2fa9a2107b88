// The VF's side of the PF/VF mailbox: lock, write, request, wait for the PF's acknowledge;
// wait for the PF's message, read it, acknowledge (datasheet §7.8.2.9.2).
#include "mailbox.hpp"

#include <cerrno>
#include <thread>

#include "vfab/drivers/igbvf/regs.hpp"

namespace vfab::igbvf {
namespace {

// Polls `done` every 100 µs until it holds or `timeout` passed (the PF answers from its
// interrupt handler: tens of microseconds on hardware, milliseconds in an emulator).
bool poll_until(auto&& done, std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
        if (std::chrono::steady_clock::now() >= end) return done();
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return true;
}

}  // namespace

uint32_t Mailbox::bits() {
    const uint32_t v = bar_->read32(reg::VMAILBOX);
    seen_ |= v & reg::kMbxReadClear;
    return v | seen_;
}

bool Mailbox::take(uint32_t bit) {
    const bool set = bits() & bit;
    seen_ &= ~bit;
    return set;
}

// Setting VFU takes the buffer unless the PF holds it (PFU); any later write without VFU
// gives it back.
bool Mailbox::lock() {
    bar_->write32(reg::VMAILBOX, reg::MBX_VFU);
    return bits() & reg::MBX_VFU;
}

void Mailbox::read_words(std::span<uint32_t> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = bar_->read32(reg::VMBMEM + 4 * uint32_t(i));
}

Result<void> Mailbox::send(std::span<const uint32_t> words, std::chrono::milliseconds timeout) {
    if (words.empty() || words.size() > reg::kMailboxWords) return Error{EINVAL, "mailbox: 1 to 16 words per message"};
    if (!poll_until([&] { return lock(); }, timeout))
        return Error{EBUSY, str_cat("the PF kept the mailbox locked for ", timeout.count(), " ms")};
    // The buffer is about to be overwritten: a message or acknowledge from before is void.
    (void)take(reg::MBX_PFSTS);
    (void)take(reg::MBX_PFACK);
    for (size_t i = 0; i < words.size(); ++i) bar_->write32(reg::VMBMEM + 4 * uint32_t(i), words[i]);
    bar_->write32(reg::VMAILBOX, reg::MBX_REQ);   // also releases VFU
    if (!poll_until([&] { return (bits() & (reg::MBX_PFACK | reg::MBX_RSTI)) != 0; }, timeout))
        return Error{ETIMEDOUT, str_cat("the PF did not read the request (message type 0x", std::hex,
                                        words[0] & 0xffff, std::dec, ") within ", timeout.count(), " ms")};
    if (!take(reg::MBX_PFACK)) return Error{ECONNRESET, "the PF began a reset instead of reading the request"};
    return {};
}

Result<void> Mailbox::receive(std::span<uint32_t> out, std::chrono::milliseconds timeout) {
    if (out.empty() || out.size() > reg::kMailboxWords) return Error{EINVAL, "mailbox: 1 to 16 words per message"};
    if (!poll_until([&] { return (bits() & (reg::MBX_PFSTS | reg::MBX_RSTI)) != 0; }, timeout))
        return Error{ETIMEDOUT, str_cat("the PF sent no reply within ", timeout.count(), " ms")};
    if (!(bits() & reg::MBX_PFSTS)) return Error{ECONNRESET, "the PF began a reset instead of replying"};
    if (!poll_until([&] { return lock(); }, timeout))
        return Error{EBUSY, str_cat("the PF kept the mailbox locked for ", timeout.count(), " ms")};
    read_words(out);
    (void)take(reg::MBX_PFSTS);
    bar_->write32(reg::VMAILBOX, reg::MBX_ACK);   // also releases VFU
    return {};
}

bool Mailbox::receive_pending(uint32_t& word0) {
    if (!(bits() & reg::MBX_PFSTS) || !lock()) return false;
    read_words({&word0, 1});
    (void)take(reg::MBX_PFSTS);
    bar_->write32(reg::VMAILBOX, reg::MBX_ACK);
    return true;
}

}  // namespace vfab::igbvf
