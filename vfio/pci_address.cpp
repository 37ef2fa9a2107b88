#include "vfab/pci_address.hpp"

#include <cstdio>

namespace vfab {
namespace {

// Parses exactly `digits` hex digits at text[pos]; advances pos.
bool parse_hex(std::string_view text, size_t& pos, size_t digits, unsigned& out) {
    if (pos + digits > text.size()) return false;
    out = 0;
    for (size_t i = 0; i < digits; ++i) {
        char c = text[pos + i];
        unsigned d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return false;
        out = out * 16 + d;
    }
    pos += digits;
    return true;
}

bool expect(std::string_view text, size_t& pos, char c) {
    if (pos >= text.size() || text[pos] != c) return false;
    ++pos;
    return true;
}

}  // namespace

Result<PciAddress> PciAddress::parse(std::string_view text) {
    auto bad = [&] {
        return Error{EINVAL, str_cat("'", text, "' is not a PCI address: use the form 0000:03:00.1 "
                                     "(domain:bus:device.function, as `lspci -D` prints it)")};
    };
    PciAddress a;
    size_t pos = 0;
    unsigned dom = 0, bus, dev, fn;
    // The domain is optional: "03:00.1" is 0000:03:00.1. Its presence shows as a second ':'.
    bool has_domain = text.find(':') != text.rfind(':');
    if (has_domain && !(parse_hex(text, pos, 4, dom) && expect(text, pos, ':'))) return bad();
    if (!parse_hex(text, pos, 2, bus) || !expect(text, pos, ':')) return bad();
    if (!parse_hex(text, pos, 2, dev) || !expect(text, pos, '.')) return bad();
    if (!parse_hex(text, pos, 1, fn) || pos != text.size()) return bad();
    if (dev > 31 || fn > 7) return bad();
    a.domain = static_cast<uint16_t>(dom);
    a.bus = static_cast<uint8_t>(bus);
    a.device = static_cast<uint8_t>(dev);
    a.function = static_cast<uint8_t>(fn);
    return a;
}

std::string PciAddress::to_string() const {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", domain, bus, device, function);
    return buf;
}

}  // namespace vfab
