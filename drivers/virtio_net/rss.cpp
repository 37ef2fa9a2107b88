// Receive-side scaling over virtio-net (VIRTIO_NET_F_RSS, VIRTIO 1.2 §5.1.6.5.7): the
// application's key, redirection table and hash types, checked here and sent on the control
// virtqueue now and after every device restart.
#include <bit>
#include <cerrno>

#include "device_state.hpp"
#include "vfab/net/rss.hpp"

namespace vfab::virtio_net {

Result<void> DeviceState::configure_rss(const RssConfig& cfg) {
    std::lock_guard lock(mu_);
    if (!ctrl_ || !virtio::has_feature(features_, virtio::net_feature::RSS))
        return Error{ENOTSUP, str_cat("configure_rss: ", transport_->where(), " does not offer VIRTIO_NET_F_RSS",
                                      transport_->device_hint("mq=on,rss=on and a multi-queue netdev"))};
    if (cfg.hash_types & ~attr_.rss_hash_types)
        return Error{EINVAL, str_cat("configure_rss: hash types 0x", std::hex, cfg.hash_types & ~attr_.rss_hash_types,
                                     " are not supported (the device hashes 0x", attr_.rss_hash_types, ")")};
    if (cfg.hash_types == 0) {   // off: the device goes back to using its queue pairs as it likes
        rss_table_.clear();
        rss_key_.clear();
        rss_types_ = 0;
        return driver_ok_ ? send_queue_config() : Result<void>{};
    }
    const size_t n = cfg.table.size();
    if (n == 0 || !std::has_single_bit(n) || n > attr_.rss_table_size)
        return Error{EINVAL, str_cat("configure_rss: the redirection table has ", n, " entries; it must be a power of 2 from 1 to ",
                                     attr_.rss_table_size)};
    for (size_t i = 0; i < n; ++i) {
        const QueuePair* qp = qp_at(cfg.table[i]);
        if (!qp || qp->state() != QpState::ready)
            return Error{EINVAL, str_cat("configure_rss: table entry ", i, " names queue ", cfg.table[i],
                                         ", which has no ready queue pair (create it first; queues are 0 to ",
                                         qps_.size() - 1, ")")};
    }
    std::span<const uint8_t> key = cfg.key;
    if (key.empty()) key = std::span(net::kDefaultRssKey).first(std::min<size_t>(attr_.rss_key_size, net::kDefaultRssKey.size()));
    if (key.size() != attr_.rss_key_size)
        return Error{EINVAL, str_cat("configure_rss: the key has ", key.size(), " bytes; the device takes ",
                                     attr_.rss_key_size, " (or pass none for the usual default)")};
    auto old_key = std::move(rss_key_);
    auto old_table = std::move(rss_table_);
    const uint32_t old_types = rss_types_;
    rss_key_.assign(key.begin(), key.end());
    rss_table_.assign(cfg.table.begin(), cfg.table.end());
    rss_types_ = cfg.hash_types;
    if (!driver_ok_) return {};   // sent when the device starts
    if (auto r = send_queue_config(); !r) {
        rss_key_ = std::move(old_key);
        rss_table_ = std::move(old_table);
        rss_types_ = old_types;
        return r;
    }
    return {};
}

}  // namespace vfab::virtio_net
