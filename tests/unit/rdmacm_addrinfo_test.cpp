// The drop-in librdmacm's rdma_getaddrinfo without a device (rdmacm/endpoints.cpp): names
// resolved as getaddrinfo(3) does, and, with no node and no service, the hints' addresses as they
// are (libfabric's verbs provider asks so for every endpoint it makes with addresses).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>

#include <cstring>

namespace {

sockaddr_in ipv4(const char* ip, uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

TEST(RdmacmAddrinfo, ANumericNodeAndService) {
    rdma_addrinfo hints{};
    hints.ai_flags = RAI_NUMERICHOST;
    hints.ai_port_space = RDMA_PS_TCP;
    rdma_addrinfo* res = nullptr;
    ASSERT_EQ(rdma_getaddrinfo("10.0.0.7", "7471", &hints, &res), 0);
    ASSERT_NE(res->ai_dst_addr, nullptr);
    const auto* d = reinterpret_cast<const sockaddr_in*>(res->ai_dst_addr);
    EXPECT_EQ(ntohs(d->sin_port), 7471);
    EXPECT_EQ(ntohl(d->sin_addr.s_addr), 0x0A000007u);
    EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC);
    rdma_freeaddrinfo(res);
}

TEST(RdmacmAddrinfo, NoNodeNoServiceGivesTheHintsAddresses) {
    sockaddr_in src = ipv4("10.0.0.1", 0), dst = ipv4("10.0.0.2", 9228);
    rdma_addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_qp_type = IBV_QPT_RC;
    hints.ai_port_space = RDMA_PS_TCP;
    hints.ai_src_addr = reinterpret_cast<sockaddr*>(&src);
    hints.ai_src_len = sizeof src;
    hints.ai_dst_addr = reinterpret_cast<sockaddr*>(&dst);
    hints.ai_dst_len = sizeof dst;
    rdma_addrinfo* res = nullptr;
    ASSERT_EQ(rdma_getaddrinfo(nullptr, nullptr, &hints, &res), 0);
    EXPECT_EQ(res->ai_family, AF_INET);
    EXPECT_EQ(res->ai_port_space, RDMA_PS_TCP);
    ASSERT_EQ(res->ai_src_len, sizeof src);
    ASSERT_EQ(res->ai_dst_len, sizeof dst);
    EXPECT_EQ(std::memcmp(res->ai_src_addr, &src, sizeof src), 0);
    EXPECT_EQ(std::memcmp(res->ai_dst_addr, &dst, sizeof dst), 0);
    rdma_freeaddrinfo(res);
}

TEST(RdmacmAddrinfo, NothingAtAllIsRefused) {
    rdma_addrinfo* res = nullptr;
    errno = 0;
    EXPECT_EQ(rdma_getaddrinfo(nullptr, nullptr, nullptr, &res), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(res, nullptr);
}

TEST(RdmacmAddrinfo, AnUnknownNameIsAnEaiCode) {
    rdma_addrinfo hints{};
    hints.ai_flags = RAI_NUMERICHOST;
    rdma_addrinfo* res = nullptr;
    EXPECT_EQ(rdma_getaddrinfo("not-a-number", "1", &hints, &res), EAI_NONAME);
}

}  // namespace
