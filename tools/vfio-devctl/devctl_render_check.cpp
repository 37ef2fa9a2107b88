// check and hugepages: their text and JSON.
#include <cstdio>

#include "devctl_fs.hpp"
#include "devctl_render.hpp"

namespace vfab::devctl {
using nlohmann::json;

json check_json(const CheckReport& r) {
    json findings = json::array();
    for (const Finding& f : r.findings)
        findings.push_back({{"severity", severity_name(f.severity)}, {"topic", f.topic}, {"message", f.message},
                            {"fix", f.fix.empty() ? json(nullptr) : json(f.fix)}});
    const IommuState& i = r.iommu;
    json iommu = {{"on", i.on}, {"units", i.units}, {"groups", i.groups},
                  {"default_domain", i.default_domain.empty() ? json(nullptr) : json(i.default_domain)},
                  {"kernel_parameters", i.cmdline}, {"noiommu_mode", i.noiommu_mode}};
    return {{"ok", !r.blocked()}, {"iommu", iommu}, {"hugepages", hugepages_json(r.hugepages)}, {"findings", findings}};
}

void print_check(std::ostream& out, const CheckReport& r) {
    int problems = 0;
    for (const Finding& f : r.findings) {
        char tag[16];
        std::snprintf(tag, sizeof tag, "[%s]", severity_name(f.severity));
        out << tag << std::string(10 - std::min<size_t>(9, std::string(tag).size()), ' ') << f.topic << ": "
            << f.message << "\n";
        if (!f.fix.empty()) out << "           fix: " << f.fix << "\n";
        problems += f.severity == Severity::error;
    }
    out << (problems ? str_cat(problems, problems == 1 ? " problem blocks" : " problems block", " vfab on this host")
                     : std::string("vfab can run on this host")) << "\n";
}

json hugepages_json(const std::vector<HugepagePool>& pools) {
    json out = json::array();
    for (const HugepagePool& p : pools)
        out.push_back({{"page_size", p.page_kb * 1024}, {"node", p.node >= 0 ? json(p.node) : json(nullptr)},
                       {"total", p.total}, {"free", p.free}});
    return out;
}

void print_hugepages(std::ostream& out, const std::vector<HugepagePool>& pools) {
    char line[128];
    std::snprintf(line, sizeof line, "%-8s %-9s %8s %8s %12s\n", "NODE", "PAGE", "TOTAL", "FREE", "RESERVED");
    out << line;
    for (const HugepagePool& p : pools) {
        std::string node = p.node >= 0 ? std::to_string(p.node) : "all";
        std::snprintf(line, sizeof line, "%-8s %-9s %8llu %8llu %12s\n", node.c_str(), human_bytes(p.page_kb * 1024).c_str(),
                      static_cast<unsigned long long>(p.total), static_cast<unsigned long long>(p.free),
                      human_bytes(p.total * p.page_kb * 1024).c_str());
        out << line;
    }
    if (pools.empty()) out << "(no hugepage sizes: kernel without HUGETLBFS?)\n";
}

}  // namespace vfab::devctl
