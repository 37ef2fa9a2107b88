// vfab's diagnostics. The libraries never write to stderr or stdout: what they have to say
// outside a returned error (a slower fallback taken, an unsafe mode entered, a failure during
// teardown that no caller can receive) goes to the handler the application installs, and by
// default nowhere.
//
//   vfab::set_log_handler(vfab::log_to_stderr, nullptr, vfab::LogLevel::warning);
//
// or, to route it into the application's own logger:
//
//   vfab::set_log_handler([](vfab::LogLevel l, const char* msg, void* user) {
//       static_cast<MyLogger*>(user)->write(int(l), msg);
//   }, &logger);
//
// C: vfab_set_log_handler() in vfab/vfab.h.
#pragma once

#include <string>

namespace vfab {

// The same values as enum vfab_log_level (vfab.h); lower is more severe.
enum class LogLevel : int {
    error = 0,     // something failed that no call could report (e.g. an IOMMU unmap in a destructor)
    warning = 1,   // vfab carries on, but slower or less safe than asked (4 KiB pages, no-IOMMU mode)
    info = 2,      // set-up steps worth knowing about
    debug = 3,
};

// Called for each message at max_level or more severe, on the thread of the vfab call that
// produced it, before that call returns (no buffering, no thread of vfab's own). `message` is
// one line without a newline, valid during the call. The handler must not call into vfab
// except set_log_handler().
using LogHandler = void (*)(LogLevel level, const char* message, void* user);

// Installs `handler` (nullptr: none, the default) for the whole process; thread-safe. The one
// piece of process-wide state a user sets in vfab: see docs/api.md, "Process-wide state".
void set_log_handler(LogHandler handler, void* user = nullptr, LogLevel max_level = LogLevel::info) noexcept;

// A handler that writes "vfab: <level>: <message>" and a newline to stderr, for programs that
// want vfab's diagnostics on their terminal (vfab's own tools and examples install it).
void log_to_stderr(LogLevel level, const char* message, void* user) noexcept;

// The lowercase name of a level ("error", "warning", "info", "debug").
const char* log_level_name(LogLevel level) noexcept;

// Whether a message at `level` reaches a handler: for a caller that would have to build an
// expensive message.
bool log_enabled(LogLevel level) noexcept;

// Hands `message` to the installed handler, if any wants `level`. For vfab's libraries and
// for providers built outside the tree; never from a fast path.
void log(LogLevel level, const std::string& message) noexcept;

namespace detail {
// A provider plugin carries its own copy of vfab's code, and so of the handler: libvfab calls
// this (through provider::Record::attach_log) when it loads the plugin, so that the plugin's
// messages reach the handler the application installed in libvfab.
void attach_host_log(void (*host_log)(int level, const char* message)) noexcept;
// What libvfab passes to attach_host_log.
void log_from_plugin(int level, const char* message) noexcept;
}  // namespace detail

}  // namespace vfab
