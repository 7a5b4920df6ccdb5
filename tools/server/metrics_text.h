// /metrics: the scheduler's and the HTTP layer's counters in Prometheus' text format.
#pragma once

#include <string>

#include "http_server.h"
#include "json_fields.h"

namespace loom::server {

// stats: loom_scheduler_stats' JSON (its "metrics" object holds the counters and histograms).
std::string render_metrics(const json& stats, const http::ServerStats& h);

}  // namespace loom::server
