#include "vfab/vfio/pci_config.hpp"

#include <bitset>

namespace vfab::pci {
namespace {

uint16_t le16(std::span<const uint8_t> c, size_t off) { return static_cast<uint16_t>(c[off] | c[off + 1] << 8); }
uint32_t le32(std::span<const uint8_t> c, size_t off) { return le16(c, off) | uint32_t{le16(c, off + 2)} << 16; }

}  // namespace

std::vector<Capability> parse_capabilities(std::span<const uint8_t> config) {
    std::vector<Capability> caps;
    if (config.size() < 0x40) return caps;
    if (le16(config, kStatus) & kStatusCapList) {
        std::bitset<256> seen;
        // Pointers are dword aligned (the low two bits are reserved) and past the header.
        for (uint16_t off = config[kCapabilityList] & 0xfc; off >= 0x40 && off + 2u <= 0x100u && off + 2u <= config.size();
             off = config[off + 1] & 0xfc) {
            if (seen[off]) break;
            seen[off] = true;
            caps.push_back({config[off], off, false, 0});
        }
    }
    if (config.size() >= 0x104) {
        std::bitset<1024> seen;
        for (uint16_t off = kExtendedCapStart; off >= kExtendedCapStart && off + 4u <= config.size();) {
            uint32_t hdr = le32(config, off);
            if (hdr == 0 || hdr == 0xffffffff || seen[off / 4]) break;   // no extended capabilities
            seen[off / 4] = true;
            caps.push_back({static_cast<uint16_t>(hdr & 0xffff), off, true, static_cast<uint8_t>((hdr >> 16) & 0xf)});
            off = static_cast<uint16_t>((hdr >> 20) & 0xffc);
        }
    }
    return caps;
}

std::optional<Capability> find_capability(std::span<const Capability> caps, uint16_t id, bool extended) {
    for (const Capability& c : caps)
        if (c.id == id && c.extended == extended) return c;
    return std::nullopt;
}

}  // namespace vfab::pci
