// The provider interface of the multiplexed API: how a driver's direct classes become
// vfab::Device / CompletionQueue / QueuePair, how a provider is registered, and the plugin
// entry point.
//
// A provider is a Record: its name, the PCI IDs it drives and an open function. Adapter turns
// any driver's direct API into the multiplexed classes with no forwarding code per provider:
//
//   using E1000e = vfab::provider::Adapter<e1000e::Device, e1000e::CompletionQueue,
//                                          e1000e::QueuePair, e1000e::QpInitAttr>;
//   constexpr vfab::provider::PciId kIds[] = {{0x8086, 0x10d3}};
//   constexpr vfab::provider::Record kRecord = vfab::provider::make_record<E1000e>("e1000e", kIds);
//
// Built-in providers are listed in libvfab (api/builtin_providers.cpp). A plugin is a shared
// object libvfab-<name>.so in the provider directory that exports the entry point:
//
//   VFAB_PROVIDER_PLUGIN(kRecord)     // extern "C" const Record* vfab_provider_entry_v1()
//
// Plugins are searched before the built-in providers, in file name order: a plugin replaces
// the built-in provider of the same name and wins for every PCI ID it lists. A plugin is
// loaded once per process and never unloaded. It must be built from the same vfab headers as
// the libvfab that loads it: the record's abi_version and layout are checked, and a plugin
// that does not load, lacks the entry point or has another ABI makes Device::open fail with
// an error naming the file (docs/api.md).
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vfab/log.hpp"
#include "vfab/pci_id.hpp"
#include "vfab/vfab.hpp"

