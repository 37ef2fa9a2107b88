#include "devctl_driver_ops.hpp"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "devctl_fs.hpp"

namespace vfab::devctl {

Result<void> ensure_driver_loaded(const Context& ctx, const std::string& driver) {
    if (is_dir(ctx.driver_dir(driver))) return {};
    auto ran = ctx.run({"modprobe", driver});
    if (!ran)
        return Error{ran.error().code, str_cat("PCI driver ", driver, " is not loaded and modprobe could "
                                               "not run: ", ran.error().message)};
    if (ran->status != 0 || !is_dir(ctx.driver_dir(driver))) {
        std::string out = ran->output.substr(0, ran->output.find('\n'));
        return Error{ENOENT, str_cat("PCI driver ", driver, " is not loaded and `modprobe ", driver,
                                     "` failed", out.empty() ? "" : str_cat(" (", out, ")"),
                                     ": is the module installed for this kernel (ls /lib/modules/$(uname -r))?")};
    }
    return {};
}

Result<void> set_override(const Context& ctx, const PciAddress& addr, const std::string& driver) {
    // A lone newline clears the override: the kernel strips it and stores nothing.
    auto w = write_text(ctx.device_dir(addr) + "/driver_override", driver.empty() ? "\n" : driver);
    if (!w) return Error{w.error().code, str_cat("setting driver_override of ", addr.to_string(),
                                                 driver.empty() ? " to none" : str_cat(" to ", driver), ": ",
                                                 w.error().message)};
    return {};
}

Result<void> unbind_current(const Context& ctx, const PciAddress& addr) {
    std::string dir = ctx.device_dir(addr);
    if (!exists(dir + "/driver")) return {};
    auto w = write_text(dir + "/driver/unbind", addr.to_string());
    if (!w) return Error{w.error().code, str_cat("unbinding ", addr.to_string(), " from its driver: ",
                                                 w.error().message)};
    return {};
}

Result<void> probe(const Context& ctx, const PciAddress& addr) {
    auto w = write_text(ctx.paths.sysfs + "/bus/pci/drivers_probe", addr.to_string());
    // The kernel answers a probe that bound nothing with an error; expect_driver says more.
    if (!w && w.error().code != EINVAL && w.error().code != ENODEV)
        return Error{w.error().code, str_cat("probing ", addr.to_string(), ": ", w.error().message)};
    return {};
}

Result<void> bind_to(const Context& ctx, const PciAddress& addr, const std::string& driver) {
    auto w = write_text(ctx.driver_dir(driver) + "/bind", addr.to_string());
    if (!w) return Error{w.error().code, str_cat("binding ", addr.to_string(), " to ", driver, ": ",
                                                 w.error().message)};
    return {};
}

Result<void> expect_driver(const Context& ctx, const PciAddress& addr, const std::optional<std::string>& want) {
    std::string link = ctx.device_dir(addr) + "/driver";
    std::optional<std::string> now;
    // Probing is synchronous for PCI, but udev or an async probe may lag a moment: poll 2 s.
    for (int i = 0; i < 40; ++i) {
        now = link_name(link);
        if (now == want) return {};
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return Error{EIO, str_cat(addr.to_string(), " is on ", now.value_or("no driver"), ", not on ",
                              want.value_or("no driver"), " (see `dmesg | tail` for the kernel's reason)")};
}

std::string record_path(const Context& ctx, const PciAddress& addr) {
    return str_cat(ctx.paths.run, "/", addr.to_string(), ".driver");
}

Result<void> write_record(const Context& ctx, const PciAddress& addr, const std::optional<std::string>& driver) {
    std::error_code ec;
    std::filesystem::create_directories(ctx.paths.run, ec);
    if (ec) return Error::from_errno(ec.value(), str_cat("cannot create ", ctx.paths.run), "run as root (sudo)");
    std::string path = record_path(ctx, addr);
    FILE* f = std::fopen(path.c_str(), "w");
    int err = errno;
    if (!f) return Error::from_errno(err, str_cat("cannot write ", path));
    std::fprintf(f, "%s\n", driver.value_or("").c_str());
    std::fclose(f);
    return {};
}

std::optional<std::string> read_record(const Context& ctx, const PciAddress& addr) {
    return read_optional(record_path(ctx, addr));
}

void forget_record(const Context& ctx, const PciAddress& addr) { ::unlink(record_path(ctx, addr).c_str()); }

std::vector<std::string> users_of(const Context& ctx, const std::vector<std::string>& nodes) {
    std::vector<std::string> out;
    for (const std::string& pid : list_dir(ctx.paths.proc)) {
        if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
        std::string fd_dir = str_cat(ctx.paths.proc, "/", pid, "/fd");
        for (const std::string& fd : list_dir(fd_dir)) {
            std::error_code ec;
            std::string target = std::filesystem::read_symlink(fd_dir + "/" + fd, ec).string();
            bool hit = false;
            for (const std::string& n : nodes) hit = hit || target == n;
            if (!hit) continue;
            out.push_back(str_cat(pid, " (", read_optional(str_cat(ctx.paths.proc, "/", pid, "/comm")).value_or("?"), ")"));
            break;
        }
    }
    return out;
}

}  // namespace vfab::devctl
