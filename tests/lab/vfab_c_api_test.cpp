// vfab's C API (vfab.h) on the lab's two 82574L NICs: the traffic of e1000e_traffic_test,
// written in C (vfab_c_traffic.c) against libvfab.so.
#include <gtest/gtest.h>

#include <cstdio>

#include "lab_env.hpp"
#include "vfab/vfab.h"
#include "vfab_c_traffic.h"

namespace vfab::lab {
namespace {
using vfio::IommuBackend;

int c_backend(IommuBackend b) {
    switch (b) {
    case IommuBackend::automatic: return VFAB_IOMMU_AUTO;
    case IommuBackend::legacy: return VFAB_IOMMU_LEGACY;
    case IommuBackend::iommufd: return VFAB_IOMMU_IOMMUFD;
    case IommuBackend::noiommu: return VFAB_IOMMU_NOIOMMU;
    }
    return -1;
}

class VfabCApi : public ::testing::TestWithParam<IommuBackend> {};

TEST_P(VfabCApi, HundredThousandFramesArriveIntactAndInOrder) {
    char why[512] = "";
    double seconds = 0;
    const std::string tx = address_of("e1000e-0").to_string(), rx = address_of("e1000e-1").to_string();
    ASSERT_EQ(vfab_c_traffic(tx.c_str(), rx.c_str(), c_backend(GetParam()), 100000, &seconds, why, sizeof why), 0) << why;
    std::printf("e1000e through the C API: 100000 frames NIC0 -> NIC1 in %.2f s (%.0f frames/s)\n", seconds,
                100000 / seconds);
}

INSTANTIATE_TEST_SUITE_P(Lab, VfabCApi, ::testing::ValuesIn(backends()), BackendName());

}  // namespace
}  // namespace vfab::lab