namespace vfab::provider {

// Bumped whenever a plugin built from older headers could misbehave with this libvfab: the
// Record, OpenOptions, the multiplexed classes' virtual functions, types.hpp, Result/Error,
// the dma:: classes the device hands out.
inline constexpr uint32_t kAbiVersion = 8;   // 2: queue(), stats(), configure_rss(); 3: timestamps, clock;
                                             // 4: dma::Translation and MrTable's slots carry the CPU address, OpenOptions::mtu;
                                             // 5: set_multicast(), IommuContext::maps_device_memory();
                                             // 6: vfio::AddressSpace under the dma:: classes, Record::cxx_abi;
                                             // 7: Record::attach_log;
                                             // 8: Device::create_qp_ex, DeviceAttr::frame_headroom

// The C++ library ABI the headers were compiled for: std::string, std::vector and
// std::shared_ptr cross the plugin boundary, and libstdc++ lays std::string out two ways
// (_GLIBCXX_USE_CXX11_ABI) under one compiler ABI (__GXX_ABI_VERSION). Checked by name rather
// than through a size that happens to differ.
#if defined(_GLIBCXX_USE_CXX11_ABI)
inline constexpr uint32_t kCxxLibraryAbi = _GLIBCXX_USE_CXX11_ABI ? 1 : 0;
#else
inline constexpr uint32_t kCxxLibraryAbi = 2;   // not libstdc++
#endif
inline constexpr uint32_t kCxxAbi = uint32_t(__GXX_ABI_VERSION) << 4 | kCxxLibraryAbi;

using vfab::PciId;   // vfab/pci_id.hpp

using OpenFn = Result<std::unique_ptr<vfab::Device>> (*)(const PciAddress& addr, const OpenOptions& opts);

// A fingerprint of the sizes of vfab's own types the plugin ABI depends on: catches a plugin
// built from other headers even when the version number was not bumped. (The C++ library's
// own layout is kCxxAbi's to check.)
constexpr uint32_t layout_fingerprint() {
    uint32_t h = 2166136261u;   // FNV-1a over the sizes
    for (size_t v : {sizeof(OpenOptions), sizeof(QpInitAttr), sizeof(DeviceAttr), sizeof(DeviceStats),
                     sizeof(LinkState), sizeof(QpCaps), sizeof(RssConfig), sizeof(QpStats), sizeof(TimestampConfig), sizeof(RxTimestamp), sizeof(Completion), sizeof(SendWr), sizeof(RecvWr),
                     sizeof(Sge), sizeof(Event), sizeof(PostResult), sizeof(Error),
                     sizeof(Result<std::unique_ptr<vfab::Device>>), sizeof(dma::ProtectionDomain),
                     sizeof(dma::MrTable), sizeof(dma::MemoryRegion), sizeof(dma::DmaArena), sizeof(PciAddress)})
        h = (h ^ uint32_t(v)) * 16777619u;
    return h;
}
inline constexpr uint32_t kLayout = layout_fingerprint();

// What a provider registers. abi_version stays the first member in every ABI version.
struct Record {
    uint32_t abi_version = kAbiVersion;
    uint32_t layout = kLayout;
    uint32_t cxx_abi = kCxxAbi;
    const char* name = nullptr;      // "e1000e"; a plugin's file is libvfab-<name>.so
    const PciId* ids = nullptr;      // the vendor/device IDs it drives
    uint32_t num_ids = 0;
    OpenFn open = nullptr;
    // Called by libvfab when it loads the plugin: the plugin's messages go to libvfab's log
    // handler (vfab/log.hpp) rather than to its own copy of it.
    void (*attach_log)(void (*host_log)(int level, const char* message)) noexcept = detail::attach_host_log;
};

using EntryFn = const Record* (*)();
inline constexpr const char* kEntryPoint = "vfab_provider_entry_v1";

// The plugin entry point, returning `record` (a Record with static storage).
#define VFAB_PROVIDER_PLUGIN(record)                                                                  \
    extern "C" __attribute__((visibility("default"))) const ::vfab::provider::Record* vfab_provider_entry_v1() { \
        return &(record);                                                                           \
    }

// ---- the registry --------------------------------------------------------------------------

struct ProviderInfo {
    std::string name;
    std::vector<PciId> ids;
    std::string origin;               // "built in", or the plugin file's path
    const Record* record = nullptr;
};

// The providers built into libvfab.
std::span<const Record> builtin_providers();

// The directory plugins are looked for in: opts.provider_dir, else VFAB_PROVIDER_DIR, else
// vfab/providers beside libvfab.so.1 (where the install put it: <libdir>/vfab/providers, in
// whatever prefix), or kDefaultProviderDir (the configured <libdir>) in a program linked with
// libvfab.a.
std::string provider_dir(const OpenOptions& opts = {});
extern const char* const kDefaultProviderDir;

// Every provider Device::open would consider, in the order it considers them: the plugins of
// provider_dir(opts) by file name, then the built-in providers no plugin replaces. An error
// when a plugin there cannot be used, or a directory given explicitly does not exist.
Result<std::vector<ProviderInfo>> list_providers(const OpenOptions& opts = {});

// The provider Device::open would use for vendor:device: the first in list_providers() order
// that lists the ID. ENODEV, listing the known providers, when none does; list_providers()'s
// errors as they are.
Result<ProviderInfo> find_provider(uint16_t vendor, uint16_t device, const OpenOptions& opts = {});
// The provider named `name` (a plugin of that name replaces the built-in one). ENOENT, listing
// the known providers, when there is none; list_providers()'s errors as they are.
Result<ProviderInfo> find_provider(std::string_view name, const OpenOptions& opts = {});

// Loads one plugin file and checks its entry point, ABI version, layout and record; the
// error names the file and says what to do. Loaded plugins stay loaded.
Result<const Record*> load_plugin(const std::string& path);

// ---- the adapter ---------------------------------------------------------------------------

// What Adapter needs of a driver's direct API: the operations of vfab.hpp with the same
// signatures (non-virtual, the fast path noexcept), create_cq/create_qp returning objects the
// device owns until it is destroyed, and after destroy() every call on such an object returning
// ENODEV. Device::open(const PciAddress&, const Options&) with an Options type of the
// provider's own; InitAttr with send_cq, recv_cq (CompletionQueue*), caps and sq_sig_all.
template <class Dev, class Cq, class Qp, class InitAttr>
concept DirectApi = requires(Dev& d, const Dev& cd, Cq& cq, const Cq& ccq, Qp& qp, const Qp& cqp, InitAttr& ia,
                             std::span<Completion> wc, std::span<const SendWr> s, std::span<const RecvWr> r,
                             const RssConfig& rss) {
    { cd.attr() } -> std::convertible_to<const DeviceAttr&>;
    { cd.link() } -> std::same_as<LinkState>;
    { d.stats() } -> std::same_as<DeviceStats>;
    { d.pd() } -> std::same_as<dma::ProtectionDomain&>;
    { d.create_cq(uint32_t{}) } -> std::same_as<Result<Cq*>>;
    { d.create_qp(ia) } -> std::same_as<Result<Qp*>>;
    { d.configure_rss(rss) } -> std::same_as<Result<void>>;
    { cd.event_fd() } -> std::convertible_to<int>;
    { d.next_event() } -> std::same_as<Event>;
    { d.reset() } -> std::same_as<Result<void>>;
    { cq.poll(wc) } noexcept -> std::same_as<int>;
    { cq.arm() } -> std::same_as<Result<void>>;
    { ccq.channel_fd() } noexcept -> std::convertible_to<int>;
    { cq.take_events() } noexcept -> std::same_as<uint64_t>;
    { cq.destroy() } -> std::same_as<Result<void>>;
    { qp.post_send(s) } noexcept -> std::same_as<PostResult>;
    { qp.post_recv(r) } noexcept -> std::same_as<PostResult>;
    { cqp.state() } noexcept -> std::same_as<QpState>;
    { cqp.qp_num() } noexcept -> std::same_as<uint32_t>;
    { cqp.caps() } noexcept -> std::convertible_to<const QpCaps&>;
    { cqp.queue() } noexcept -> std::same_as<uint32_t>;
    { cqp.stats() } noexcept -> std::same_as<QpStats>;
    { qp.destroy() } -> std::same_as<Result<void>>;
    ia.send_cq = &cq;
    ia.recv_cq = &cq;
    ia.caps = QpCaps{};
    ia.sq_sig_all = true;
};

namespace detail {
template <class F>
struct OpenSignature;
template <class D, class O>
struct OpenSignature<Result<std::unique_ptr<D>> (*)(const PciAddress&, const O&)> {
    using Options = O;
};
}  // namespace detail

// The multiplexed classes over one provider's direct classes. Each call is one forwarding
// virtual call; the direct fast path (inline in the provider's header) is inlined into it.
template <class Dev, class Cq, class Qp, class InitAttr>
    requires DirectApi<Dev, Cq, Qp, InitAttr>
class Adapter final : public vfab::Device {
public:
    using Options = typename detail::OpenSignature<decltype(&Dev::open)>::Options;

