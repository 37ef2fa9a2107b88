// vfab's RDMA transport over the drivers' direct APIs (rdma::create_port over e1000e::Device,
// virtio_net::Device, igb::Device), linked without libvfab: the raw queue pair's fast path is
// the driver's, inline. The same tests as rdma_vfab_test (rdma_over_nic.hpp), on one pair of each
// provider, one of them with 4200-byte links.
#include "rdma_over_nic.hpp"
#include "vfab/drivers/e1000e.hpp"
#include "vfab/drivers/igb.hpp"
#include "vfab/drivers/virtio_net.hpp"

namespace vfab::rdma::test {
namespace {

template <class Dev, class Options>
Result<std::unique_ptr<Port>> open_direct(const char* name, uint32_t mtu, const PortConfig& cfg,
                                          std::vector<std::shared_ptr<void>>& keep) {
    Options o{};
    o.mtu = mtu;
    auto dev = Dev::open(lab::address_of(name), o);
    if (!dev) return dev.take_error();
    std::shared_ptr<Dev> d = std::move(*dev);
    keep.push_back(d);
    return create_port(*d, cfg);
}

}  // namespace

Result<std::unique_ptr<Port>> open_port(const NicPair& p, const char* name, const PortConfig& cfg,
                                        std::vector<std::shared_ptr<void>>& keep) {
    const std::string n = name;
    if (n.starts_with("e1000e")) return open_direct<e1000e::Device, e1000e::DeviceOptions>(name, p.mtu, cfg, keep);
    if (n.starts_with("virtio-net")) return open_direct<virtio_net::Device, virtio_net::DeviceOptions>(name, p.mtu, cfg, keep);
    return open_direct<igb::Device, igb::DeviceOptions>(name, p.mtu, cfg, keep);
}

namespace {

INSTANTIATE_TEST_SUITE_P(Lab, RdmaOverNic,
                         ::testing::Values(NicPair{"e1000e-0", "e1000e-1", 4200}, NicPair{"virtio-net", "virtio-net-1"},
                                           NicPair{"igb", "igb-1"}),
                         pair_name);

}  // namespace
}  // namespace vfab::rdma::test
