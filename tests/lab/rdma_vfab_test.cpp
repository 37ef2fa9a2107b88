// vfab's RDMA transport between two of the lab's NICs wired to each other, through real VFIO:
// e1000e 00:02.0 <-> 00:03.0, virtio-net 00:04.0 <-> 00:06.0, igb 05.0 <-> 0a.0, each through
// the multiplexed API (the transport runs over any provider); path MTU 1024 on every pair
// (1500-byte links), and 4096 on every pair opened with 4200-byte (jumbo) links. The tests:
// rdma_over_nic.hpp.
#include "rdma_over_nic.hpp"

namespace vfab::rdma::test {

Result<std::unique_ptr<Port>> open_port(const NicPair& p, const char* name, const PortConfig& cfg,
                                        std::vector<std::shared_ptr<void>>& keep) {
    vfab::OpenOptions oo;
    oo.mtu = p.mtu;
    auto dev = vfab::Device::open(lab::address_of(name).to_string(), oo);
    if (!dev) return dev.take_error();
    std::shared_ptr<vfab::Device> d = std::move(*dev);
    keep.push_back(d);
    return Port::create(*d, cfg);
}

namespace {

INSTANTIATE_TEST_SUITE_P(Lab, RdmaOverNic,
                         ::testing::Values(NicPair{"e1000e-0", "e1000e-1"}, NicPair{"virtio-net", "virtio-net-1"},
                                           NicPair{"igb", "igb-1"}, NicPair{"e1000e-0", "e1000e-1", 4200},
                                           NicPair{"virtio-net", "virtio-net-1", 4200}, NicPair{"igb", "igb-1", 4200}),
                         pair_name);

}  // namespace
}  // namespace vfab::rdma::test
