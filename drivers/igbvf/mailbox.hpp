// The VF's side of the 82576 PF/VF mailbox (datasheet §7.8.2.9.2): one 16-dword buffer, a
// lock bit for each side, and request/acknowledge bits. Reading VMAILBOX clears PFSTS, PFACK
// and RSTD, so every read goes through here and those bits are kept in software until taken.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>

#include "vfab/result.hpp"
#include "vfab/vfio/region.hpp"

namespace vfab::igbvf {

class Mailbox {
public:
    explicit Mailbox(vfio::Region& bar) : bar_(&bar) {}

    // Reads VMAILBOX and returns its bits with the read-clear ones seen since they were taken.
    uint32_t bits();
    // True if `bit` was seen (now or since it was last taken), and forgets it.
    bool take(uint32_t bit);
    // Forgets everything seen (after the VF's own reset).
    void clear() { seen_ = 0; }

    // Sends `words` and waits until the PF has read them (PFACK). The PF's reply comes later:
    // receive() it.
    Result<void> send(std::span<const uint32_t> words, std::chrono::milliseconds timeout);
    // Waits for a message from the PF (PFSTS), reads `out.size()` words and acknowledges it.
    Result<void> receive(std::span<uint32_t> out, std::chrono::milliseconds timeout);
    // Reads a message the PF already left (PFSTS seen), if there is one: its first word.
    bool receive_pending(uint32_t& word0);

private:
    bool lock();
    void read_words(std::span<uint32_t> out);

    vfio::Region* bar_;
    uint32_t seen_ = 0;   // read-clear bits seen and not yet taken
};

}  // namespace vfab::igbvf
