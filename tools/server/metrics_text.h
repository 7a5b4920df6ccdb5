// /metrics: the scheduler's and the HTTP layer's counters in Prometheus' text format.
#pragma once

#include <string>

#include "http_server.h"
#include "serve/scheduler.h"

namespace loom::server {

std::string render_metrics(const serve::SchedulerStats& s, const http::ServerStats& h);

}  // namespace loom::server
