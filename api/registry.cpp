// The provider registry: built-in providers and libvfab-<name>.so plugins from the provider
// directory, matched against a device's PCI IDs.
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "vfab/provider.hpp"

#ifndef VFAB_DEFAULT_PROVIDER_DIR
#error "VFAB_DEFAULT_PROVIDER_DIR must name the install's provider directory"
#endif

namespace vfab::provider {

const char* const kDefaultProviderDir = VFAB_DEFAULT_PROVIDER_DIR;

namespace {
namespace fs = std::filesystem;

constexpr std::string_view kPrefix = "libvfab-", kSuffix = ".so";

std::mutex g_mu;
std::map<std::string, const Record*> g_loaded;   // plugin path -> its record (never unloaded)

std::string hex4(uint16_t v) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04x", v);
    return buf;
}

std::string id_text(uint16_t vendor, uint16_t device) { return hex4(vendor) + ":" + hex4(device); }

// "libvfab-e1000e.so" -> "e1000e"; empty for other names.
std::string plugin_name(const std::string& file) {
    if (file.size() <= kPrefix.size() + kSuffix.size() || !file.starts_with(kPrefix) || !file.ends_with(kSuffix))
        return {};
    return file.substr(kPrefix.size(), file.size() - kPrefix.size() - kSuffix.size());
}

ProviderInfo info_of(const Record* r, std::string origin) {
    ProviderInfo p{r->name, {r->ids, r->ids + r->num_ids}, std::move(origin), r};
    return p;
}

Error plugin_error(const std::string& path, std::string_view what) {
    return Error{ELIBBAD, str_cat("provider plugin ", path, ": ", what)};
}

Result<const Record*> check_record(const std::string& path, const Record* r) {
    if (!r) return plugin_error(path, "its entry point returned no record — return the address of a Record");
    if (r->abi_version != kAbiVersion)
        return plugin_error(path, str_cat("built for provider ABI version ", r->abi_version, ", this libvfab has version ",
                                          kAbiVersion, " — rebuild the plugin against this vfab's headers, or remove it"));
    if (r->cxx_abi != kCxxAbi)
        return plugin_error(path, str_cat("built for another C++ library ABI (__GXX_ABI_VERSION ", r->cxx_abi >> 4,
                                          ", _GLIBCXX_USE_CXX11_ABI=", r->cxx_abi & 15, "; this libvfab: ",
                                          kCxxAbi >> 4, ", ", kCxxAbi & 15, ") — rebuild the plugin with the same "
                                          "compiler and without changing _GLIBCXX_USE_CXX11_ABI"));
    if (r->layout != kLayout)
        return plugin_error(path, str_cat("built from other vfab headers (layout 0x", std::hex, r->layout,
                                          ", this libvfab 0x", kLayout, ") — rebuild the plugin against this vfab's "
                                          "headers, or remove it"));
    if (!r->name || !*r->name || !r->open || !r->attach_log || (r->num_ids && !r->ids))
        return plugin_error(path, "its record lacks a name, an open or an attach_log function, or has IDs without an array");
    const std::string file = fs::path(path).filename().string();
    if (plugin_name(file) != r->name)
        return plugin_error(path, str_cat("registers provider '", r->name, "', so it must be named libvfab-", r->name,
                                          ".so — rename it"));
    return r;
}

struct Dir {
    std::string path;
    bool explicit_choice;   // given by the caller or the environment: it must exist
    std::string described;  // for messages
};

// <the directory of libvfab.so.1>/vfab/providers: found where the library is, so that an
// install in another prefix or from a package finds its own plugins. In a program that linked
// libvfab.a, the directory the build was configured to install to.
std::string installed_dir() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&installed_dir), &info) && info.dli_fname) {
        const fs::path lib = info.dli_fname;
        if (lib.filename().string().starts_with("libvfab.so")) return (lib.parent_path() / "vfab" / "providers").string();
    }
    return kDefaultProviderDir;
}

Dir choose_dir(const OpenOptions& opts) {
    if (!opts.provider_dir.empty()) return {opts.provider_dir, true, opts.provider_dir};
    if (const char* env = std::getenv("VFAB_PROVIDER_DIR"); env && *env)
        return {env, true, str_cat(env, " (VFAB_PROVIDER_DIR)")};
    std::string dir = installed_dir();
    return {dir, false, dir};
}

