// 82576 receive-side scaling (datasheet §7.1.2.8): the hash key, the redirection table and the
// hashed packet types, over the physical function's queue pairs.
#include <bit>

#include "device_impl.hpp"
#include "vfab/net/rss.hpp"

namespace vfab::igb {

Result<void> DeviceImpl::configure_rss(const RssConfig& cfg) {
    std::lock_guard lock(mu_);
    if (cfg.hash_types & ~attr_.rss_hash_types)
        return Error{EINVAL, str_cat("configure_rss: hash types 0x", std::hex, cfg.hash_types & ~attr_.rss_hash_types,
                                     " are not supported (the 82576 hashes 0x", attr_.rss_hash_types, ")")};
    if (cfg.hash_types == 0) {
        rss_table_.clear();
        rss_types_ = 0;
        write_rss();
        return {};
    }
    const size_t n = cfg.table.size();
    if (n == 0 || !std::has_single_bit(n) || n > reg::kRetaEntries)
        return Error{EINVAL, str_cat("configure_rss: the redirection table has ", n,
                                     " entries; it must be a power of 2 from 1 to ", reg::kRetaEntries)};
    for (size_t i = 0; i < n; ++i)
        if (cfg.table[i] >= qps_.size() || !qps_[cfg.table[i]] || qps_[cfg.table[i]]->state() != QpState::ready)
            return Error{EINVAL, str_cat("configure_rss: table entry ", i, " names queue ", cfg.table[i],
                                         ", which has no ready queue pair (create it first; queues are 0 to ", qps_.size() - 1, ")")};
    if (!cfg.key.empty() && cfg.key.size() != reg::kRssKeyBytes)
        return Error{EINVAL, str_cat("configure_rss: the key has ", cfg.key.size(), " bytes; the 82576 takes ",
                                     reg::kRssKeyBytes, " (or pass none for the usual default)")};
    const auto key = cfg.key.empty() ? std::span<const uint8_t>(net::kDefaultRssKey) : cfg.key;
    std::copy(key.begin(), key.end(), rss_key_.begin());
    rss_table_.assign(cfg.table.begin(), cfg.table.end());
    rss_types_ = cfg.hash_types;
    write_rss();
    return {};
}

// RSSRK holds the key with byte 0 in the low byte of the first register; the 128 RETA entries
// repeat the table, so entry hash % 128 names table[hash % size] (§7.1.2.8.1).
void DeviceImpl::write_rss() {
    if (rss_types_ == 0) {
        bar_->write32(reg::MRQC, 0);
        return;
    }
    for (uint32_t i = 0; i < reg::kRssKeyBytes / 4; ++i)
        bar_->write32(reg::RSSRK + 4 * i, uint32_t(rss_key_[4 * i]) | uint32_t(rss_key_[4 * i + 1]) << 8 |
                                              uint32_t(rss_key_[4 * i + 2]) << 16 | uint32_t(rss_key_[4 * i + 3]) << 24);
    for (uint32_t i = 0; i < reg::kRetaEntries / 4; ++i) {
        uint32_t v = 0;
        for (uint32_t j = 0; j < 4; ++j) v |= uint32_t(rss_table_[(4 * i + j) % rss_table_.size()]) << (8 * j);
        bar_->write32(reg::RETA + 4 * i, v);
    }
    uint32_t mrqc = reg::MRQC_RSS;
    if (rss_types_ & rss_ipv4) mrqc |= reg::MRQC_IPV4;
    if (rss_types_ & rss_tcp_ipv4) mrqc |= reg::MRQC_TCP_IPV4;
    if (rss_types_ & rss_udp_ipv4) mrqc |= reg::MRQC_UDP_IPV4;
    if (rss_types_ & rss_ipv6) mrqc |= reg::MRQC_IPV6;
    if (rss_types_ & rss_tcp_ipv6) mrqc |= reg::MRQC_TCP_IPV6;
    if (rss_types_ & rss_udp_ipv6) mrqc |= reg::MRQC_UDP_IPV6;
    bar_->write32(reg::MRQC, mrqc);
}

}  // namespace vfab::igb
