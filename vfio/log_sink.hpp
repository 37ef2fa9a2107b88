// The installed log handler, C++ or C (vfab_set_log_handler takes the level as an int, so the
// C API installs its function as it is, without a trampoline or a second global).
#pragma once

#include "vfab/log.hpp"

namespace vfab::detail {

struct LogSink {
    LogHandler handler = nullptr;
    void (*c_handler)(int level, const char* message, void* user) = nullptr;
    void* user = nullptr;
    LogLevel max_level = LogLevel::info;
    // In a provider plugin: libvfab's own log, which filters and calls its handler.
    void (*host)(int level, const char* message) = nullptr;
};

void set_log_sink(const LogSink& sink) noexcept;

}  // namespace vfab::detail