    // The Record's open function.
    static Result<std::unique_ptr<vfab::Device>> open(const PciAddress& addr, const OpenOptions& opts) {
        auto o = options(opts);
        if (!o) return o.take_error();
        auto d = Dev::open(addr, *o);
        if (!d) return d.take_error();
        return std::unique_ptr<vfab::Device>(new Adapter(std::move(*d)));
    }

    // The provider's options for `opts`: the fields both have (vfio.backend, vfio.sysfs_root,
    // promiscuous, mtu); an error when opts asks for something the provider cannot do.
    static Result<Options> options(const OpenOptions& opts) {
        Options o{};
        if constexpr (requires { o.vfio.backend = opts.backend; }) o.vfio.backend = opts.backend;
        if constexpr (requires { o.vfio.sysfs_root = opts.sysfs_root; }) o.vfio.sysfs_root = opts.sysfs_root;
        if constexpr (requires { o.mtu = opts.mtu; })
            o.mtu = opts.mtu;
        else if (opts.mtu && opts.mtu != 1500)
            return Error{EOPNOTSUPP, str_cat("this provider runs 1500-byte links only: open the device without mtu ", opts.mtu)};
        if constexpr (requires { o.promiscuous = opts.promiscuous; })
            o.promiscuous = opts.promiscuous;
        else if (opts.promiscuous)
            return Error{EOPNOTSUPP, "this provider has no promiscuous mode: open the device without it"};
        return o;
    }

    // The direct device, for provider extensions.
    Dev& direct() { return *dev_; }

    const DeviceAttr& attr() const override { return dev_->attr(); }
    LinkState link() const override { return dev_->link(); }
    DeviceStats stats() override { return dev_->stats(); }
    dma::ProtectionDomain& pd() override { return dev_->pd(); }
    int event_fd() const override { return dev_->event_fd(); }
    Event next_event() override { return dev_->next_event(); }
    Result<void> reset() override { return dev_->reset(); }
    Result<void> configure_rss(const RssConfig& cfg) override { return dev_->configure_rss(cfg); }
    Result<void> set_multicast(std::span<const MacAddress> groups) override {
        if constexpr (requires { dev_->set_multicast(groups); })
            return dev_->set_multicast(groups);
        else
            return unsupported("multicast filtering");
    }

    // Timestamps are optional in the direct API: forwarded where the provider has them.
    Result<void> enable_timestamps(const TimestampConfig& cfg) override {
        if constexpr (requires { dev_->enable_timestamps(cfg); })
            return dev_->enable_timestamps(cfg);
        else
            return unsupported("hardware timestamps");
    }
    Result<uint64_t> clock_ns() override {
        if constexpr (requires { dev_->clock_ns(); })
            return dev_->clock_ns();
        else
            return unsupported("hardware clock");
    }
    Result<void> set_clock_ns(uint64_t ns) override {
        if constexpr (requires { dev_->set_clock_ns(ns); }) {
            dev_->set_clock_ns(ns);
            return {};
        } else {
            return unsupported("hardware clock");
        }
    }
    std::optional<uint64_t> take_tx_timestamp() override {
        if constexpr (requires { dev_->take_tx_timestamp(); })
            return dev_->take_tx_timestamp();
        else
            return std::nullopt;
    }
    std::optional<RxTimestamp> take_rx_timestamp() override {
        if constexpr (requires { dev_->take_rx_timestamp(); })
            return dev_->take_rx_timestamp();
        else
            return std::nullopt;
    }

