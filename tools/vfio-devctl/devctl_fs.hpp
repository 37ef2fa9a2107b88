// Small file helpers whose errors say what to do (sysfs writes fail with EACCES for non-root,
// with the kernel's errno when it refuses a bind).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "vfab/result.hpp"

namespace vfab::devctl {

// The file's contents without the trailing newline; an error when it cannot be read.
Result<std::string> read_text(const std::string& path);
// The same, or nullopt when the file is missing or unreadable.
std::optional<std::string> read_optional(const std::string& path);
// A number in the file (decimal, or hex with 0x); nullopt when missing or not a number.
std::optional<unsigned long long> read_number(const std::string& path, int base = 10);

// Writes `text` in one write(2), as sysfs wants it. On EACCES/EPERM the error says to run as
// root; other errnos are the kernel's answer and the caller adds what it means.
Result<void> write_text(const std::string& path, std::string_view text);

bool exists(const std::string& path);
bool is_dir(const std::string& path);
bool is_char_device(const std::string& path);
// The last component of a symlink's target ("e1000e" for .../driver); nullopt if no link.
std::optional<std::string> link_name(const std::string& path);
// The entries of a directory, sorted; empty when it does not exist.
std::vector<std::string> list_dir(const std::string& path);

// "2.0 MiB", "1.0 GiB", "512 KiB": for messages.
std::string human_bytes(unsigned long long bytes);

}  // namespace vfab::devctl
