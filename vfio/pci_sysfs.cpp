#include "vfab/vfio/pci_sysfs.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>

namespace vfab::vfio {
namespace fs = std::filesystem;
namespace {

Result<std::string> read_line(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    if (!in || !std::getline(in, line)) return Error::from_errno(errno ? errno : EIO, str_cat("cannot read ", path));
    return line;
}

// Parses all of `text` as a number; sysfs writes hex with a 0x prefix.
template <class T>
std::optional<T> parse_number(std::string_view text, int base) {
    if (base == 16 && text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X'))
        text.remove_prefix(2);
    T v{};
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, base);
    if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return v;
}

Result<unsigned long> read_number(const std::string& path, int base) {
    auto line = read_line(path);
    if (!line) return line.take_error();
    auto v = parse_number<unsigned long>(*line, base);
    if (!v) return Error{EIO, str_cat(path, " holds '", *line, "', not a number")};
    return *v;
}

std::optional<std::string> link_basename(const fs::path& link) {
    std::error_code ec;
    fs::path target = fs::read_symlink(link, ec);
    if (ec) return std::nullopt;
    return target.filename().string();
}

}  // namespace

Result<std::string> PciSysfs::device_dir(const PciAddress& addr) const {
    std::string dir = str_cat(root_, "/bus/pci/devices/", addr.to_string());
    std::error_code ec;
    if (!fs::exists(dir, ec))
        return Error{ENODEV, str_cat("no PCI device ", addr.to_string(),
                                     ": check the address with `lspci -D` or `vfio-devctl list`")};
    return dir;
}

Result<PciIds> PciSysfs::ids(const PciAddress& addr) const {
    auto dir = device_dir(addr);
    if (!dir) return dir.take_error();
    PciIds ids;
    struct Field { const char* name; unsigned long* out; };
    unsigned long v[5] = {};
    const Field fields[] = {{"vendor", &v[0]}, {"device", &v[1]}, {"subsystem_vendor", &v[2]},
                            {"subsystem_device", &v[3]}, {"class", &v[4]}};
    for (const Field& f : fields) {
        auto n = read_number(str_cat(*dir, "/", f.name), 16);
        if (!n) return n.take_error();
        *f.out = *n;
    }
    ids.vendor = static_cast<uint16_t>(v[0]);
    ids.device = static_cast<uint16_t>(v[1]);
    ids.subsystem_vendor = static_cast<uint16_t>(v[2]);
    ids.subsystem_device = static_cast<uint16_t>(v[3]);
    ids.class_code = static_cast<uint32_t>(v[4]);
    return ids;
}

Result<std::optional<std::string>> PciSysfs::driver(const PciAddress& addr) const {
    auto dir = device_dir(addr);
    if (!dir) return dir.take_error();
    return link_basename(*dir + "/driver");
}

Result<std::optional<PciAddress>> PciSysfs::physfn(const PciAddress& addr) const {
    auto dir = device_dir(addr);
    if (!dir) return dir.take_error();
    const std::optional<std::string> pf = link_basename(*dir + "/physfn");
    if (!pf) return std::optional<PciAddress>();
    auto parsed = PciAddress::parse(*pf);
    if (!parsed) return Error{EIO, str_cat(addr.to_string(), ": its physfn link names '", *pf, "'")};
    return std::optional<PciAddress>(*parsed);
}

Result<std::vector<std::string>> PciSysfs::net_interfaces(const PciAddress& addr) const {
    auto dir = device_dir(addr);
    if (!dir) return dir.take_error();
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(*dir + "/net", ec)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

Result<unsigned> PciSysfs::iommu_group(const PciAddress& addr) const {
    auto dir = device_dir(addr);
    if (!dir) return dir.take_error();
    auto group = link_basename(*dir + "/iommu_group");
    if (!group)
        return Error{ENODEV, str_cat(addr.to_string(), " has no IOMMU group: the IOMMU is off — boot "
                                     "with intel_iommu=on (Intel) or amd_iommu=on (AMD), or ask for "
                                     "no-IOMMU mode (unsafe: DMA is not isolated)")};
    auto n = parse_number<unsigned>(*group, 10);
    if (!n) return Error{EIO, str_cat(addr.to_string(), ": IOMMU group link names '", *group, "'")};
    return *n;
}

Result<std::vector<PciAddress>> PciSysfs::group_devices(unsigned group) const {
    std::string dir = str_cat(root_, "/kernel/iommu_groups/", group, "/devices");
    std::error_code ec;
    std::vector<PciAddress> out;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        auto a = PciAddress::parse(entry.path().filename().string());
        if (a) out.push_back(*a);   // non-PCI members (rare) are not ours to report
    }
    if (ec) return Error::from_errno(ec.value(), str_cat("cannot list IOMMU group ", group, " (", dir, ")"));
    std::sort(out.begin(), out.end());
    return out;
}

Result<int> PciSysfs::numa_node(const PciAddress& addr) const {
    auto dir = device_dir(addr);
    if (!dir) return dir.take_error();
    auto line = read_line(*dir + "/numa_node");
    if (!line) return -1;
    return parse_number<int>(*line, 10).value_or(-1);
}

Result<std::optional<std::string>> PciSysfs::vfio_cdev(const PciAddress& addr) const {
    auto dir = device_dir(addr);
    if (!dir) return dir.take_error();
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(*dir + "/vfio-dev", ec)) {
        std::string name = entry.path().filename().string();
        if (name.rfind("vfio", 0) == 0) return std::optional<std::string>(name);
    }
    return std::optional<std::string>();
}

}  // namespace vfab::vfio
