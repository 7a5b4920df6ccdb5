// Minimal leveled logging to stderr. LOOM_LOG_LEVEL=debug|info|warn|error|none (default warn).
#pragma once

#include <cstdio>
#include <string_view>

namespace loom {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kNone = 4 };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_message(LogLevel level, std::string_view msg);
// Where messages go instead of stderr (nullptr: stderr). The sink is called from any thread.
using LogSink = void (*)(LogLevel level, std::string_view msg, void* user);
void set_log_sink(LogSink sink, void* user);

}  // namespace loom

#define LOOM_LOG(level, ...)                                           \
  do {                                                                 \
    if (::loom::LogLevel::level >= ::loom::log_level()) {              \
      char loom_log_buf_[1024];                                        \
      std::snprintf(loom_log_buf_, sizeof loom_log_buf_, __VA_ARGS__); \
      ::loom::log_message(::loom::LogLevel::level, loom_log_buf_);     \
    }                                                                  \
  } while (0)
