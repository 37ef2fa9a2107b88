// Walking PCI capability lists in a config-space snapshot.
#include "vfab/vfio/pci_config.hpp"

#include <gtest/gtest.h>

#include <array>

namespace vfab::pci {
namespace {

struct Config {
    std::array<uint8_t, 4096> bytes{};
    Config() { bytes[kStatus] = kStatusCapList; }
    void cap(uint8_t at, uint8_t id, uint8_t next) {
        bytes[at] = id;
        bytes[at + 1] = next;
    }
    void ext(uint16_t at, uint16_t id, uint8_t ver, uint16_t next) {
        uint32_t h = id | uint32_t{ver} << 16 | uint32_t{next} << 20;
        for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<uint8_t>(h >> (8 * i));
    }
};

TEST(PciCapabilities, WalksStandardAndExtendedLists) {
    // As the emulated 82574L has them: PM, MSI, PCIe, MSI-X; then AER and DSN.
    Config c;
    c.bytes[kCapabilityList] = 0xc8;
    c.cap(0xc8, kCapPowerManagement, 0xd0);
    c.cap(0xd0, kCapMsi, 0xe0);
    c.cap(0xe0, kCapPciExpress, 0xa0);
    c.cap(0xa0, kCapMsix, 0x00);
    c.ext(0x100, kExtCapAer, 2, 0x140);
    c.ext(0x140, 0x0003, 1, 0);
    auto caps = parse_capabilities(c.bytes);
    ASSERT_EQ(caps.size(), 6u);
    EXPECT_EQ(caps[0].id, kCapPowerManagement);
    EXPECT_EQ(caps[3].id, kCapMsix);
    EXPECT_EQ(caps[3].offset, 0xa0);
    EXPECT_TRUE(caps[4].extended);
    EXPECT_EQ(caps[4].version, 2);
    EXPECT_EQ(caps[5].offset, 0x140);
    auto msix = find_capability(caps, kCapMsix);
    ASSERT_TRUE(msix);
    EXPECT_EQ(msix->offset, 0xa0);
    EXPECT_TRUE(find_capability(caps, kExtCapAer, true));
    EXPECT_FALSE(find_capability(caps, kExtCapSriov, true));
}

TEST(PciCapabilities, NoCapListBitMeansNoStandardCaps) {
    Config c;
    c.bytes[kStatus] = 0;
    c.bytes[kCapabilityList] = 0x40;
    c.cap(0x40, kCapMsi, 0);
    EXPECT_TRUE(parse_capabilities(std::span(c.bytes).first(256)).empty());
}

TEST(PciCapabilities, LoopsAndBadPointersEndTheWalk) {
    Config c;
    c.bytes[kCapabilityList] = 0x40;
    c.cap(0x40, kCapMsi, 0x50);
    c.cap(0x50, kCapMsix, 0x40);   // loops back
    c.ext(0x100, kExtCapAer, 1, 0x100);   // extended list loops on itself
    auto caps = parse_capabilities(c.bytes);
    EXPECT_EQ(caps.size(), 3u);

    Config d;
    d.bytes[kCapabilityList] = 0x10;   // into the header: invalid
    EXPECT_TRUE(parse_capabilities(std::span(d.bytes).first(256)).empty());
}

TEST(PciCapabilities, ConventionalConfigSpaceHasNoExtendedList) {
    Config c;
    c.bytes[kCapabilityList] = 0x40;
    c.cap(0x40, kCapMsi, 0);
    auto caps = parse_capabilities(std::span(c.bytes).first(256));
    ASSERT_EQ(caps.size(), 1u);
    EXPECT_FALSE(caps[0].extended);
}

}  // namespace
}  // namespace vfab::pci
