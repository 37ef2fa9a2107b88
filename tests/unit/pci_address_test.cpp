#include "vfab/pci_address.hpp"

#include <gtest/gtest.h>

namespace vfab {
namespace {

TEST(PciAddress, ParsesFullForm) {
    auto a = PciAddress::parse("0001:3b:1f.7");
    ASSERT_TRUE(a.ok()) << a.error().message;
    EXPECT_EQ(a->domain, 1);
    EXPECT_EQ(a->bus, 0x3b);
    EXPECT_EQ(a->device, 0x1f);
    EXPECT_EQ(a->function, 7);
    EXPECT_EQ(a->to_string(), "0001:3b:1f.7");
}

TEST(PciAddress, ShortFormMeansDomainZero) {
    auto a = PciAddress::parse("03:00.1");
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->to_string(), "0000:03:00.1");
}

TEST(PciAddress, UpperCaseHexIsAccepted) {
    auto a = PciAddress::parse("0000:AF:0A.0");
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->to_string(), "0000:af:0a.0");
}

TEST(PciAddress, RejectsMalformedInputWithAHint) {
    for (const char* bad : {"", "0000:00:01", "0000:00:01.8", "0000:00:20.0", "00:1.0",
                            "0000:00:01.0 ", "x000:00:01.0", "0000-00-01.0", "0000:00:01.0.0",
                            "eth0", "00000:00:01.0"}) {
        auto a = PciAddress::parse(bad);
        ASSERT_FALSE(a.ok()) << "accepted '" << bad << "'";
        EXPECT_EQ(a.error().code, EINVAL);
        EXPECT_NE(a.error().message.find("lspci -D"), std::string::npos) << a.error().message;
    }
}

TEST(PciAddress, OrdersByDomainBusDeviceFunction) {
    EXPECT_LT(*PciAddress::parse("0000:00:02.0"), *PciAddress::parse("0000:00:02.1"));
    EXPECT_LT(*PciAddress::parse("0000:00:1f.7"), *PciAddress::parse("0000:01:00.0"));
    EXPECT_LT(*PciAddress::parse("0000:ff:00.0"), *PciAddress::parse("0001:00:00.0"));
}

}  // namespace
}  // namespace vfab
