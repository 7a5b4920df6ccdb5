// Status and Expected<T>: the error model for anything a user can cause (bad file, bad token id,
// full cache, bad flag). Programmer errors use assert instead.
#pragma once

#include <cassert>
#include <new>
#include <string>
#include <utility>
#include <optional>

namespace loom {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // caller passed something malformed (flag, token id, batch field)
  kNotFound,           // file, tensor or key missing
  kCorrupt,            // file content is malformed or inconsistent
  kUnsupported,        // well-formed but not something loom implements (yet)
  kIo,                 // the OS refused (open, mmap, read, write)
  kOutOfRange,         // an index past the end
  kResourceExhausted,  // no room (KV cache full, buffer too small)
  kAborted,            // stopped by a callback
  kInternal,
  kUnavailable,  // not now: shutting down, or a queue is full (retry later)
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIo, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }

// A value or the Status explaining why there is none. (std::expected is C++23.)
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Expected(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.is_ok() && "Expected built from an ok Status");
  }

  bool has_value() const { return value_.has_value(); }
  explicit operator bool() const { return has_value(); }

  T& value() & {
    assert(has_value());
    return *value_;
  }
  const T& value() const& {
    assert(has_value());
    return *value_;
  }
  T&& value() && {
    assert(has_value());
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  // ok when a value is held.
  const Status& status() const { return status_; }

 private:
  std::optional<T> value_;
  Status status_;
};

// Runs f (returning a Status or an Expected), turning an allocation failure into kResourceExhausted
// "out of memory while <what>": for the entry points that allocate what untrusted input asks for
// (loading a model, creating a context), so that running out of memory is an error, not a crash.
template <typename F>
auto out_of_memory_as_status(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return resource_exhausted(std::string("out of memory while ") + what);
  }
}

}  // namespace loom

// Propagate a failing Status from an expression returning Status.
#define LOOM_RETURN_IF_ERROR(expr)          \
  do {                                      \
    ::loom::Status loom_st_ = (expr);       \
    if (!loom_st_.is_ok()) return loom_st_; \
  } while (0)

#define LOOM_CONCAT_INNER_(a, b) a##b
#define LOOM_CONCAT_(a, b) LOOM_CONCAT_INNER_(a, b)
// `LOOM_ASSIGN_OR_RETURN(auto x, f());` — binds the value or returns the Status.
#define LOOM_ASSIGN_OR_RETURN(lhs, expr) LOOM_ASSIGN_OR_RETURN_IMPL_(LOOM_CONCAT_(loom_ex_, __LINE__), lhs, expr)
#define LOOM_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.has_value()) return tmp.status();        \
  lhs = std::move(tmp).value()
