// 82576 completion queues and queue pairs, for the physical and the virtual functions: ring
// memory, per-queue start and stop (datasheet §4.5.9 receive and §4.5.10 transmit
// initialization), MSI-X routing (IVAR), arming.
#include <cerrno>
#include <chrono>
#include <thread>

#include <unistd.h>

#include "../intel/queue_set_impl.hpp"
#include "queue_set.hpp"

namespace vfab::intel {
template class QueueSet<igb::QueueTraits>;
template class CompletionQueue<igb::QueueTraits>;
template class QueuePair<igb::QueueTraits>;
}  // namespace vfab::intel

namespace vfab::igb {

static_assert(reg::Q_TAIL == intel::QueueLayout::kTail);

namespace {

bool wait_for(auto&& done) {
    for (int i = 0; i < 100; ++i) {
        if (done()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done();
}

}  // namespace

// Unmask the vector; EIAM masks it again when it fires: one arm(), one notification.
void QueueSet::arm_vector(uint32_t vector, bool, bool) { bar_->write32(reg::EIMS, 1u << vector); }

// Masks the vector again (EIAM does that on the 82576 when the vector fires; QEMU's model
// does not, so without this a disarmed queue would keep interrupting).
void QueueSet::disarm_vector(uint32_t vector) { bar_->write32(reg::EIMC, 1u << vector); }

// §4.5.9 / §4.5.10: ring base and length, head = tail = 0, descriptor type, then enable and
// wait for the enable bit to read back. Each queue's causes go to its CQ's vector.
Result<void> QueueSet::start_queues(const QueueRegs& regs) {
    const uint32_t q = regs.queue;
    bar_->write32(layout_.rx(q, reg::Q_DCTL), 0);
    bar_->write32(layout_.rx(q, reg::Q_BAL), uint32_t(regs.rx_iova));
    bar_->write32(layout_.rx(q, reg::Q_BAH), uint32_t(regs.rx_iova >> 32));
    bar_->write32(layout_.rx(q, reg::Q_LEN), regs.rx_bytes);
    bar_->write32(layout_.rx(q, reg::Q_SRRCTL), (attr_.recv_buffer_size / 1024) << reg::SRRCTL_BSIZEPKT_SHIFT |
                                      reg::SRRCTL_DESCTYPE_ADV_ONEBUF | reg::SRRCTL_DROP_EN);
    bar_->write32(layout_.rx(q, reg::Q_HEAD), 0);
    bar_->write32(layout_.rx(q, reg::Q_TAIL), 0);
    bar_->write32(layout_.tx(q, reg::Q_DCTL), 0);
    bar_->write32(layout_.tx(q, reg::Q_BAL), uint32_t(regs.tx_iova));
    bar_->write32(layout_.tx(q, reg::Q_BAH), uint32_t(regs.tx_iova >> 32));
    bar_->write32(layout_.tx(q, reg::Q_LEN), regs.tx_bytes);
    bar_->write32(layout_.tx(q, reg::Q_HEAD), 0);
    bar_->write32(layout_.tx(q, reg::Q_TAIL), 0);
    uint32_t ivar = bar_->read32(reg::ivar_reg(q));
    ivar &= ~(0xffu << reg::ivar_rx_shift(q) | 0xffu << reg::ivar_tx_shift(q));
    ivar |= (reg::IVAR_VALID | regs.rx_vector) << reg::ivar_rx_shift(q);
    ivar |= (reg::IVAR_VALID | regs.tx_vector) << reg::ivar_tx_shift(q);
    bar_->write32(reg::ivar_reg(q), ivar);
    bar_->write32(layout_.rx(q, reg::Q_DCTL), reg::XDCTL_ENABLE);
    bar_->write32(layout_.tx(q, reg::Q_DCTL), reg::XDCTL_ENABLE);
    const uint32_t rxdctl = layout_.rx(q, reg::Q_DCTL), txdctl = layout_.tx(q, reg::Q_DCTL);
    if (!wait_for([&] { return (bar_->read32(rxdctl) & bar_->read32(txdctl)) & reg::XDCTL_ENABLE; }))
        return Error{EIO, str_cat(attr_.address.to_string(), ": queue ", q, " did not enable (RXDCTL/TXDCTL.ENABLE)")};
    return {};
}

// Disable both queues and wait until the device says so (§4.5.9.1): it then no longer
// fetches from or writes to the rings or buffers.
void QueueSet::stop_queues(uint32_t q) {
    if (removed_) return;
    const uint32_t rxdctl = layout_.rx(q, reg::Q_DCTL), txdctl = layout_.tx(q, reg::Q_DCTL);
    bar_->write32(rxdctl, 0);
    bar_->write32(txdctl, 0);
    (void)wait_for([&] { return !((bar_->read32(rxdctl) | bar_->read32(txdctl)) & reg::XDCTL_ENABLE); });
    uint32_t ivar = bar_->read32(reg::ivar_reg(q));
    ivar &= ~(0xffu << reg::ivar_rx_shift(q) | 0xffu << reg::ivar_tx_shift(q));
    bar_->write32(reg::ivar_reg(q), ivar);
    for (uint32_t r : {reg::Q_BAL, reg::Q_BAH, reg::Q_LEN, reg::Q_HEAD, reg::Q_TAIL}) {
        bar_->write32(layout_.rx(q, r), 0);
        bar_->write32(layout_.tx(q, r), 0);
    }
}

}  // namespace vfab::igb
