#include "base/log.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace loom {
namespace {

LogLevel level_from_env() {
  const char* e = std::getenv("LOOM_LOG_LEVEL");
  if (!e) return LogLevel::kWarn;
  if (!std::strcmp(e, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(e, "info")) return LogLevel::kInfo;
  if (!std::strcmp(e, "error")) return LogLevel::kError;
  if (!std::strcmp(e, "none")) return LogLevel::kNone;
  return LogLevel::kWarn;
}

std::atomic<LogLevel>& level_ref() {
  static std::atomic<LogLevel> level{level_from_env()};
  return level;
}

struct Sink {
  LogSink fn = nullptr;
  void* user = nullptr;
};
std::atomic<Sink*>& sink_ref() {
  static std::atomic<Sink*> sink{nullptr};
  return sink;
}

}  // namespace

void set_log_sink(LogSink sink, void* user) {
  // Replaced sinks are kept (a message may be in flight with the old one); they are tiny.
  sink_ref().store(sink ? new Sink{sink, user} : nullptr, std::memory_order_release);
}

LogLevel log_level() { return level_ref().load(std::memory_order_relaxed); }
void set_log_level(LogLevel level) { level_ref().store(level, std::memory_order_relaxed); }

void log_message(LogLevel level, std::string_view msg) {
  if (Sink* s = sink_ref().load(std::memory_order_acquire)) {
    s->fn(level, msg, s->user);
    return;
  }
  static const char* kNames[] = {"debug", "info", "warn", "error", ""};
  std::fprintf(stderr, "loom %s: %.*s\n", kNames[static_cast<int>(level)], int(msg.size()), msg.data());
}

}  // namespace loom
