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
    // A success holding `value` (implicit, so that a function returns its value as it is).
    Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}   // NOLINT: implicit by design
    // A failure (implicit, so that a function returns an Error as it is).
    Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

    // Whether it holds a value rather than an error.
    bool ok() const { return v_.index() == 0; }
    // ok().
    explicit operator bool() const { return ok(); }

    // The value; only when ok() (otherwise std::bad_variant_access: check first).
    T& value() & { return std::get<0>(v_); }
    // The value; only when ok().
    const T& value() const& { return std::get<0>(v_); }
    // The value, moved out; only when ok().
    T&& value() && { return std::get<0>(std::move(v_)); }
    // The value's members; only when ok().
    T* operator->() { return &value(); }
    // The value's members; only when ok().
    const T* operator->() const { return &value(); }
    // The value; only when ok().
    T& operator*() & { return value(); }
    // The value; only when ok().
    const T& operator*() const& { return value(); }
    // The value, moved out; only when ok().
    T&& operator*() && { return std::move(*this).value(); }

    // The error (its errno code and the message that says what to do); only when !ok().
    const Error& error() const { return std::get<1>(v_); }
    // The error, moved out (to return it from a function of another Result type); only when !ok().
    Error take_error() { return std::get<1>(std::move(v_)); }

private:
    std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
public:
    Result() = default;
    // A failure (implicit, so that a function returns an Error as it is).
    Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT

    // Whether the call succeeded.
    bool ok() const { return ok_; }
    // ok().
    explicit operator bool() const { return ok_; }
    // The error (its errno code and the message that says what to do); only when !ok().
    const Error& error() const { return error_; }
    // The error, moved out (to return it from a function of another Result type); only when !ok().
    Error take_error() { return std::move(error_); }

private:
    Error error_;
    bool ok_ = true;
};

}  // namespace vfab