// The plugin files of `dir`, sorted; none when the default directory does not exist.
Result<std::vector<std::string>> plugin_files(const Dir& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir.path, ec)) {
        if (!dir.explicit_choice) return std::vector<std::string>{};
        return Error{ENOENT, str_cat("provider directory ", dir.described,
                                     " does not exist — give an existing directory, or none for the default ",
                                     installed_dir())};
    }
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir.path, ec))
        if (!plugin_name(e.path().filename().string()).empty()) files.push_back(e.path().string());
    if (ec) return Error::from_errno(ec.value(), str_cat("cannot list the provider directory ", dir.described));
    std::sort(files.begin(), files.end());
    return files;
}

std::string describe(const std::vector<ProviderInfo>& all, const Dir& dir) {
    std::string known;
    for (const ProviderInfo& p : all) {
        known += str_cat(known.empty() ? "" : "; ", p.name, " (");
        for (size_t i = 0; i < p.ids.size(); ++i) known += str_cat(i ? " " : "", id_text(p.ids[i].vendor, p.ids[i].device));
        known += str_cat(p.ids.empty() ? "" : ", ", p.origin, ")");
    }
    bool any_plugin = std::any_of(all.begin(), all.end(), [](const ProviderInfo& p) { return p.origin != "built in"; });
    return str_cat("known providers: ", known.empty() ? "none" : known, "; plugins searched in ", dir.described,
                   any_plugin ? "" : " (none there)");
}

}  // namespace

std::string provider_dir(const OpenOptions& opts) { return choose_dir(opts).path; }

Result<const Record*> load_plugin(const std::string& path) {
    std::lock_guard lock(g_mu);
    if (auto it = g_loaded.find(path); it != g_loaded.end()) return it->second;
    // RTLD_LOCAL: a plugin's own copies of vfab's code stay its own.
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char* why = dlerror();
        return plugin_error(path, str_cat("cannot be loaded (", why ? why : "dlopen failed",
                                          ") — it must be a shared object built for this machine; remove it or "
                                          "rebuild it"));
    }
    auto entry = reinterpret_cast<EntryFn>(dlsym(h, kEntryPoint));
    if (!entry) {
        dlclose(h);
        return plugin_error(path, str_cat("has no entry point ", kEntryPoint,
                                          " — define one with VFAB_PROVIDER_PLUGIN(record) from <vfab/provider.hpp>, "
                                          "or remove the file"));
    }
    auto r = check_record(path, entry());
    if (!r) {
        dlclose(h);
        return r;
    }
    (*r)->attach_log(vfab::detail::log_from_plugin);
    g_loaded.emplace(path, *r);
    return r;
}

Result<std::vector<ProviderInfo>> list_providers(const OpenOptions& opts) {
    const Dir dir = choose_dir(opts);
    auto files = plugin_files(dir);
    if (!files) return files.take_error();
    std::vector<ProviderInfo> all;
    for (const std::string& f : *files) {
        auto r = load_plugin(f);
        if (!r) return r.take_error();
        all.push_back(info_of(*r, f));
    }
    for (const Record& b : builtin_providers()) {
        bool replaced = std::any_of(all.begin(), all.end(), [&](const ProviderInfo& p) { return p.name == b.name; });
        if (!replaced) all.push_back(info_of(&b, "built in"));
    }
    return all;
}

Result<ProviderInfo> find_provider(uint16_t vendor, uint16_t device, const OpenOptions& opts) {
    auto all = list_providers(opts);
    if (!all) return all.take_error();
    for (const ProviderInfo& p : *all)
        for (const PciId& id : p.ids)
            if (id == PciId{vendor, device}) return p;
    return Error{ENODEV, str_cat("no vfab provider for PCI ID ", id_text(vendor, device), " — ", describe(*all, choose_dir(opts)),
                                 ". `vfio-devctl list` shows the devices vfab drives; a provider for another "
                                 "device goes there as libvfab-<name>.so")};
}

Result<ProviderInfo> find_provider(std::string_view name, const OpenOptions& opts) {
    auto all = list_providers(opts);
    if (!all) return all.take_error();
    for (const ProviderInfo& p : *all)
        if (p.name == name) return p;
    return Error{ENOENT, str_cat("no vfab provider named '", name, "' — ", describe(*all, choose_dir(opts)))};
}

}  // namespace vfab::provider
