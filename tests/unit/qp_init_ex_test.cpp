// Device::create_qp_ex as the multiplexed API's default gives it to a device that does not
// override it: a comp_mask bit or create flag it does not know is refused by name; the header
// in the headroom is ignored by a device with no header of its own (frame_headroom 0) and
// refused (ENOTSUP) by one that has a header but does not take it there.
#include <gtest/gtest.h>

#include "rdma_fake_link.hpp"

namespace vfab::test {
namespace {

struct Fixture {
    Wire wire;
    FakeWireDevice dev{wire, 0, 1500};
    vfab::CompletionQueue* cq = *dev.create_cq(16);
    QpInitAttrEx init() const {
        QpInitAttrEx a;
        a.send_cq = a.recv_cq = cq;
        return a;
    }
};

TEST(CreateQpEx, RefusesWhatItDoesNotKnowByName) {
    Fixture f;
    QpInitAttrEx a = f.init();
    a.comp_mask = qp_init_attr_create_flags | 0x10;
    auto r = f.dev.create_qp_ex(a);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, EINVAL);
    EXPECT_NE(r.error().message.find("comp_mask 0x10 is not known"), std::string::npos) << r.error().message;
    a.comp_mask = qp_init_attr_create_flags;
    a.create_flags = qp_create_hdr_in_headroom | 0x8;
    r = f.dev.create_qp_ex(a);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, EINVAL);
    EXPECT_NE(r.error().message.find("create_flags 0x8 are not known"), std::string::npos) << r.error().message;
    a.comp_mask = 0;   // flags not named by comp_mask are not looked at
    EXPECT_TRUE(f.dev.create_qp_ex(a));
}

TEST(CreateQpEx, TheHeaderInTheHeadroomWhereTheDeviceHasNone) {
    Fixture f;
    QpInitAttrEx a = f.init();
    a.comp_mask = qp_init_attr_create_flags;
    a.create_flags = qp_create_hdr_in_headroom;
    auto r = f.dev.create_qp_ex(a);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ((*r)->state(), QpState::ready);

    f.dev.set_frame_headroom(12);   // a header of its own, and no create_qp_ex to take it there
    r = f.dev.create_qp_ex(a);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ENOTSUP);
    EXPECT_NE(r.error().message.find("fake-wire"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace vfab::test
