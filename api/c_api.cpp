// The C API (vfab.h), devices, memory and errors: thin wrappers over the multiplexed C++ API.
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "api/c_api_internal.hpp"
#include "vfab/log.hpp"
#include "vfio/log_sink.hpp"
#include "vfab/vfio/device.hpp"

namespace vfab::capi {
namespace {

thread_local std::string t_last_error;

// The C structs the fast path passes through must be the C++ ones, byte for byte.
template <class C, class Cpp>
constexpr bool same_shape = sizeof(C) == sizeof(Cpp) && alignof(C) == alignof(Cpp) &&
                            std::is_standard_layout_v<C> && std::is_standard_layout_v<Cpp>;

static_assert(same_shape<vfab_sge, Sge>);
static_assert(offsetof(vfab_sge, addr) == offsetof(Sge, addr));
static_assert(offsetof(vfab_sge, length) == offsetof(Sge, length));
static_assert(offsetof(vfab_sge, lkey) == offsetof(Sge, lkey));

static_assert(same_shape<vfab_send_wr, SendWr>);
static_assert(offsetof(vfab_send_wr, wr_id) == offsetof(SendWr, wr_id));
static_assert(offsetof(vfab_send_wr, sg_list) == offsetof(SendWr, sg_list));
static_assert(offsetof(vfab_send_wr, num_sge) == offsetof(SendWr, num_sge));
static_assert(offsetof(vfab_send_wr, flags) == offsetof(SendWr, flags));

static_assert(same_shape<vfab_recv_wr, RecvWr>);
static_assert(offsetof(vfab_recv_wr, wr_id) == offsetof(RecvWr, wr_id));
static_assert(offsetof(vfab_recv_wr, sg_list) == offsetof(RecvWr, sg_list));
static_assert(offsetof(vfab_recv_wr, num_sge) == offsetof(RecvWr, num_sge));

static_assert(same_shape<vfab_completion, Completion>);
static_assert(offsetof(vfab_completion, wr_id) == offsetof(Completion, wr_id));
static_assert(offsetof(vfab_completion, status) == offsetof(Completion, status));
static_assert(offsetof(vfab_completion, opcode) == offsetof(Completion, opcode));
static_assert(offsetof(vfab_completion, flags) == offsetof(Completion, flags));
static_assert(offsetof(vfab_completion, byte_len) == offsetof(Completion, byte_len));
static_assert(offsetof(vfab_completion, qp_num) == offsetof(Completion, qp_num));
static_assert(sizeof(Completion::status) == 1 && sizeof(Completion::opcode) == 1);

static_assert(same_shape<vfab_device_stats, DeviceStats> && sizeof(DeviceStats) == 9 * sizeof(uint64_t));
static_assert(same_shape<vfab_qp_caps, QpCaps> && offsetof(vfab_qp_caps, max_recv_sge) == offsetof(QpCaps, max_recv_sge));

// The constants are the C++ ones.
static_assert(int(VFAB_SEND_SIGNALED) == int(send_signaled) && int(VFAB_SEND_IP_CSUM) == int(send_ip_csum) &&
              int(VFAB_SEND_TIMESTAMP) == int(send_timestamp));
static_assert(VFAB_WC_SUCCESS == int(WcStatus::success) && VFAB_WC_LOC_LEN_ERR == int(WcStatus::local_length_error) &&
              VFAB_WC_LOC_QP_OP_ERR == int(WcStatus::local_qp_op_error) &&
              VFAB_WC_LOC_PROT_ERR == int(WcStatus::local_protection_error) &&
              VFAB_WC_WR_FLUSH_ERR == int(WcStatus::wr_flush_error) && VFAB_WC_GENERAL_ERR == int(WcStatus::general_error));
static_assert(VFAB_WC_SEND == int(WcOpcode::send) && VFAB_WC_RECV == int(WcOpcode::recv));
static_assert(int(VFAB_QP_INIT_ATTR_CREATE_FLAGS) == int(qp_init_attr_create_flags) &&
              int(VFAB_QP_CREATE_HDR_IN_HEADROOM) == int(qp_create_hdr_in_headroom));
static_assert(int(VFAB_LOG_ERROR) == int(LogLevel::error) && int(VFAB_LOG_WARNING) == int(LogLevel::warning) &&
              int(VFAB_LOG_INFO) == int(LogLevel::info) && int(VFAB_LOG_DEBUG) == int(LogLevel::debug));
static_assert(int(VFAB_WC_IP_CSUM_OK) == int(wc_ip_csum_ok) && int(VFAB_WC_TIMESTAMPED) == int(wc_timestamped));
static_assert(int(VFAB_OFFLOAD_TX_IP_CSUM) == int(offload_tx_ip_csum) &&
              int(VFAB_OFFLOAD_RX_IP_CSUM) == int(offload_rx_ip_csum) &&
              int(VFAB_OFFLOAD_TX_TIMESTAMP) == int(offload_tx_timestamp) &&
              int(VFAB_OFFLOAD_RX_TIMESTAMP) == int(offload_rx_timestamp));
static_assert(VFAB_ACCESS_LOCAL_WRITE == uint32_t(dma::Access::local_write) &&
              VFAB_ACCESS_REMOTE_WRITE == uint32_t(dma::Access::remote_write) &&
              VFAB_ACCESS_REMOTE_READ == uint32_t(dma::Access::remote_read) &&
              VFAB_ACCESS_REMOTE_ATOMIC == uint32_t(dma::Access::remote_atomic) &&
              VFAB_ACCESS_MW_BIND == uint32_t(dma::Access::mw_bind) &&
              VFAB_ACCESS_ZERO_BASED == uint32_t(dma::Access::zero_based));
static_assert(VFAB_QPS_READY == int(QpState::ready) && VFAB_QPS_ERROR == int(QpState::error) &&
              VFAB_QPS_DESTROYED == int(QpState::destroyed));
static_assert(VFAB_EVENT_NONE == int(EventType::none) && VFAB_EVENT_LINK_UP == int(EventType::link_up) &&
              VFAB_EVENT_LINK_DOWN == int(EventType::link_down) &&
              VFAB_EVENT_DEVICE_FATAL == int(EventType::device_fatal) &&
              VFAB_EVENT_DEVICE_REMOVAL == int(EventType::device_removal) &&
              VFAB_EVENT_DEVICE_RESET == int(EventType::device_reset));

template <size_t N>
void copy_string(char (&out)[N], const std::string& s) {
    std::snprintf(out, N, "%s", s.c_str());
}

Result<vfio::IommuBackend> backend_of(int b) {
    switch (b) {
    case VFAB_IOMMU_AUTO: return vfio::IommuBackend::automatic;
    case VFAB_IOMMU_LEGACY: return vfio::IommuBackend::legacy;
    case VFAB_IOMMU_IOMMUFD: return vfio::IommuBackend::iommufd;
    case VFAB_IOMMU_NOIOMMU: return vfio::IommuBackend::noiommu;
    }
    return Error{EINVAL, str_cat("vfab_open: iommu_backend ", b, " is not one of VFAB_IOMMU_AUTO, VFAB_IOMMU_LEGACY, "
                                 "VFAB_IOMMU_IOMMUFD, VFAB_IOMMU_NOIOMMU")};
}

// Registers [addr, addr + len) and keeps the handle with the device.
// The handle of a registration, kept by the device until vfab_close(); null (errno, the
// message) when the registration failed. The caller holds dev->mu.
vfab_mr* adopt_mr(vfab_device* dev, Result<dma::MemoryRegion> mr, const char* function) {
    if (!mr) {
        errno = fail(mr.error().code, str_cat(function, ": ", mr.error().message));
        return nullptr;
    }
    dev->mrs.push_back(std::make_unique<vfab_mr>(vfab_mr{dev, *mr, true}));
    return dev->mrs.back().get();
}

vfab_mr* register_mr(vfab_device* dev, void* addr, size_t len, uint32_t access, const char* function) {
    std::lock_guard lock(dev->mu);
    return adopt_mr(dev, dev->dev->pd().register_memory(addr, len, dma::Access(access)), function);
}

}  // namespace

int fail(int code, std::string message) {
    t_last_error = std::move(message);
    return code;
}

int fail(const Error& e) { return fail(e.code ? e.code : EIO, e.message); }

int null_arg(const char* function, const char* what) { return fail(EINVAL, str_cat(function, ": ", what, " is NULL")); }

}  // namespace vfab::capi

