// Internals of the C API shared by its translation units (loom_c.cpp: models and vocabulary;
// loom_context_c.cpp: contexts, batches, decode, KV cache; loom_state_c.cpp: state, adapters,
// perf; loom_serve_c.cpp: the scheduler): the handle structs, the thread-local error message and the
// exception guards. Not installed; nothing outside src/capi includes it.
#pragma once

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <string_view>

#include "base/status.h"
#include "context/context.h"
#include "loom/loom.h"
#include "model/adapters.h"
#include "model/model.h"

struct loom_model {
  std::shared_ptr<const loom::Model> m;
  bool vocab_only = false;
  std::string arch;
};

struct loom_context {
  std::unique_ptr<loom::Context> c;
  loom::Batch batch;  // reused by every decode so that converting a batch allocates nothing
};

struct loom_lora_adapter {
  std::shared_ptr<const loom::LoraAdapter> a;
};

struct loom_control_vector {
  loom::ControlVector cv;
};

namespace loom::capi {

// ---- errors -----------------------------------------------------------------------------------

struct LastError {
  std::string msg;
  const char* fallback = nullptr;  // used when recording the message itself ran out of memory
};
inline thread_local LastError t_error;

inline void set_error(std::string_view fn, std::string_view msg) noexcept {
  try {
    t_error.msg.assign(fn);
    t_error.msg.append(": ");
    t_error.msg.append(msg);
    t_error.fallback = nullptr;
  } catch (...) {
    t_error.fallback = "out of memory (while recording an error message)";
  }
}

inline int32_t status_code(const loom::Status& st) {
  if (st.is_ok()) return LOOM_OK;
  if (st.code() == loom::StatusCode::kUnavailable) return LOOM_ERR_UNAVAILABLE;
  return -int32_t(st.code());
}

// Records a failing status; returns its C code.
inline int32_t fail(const char* fn, const loom::Status& st) {
  set_error(fn, st.message());
  return status_code(st);
}

inline int32_t fail_arg(const char* fn, const char* msg) {
  set_error(fn, msg);
  return LOOM_ERR_INVALID_ARGUMENT;
}

inline int32_t check(const char* fn, const loom::Status& st) { return st.is_ok() ? LOOM_OK : fail(fn, st); }

// Runs f, turning any exception into `on_error` and a recorded message; `oom` is the result for
// std::bad_alloc when it differs from on_error (status-returning functions).
template <typename R, typename F>
inline R guarded(const char* fn, R on_error, R oom, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    set_error(fn, "out of memory");
    return oom;
  } catch (const std::exception& e) {
    set_error(fn, std::string("internal error: ") + e.what());
  } catch (...) {
    set_error(fn, "internal error: unknown exception");
  }
  return on_error;
}
template <typename R, typename F>
inline R guarded(const char* fn, R on_error, F&& f) noexcept {
  return guarded(fn, on_error, on_error, std::forward<F>(f));
}
// For functions returning a status.
template <typename F>
inline int32_t guarded_status(const char* fn, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    set_error(fn, "out of memory");
    return LOOM_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_error(fn, std::string("internal error: ") + e.what());
  } catch (...) {
    set_error(fn, "internal error: unknown exception");
  }
  return LOOM_ERR_INTERNAL;
}

// snprintf-style copy: returns the full length, -1 when it does not fit int32_t.
inline int32_t copy_string(std::string_view s, char* buf, size_t buf_size) {
  if (buf && buf_size > 0) {
    const size_t n = std::min(s.size(), buf_size - 1);
    if (n) std::memcpy(buf, s.data(), n);
    buf[n] = '\0';
  }
  return s.size() > size_t(INT32_MAX) ? -1 : int32_t(s.size());
}

// Negotiated copy (tokenize / piece / detokenize): bytes written, or -needed.
inline int32_t copy_sized(const char* fn, std::string_view s, char* buf, int32_t cap) {
  if (s.size() > size_t(INT32_MAX)) {
    set_error(fn, "result does not fit int32_t");
    return LOOM_SIZE_ERROR;
  }
  if (int64_t(s.size()) > int64_t(cap)) return -int32_t(s.size());
  if (!s.empty()) std::memcpy(buf, s.data(), s.size());
  return int32_t(s.size());
}

// loom_context_params -> ContextParams (defined in loom_context_c.cpp).
loom::Status to_params(const loom_context_params& p, loom::ContextParams* out);

// loom_context_new and loom_context_new_ext (defined in loom_context_c.cpp): the checks, the params, then
// `adjust` (may be empty; returns false after recording an error) for what the params struct
// cannot hold, then the context. Errors are recorded under `fn`.
loom_context* new_context(const char* fn, const loom_model* model, const loom_context_params* params,
                          const std::function<bool(loom::ContextParams&)>& adjust);

}  // namespace loom::capi

// The start of a C entry point that needs its loom_context* `ctx`: NULL records an error and
// returns `ret`.
#define LOOM_NEED_CTX(ret)                    \
  do {                                        \
    if (!ctx) {                               \
      set_error(__func__, "context is NULL"); \
      return ret;                             \
    }                                         \
  } while (0)