    Result<vfab::CompletionQueue*> create_cq(uint32_t cqe) override {
        std::lock_guard lock(mu_);
        auto cq = dev_->create_cq(cqe);
        if (!cq) return cq.take_error();
        cqs_.push_back(std::make_unique<CqAdapter>(**cq));
        return cqs_.back().get();
    }

    Result<vfab::QueuePair*> create_qp(const QpInitAttr& attr) override { return make_qp(attr, false); }
    Result<vfab::QueuePair*> create_qp_ex(const QpInitAttrEx& init) override {
        if constexpr (requires(InitAttr a) { a.hdr_in_headroom; }) {
            if (auto e = unknown_qp_init_bits(init)) return *e;
            return make_qp(init.base(), wants_hdr_in_headroom(init));
        } else {
            return vfab::Device::create_qp_ex(init);   // a driver with no header to place
        }
    }

private:
    // create_qp and create_qp_ex: `headroom` goes to a driver that takes it.
    Result<vfab::QueuePair*> make_qp(const QpInitAttr& attr, bool headroom) {
        std::lock_guard lock(mu_);
        InitAttr a{};
        auto s = direct_cq(attr.send_cq), r = direct_cq(attr.recv_cq);
        if (!s) return s.take_error();
        if (!r) return r.take_error();
        a.send_cq = *s;
        a.recv_cq = *r;
        a.caps = attr.caps;
        a.sq_sig_all = attr.sq_sig_all;
        if constexpr (requires { a.hdr_in_headroom; }) a.hdr_in_headroom = headroom;
        auto qp = dev_->create_qp(a);
        if (!qp) return qp.take_error();
        qps_.push_back(std::make_unique<QpAdapter>(**qp));
        return qps_.back().get();
    }
    Error unsupported(const char* what) const {
        return Error{ENOTSUP, str_cat(dev_->attr().address.to_string(), ": the ", dev_->attr().provider, " provider has no ", what)};
    }

    class CqAdapter final : public vfab::CompletionQueue {
    public:
        explicit CqAdapter(Cq& cq) : cq_(&cq) {}
        int poll(std::span<Completion> out) noexcept override { return cq_->poll(out); }
        Result<void> arm() override { return cq_->arm(); }
        int channel_fd() const noexcept override { return cq_->channel_fd(); }
        uint64_t take_events() noexcept override { return cq_->take_events(); }
        Result<void> destroy() override { return cq_->destroy(); }
        Cq* direct() const { return cq_; }

    private:
        Cq* cq_;
    };

    class QpAdapter final : public vfab::QueuePair {
    public:
        explicit QpAdapter(Qp& qp) : qp_(&qp) {}
        PostResult post_send(std::span<const SendWr> wrs) noexcept override { return qp_->post_send(wrs); }
        PostResult post_recv(std::span<const RecvWr> wrs) noexcept override { return qp_->post_recv(wrs); }
        QpState state() const noexcept override { return qp_->state(); }
        uint32_t qp_num() const noexcept override { return qp_->qp_num(); }
        const QpCaps& caps() const noexcept override { return qp_->caps(); }
        uint32_t queue() const noexcept override { return qp_->queue(); }
        QpStats stats() const noexcept override { return qp_->stats(); }
        Result<void> destroy() override { return qp_->destroy(); }

    private:
        Qp* qp_;
    };

    explicit Adapter(std::unique_ptr<Dev> dev) : dev_(std::move(dev)) {}

    // The direct CQ behind one of this device's CQs; null stays null (the provider says what
    // it thinks of that).
    Result<Cq*> direct_cq(vfab::CompletionQueue* cq) const {
        if (!cq) return static_cast<Cq*>(nullptr);
        for (const auto& c : cqs_)
            if (c.get() == cq) return c->direct();
        return Error{EINVAL, "create_qp: the completion queue belongs to another device"};
    }

    // Declared first, destroyed last: the wrappers go before the objects they point to.
    std::unique_ptr<Dev> dev_;
    std::mutex mu_;
    std::vector<std::unique_ptr<CqAdapter>> cqs_;   // kept until the device goes (see vfab.hpp)
    std::vector<std::unique_ptr<QpAdapter>> qps_;
};

// A Record for the Adapter type A; `ids` must have static storage.
template <class A>
constexpr Record make_record(const char* name, std::span<const PciId> ids) {
    return Record{kAbiVersion, kLayout, kCxxAbi, name, ids.data(), static_cast<uint32_t>(ids.size()), &A::open};
}

}  // namespace vfab::provider
