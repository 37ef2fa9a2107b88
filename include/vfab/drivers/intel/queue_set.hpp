// The queue pairs and completion queues of the Intel e1000 family, written once for every
// device of it: a QueueSet holds N queue pairs (the 82574L one, the 82576 up to 16, its
// virtual functions one) and completion queues on MSI-X vectors, and a device derives from it,
// adding its bring-up, link and events and the few steps that touch its own registers:
// starting and stopping a queue, unmasking and masking a vector. The fast path is
// intel::QueuePairCore and queue::CompletionQueueCore, inline; the control path common to the
// family is in drivers/intel/queue_set_impl.hpp.
//
// Thread model: one thread at a time per queue pair / completion queue (no locks on the fast
// path; different queue pairs on different threads need nothing); control calls are
// thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "vfab/dma/protection_domain.hpp"
#include "vfab/drivers/common/completion_queue.hpp"
#include "vfab/drivers/intel/queue_pair.hpp"
#include "vfab/types.hpp"
#include "vfab/vfio/device.hpp"

namespace vfab::intel {

// Where a device's queue registers are (the same registers in each queue's block): the
// 82574L's one queue and an 82576 VF's at 0x2800 (receive) and 0x3800 (transmit), 0x100 apart
// (82574L §10.2.5, 82576 §8.27.3); the 82576 PF's at 0xc000 and 0xe000, 0x40 apart (§8.10).
struct QueueLayout {
    static constexpr uint32_t kTail = 0x18;   // RDT / TDT in a queue's block
    uint32_t rx_base = 0x2800, tx_base = 0x3800, stride = 0x100;
    constexpr uint32_t rx(uint32_t q, uint32_t reg) const { return rx_base + stride * q + reg; }
    constexpr uint32_t tx(uint32_t q, uint32_t reg) const { return tx_base + stride * q + reg; }
};

template <class Traits>
class QueueSet;
template <class Traits>
class QueuePair;

template <class Traits>
class CompletionQueue final : public queue::CompletionQueueCore<QueuePair<Traits>> {
public:
    // Requests one notification on channel_fd() for the next completion (ibv_req_notify_cq).
    // If a completion is already waiting, the channel is signalled at once, so arm-then-wait
    // never sleeps through one.
    Result<void> arm();
    // Reads and clears the channel (the number of notifications since the last call); the
    // vector stays masked until the next arm().
    uint64_t take_events() noexcept;
    // EBUSY while a queue pair uses it.
    Result<void> destroy();
    // A completion queue of no device, for a queue pair over rings in plain memory (the unit
    // tests' and bench/'s device models): poll() works, arm() and destroy() do not.
    CompletionQueue() = default;

private:
    friend class QueueSet<Traits>;
    friend class QueuePair<Traits>;
    friend struct queue::Control;
    friend typename Traits::Harness;   // to destroy it behind the device's back
    CompletionQueue(QueueSet<Traits>& dev, uint32_t cqe, uint32_t vector, int efd)
        : queue::CompletionQueueCore<QueuePair<Traits>>(cqe, vector, efd), dev_(&dev) {}

    QueueSet<Traits>* dev_ = nullptr;
};

template <class Traits>
struct QpInitAttr {
    CompletionQueue<Traits>* send_cq = nullptr;
    CompletionQueue<Traits>* recv_cq = nullptr;
    QpCaps caps = {};
    bool sq_sig_all = false;   // every send completes (else only send_signaled ones and errors)
};

template <class Traits>
class QueuePair final : public QueuePairCore<Traits> {
public:
    // Stops the queues and frees the rings; outstanding WRs are dropped (as ibv_destroy_qp).
    Result<void> destroy();
    // A queue pair of no device over rings in memory the caller owns, completing on `cq` (the
    // unit tests' and bench/'s device models, IOVA = VA).
    QueuePair(const RingView<Traits>& rings, CompletionQueue<Traits>& cq)
        : QueuePairCore<Traits>(rings), send_cq_(&cq), recv_cq_(&cq) {
        cq.send_qp_ = cq.recv_qp_ = this;
    }

private:
    friend class QueueSet<Traits>;
    friend class CompletionQueue<Traits>;
    friend class queue::CompletionQueueCore<QueuePair>;
    friend typename Traits::Harness;   // to put the queue pair in the error state
    QueuePair(QueueSet<Traits>& dev, const QpInitAttr<Traits>& attr)
        : dev_(&dev), send_cq_(attr.send_cq), recv_cq_(attr.recv_cq) {}

    QueueSet<Traits>* dev_ = nullptr;
    CompletionQueue<Traits>* send_cq_ = nullptr;
    CompletionQueue<Traits>* recv_cq_ = nullptr;
};

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
    bool removed_ = false;      // the registers are not touched any more
    std::recursive_mutex mu_;
    std::vector<std::unique_ptr<CompletionQueue<Traits>>> cqs_;   // kept after destroy()
    std::vector<std::unique_ptr<QueuePair<Traits>>> qps_;         // by queue index; null when free
    std::vector<std::unique_ptr<QueuePair<Traits>>> dead_qps_;    // destroyed: a late post gets ENODEV
};

}  // namespace vfab::intel
