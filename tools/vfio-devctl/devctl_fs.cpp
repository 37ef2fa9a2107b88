#include "devctl_fs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace vfab::devctl {
namespace fs = std::filesystem;

Result<std::string> read_text(const std::string& path) {
    std::ifstream in(path);
    if (!in) return Error::from_errno(errno ? errno : EIO, str_cat("cannot read ", path));
    std::ostringstream text;
    text << in.rdbuf();
    std::string s = text.str();
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

std::optional<std::string> read_optional(const std::string& path) {
    auto text = read_text(path);
    if (!text) return std::nullopt;
    return std::move(text).value();
}

std::optional<unsigned long long> read_number(const std::string& path, int base) {
    auto text = read_optional(path);
    if (!text) return std::nullopt;
    std::string_view s = *text;
    if (base == 16 && s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
    unsigned long long v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
    return v;
}

Result<void> write_text(const std::string& path, std::string_view text) {
    int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);   // O_TRUNC as the shell's echo >
    if (fd < 0) {
        int err = errno;
        if (err == EACCES || err == EPERM)
            return Error::from_errno(err, str_cat("cannot write ", path), "run vfio-devctl as root (sudo)");
        return Error::from_errno(err, str_cat("cannot open ", path));
    }
    ssize_t n = ::write(fd, text.data(), text.size());
    int err = errno;
    ::close(fd);
    if (n < 0) return Error::from_errno(err, str_cat("writing '", text, "' to ", path));
    return {};
}

bool exists(const std::string& path) {
    std::error_code ec;
    return fs::exists(fs::symlink_status(path, ec)) && !ec;
}

bool is_dir(const std::string& path) {
    std::error_code ec;
    return fs::is_directory(path, ec);
}

bool is_char_device(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

std::optional<std::string> link_name(const std::string& path) {
    std::error_code ec;
    fs::path target = fs::read_symlink(path, ec);
    if (ec) return std::nullopt;
    return target.filename().string();
}

std::vector<std::string> list_dir(const std::string& path) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(path, ec)) out.push_back(entry.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

std::string human_bytes(unsigned long long bytes) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024 && u < 4) { v /= 1024; ++u; }
    char buf[32];
    if (v == static_cast<double>(static_cast<unsigned long long>(v)))
        std::snprintf(buf, sizeof buf, "%llu %s", static_cast<unsigned long long>(v), units[u]);
    else
        std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    return buf;
}

}  // namespace vfab::devctl
