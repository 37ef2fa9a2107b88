// intel::QueueSet: the control path of the Intel e1000 family's queues, private to its
// drivers. A QueueSet holds N queue pairs (the 82574L one, the 82576 up to 16, its virtual
// functions one) and completion queues on MSI-X vectors; a device derives from it, adding its
// bring-up, link and events and the few steps that touch its own registers: starting and
// stopping a queue, unmasking and masking a vector. Its code is in queue_set_impl.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "vfab/dma/protection_domain.hpp"
#include "vfab/drivers/intel/queue_set.hpp"
#include "vfab/types.hpp"
#include "vfab/vfio/device.hpp"

namespace vfab::intel {

template <class Traits>
class QueueSet {
public:
    QueueSet(const QueueSet&) = delete;
    QueueSet& operator=(const QueueSet&) = delete;

    const DeviceAttr& attr() const { return attr_; }
    dma::ProtectionDomain& pd() { return *pd_; }
    // Provider extensions: the VFIO device and register BAR.
    vfio::Device& vfio() { return *vfio_; }
    vfio::Region& bar0() { return *bar_; }

    // One MSI-X vector per completion queue (attr().max_cq of them). `cqe` is a capacity hint
    // (completions are read from the queues' own rings, so a CQ cannot overflow).
    Result<CompletionQueue<Traits>*> create_cq(uint32_t cqe);
    // Up to attr().max_qp queue pairs, the lowest free queue index first; each starts at once
    // (the others keep running). A completion queue takes the sends of one queue pair and the
    // receives of one.
    Result<QueuePair<Traits>*> create_qp(const QpInitAttr<Traits>& attr);

protected:
    friend class CompletionQueue<Traits>;
    friend class QueuePair<Traits>;
    QueueSet(std::unique_ptr<vfio::Device> vdev, vfio::Region* bar) : vfio_(std::move(vdev)), bar_(bar) {}
    ~QueueSet() = default;

    // What a device programs to start a queue pair's queues.
    struct QueueRegs {
        uint32_t queue;
        uint64_t rx_iova, tx_iova;    // ring bases
        uint32_t rx_bytes, tx_bytes;  // ring lengths
        uint32_t rx_vector, tx_vector;   // its completion queues' MSI-X vectors
    };
    static QueueRegs queue_regs(const QueuePair<Traits>& qp);

    // The device's own steps. start_queues: program and enable the queue pair's rings and
    // route its causes to its completion queues' vectors. stop_queues: the device no longer
    // reads or writes queue q's rings and buffers when it returns. arm_vector: unmask the
    // vector's interrupt for one notification (for the causes of the sends and/or receives
    // it takes). disarm_vector: mask it again.
    virtual Result<void> start_queues(const QueueRegs& q) = 0;
    virtual void stop_queues(uint32_t q) = 0;
    virtual void arm_vector(uint32_t vector, bool sends, bool recvs) = 0;
    virtual void disarm_vector(uint32_t /*vector*/) {}

    // A device's init(): its protection domain, and the attributes every device of the
    // family fills the same way (provider and device names, address, PCI IDs).
    Result<void> init_common(const dma::PdOptions& pd, const char* provider, const char* name);
    // Every queue pair stops and goes to the error state (WRs flush); sleepers on channels wake.
    void enter_error_state();
    void release_qp(QueuePair<Traits>& qp);
    // A device's destructor: stop_all_queues() first (the device stops DMA to the rings and
    // buffers), then its own shutdown, then release_all() frees the queue pairs, completion
    // queues and the protection domain.
    void stop_all_queues();
    void release_all();

    std::unique_ptr<vfio::Device> vfio_;
    vfio::Region* bar_;
    vfio::Interrupts* msix_ = nullptr;
    std::unique_ptr<dma::ProtectionDomain> pd_;
    DeviceAttr attr_;
    std::string_view chip_;     // "the 82574L", in messages
    QueueLayout layout_;
    uint32_t cq_vectors_ = 0;   // completion queues take MSI-X vectors 0 .. cq_vectors_ - 1
    // How long after a notification the device may send another with no cause behind it (0:
    // it does not; QEMU's 82574L model before 10.1 does, when its moderation timer runs out);
    // measured at open (e1000e::DeviceImpl::probe_trailing_notification). CompletionQueue::arm()
    // takes such a notification instead of letting it wake the application.
    int64_t trailing_notify_ns_ = 0;
    bool removed_ = false;      // the registers are not touched any more
    std::recursive_mutex mu_;
    std::vector<std::unique_ptr<CompletionQueue<Traits>>> cqs_;   // kept after destroy()
    std::vector<std::unique_ptr<QueuePair<Traits>>> qps_;         // by queue index; null when free
    std::vector<std::unique_ptr<QueuePair<Traits>>> dead_qps_;    // destroyed: a late post gets ENODEV
};

}  // namespace vfab::intel
