// Looking at a device's asynchronous events from an application's loop (docs/reliability.md):
// when the kernel wants the device back, it stopped working or it was reset, the program must
// stop its traffic and close the device promptly — a removal waits for the close.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "vfab/types.hpp"

namespace vfab::examples {

// The line a program prints when `e` ends its run on `device`; nothing for events it can carry
// on after (link changes).
inline std::optional<std::string> stop_message(EventType e, const std::string& device) {
    switch (e) {
    case EventType::device_removal:
        return device + ": the device is being removed (the kernel asked for it back): stopping and closing it";
    case EventType::device_fatal: return device + ": the device stopped working (reset behind our back): closing it";
    case EventType::device_reset: return device + ": the device was reset by its owner: closing it";
    default: return std::nullopt;
    }
}

// next_event() until none: the line that ends the run on `dev` (named `name`), or nothing.
template <class Dev>
std::optional<std::string> stop_reason(Dev& dev, const std::string& name) {
    for (Event e = dev.next_event(); e.type != EventType::none; e = dev.next_event())
        if (auto why = stop_message(e.type, name)) return why;
    return std::nullopt;
}

// stop_reason(), at most every `every` (a busy loop that calls it after each empty
// poll would otherwise put a system call between the poll and the answer it waits for).
template <class Dev>
class EventWatch {
public:
    explicit EventWatch(Dev& dev, std::chrono::milliseconds every = std::chrono::milliseconds(5))
        : dev_(dev), every_(every) {}
    std::optional<std::string> stop_reason() {
        const auto now = std::chrono::steady_clock::now();
        if (now < next_) return std::nullopt;
        next_ = now + every_;
        return examples::stop_reason(dev_, dev_.attr().address.to_string());
    }

private:
    Dev& dev_;
    std::chrono::milliseconds every_;
    std::chrono::steady_clock::time_point next_{};
};

}  // namespace vfab::examples
