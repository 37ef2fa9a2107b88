// The log sink (vfab/log.hpp): one handler for the process, read under a mutex on every message
// (messages come only from the control path) and called outside it, so that a handler may
// replace itself.
#include "vfab/log.hpp"

#include <cstdio>
#include <mutex>

#include "log_sink.hpp"

namespace vfab {
namespace {

// Constant-initialised (std::mutex has a constexpr constructor): no global constructor runs.
constinit std::mutex g_sink_mu;
constinit detail::LogSink g_sink{};

void emit(LogLevel level, const char* message) noexcept {
    detail::LogSink s;
    {
        std::lock_guard lock(g_sink_mu);
        s = g_sink;
    }
    if (s.host)
        s.host(int(level), message);
    else if (level > s.max_level)
        return;
    else if (s.handler)
        s.handler(level, message, s.user);
    else if (s.c_handler)
        s.c_handler(int(level), message, s.user);
}

}  // namespace

namespace detail {

void set_log_sink(const LogSink& sink) noexcept {
    std::lock_guard lock(g_sink_mu);
    auto host = g_sink.host;
    g_sink = sink;
    g_sink.host = host;
}

void attach_host_log(void (*host_log)(int level, const char* message)) noexcept {
    std::lock_guard lock(g_sink_mu);
    g_sink.host = host_log;
}

void log_from_plugin(int level, const char* message) noexcept { emit(LogLevel(level), message); }

}  // namespace detail

void set_log_handler(LogHandler handler, void* user, LogLevel max_level) noexcept {
    detail::set_log_sink({.handler = handler, .c_handler = nullptr, .user = user, .max_level = max_level});
}

const char* log_level_name(LogLevel level) noexcept {
    switch (level) {
    case LogLevel::error: return "error";
    case LogLevel::warning: return "warning";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
    }
    return "unknown";
}

void log_to_stderr(LogLevel level, const char* message, void*) noexcept {
    std::fprintf(stderr, "vfab: %s: %s\n", log_level_name(level), message);
}

bool log_enabled(LogLevel level) noexcept {
    std::lock_guard lock(g_sink_mu);
    return g_sink.host || ((g_sink.handler || g_sink.c_handler) && level <= g_sink.max_level);
}

void log(LogLevel level, const std::string& message) noexcept { emit(level, message.c_str()); }

}  // namespace vfab