using namespace vfab;
using capi::fail;
using capi::null_arg;

extern "C" {

vfab_device* vfab_open(const char* pci_address, const vfab_open_opts* o) {
    if (!pci_address) {
        errno = null_arg("vfab_open", "pci_address");
        return nullptr;
    }
    OpenOptions opts;
    if (o) {
        auto b = capi::backend_of(o->iommu_backend);
        if (!b) {
            errno = fail(b.error());
            return nullptr;
        }
        opts.backend = *b;
        opts.promiscuous = o->promiscuous != 0;
        if (o->provider_dir) opts.provider_dir = o->provider_dir;
        if (o->provider) opts.provider = o->provider;
        if (o->sysfs_root) opts.sysfs_root = o->sysfs_root;
    }
    auto d = Device::open(pci_address, opts);
    if (!d) {
        errno = fail(d.error());
        return nullptr;
    }
    auto h = std::make_unique<vfab_device>();
    h->dev = std::move(*d);
    return h.release();
}

int vfab_close(vfab_device* dev) {
    delete dev;   // the device quiesces the hardware; its PD drops every registration
    return 0;
}

int vfab_query_device(vfab_device* dev, vfab_device_attr* out) {
    if (!dev) return null_arg("vfab_query_device", "dev");
    if (!out) return null_arg("vfab_query_device", "attr");
    const DeviceAttr& a = dev->dev->attr();
    *out = {};
    capi::copy_string(out->provider, a.provider);
    capi::copy_string(out->name, a.name);
    capi::copy_string(out->pci_address, a.address.to_string());
    out->vendor_id = a.vendor_id;
    out->device_id = a.device_id;
    std::memcpy(out->mac, a.mac, sizeof out->mac);
    out->mtu = a.mtu;
    out->max_qp = a.max_qp;
    out->max_cq = a.max_cq;
    out->max_qp_wr = a.max_qp_wr;
    out->max_send_sge = a.max_send_sge;
    out->max_recv_sge = a.max_recv_sge;
    out->recv_buffer_size = a.recv_buffer_size;
    out->offloads = a.offloads;
    out->interrupt_vectors = a.interrupt_vectors;
    out->rss_key_size = a.rss_key_size;
    out->rss_table_size = a.rss_table_size;
    out->rss_hash_types = a.rss_hash_types;
    return 0;
}

int vfab_configure_rss(vfab_device* dev, const vfab_rss_config* cfg) {
    if (!dev) return null_arg("vfab_configure_rss", "dev");
    if (!cfg) return null_arg("vfab_configure_rss", "cfg");
    if ((!cfg->table && cfg->table_len) || (!cfg->key && cfg->key_len)) return null_arg("vfab_configure_rss", "cfg->table or cfg->key");
    const RssConfig c{{cfg->key, cfg->key ? cfg->key_len : 0}, {cfg->table, cfg->table_len}, cfg->hash_types};
    if (auto r = dev->dev->configure_rss(c); !r) return fail(r.error());
    return 0;
}

int vfab_set_multicast(vfab_device* dev, const uint8_t (*groups)[6], uint32_t n) {
    if (!dev) return null_arg("vfab_set_multicast", "dev");
    if (!groups && n) return null_arg("vfab_set_multicast", "groups");
    std::vector<MacAddress> g(n);
    for (uint32_t i = 0; i < n; ++i) std::memcpy(g[i].data(), groups[i], 6);
    if (auto r = dev->dev->set_multicast(g); !r) return fail(r.error());
    return 0;
}

int vfab_enable_timestamps(vfab_device* dev, const vfab_timestamp_config* cfg) {
    if (!dev) return null_arg("vfab_enable_timestamps", "dev");
    if (!cfg) return null_arg("vfab_enable_timestamps", "cfg");
    if (auto r = dev->dev->enable_timestamps({cfg->tx != 0, cfg->rx != 0, cfg->rx_message}); !r) return fail(r.error());
    return 0;
}

int vfab_clock_ns(vfab_device* dev, uint64_t* ns) {
    if (!dev) return null_arg("vfab_clock_ns", "dev");
    if (!ns) return null_arg("vfab_clock_ns", "ns");
    auto t = dev->dev->clock_ns();
    if (!t) return fail(t.error());
    *ns = *t;
    return 0;
}

int vfab_set_clock_ns(vfab_device* dev, uint64_t ns) {
    if (!dev) return null_arg("vfab_set_clock_ns", "dev");
    if (auto r = dev->dev->set_clock_ns(ns); !r) return fail(r.error());
    return 0;
}

int vfab_take_tx_timestamp(vfab_device* dev, uint64_t* ns) {
    if (!dev) return null_arg("vfab_take_tx_timestamp", "dev");
    if (!ns) return null_arg("vfab_take_tx_timestamp", "ns");
    auto t = dev->dev->take_tx_timestamp();
    if (!t) return fail(EAGAIN, "vfab_take_tx_timestamp: no departure time is latched");
    *ns = *t;
    return 0;
}

int vfab_take_rx_timestamp(vfab_device* dev, vfab_rx_timestamp* out) {
    if (!dev) return null_arg("vfab_take_rx_timestamp", "dev");
    if (!out) return null_arg("vfab_take_rx_timestamp", "out");
    auto t = dev->dev->take_rx_timestamp();
    if (!t) return fail(EAGAIN, "vfab_take_rx_timestamp: no arrival time is latched");
    *out = {t->ns, t->source, t->sequence_id};
    return 0;
}

int vfab_link(vfab_device* dev, vfab_link_state* out) {
    if (!dev) return null_arg("vfab_link", "dev");
    if (!out) return null_arg("vfab_link", "link");
    const LinkState l = dev->dev->link();
    *out = {l.up ? 1 : 0, l.speed_mbps, l.full_duplex ? 1 : 0};
    return 0;
}

int vfab_stats(vfab_device* dev, vfab_device_stats* out) {
    if (!dev) return null_arg("vfab_stats", "dev");
    if (!out) return null_arg("vfab_stats", "stats");
    const DeviceStats s = dev->dev->stats();
    std::memcpy(out, &s, sizeof s);
    return 0;
}

int vfab_event_fd(vfab_device* dev) {
    if (!dev) return -null_arg("vfab_event_fd", "dev");
    return dev->dev->event_fd();
}

int vfab_next_event(vfab_device* dev, vfab_event* out) {
    if (!dev) return null_arg("vfab_next_event", "dev");
    if (!out) return null_arg("vfab_next_event", "event");
    out->type = int(dev->dev->next_event().type);
    return 0;
}

int vfab_reset(vfab_device* dev) {
    if (!dev) return null_arg("vfab_reset", "dev");
    if (auto r = dev->dev->reset(); !r) return fail(r.error());
    return 0;
}

vfab_mr* vfab_reg_mr(vfab_device* dev, void* addr, size_t length, uint32_t access) {
    if (!dev || !addr) {
        errno = null_arg("vfab_reg_mr", dev ? "addr" : "dev");
        return nullptr;
    }
    return capi::register_mr(dev, addr, length, access, "vfab_reg_mr");
}

vfab_mr* vfab_reg_device_mr(vfab_device* dev, const char* memory_device, uint32_t bar, uint64_t offset, uint64_t length,
                            uint32_t access) {
    if (!dev || !memory_device) {
        errno = null_arg("vfab_reg_device_mr", dev ? "memory_device" : "dev");
        return nullptr;
    }
    auto addr = PciAddress::parse(memory_device);
    if (!addr) {
        errno = fail(EINVAL, str_cat("vfab_reg_device_mr: '", memory_device, "' is not a PCI address (0000:00:0b.0)"));
        return nullptr;
    }
    std::lock_guard lock(dev->mu);
    if (const char* why = dev->dev->pd().address_space().device_memory_refusal()) {   // say why before opening anything
        errno = fail(ENOTSUP, str_cat("vfab_reg_device_mr: device memory registration: ", why));
        return nullptr;
    }
    vfio::DeviceOptions o;
    o.backend = vfio::IommuBackend::legacy;   // its own container: type1 maps its BAR's mmap for the NIC
    auto mem = vfio::Device::open(*addr, o);
    if (!mem) {
        errno = fail(mem.error().code, str_cat("vfab_reg_device_mr: ", mem.error().message));
        return nullptr;
    }
    return capi::adopt_mr(dev,
                          dev->dev->pd().register_device_memory(std::shared_ptr<vfio::Device>(std::move(*mem)), bar,
                                                                offset, length, dma::Access(access)),
                          "vfab_reg_device_mr");
}

int vfab_query_mr(const vfab_mr* mr, vfab_mr_attr* out) {
    if (!mr) return null_arg("vfab_query_mr", "mr");
    if (!out) return null_arg("vfab_query_mr", "attr");
    std::lock_guard lock(mr->dev->mu);
    if (!mr->registered) return fail(ENODEV, "vfab_query_mr: the MR was deregistered");
    *out = {mr->mr.addr, mr->mr.length, mr->mr.lkey, mr->mr.rkey};
    return 0;
}

int vfab_dereg_mr(vfab_mr* mr) {
    if (!mr) return null_arg("vfab_dereg_mr", "mr");
    std::lock_guard lock(mr->dev->mu);
    if (!mr->registered) return fail(ENODEV, "vfab_dereg_mr: the MR was already deregistered");
    if (auto r = mr->dev->dev->pd().deregister(mr->mr); !r) return fail(r.error());
    mr->registered = false;
    return 0;
}

void* vfab_alloc_dma(vfab_device* dev, size_t length, uint32_t access, vfab_mr** mr) {
    if (!dev || !mr) {
        errno = null_arg("vfab_alloc_dma", dev ? "mr" : "dev");
        return nullptr;
    }
    if (length == 0) {
        errno = fail(EINVAL, "vfab_alloc_dma: length is 0");
        return nullptr;
    }
    dma::DmaArena* arena;
    {
        std::lock_guard lock(dev->mu);
        auto a = dev->dev->pd().create_arena(length, dma::near_device(dev->dev->attr().address));
        if (!a) {
            errno = fail(a.error().code, str_cat("vfab_alloc_dma: ", a.error().message));
            return nullptr;
        }
        arena = *a;
    }
    *mr = capi::register_mr(dev, arena->data(), length, access, "vfab_alloc_dma");
    return *mr ? arena->data() : nullptr;
}

const char* vfab_last_error(void) { return capi::t_last_error.c_str(); }

const char* vfab_wc_status_str(int status) { return to_string(WcStatus(uint8_t(status))); }

const char* vfab_event_type_str(int type) { return to_string(EventType(uint8_t(type))); }

const char* vfab_version(void) { return VFAB_VERSION; }

void vfab_set_log_handler(vfab_log_fn fn, void* user, int max_level) {
    detail::set_log_sink({.handler = nullptr, .c_handler = fn, .user = user, .max_level = LogLevel(max_level)});
}

void vfab_log_to_stderr(int level, const char* message, void* user) { log_to_stderr(LogLevel(level), message, user); }

}  // extern "C"
