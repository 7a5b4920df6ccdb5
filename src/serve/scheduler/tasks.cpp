// Exclusive tasks (Scheduler::run_exclusive): a function given the context and the prefix cache,
// run between steps once everything that arrived before it is done.

#include "serve/scheduler/impl.h"

namespace loom::serve {

// Whether a request or embedding that arrived before ticket `t` still waits (both queues are in
// arrival order).
bool Scheduler::Impl::work_before(uint64_t t) const {
  return (!waiting.empty() && waiting.front()->ticket < t) || (!embed_jobs.empty() && embed_jobs.front()->ticket < t);
}

// Exclusive tasks, run when nothing else does (nothing runs and nothing that came before the
// task waits). A task's exception becomes its status.
void Scheduler::Impl::run_tasks() {
  while (!tasks.empty() && !work_before(tasks.front()->ticket)) {
    std::unique_ptr<Task> t = std::move(tasks.front());
    tasks.pop_front();
    Status st;
    try {
      st = t->fn(*ctx, cache.get());
    } catch (const std::exception& e) {
      st = internal_error(std::string("exclusive task failed: ") + e.what());
    }
    if (cache) {
      Status inv = cache->check_invariants();
      if (!inv) {
        LOOM_LOG(kWarn, "prefix cache inconsistent after an exclusive task (%s): cleared", inv.message().c_str());
        cache->clear_unlocked();
      }
    }
    t->done.set_value(std::move(st));
  }
}

}  // namespace loom::serve
