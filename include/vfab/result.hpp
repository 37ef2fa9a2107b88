// Errors as values for vfab's setup paths.
//
// Every setup call returns Result<T>: the value, or an Error whose message names the object
// (device, group, file) and says what to do about it. The fast path never uses Result: it
// returns plain status codes and never allocates.
#pragma once

#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace vfab {

// Concatenates its arguments with operator<<; for building error messages.
template <class... Args>
std::string str_cat(const Args&... args) {
    std::ostringstream out;
    (out << ... << args);
    return out.str();
}

struct Error {
    int code = 0;          // an errno value (EINVAL, ENODEV, EPERM, ...)
    std::string message;   // what went wrong and what to do about it

    // "what: strerror(err)" followed by an optional hint.
    static Error from_errno(int err, std::string_view what, std::string_view hint = {}) {
        std::string msg = str_cat(what, ": ", std::strerror(err));
        if (!hint.empty()) msg += str_cat(" — ", hint);
        return Error{err, std::move(msg)};
    }
};

template <class T>
class [[nodiscard]] Result {
public:
    Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}   // NOLINT: implicit by design
    Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

    bool ok() const { return v_.index() == 0; }
    explicit operator bool() const { return ok(); }

    T& value() & { return std::get<0>(v_); }
    const T& value() const& { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }
    T&& operator*() && { return std::move(*this).value(); }

    const Error& error() const { return std::get<1>(v_); }
    Error take_error() { return std::get<1>(std::move(v_)); }

private:
    std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
public:
    Result() = default;
    Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT

    bool ok() const { return ok_; }
    explicit operator bool() const { return ok_; }
    const Error& error() const { return error_; }
    Error take_error() { return std::move(error_); }

private:
    Error error_;
    bool ok_ = true;
};

}  // namespace vfab
