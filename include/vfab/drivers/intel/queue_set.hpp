// The completion queues and queue pairs of the Intel e1000 family, written once for every
// device of it (the 82574L, the 82576 and its virtual functions). The fast path is
// intel::QueuePairCore and queue::CompletionQueueCore, inline; the control path — the
// QueueSet a device derives from, holding N queue pairs and completion queues on MSI-X vectors
// — is private to the drivers (drivers/intel/queue_set.hpp).
//
// Thread model: one thread at a time per queue pair / completion queue (no locks on the fast
// path; different queue pairs on different threads need nothing); control calls are
// thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "vfab/dma/protection_domain.hpp"
#include "vfab/drivers/common/completion_queue.hpp"
#include "vfab/drivers/intel/queue_pair.hpp"
#include "vfab/types.hpp"

namespace vfab::intel {

// Where a device's queue registers are (the same registers in each queue's block): the
// 82574L's one queue and an 82576 VF's at 0x2800 (receive) and 0x3800 (transmit), 0x100 apart
// (82574L §10.2.5, 82576 §8.27.3); the 82576 PF's at 0xc000 and 0xe000, 0x40 apart (§8.10).
struct QueueLayout {
    static constexpr uint32_t kTail = 0x18;   // RDT / TDT in a queue's block
    uint32_t rx_base = 0x2800, tx_base = 0x3800, stride = 0x100;
    // The BAR 0 offset of register `reg` (its offset in a queue's block: igb::reg::Q_*, kTail)
    // of receive queue q.
    constexpr uint32_t rx(uint32_t q, uint32_t reg) const { return rx_base + stride * q + reg; }
    // The same for transmit queue q.
    constexpr uint32_t tx(uint32_t q, uint32_t reg) const { return tx_base + stride * q + reg; }
};

template <class Traits>
class QueueSet;   // drivers/intel/queue_set.hpp
template <class Traits>
class QueuePair;

template <class Traits>
class CompletionQueue final : public queue::CompletionQueueCore<QueuePair<Traits>> {
public:
    // Requests one notification on channel_fd() for the next completion (ibv_req_notify_cq).
    // If a completion is already waiting, the channel is signalled at once, so arm-then-wait
    // never sleeps through one. On a device that sends a second notification with nothing
    // behind it after each one (QEMU's 82574L model before QEMU 10.1: when its moderation timer
    // runs out), arm() first waits for that one and takes it (until the timer's end, a fraction
    // of a millisecond after the notification), so that the caller's sleep ends only for a
    // completion.
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
    // `n` notifications were read from the channel: is a trailing one due (see arm())?
    void note_taken(uint64_t n) noexcept;
    // arm()'s wait for the trailing notification (the device's lock not held).
    void absorb_trailer();
    void arm_vector();   // the device's lock held

    QueueSet<Traits>* dev_ = nullptr;
    int64_t trailer_due_ns_ = 0;   // CLOCK_MONOTONIC: a trailing notification is due until then
    uint32_t own_signals_ = 0;     // channel writes by arm() itself, not the device's
    bool armed_ = false;           // the vector was armed and has not notified since
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

}  // namespace vfab::intel
