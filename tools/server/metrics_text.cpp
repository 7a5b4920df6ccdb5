#include "metrics_text.h"

#include <algorithm>
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
  // h: {"bounds", "counts" (per bucket, the last one +Inf), "sum", "count"}.
  void histogram(const char* name, const char* help, const json& h) {
    head(name, "histogram", help);
    const json& bounds = h.at("bounds");
    const json& counts = h.at("counts");
    uint64_t cum = 0;
    for (size_t i = 0; i < bounds.size() && i < counts.size(); ++i) {
      cum += counts[i].get<uint64_t>();
      char le[48];
      std::snprintf(le, sizeof le, "%g", bounds[i].get<double>());
      value(std::string(name) + "_bucket{le=\"" + le + "\"}", double(cum));
    }
    if (!counts.empty()) cum += counts.back().get<uint64_t>();
    value(std::string(name) + "_bucket{le=\"+Inf\"}", double(cum));
    value(std::string(name) + "_sum", h.at("sum").get<double>());
    value(std::string(name) + "_count", h.at("count").get<double>());
  }
  std::string take() { return std::move(s_); }

 private:
  std::string s_;
};

double n(const json& j, const char* k) { return j.at(k).get<double>(); }

// loom's own names: the scheduler's stats `s` and its counters `m`.
void render_loom(Out& o, const json& s, const json& m) {
  o.counter("loom_prompt_tokens_total", "Prompt tokens computed (not counting prefix-cache hits).", n(m, "prompt_tokens"));
  o.counter("loom_generation_tokens_total", "Tokens generated.", n(m, "generated_tokens"));
  o.head("loom_request_success_total", "counter", "Requests finished, by finish reason.");
  o.value("loom_request_success_total{finished_reason=\"stop\"}", n(m, "requests_stop"));
  o.value("loom_request_success_total{finished_reason=\"length\"}", n(m, "requests_length"));
  o.value("loom_request_success_total{finished_reason=\"cancelled\"}", n(m, "requests_cancelled"));
  o.counter("loom_request_errors_total", "Requests that failed while running.", n(m, "requests_error"));
  o.counter("loom_requests_rejected_total", "Requests refused at admission (queue full, shutting down).",
            n(m, "requests_rejected"));
  o.counter("loom_embedding_requests_total", "Embedding and rerank requests served.", n(m, "embed_requests"));
  o.gauge("loom_num_requests_running", "Requests holding a slot.", n(s, "running"));
  o.gauge("loom_num_requests_waiting", "Requests waiting for a slot or KV cells.", n(s, "waiting"));
  o.gauge("loom_slots_total", "Sequences that can generate at once.", n(s, "slots"));
  o.gauge("loom_slots_busy", "Slots in use.", n(s, "slots_busy"));
  o.gauge("loom_kv_cells_total", "KV cache cells (shared by every slot).", n(s, "kv_cells"));
  o.gauge("loom_kv_cells_used", "KV cache cells holding a token (running requests and cached prefixes).", n(s, "kv_used"));
  o.gauge("loom_kv_cache_usage_perc", "Fraction of KV cells in use.",
          n(s, "kv_cells") > 0 ? n(s, "kv_used") / n(s, "kv_cells") : 0.0);
  o.gauge("loom_prefix_cache_tokens", "Tokens in the prefix cache.", n(s, "cached_tokens"));
  o.gauge("loom_prefix_cache_evictable_tokens", "Cached tokens no running request uses.", n(s, "cache_evictable"));
  o.gauge("loom_prefix_cache_checkpoints", "Checkpoints of recurrent states / windows in the prefix cache.",
          n(s, "cache_checkpoints"));
  o.gauge("loom_prefix_cache_checkpoint_bytes", "Bytes of those checkpoints (--cache-ram bounds them).",
          n(s, "cache_checkpoint_bytes"));
  o.counter("loom_context_shifts_total", "Sequences that reached their cells and dropped old tokens to go on.",
            n(m, "context_shifts"));
  if (m.contains("expert_choices") && n(m, "expert_choices") > 0) {
    o.counter("loom_expert_choices_total", "Mixture of experts: experts chosen (tokens x MoE layers x experts per token).",
              n(m, "expert_choices"));
    o.gauge("loom_expert_busiest_share",
            "Mixture of experts: the busiest expert's share of its layer's choices (even routing: 1 / experts).",
            n(m, "expert_busiest_share"));
  }
  o.counter("loom_scheduler_stalls_total", "Steps that found no KV cell for any row (resolved; 0 when sound).",
            n(m, "stalls"));
  o.counter("loom_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
            n(m, "prefix_queried_tokens"));
  o.counter("loom_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", n(m, "prefix_hit_tokens"));
  o.counter("loom_prefix_cache_disk_loads_total", "Prefixes loaded from --cache-dir.", n(m, "disk_loads"));
  o.counter("loom_prefix_cache_disk_writes_total", "Prefixes written to --cache-dir.", n(m, "disk_writes"));
  o.counter("loom_prefix_cache_disk_errors_total", "Cache files that could not be read or written.", n(m, "disk_errors"));
  o.counter("loom_scheduler_steps_total", "Batches decoded by the scheduler.", n(m, "steps"));
  o.counter("loom_draft_tokens_total", "Draft tokens verified (prompt lookup or the draft model).", n(m, "draft_tokens"));
  o.counter("loom_draft_accepted_total", "Of them, accepted (equal to the sampled token).", n(m, "draft_accepted"));
  o.histogram("loom_time_to_first_token_seconds", "Time from arrival to the first generated token.", m.at("ttft_seconds"));
  o.histogram("loom_inter_token_latency_seconds", "Time between consecutive tokens of a stream.",
              m.at("inter_token_seconds"));
  o.histogram("loom_request_queue_time_seconds", "Time from arrival to admission.", m.at("queue_seconds"));
  o.histogram("loom_e2e_request_latency_seconds", "Time from arrival to the last token.", m.at("e2e_seconds"));
}

