// 82576 virtual function: bring-up through the PF (the reset handshake of datasheet
// §7.8.2.9 and the Linux igb/igbvf message set), link, statistics, the PF's news.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <random>
#include <thread>

#include "../common/queue_control.hpp"
#include "../intel/intel_common.hpp"
#include "mailbox.hpp"
#include "vfab/drivers/igb.hpp"
#include "../intel/device_handle_impl.hpp"
#include "device_impl.hpp"
#include "vfab/drivers/igbvf/regs.hpp"
#include "vfab/vfio/pci_sysfs.hpp"

namespace vfab::igbvf {
namespace {

using namespace std::chrono_literals;

enum : uint64_t { kTagMailbox = 1, kTagReq = 2 };
constexpr uint32_t kCqVector = 0;
constexpr uint32_t kMailboxVectors = 0b110;   // 1 (QEMU's model) and 2 (hardware)
constexpr uint32_t kMaxFrame = 1522;          // 1500 + Ethernet header + FCS + one VLAN tag
// The VF's free-running counters, in the order stats() adds them up (raw_ holds their last values).
constexpr uint32_t kCounters[] = {reg::VFGPRC, reg::VFGPTC, reg::VFGORC, reg::VFGOTC, reg::VFMPRC};

using intel::mac_string;

bool valid_unicast(const MacAddress& m) {
    return !(m[0] & 1) && (m[0] | m[1] | m[2] | m[3] | m[4] | m[5]) != 0;
}

}  // namespace

DeviceImpl::DeviceImpl(std::unique_ptr<vfio::Device> vdev, vfio::Region* bar, vfio::EventWaiter events)
    : QueueSet(std::move(vdev), bar), mbx_(std::make_unique<Mailbox>(*bar)), events_(std::move(events)) {}

Result<std::unique_ptr<DeviceImpl>> DeviceImpl::open(const PciAddress& addr, const DeviceOptions& opts) {
    if (opts.mac && !valid_unicast(*opts.mac))
        return Error{EINVAL, str_cat("igbvf: ", mac_string(*opts.mac), " is not a unicast address")};
    if (opts.pf_timeout_ms <= 0) return Error{EINVAL, "igbvf: pf_timeout_ms must be positive"};
    auto f = intel::open_function(addr, opts.vfio, kPciIds, "an Intel 82576 or I350 virtual function (8086:10ca, 8086:1520)",
                                  0x4000, [](PciId id) { return contains(igb::kPciIds, id) ? ": it is an 82576 physical function (igb)" : ""; });
    if (!f) return f.take_error();
    std::unique_ptr<DeviceImpl> dev(new DeviceImpl(std::move(f->dev), f->bar, std::move(*f->events)));
    if (auto r = dev->init(opts); !r) return r.take_error();
    return dev;
}

Result<void> DeviceImpl::init(const DeviceOptions& opts) {
    opts_ = opts;
    const std::string where = vfio_->address().to_string();
    const vfio::PciSysfs sysfs(opts.vfio.sysfs_root);
    if (auto pf = sysfs.physfn(vfio_->address()); pf && *pf) pf_ = (*pf)->to_string();
    if (auto r = vfio_->enable_bus_master(); !r) return r;
    auto info = vfio_->irq_info(vfio::IrqIndex::msix);
    if (!info || info->count < reg::kVectors)
        return Error{ENOTSUP, str_cat(where, ": the VF driver needs its 3 MSI-X vectors")};
    auto msix = vfio_->enable_interrupts(vfio::IrqIndex::msix, reg::kVectors);
    if (!msix) return msix.take_error();
    msix_ = *msix;
    for (uint32_t v = 1; v < reg::kVectors; ++v)
        if (auto r = events_.add(msix_->eventfd(v), kTagMailbox); !r) return r;
    auto req = vfio_->watch_optional_interrupt(vfio::IrqIndex::req, events_, kTagReq);
    if (!req) return req.take_error();
    req_ = *req;
    if (auto r = init_common(opts.pd, "igbvf", "Intel 82576 virtual function"); !r) return r;
    attr_.mtu = 1500;
    attr_.max_cq = 1;
    attr_.max_qp = 1;
    attr_.max_qp_wr = igb::kMaxQueueDepth;
    attr_.max_send_sge = igb::kMaxSendSge;
    attr_.max_recv_sge = 1;
    attr_.recv_buffer_size = igb::reg::kRxBufferSize;
    attr_.offloads = offload_tx_ip_csum;   // receive checksums are the PF's to turn on
    attr_.interrupt_vectors = reg::kVectors;
    cq_vectors_ = 1;
    layout_ = {0x2800, 0x3800, 0x100};   // a VF's queue block (§8.27.3)
    qps_.resize(1);

    if (auto r = handshake(); !r) return r;
    for (size_t i = 0; i < std::size(kCounters); ++i) raw_[i] = bar_->read32(kCounters[i]);
    if (opts.link_timeout_ms > 0) intel::wait_until([&] { return link().up; }, std::chrono::milliseconds(opts.link_timeout_ms));
    link_up_ = link().up;
    return {};
}

// What the PF's side looks like, for an error that says what to do about it.
std::string DeviceImpl::pf_state() const {
    if (pf_.empty()) return "this VF's PF is not visible here (a VF passed into a VM?): its driver must be running and its interface up";
    const vfio::PciSysfs sysfs(opts_.vfio.sysfs_root);
    const PciAddress pf = *PciAddress::parse(pf_);
    auto bound = sysfs.driver(pf);
    const std::string driver = bound && *bound ? **bound : std::string();
    if (driver.empty()) return str_cat("the PF ", pf_, " has no driver: load the kernel's igb (`modprobe igb`) — a VF needs its PF driven");
    if (driver == "vfio-pci") return str_cat("the PF ", pf_, " is bound to vfio-pci: a VF needs its PF driven by the kernel's igb");
    auto interfaces = sysfs.net_interfaces(pf);
    const std::string netdev = interfaces && !interfaces->empty() ? interfaces->back() : std::string();
    return str_cat("the PF ", pf_, " is driven by ", driver, netdev.empty() ? "" : str_cat(" as ", netdev),
                   ": bring its interface up (`ip link set ", netdev.empty() ? "DEV" : netdev, " up`)");
}

// One request and its reply's first words; a PF control message arriving first is handled and
// skipped. Returns the reply's word 0 (ACK or NACK for the caller to judge).
Result<uint32_t> DeviceImpl::request(std::span<const uint32_t> words, std::span<uint32_t> reply, const char* what) {
    const auto timeout = std::chrono::milliseconds(opts_.pf_timeout_ms);
    const std::string where = vfio_->address().to_string();
    // A mailbox failure: the PF reset (ECONNRESET) or did not answer (ETIMEDOUT), and what its side looks like.
    auto failed = [&](const Error& e) {
        return Error{e.code == ECONNRESET ? ECONNRESET : ETIMEDOUT, str_cat(where, ": ", what, ": ", e.message, " — ", pf_state())};
    };
    if (auto r = mbx_->send(words, timeout); !r) return failed(r.error());
    for (int i = 0; i < 4; ++i) {
        if (auto r = mbx_->receive(reply, timeout); !r) return failed(r.error());
        if ((reply[0] & msg::TYPE_MASK) == (words[0] & msg::TYPE_MASK)) return reply[0];
        if ((reply[0] & msg::TYPE_MASK) == msg::PF_CONTROL && !(reply[0] & msg::CTS)) cts_ = false;
    }
    return Error{EPROTO, str_cat(where, ": ", what, ": the PF's replies are for other requests")};
}

// The VF reset handshake (Linux igbvf e1000_reset_hw_vf): reset the VF, wait until the PF is
// not resetting (RSTI clear), VF_RESET (the PF answers with the MAC it assigned and clears the
// VF to send), then this driver's settings: MAC, frame size, multicast, promiscuous modes.
Result<void> DeviceImpl::handshake() {
    const std::string where = vfio_->address().to_string();
    const auto timeout = std::chrono::milliseconds(opts_.pf_timeout_ms);
    cts_ = false;
    bar_->write32(reg::VTEIMC, (1u << reg::kVectors) - 1);
    bar_->write32(reg::VTCTRL, reg::VTCTRL_RST);
    std::this_thread::sleep_for(1ms);
    mbx_->clear();
    if (!intel::wait_until([&] { return !(mbx_->bits() & reg::MBX_RSTI); }, timeout))
        return Error{EAGAIN, str_cat(where, ": the PF is resetting (VMAILBOX.RSTI) and did not finish within ", timeout.count(),
                                     " ms — ", pf_state())};
    (void)mbx_->take(reg::MBX_RSTD);

    uint32_t reply[3] = {};
    const uint32_t reset_msg[] = {msg::VF_RESET};
    auto w0 = request(reset_msg, reply, "VF reset request");
    if (!w0) return w0.take_error();
    MacAddress assigned{};
    if (*w0 & msg::ACK) {
        for (int i = 0; i < 4; ++i) assigned[i] = uint8_t(reply[1] >> (8 * i));
        for (int i = 0; i < 2; ++i) assigned[4 + i] = uint8_t(reply[2] >> (8 * i));
    } else if (!(*w0 & msg::NACK)) {
        return Error{EPROTO, str_cat(where, ": the PF answered the VF reset request with neither ACK nor NACK (0x", std::hex, *w0, ")")};
    }
    cts_ = true;

    MacAddress mac = assigned;
    if (opts_.mac) {
        mac = *opts_.mac;
    } else if (!valid_unicast(assigned)) {   // no address assigned: a random, locally administered one
        std::random_device rd;
        for (auto& b : mac) b = uint8_t(rd());
        mac[0] = uint8_t((mac[0] & 0xfe) | 0x02);
    }
    if (mac != assigned) {
        const uint32_t set_mac[] = {msg::SET_MAC_ADDR,
                                    uint32_t(mac[0]) | uint32_t(mac[1]) << 8 | uint32_t(mac[2]) << 16 | uint32_t(mac[3]) << 24,
                                    uint32_t(mac[4]) | uint32_t(mac[5]) << 8};
        auto r = request(set_mac, std::span(reply, 1), "set MAC address");
        if (!r) return r.take_error();
        if (!(*r & msg::ACK))
            return Error{EPERM, str_cat(where, ": the PF refused MAC address ", mac_string(mac),
                                        valid_unicast(assigned) ? str_cat(" (it assigned ", mac_string(assigned), ")") : std::string(),
                                        ": its administrator may have fixed this VF's address (`ip link set PF vf N mac ...`); "
                                        "open without DeviceOptions::mac to use the PF's")};
    }
    std::copy(mac.begin(), mac.end(), attr_.mac);

    const uint32_t lpe[] = {msg::SET_LPE, kMaxFrame};
    if (auto r = request(lpe, std::span(reply, 1), "set frame size"); !r) return r.take_error();
    if (!multicast_.empty())
        if (auto r = send_multicast(multicast_); !r) return r.take_error();
    if (promisc_) {
        const uint32_t p[] = {msg::SET_PROMISC | promisc_};
        if (auto r = request(p, std::span(reply, 1), "set promiscuous mode"); !r) return r.take_error();
    }
    setup_interrupts();
    reset_reported_ = false;
    return {};
}

// Vector 0 for the completion queue: auto-clear and auto-mask, one notification per arm().
// The mailbox on the vector QEMU raises (1) and the one hardware raises (2); IVAR_MISC's
// field is a vector number on hardware and a bit mask in QEMU, and 2 means one of those two.
void DeviceImpl::setup_interrupts() {
    for (uint32_t v = 0; v < reg::kVectors; ++v) bar_->write32(reg::VTEITR0 + 4 * v, 0);
    bar_->write32(reg::VTIVAR_MISC, reg::IVAR_VALID | 2);
    bar_->write32(reg::VTEIAC, (1u << reg::kVectors) - 1);
    bar_->write32(reg::VTEIAM, 1u << kCqVector);
    for (uint32_t v = 0; v < reg::kVectors; ++v) vfio::drain_eventfd(msix_->eventfd(v));
    bar_->write32(reg::VTEIMS, kMailboxVectors);
}

LinkState DeviceImpl::link() const {
    LinkState l = intel::link_from_status(bar_->read32(reg::VTSTATUS));
    if (!cts_) l = {};
    return l;
}

DeviceStats DeviceImpl::stats() {
    std::lock_guard lock(mu_);
    if (!removed_) {
        uint64_t* fields[] = {&stats_.rx_packets, &stats_.tx_packets, &stats_.rx_bytes, &stats_.tx_bytes, &stats_.rx_multicast};
        static_assert(std::size(fields) == std::size(kCounters));
        for (size_t i = 0; i < std::size(kCounters); ++i) {
            const uint32_t now = bar_->read32(kCounters[i]);
            *fields[i] += uint32_t(now - raw_[i]);   // they wrap at 32 bits
            raw_[i] = now;
        }
    }
    return stats_;
}

// SET_MULTICAST: the count in MSGINFO, then the 12-bit hashes two to a word. The PF's reply.
Result<uint32_t> DeviceImpl::send_multicast(std::span<const uint16_t> hashes) {
    uint32_t m[1 + msg::kMaxMulticast / 2] = {msg::SET_MULTICAST | uint32_t(hashes.size()) << msg::INFO_SHIFT};
    for (size_t i = 0; i < hashes.size(); ++i) m[1 + i / 2] |= uint32_t(hashes[i]) << (16 * (i % 2));
    uint32_t reply[1];
    return request(std::span(m, 1 + (hashes.size() + 1) / 2), reply, "set multicast");
}

Result<void> DeviceImpl::set_multicast(std::span<const MacAddress> groups) {
    std::lock_guard lock(mu_);
    if (auto r = intel::check_multicast_groups(groups, msg::kMaxMulticast); !r) return r;
    if (removed_ || !cts_) return Error{EAGAIN, "set_multicast: the PF has not cleared this VF to run; reset() first"};
    std::vector<uint16_t> hashes;   // the PF's hash filter (intel::multicast_hash)
    for (const auto& g : groups) hashes.push_back(intel::multicast_hash(g));
    auto r = send_multicast(hashes);
    if (!r) return r.take_error();
    if (!(*r & msg::ACK)) return Error{EPERM, str_cat(vfio_->address().to_string(), ": the PF refused the multicast list")};
    multicast_ = std::move(hashes);
    return {};
}

Result<void> DeviceImpl::set_promiscuous(bool unicast, bool all_multicast) {
    std::lock_guard lock(mu_);
    if (removed_ || !cts_) return Error{EAGAIN, "set_promiscuous: the PF has not cleared this VF to run; reset() first"};
    const uint32_t modes = (unicast ? msg::PROMISC_UNICAST : 0) | (all_multicast ? msg::PROMISC_MULTICAST : 0);
    const uint32_t p[] = {msg::SET_PROMISC | modes};
    uint32_t reply[1];
    auto r = request(p, reply, "set promiscuous mode");
    if (!r) return r.take_error();
    if (!(*r & msg::ACK))
        return Error{EPERM, str_cat(vfio_->address().to_string(), ": the PF refused ", unicast ? "unicast" : "",
                                    unicast && all_multicast ? " and " : "", all_multicast ? "all-multicast" : "",
                                    unicast || all_multicast ? "" : "leaving", " promiscuous mode",
                                    unicast ? " (Linux's igb grants VFs all-multicast only)" : "")};
    promisc_ = modes;
    return {};
}

Result<void> DeviceImpl::configure_rss(const RssConfig&) {
    return Error{ENOTSUP, str_cat(vfio_->address().to_string(), ": a VF has one queue pair here; RSS is the PF's to configure")};
}

// The PF took back this VF's clearance (it is going down or resetting): the queues stop.
void DeviceImpl::lose_pf() {
    cts_ = false;
    enter_error_state();
}

Event DeviceImpl::next_event() {
    std::lock_guard lock(mu_);
    if (removed_) return {};
    if (req_ && vfio::drain_eventfd(req_->eventfd(0))) {
        enter_error_state();
        removed_ = true;
        return {EventType::device_removal};
    }
    for (uint32_t v = 1; v < reg::kVectors; ++v) vfio::drain_eventfd(msix_->eventfd(v));
    const uint32_t status = bar_->read32(reg::VTSTATUS);   // gone, else the link state below
    if (status == 0xffffffffu) {
        removed_ = true;
        enter_error_state();
        return {EventType::device_fatal};
    }
    uint32_t w0 = 0;
    while (mbx_->receive_pending(w0))
        if (((w0 & msg::TYPE_MASK) == msg::PF_CONTROL && !(w0 & msg::CTS)) || (w0 & msg::NACK)) cts_ = false;
    if (mbx_->bits() & (reg::MBX_RSTI | reg::MBX_RSTD)) cts_ = false;
    bar_->write32(reg::VTEIMS, kMailboxVectors);
    if (!cts_) {
        if (!reset_reported_) {
            reset_reported_ = true;
            link_up_ = false;
            lose_pf();
            return {EventType::device_reset};
        }
        return {};
    }
    return queue::link_change(intel::link_from_status(status).up, link_up_);
}

Result<void> DeviceImpl::reset() {
    std::lock_guard lock(mu_);
    if (removed_) return Error{ENODEV, str_cat(attr_.address.to_string(), ": the device was removed; close it")};
    enter_error_state();
    if (auto r = handshake(); !r) return r;
    if (opts_.link_timeout_ms > 0) intel::wait_until([&] { return link().up; }, std::chrono::milliseconds(opts_.link_timeout_ms));
    link_up_ = link().up;
    return {};
}

DeviceImpl::~DeviceImpl() {
    std::lock_guard lock(mu_);
    // Quiesce before anything is freed; the VF reset also tells the PF this VF is gone.
    stop_all_queues();
    if (!removed_) {
        bar_->write32(reg::VTEIMC, (1u << reg::kVectors) - 1);
        bar_->write32(reg::VTCTRL, reg::VTCTRL_RST);
    }
    vfio_->disable_bus_master();
    (void)vfio_->disable_interrupts(vfio::IrqIndex::msix);
    release_all();
}

}  // namespace vfab::igbvf

// The public handle: intel::DeviceHandle's calls, and the driver's own below.
template class vfab::intel::DeviceHandle<vfab::igbvf::Device, vfab::igbvf::DeviceImpl, vfab::igb::QueueTraits,
                                         vfab::igbvf::DeviceOptions>;

namespace vfab::igbvf {

Device::Device(std::unique_ptr<DeviceImpl> impl) : DeviceHandle(std::move(impl)) {}

Result<void> Device::set_promiscuous(bool unicast, bool all_multicast) {
    return impl_->set_promiscuous(unicast, all_multicast);
}
const std::string& Device::pf_address() const { return impl_->pf_address(); }

}  // namespace vfab::igbvf
