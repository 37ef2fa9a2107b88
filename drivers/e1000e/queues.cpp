// 82574L completion queues and the queue pair: ring memory, queue start/stop (datasheet §14.6
// receive and §14.7 transmit initialization), interrupt arming.
#include <cerrno>
#include <chrono>
#include <thread>

#include <unistd.h>

#include "../intel/queue_set_impl.hpp"
#include "device_impl.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::intel {
template class QueueSet<e1000e::QueueTraits>;
template class CompletionQueue<e1000e::QueueTraits>;
template class QueuePair<e1000e::QueueTraits>;
}  // namespace vfab::intel

namespace vfab::e1000e {

// EIAC masks a vector's causes again when it fires: one arm(), one notification. Causes
// already handled are forgotten first.
void DeviceImpl::arm_vector(uint32_t, bool sends, bool recvs) {
    const uint32_t c = (sends ? reg::ICR_TXQ0 : 0) | (recvs ? reg::ICR_RXQ0 : 0);
    if (!c) return;
    bar_->write32(reg::ICR, c);
    bar_->write32(reg::IMS, c);
}

// §14.6 / §14.7: ring base and length, head = tail = 0, then enable.
Result<void> DeviceImpl::start_queues(const QueueRegs& q) {
    bar_->write32(reg::RDBAL, uint32_t(q.rx_iova));
    bar_->write32(reg::RDBAH, uint32_t(q.rx_iova >> 32));
    bar_->write32(reg::RDLEN, q.rx_bytes);
    bar_->write32(reg::RDH, 0);
    bar_->write32(reg::RDT, 0);
    bar_->write32(reg::TDBAL, uint32_t(q.tx_iova));
    bar_->write32(reg::TDBAH, uint32_t(q.tx_iova >> 32));
    bar_->write32(reg::TDLEN, q.tx_bytes);
    bar_->write32(reg::TDH, 0);
    bar_->write32(reg::TDT, 0);
    program_ivar(&q);
    bar_->write32(reg::TIPG, reg::kTipgCopper);
    bar_->write32(reg::TCTL, reg::TCTL_EN | reg::TCTL_PSP | 0x0fu << reg::TCTL_CT_SHIFT | 0x3fu << reg::TCTL_COLD_SHIFT);
    uint32_t rctl = reg::RCTL_EN | reg::RCTL_BAM | reg::RCTL_SECRC |
                    (attr_.mtu > 1500 ? reg::RCTL_LPE | reg::RCTL_BSIZE_8192 : reg::RCTL_BSIZE_2048);
    if (opts_.promiscuous) rctl |= reg::RCTL_UPE | reg::RCTL_MPE;
    bar_->write32(reg::RCTL, rctl);
    if (bar_->read32(reg::RDLEN) != q.rx_bytes)
        return Error{EIO, str_cat(attr_.address.to_string(), ": the receive ring registers did not take their values")};
    return {};
}

// Receive and transmit off; the rings stay where they are until the QP's memory goes, and the
// device no longer fetches from or writes to them.
void DeviceImpl::stop_queues(uint32_t) {
    if (removed_) return;
    bar_->write32(reg::RCTL, 0);
    bar_->write32(reg::TCTL, reg::TCTL_PSP);
    bar_->write32(reg::IMC, reg::ICR_RXQ0 | reg::ICR_TXQ0);
    (void)bar_->read32(reg::STATUS);
    // Let a frame being written land before the caller frees anything (§14.6: "allow the
    // receive unit to complete a packet in progress").
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    bar_->write32(reg::RDLEN, 0);
    bar_->write32(reg::TDLEN, 0);
    for (uint32_t r : {reg::RDBAL, reg::RDBAH, reg::RDH, reg::RDT, reg::TDBAL, reg::TDBAH, reg::TDH, reg::TDT})
        bar_->write32(r, 0);
    program_ivar(nullptr);   // the queue's causes go nowhere
}

Result<void> DeviceImpl::configure_rss(const RssConfig&) {
    return Error{ENOTSUP, str_cat(attr_.address.to_string(), ": the 82574L driver uses one queue pair and offers no RSS "
                                                             "(attr().rss_table_size is 0)")};
}

}  // namespace vfab::e1000e
