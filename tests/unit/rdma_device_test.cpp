// Port::query_device: the limits it reports are the ones creation enforces (one more is
// refused with a message), the flags name what the transport does, and the node GUID comes
// from the link's MAC.
#include "rdma_connect.hpp"

namespace vfab::rdma::test {
namespace {

TEST(RdmaDevice, ReportsTheLimitsCreationEnforces) {
    RdmaPair pair;
    Port& port = *pair.a;
    const DeviceCaps caps = port.query_device();
    const VerbsDeviceAttr& a = caps.attr;
    EXPECT_EQ(std::string(a.fw_ver), "vfab fake-wire");
    EXPECT_EQ(a.phys_port_cnt, 1);
    EXPECT_EQ(a.atomic_cap, AtomicCap::glob);
    EXPECT_EQ(caps.max_path_mtu, port.active_mtu());
    EXPECT_GT(a.max_mr, 0);
    EXPECT_EQ(a.max_mw, a.max_mr);

    auto cq = port.create_cq(uint32_t(a.max_cqe));
    ASSERT_TRUE(cq) << cq.error().message;
    EXPECT_FALSE(port.create_cq(uint32_t(a.max_cqe) + 1));

    RdmaQpInitAttr ia;
    ia.send_cq = ia.recv_cq = *cq;
    ia.cap = {uint32_t(a.max_qp_wr), uint32_t(a.max_qp_wr), uint32_t(a.max_sge), uint32_t(a.max_sge), 0};
    auto qp = port.create_qp(ia);
    ASSERT_TRUE(qp) << qp.error().message;
    ia.cap.max_send_wr += 1;
    EXPECT_FALSE(port.create_qp(ia));
    ia.cap.max_send_wr -= 1;
    ia.cap.max_recv_sge += 1;
    EXPECT_FALSE(port.create_qp(ia));

    auto srq = port.create_srq(SrqAttr{uint32_t(a.max_srq_wr), uint32_t(a.max_srq_sge), 0});
    ASSERT_TRUE(srq) << srq.error().message;
    EXPECT_FALSE(port.create_srq(SrqAttr{uint32_t(a.max_srq_wr) + 1, 1, 0}));
    EXPECT_FALSE(port.create_srq(SrqAttr{1, uint32_t(a.max_srq_sge) + 1, 0}));

    QpAttr x;
    x.qp_state = RdmaQpState::init;
    ASSERT_TRUE((*qp)->modify(x, attr_state | attr_pkey_index | attr_port | attr_access_flags));
    x.max_rd_atomic = uint8_t(a.max_qp_init_rd_atom + 1);
    EXPECT_FALSE((*qp)->modify(x, attr_max_qp_rd_atomic));
    x.max_dest_rd_atomic = uint8_t(a.max_qp_rd_atom + 1);
    EXPECT_FALSE((*qp)->modify(x, attr_max_dest_rd_atomic));
    x.max_rd_atomic = uint8_t(a.max_qp_init_rd_atom);
    x.max_dest_rd_atomic = uint8_t(a.max_qp_rd_atom);
    EXPECT_TRUE((*qp)->modify(x, attr_max_qp_rd_atomic | attr_max_dest_rd_atomic));
}

TEST(RdmaDevice, FlagsSayWhatTheTransportDoes) {
    RdmaPair pair;
    const DeviceCaps caps = pair.a->query_device();
    for (uint32_t f : {device_mem_mgt_extensions, device_mem_window, device_mem_window_type_2b, device_srq_resize,
                       device_rc_rnr_nak_gen, device_n_notify_cq})
        EXPECT_TRUE(caps.attr.device_cap_flags & f) << f;
    EXPECT_TRUE(caps.attr.device_cap_flags & device_xrc);
    for (uint64_t f : {vfab_cap_reg_mr_wr, vfab_cap_zero_based, vfab_cap_remote_invalidate, vfab_cap_srq,
                       vfab_cap_async_events})
        EXPECT_TRUE(caps.vfab_caps & f) << f;
    // EUI-64 of the MAC: the universal/local bit flipped, ff:fe in the middle.
    uint8_t guid[8];
    std::memcpy(guid, &caps.attr.node_guid, 8);
    EXPECT_EQ(guid[3], 0xff);
    EXPECT_EQ(guid[4], 0xfe);
    EXPECT_EQ(caps.attr.sys_image_guid, caps.attr.node_guid);
    EXPECT_NE(pair.a->query_device().attr.node_guid, pair.b->query_device().attr.node_guid);
}

}  // namespace
}  // namespace vfab::rdma::test
