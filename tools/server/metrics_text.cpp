#include "metrics_text.h"

#include <cstdio>

namespace loom::server {
namespace {

class Out {
 public:
  void head(const char* name, const char* type, const char* help) {
    s_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void value(const std::string& name_labels, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    s_ += name_labels + " " + buf + "\n";
  }
  void counter(const char* name, const char* help, double v) {
    head(name, "counter", help);
    value(name, v);
  }
  void gauge(const char* name, const char* help, double v) {
    head(name, "gauge", help);
    value(name, v);
  }
  void histogram(const char* name, const char* help, const serve::Histogram& h) {
    head(name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds().size(); ++i) {
      cum += h.counts()[i];
      char le[48];
      std::snprintf(le, sizeof le, "%g", h.bounds()[i]);
      value(std::string(name) + "_bucket{le=\"" + le + "\"}", double(cum));
    }
    cum += h.counts().back();
    value(std::string(name) + "_bucket{le=\"+Inf\"}", double(cum));
    value(std::string(name) + "_sum", h.sum());
    value(std::string(name) + "_count", double(h.count()));
  }
  std::string take() { return std::move(s_); }

 private:
  std::string s_;
};

}  // namespace

std::string render_metrics(const serve::SchedulerStats& s, const http::ServerStats& h) {
  const serve::Metrics& m = s.metrics;
  Out o;
  o.counter("loom_prompt_tokens_total", "Prompt tokens computed (not counting prefix-cache hits).", double(m.prompt_tokens));
  o.counter("loom_generation_tokens_total", "Tokens generated.", double(m.generated_tokens));
  o.head("loom_request_success_total", "counter", "Requests finished, by finish reason.");
  o.value("loom_request_success_total{finished_reason=\"stop\"}", double(m.requests_stop));
  o.value("loom_request_success_total{finished_reason=\"length\"}", double(m.requests_length));
  o.value("loom_request_success_total{finished_reason=\"cancelled\"}", double(m.requests_cancelled));
  o.counter("loom_request_errors_total", "Requests that failed while running.", double(m.requests_error));
  o.counter("loom_requests_rejected_total", "Requests refused at admission (queue full, shutting down).", double(m.requests_rejected));
  o.counter("loom_embedding_requests_total", "Embedding and rerank requests served.", double(m.embed_requests));
  o.gauge("loom_num_requests_running", "Requests holding a slot.", s.running);
  o.gauge("loom_num_requests_waiting", "Requests waiting for a slot or KV cells.", s.waiting);
  o.gauge("loom_slots_total", "Sequences that can generate at once.", s.slots);
  o.gauge("loom_slots_busy", "Slots in use.", s.slots_busy);
  o.gauge("loom_kv_cells_total", "KV cache cells (shared by every slot).", s.kv_cells);
  o.gauge("loom_kv_cells_used", "KV cache cells holding a token (running requests and cached prefixes).", s.kv_used);
  o.gauge("loom_kv_cache_usage_perc", "Fraction of KV cells in use.", s.kv_cells > 0 ? double(s.kv_used) / s.kv_cells : 0.0);
  o.gauge("loom_prefix_cache_tokens", "Tokens in the prefix cache.", s.cached_tokens);
  o.gauge("loom_prefix_cache_evictable_tokens", "Cached tokens no running request uses.", s.cache_evictable);
  o.counter("loom_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", double(m.prefix_queried_tokens));
  o.counter("loom_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", double(m.prefix_hit_tokens));
  o.counter("loom_prefix_cache_disk_loads_total", "Prefixes loaded from --cache-dir.", double(m.disk_loads));
  o.counter("loom_prefix_cache_disk_writes_total", "Prefixes written to --cache-dir.", double(m.disk_writes));
  o.counter("loom_prefix_cache_disk_errors_total", "Cache files that could not be read or written.", double(m.disk_errors));
  o.counter("loom_scheduler_steps_total", "Batches decoded by the scheduler.", double(m.steps));
  o.counter("loom_draft_tokens_total", "Draft tokens verified (prompt lookup or the draft model).", double(m.draft_tokens));
  o.counter("loom_draft_accepted_total", "Of them, accepted (equal to the sampled token).", double(m.draft_accepted));
  o.histogram("loom_time_to_first_token_seconds", "Time from arrival to the first generated token.", m.ttft);
  o.histogram("loom_inter_token_latency_seconds", "Time between consecutive tokens of a stream.", m.itl);
  o.histogram("loom_request_queue_time_seconds", "Time from arrival to admission.", m.queue_time);
  o.histogram("loom_e2e_request_latency_seconds", "Time from arrival to the last token.", m.e2e);
  o.gauge("loom_http_connections_open", "Open HTTP connections.", double(h.connections_open));
  o.counter("loom_http_connections_total", "HTTP connections accepted.", double(h.connections_total));
  o.counter("loom_http_requests_total", "HTTP requests handled.", double(h.requests_total));
  o.counter("loom_http_bad_requests_total", "Malformed HTTP requests answered with an error.", double(h.bad_requests));
  o.counter("loom_http_timeouts_total", "Connections timed out (slow clients).", double(h.timeouts));
  o.counter("loom_http_client_disconnects_total", "Clients gone before their response was complete.", double(h.client_disconnects));
  o.gauge("loom_http_open_streams", "Responses not yet completely written.", double(h.open_streams));
  return o.take();
}

}  // namespace loom::server
