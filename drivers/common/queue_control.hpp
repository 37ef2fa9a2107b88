// The control path every driver's completion queues and queue pairs share (private to the
// drivers): which MSI-X vector a new completion queue takes, destroying one, arm()'s last
// step, the checks of a new queue pair's completion queues, attaching and detaching it, and
// waking sleepers when queue pairs go to the error state. Callers hold the device's lock.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "vfab/drivers/common/completion_queue.hpp"
#include "vfab/result.hpp"
#include "vfab/types.hpp"

namespace vfab::queue {

// A device's next_event() for its link: link_up / link_down when `up` differs from what was
// reported last (`reported`, updated), else none.
inline Event link_change(bool up, bool& reported) {
    if (up == reported) return {};
    reported = up;
    return {up ? EventType::link_up : EventType::link_down};
}

struct Control {
    // The lowest vector in [first, end) no live completion queue uses.
    template <class Cq>
    static Result<uint32_t> free_vector(const std::vector<std::unique_ptr<Cq>>& cqs, uint32_t first, uint32_t end,
                                        std::string_view where) {
        std::vector<bool> used(end, false);
        for (const auto& cq : cqs)
            if (!cq->destroyed_ && cq->vector_ < end) used[cq->vector_] = true;
        for (uint32_t v = first; v < end; ++v)
            if (!used[v]) return v;
        return Error{ENOSPC, str_cat(where, ": all ", end - first,
                                     " completion queues are in use (one MSI-X vector each); destroy one first")};
    }

    // The completion queue stays allocated (a late poll returns -ENODEV).
    template <class Cq>
    static Result<void> destroy(Cq& cq) {
        if (cq.destroyed_) return Error{ENODEV, "this completion queue was already destroyed"};
        if (cq.send_qp_ || cq.recv_qp_)
            return Error{EBUSY, "the completion queue is still used by a queue pair: destroy the queue pair first"};
        cq.destroyed_ = true;
        return {};
    }

    template <class Cq>
    static Result<void> check_armable(const Cq& cq) {
        if (cq.destroyed_) return Error{ENODEV, "arm(): the completion queue was destroyed"};
        return {};
    }

    // arm()'s last step, after the device was told to interrupt: a completion that landed
    // before that raised no interrupt, so signal the channel ourselves.
    template <class Cq>
    static bool signal_if_ready(const Cq& cq) {
        if (!cq.wake_on_arm()) return false;
        signal(cq);
        return true;
    }

    template <class Cq>
    static void signal(const Cq& cq) {
        uint64_t one = 1;
        (void)!::write(cq.efd_, &one, sizeof one);
    }

    // Sleepers on every live channel wake (queue pairs went to the error state).
    template <class Cq>
    static void wake_all(const std::vector<std::unique_ptr<Cq>>& cqs) {
        for (const auto& cq : cqs)
            if (!cq->destroyed_) signal(*cq);
    }

    // A new queue pair's completion queues: given, the device's own, live, and (when
    // `exclusive`, as on devices with several queue pairs) not yet taking another queue
    // pair's sends or receives.
    template <class Cq, class Dev>
    static Result<void> check_cqs(const Dev* dev, const Cq* send, const Cq* recv, bool exclusive) {
        for (const Cq* cq : {send, recv}) {
            if (!cq) return Error{EINVAL, "create_qp: send_cq and recv_cq are required (they may be the same)"};
            if (cq->dev_ != dev) return Error{EINVAL, "create_qp: the completion queue belongs to another device"};
            if (cq->destroyed_) return Error{ENODEV, "create_qp: the completion queue was destroyed"};
        }
        if (exclusive && (send->send_qp_ || recv->recv_qp_))
            return Error{EBUSY, "create_qp: a completion queue takes the sends of one queue pair and the receives of "
                                "one; create another completion queue for this queue pair"};
        return {};
    }

    template <class Cq, class Qp>
    static void attach(Cq& send, Cq& recv, Qp* qp) {
        send.send_qp_ = qp;
        recv.recv_qp_ = qp;
    }
    template <class Cq, class Qp>
    static void detach(Cq& send, Cq& recv, const Qp* qp) {
        if (send.send_qp_ == qp) send.send_qp_ = nullptr;
        if (recv.recv_qp_ == qp) recv.recv_qp_ = nullptr;
    }

    // The lowest free queue index in `qps` (null entries are free); qps.size() when none.
    template <class Qp>
    static uint32_t free_index(const std::vector<std::unique_ptr<Qp>>& qps) {
        uint32_t i = 0;
        while (i < qps.size() && qps[i]) ++i;
        return i;
    }
};

}  // namespace vfab::queue
