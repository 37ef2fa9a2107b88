// igb::QueueSet: the 82576's queue steps (its PF and its VFs share them) over
// intel::QueueSet; private to the igb and igbvf drivers.
#pragma once

#include "../intel/queue_set.hpp"
#include "vfab/drivers/igb/queues.hpp"
#include "vfab/drivers/igb/regs.hpp"

namespace vfab::igb {

// What the 82576's physical function (igb::Device) and its virtual functions (igbvf::Device)
// share: queues on the same registers in their blocks (layout_ says where) and descriptors,
// completion queues on MSI-X vectors under EIMS/EIMC, a protection domain. Each device adds
// its own bring-up, link and events.
class QueueSet : public intel::QueueSet<QueueTraits> {
protected:
    QueueSet(std::unique_ptr<vfio::Device> vdev, vfio::Region* bar) : intel::QueueSet<QueueTraits>(std::move(vdev), bar) {
        chip_ = "the 82576";
    }
    ~QueueSet() = default;
    Result<void> start_queues(const QueueRegs& q) override;
    void stop_queues(uint32_t q) override;
    void arm_vector(uint32_t vector, bool sends, bool recvs) override;
    void disarm_vector(uint32_t vector) override;
};

}  // namespace vfab::igb