void render_http(Out& o, const http::ServerStats& h) {
  o.gauge("loom_http_connections_open", "Open HTTP connections.", double(h.connections_open));
  o.counter("loom_http_connections_total", "HTTP connections accepted.", double(h.connections_total));
  o.counter("loom_http_requests_total", "HTTP requests handled.", double(h.requests_total));
  o.counter("loom_http_bad_requests_total", "Malformed HTTP requests answered with an error.", double(h.bad_requests));
  o.counter("loom_http_timeouts_total", "Connections timed out (slow clients).", double(h.timeouts));
  o.counter("loom_http_client_disconnects_total", "Clients gone before their response was complete.",
            double(h.client_disconnects));
  o.gauge("loom_http_open_streams", "Responses not yet completely written.", double(h.open_streams));
}

// llama-server's names (what its dashboards and autoscalers read), from the same figures.
void render_llamacpp(Out& o, const json& s, const json& m) {
  auto per_second = [](double n, double s) { return s > 0 ? n / s : 0.0; };
  const double steps = n(m, "steps");
  o.counter("llamacpp:prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens",
            n(m, "prompt_tokens"));
  o.counter("llamacpp:prompt_tokens_cached_total", "Number of prompt tokens reused from the cache",
            n(m, "prefix_hit_tokens"));
  o.counter("llamacpp:prompt_seconds_total", "Total time spent processing prompts", n(m, "prompt_seconds"));
  o.counter("llamacpp:tokens_predicted_total", "Number of generation tokens processed", n(m, "generated_tokens"));
  o.counter("llamacpp:tokens_predicted_seconds_total", "Total time spent generating tokens", n(m, "predicted_seconds"));
  o.counter("llamacpp:n_decode_total", "Total number of batches decoded", steps);
  o.counter("llamacpp:n_tokens_max", "Largest observed sequence length (prompt + generation)", n(m, "n_tokens_max"));
  o.counter("llamacpp:spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated",
            n(m, "draft_tokens"));
  o.counter("llamacpp:spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model",
            n(m, "draft_accepted"));
  o.gauge("llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s",
          per_second(n(m, "prompt_tokens"), n(m, "prompt_seconds")));
  o.gauge("llamacpp:predicted_tokens_seconds", "Average generation throughput in tokens/s",
          per_second(n(m, "generated_tokens"), n(m, "predicted_seconds")));
  o.gauge("llamacpp:requests_processing", "Number of requests processing", n(s, "running"));
  o.gauge("llamacpp:requests_deferred", "Number of requests deferred", n(s, "waiting"));
  o.gauge("llamacpp:n_busy_slots_per_decode", "Average number of busy slots per decoded batch",
          n(m, "busy_slots_sum") / std::max(steps, 1.0));
  o.gauge("llamacpp:kv_cache_usage_ratio", "KV-cache usage. 1 means 100 percent usage",
          n(s, "kv_cells") > 0 ? n(s, "kv_used") / n(s, "kv_cells") : 0.0);
  o.gauge("llamacpp:kv_cache_tokens", "KV-cache tokens.", n(s, "kv_used"));
}

}  // namespace

std::string render_metrics(const json& s, const http::ServerStats& h) {
  const json& m = s.at("metrics");
  Out o;
  render_loom(o, s, m);
  render_http(o, h);
  render_llamacpp(o, s, m);
  return o.take();
}

}  // namespace loom::server
