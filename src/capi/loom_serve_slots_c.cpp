// The C API's exclusive scheduler operations (include/loom/loom_serve.h), run as
// Scheduler::run_exclusive tasks: session files, slots and their save / restore / erase, the
// prefix cache, LoRA adapters, bench; and the chat formatting helpers (loom_chat_format,
// loom_chat_template_info).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>

#include "capi/serve_internal.h"
#include "serve/prefix_cache.h"

using namespace loom::capi;

namespace {

// The cached prefix of `toks` as a checked sequence state file (save_session, slot save).
loom::Status save_cached(loom_scheduler* sched, const char* path, const std::vector<int32_t>& toks, int* saved) {
  *saved = 0;
  return sched->s->run_exclusive([&](loom::Context& ctx, loom::serve::PrefixCache* cache) -> loom::Status {
    if (!cache) return loom::Status(loom::StatusCode::kUnsupported, "the prefix cache is disabled");
    loom::serve::PrefixCache::Match m = cache->match(toks, int(toks.size()));
    if (m.len == 0) return loom::Status(loom::StatusCode::kNotFound, "none of these tokens is cached");
    // Slot 0 is free while nothing runs: give it the prefix, write it, free it again.
    LOOM_RETURN_IF_ERROR(cache->share(m, 0));
    loom::Status w = ctx.seq_state_save_file(path, 0, std::span<const int32_t>(toks.data(), size_t(m.len)));
    (void)ctx.seq_rm(0, -1, -1);
    if (w) *saved = m.len;
    return w;
  });
}

// A file written by save_cached into the prefix cache; its tokens into *toks.
loom::Status load_cached(loom_scheduler* sched, const char* path, std::vector<int32_t>* toks) {
  return sched->s->run_exclusive([&](loom::Context& ctx, loom::serve::PrefixCache* cache) -> loom::Status {
    if (!cache) return loom::Status(loom::StatusCode::kUnsupported, "the prefix cache is disabled");
    auto header = ctx.seq_state_file_tokens(path);
    if (!header) return header.status();
    const int need = int(header->size());
    if (need > ctx.kv().size()) {
      return loom::invalid_argument("the session holds " + std::to_string(need) +
                                    " tokens, more than n_ctx = " + std::to_string(ctx.kv().size()));
    }
    const int free_cells = ctx.kv().size() - ctx.kv().used();
    if (free_cells < need) cache->evict(need - free_cells);
    LOOM_RETURN_IF_ERROR(ctx.seq_state_load_file(path, 0, toks));
    (void)cache->insert(*toks, 0);
    (void)ctx.seq_rm(0, -1, -1);
    return loom::Status::ok();
  });
}

bool valid_slot(const loom_scheduler* sched, int32_t slot) { return slot >= 0 && slot < sched->s->n_slots(); }

}  // namespace

extern "C" {

int32_t loom_scheduler_save_session(loom_scheduler* sched, const char* path, const loom_token* tokens, int32_t n_tokens,
                                    int32_t* n_saved) {
  LOOM_NEED_SCHED(LOOM_ERR_INVALID_ARGUMENT);
  if (!path) return fail_arg(__func__, "path is NULL");
  if (n_tokens < 0 || (n_tokens > 0 && !tokens)) return fail_arg(__func__, "tokens is NULL or n_tokens negative");
  if (n_saved) *n_saved = 0;
  return guarded_status(__func__, [&]() -> int32_t {
    int saved = 0;
    const loom::Status st = save_cached(sched, path, std::vector<int32_t>(tokens, tokens + n_tokens), &saved);
    if (!st) return fail("loom_scheduler_save_session", st);
    if (n_saved) *n_saved = saved;
    return LOOM_OK;
  });
}

int32_t loom_scheduler_load_session(loom_scheduler* sched, const char* path, loom_token* tokens_out, int32_t capacity,
                                    int32_t* n_loaded) {
  LOOM_NEED_SCHED(LOOM_ERR_INVALID_ARGUMENT);
  if (!path) return fail_arg(__func__, "path is NULL");
  if (capacity < 0 || (capacity > 0 && !tokens_out)) return fail_arg(__func__, "tokens_out is NULL or capacity negative");
  if (n_loaded) *n_loaded = 0;
  return guarded_status(__func__, [&]() -> int32_t {
    std::vector<int32_t> toks;
    const loom::Status st = load_cached(sched, path, &toks);
    if (!st) return fail("loom_scheduler_load_session", st);
    const size_t n = std::min(toks.size(), size_t(capacity));
    if (n) std::copy_n(toks.begin(), n, tokens_out);
    if (n_loaded) *n_loaded = int32_t(toks.size());
    return LOOM_OK;
  });
}

int32_t loom_scheduler_slots(const loom_scheduler* sched, char* buf, size_t buf_size) {
  LOOM_NEED_SCHED(LOOM_SIZE_ERROR);
  return guarded<int32_t>(__func__, LOOM_SIZE_ERROR, [&] {
    json out = json::array();
    for (const loom::serve::SlotState& s : sched->s->slots()) {
      out.push_back({{"id", s.id},
                     {"is_processing", s.processing},
                     {"request_id", s.request},
                     {"n_prompt", s.n_prompt},
                     {"n_decoded", s.n_decoded},
                     {"n_remain", s.n_remain},
                     {"n_cached", s.n_cached}});
    }
    return copy_json("loom_scheduler_slots", out, buf, buf_size);
  });
}

int32_t loom_scheduler_slot_save(loom_scheduler* sched, int32_t slot, const char* path, int32_t* n_saved) {
  LOOM_NEED_SCHED(LOOM_ERR_INVALID_ARGUMENT);
  if (!path) return fail_arg(__func__, "path is NULL");
  if (!valid_slot(sched, slot)) return fail_arg(__func__, "no such slot");
  if (n_saved) *n_saved = 0;
  return guarded_status(__func__, [&]() -> int32_t {
    const std::vector<int32_t> toks = sched->s->slot_tokens(slot);
    if (toks.empty()) return fail("loom_scheduler_slot_save", loom::not_found("the slot holds no tokens"));
    int saved = 0;
    const loom::Status st = save_cached(sched, path, toks, &saved);
    if (!st) return fail("loom_scheduler_slot_save", st);
    if (n_saved) *n_saved = saved;
    return LOOM_OK;
  });
}

int32_t loom_scheduler_slot_restore(loom_scheduler* sched, int32_t slot, const char* path, int32_t* n_restored) {
  LOOM_NEED_SCHED(LOOM_ERR_INVALID_ARGUMENT);
  if (!path) return fail_arg(__func__, "path is NULL");
  if (!valid_slot(sched, slot)) return fail_arg(__func__, "no such slot");
  if (n_restored) *n_restored = 0;
  return guarded_status(__func__, [&]() -> int32_t {
    std::vector<int32_t> toks;
    const loom::Status st = load_cached(sched, path, &toks);
    if (!st) return fail("loom_scheduler_slot_restore", st);
    if (n_restored) *n_restored = int32_t(toks.size());
    sched->s->set_slot_tokens(slot, std::move(toks));
    return LOOM_OK;
  });
}

int32_t loom_scheduler_slot_erase(loom_scheduler* sched, int32_t slot, int32_t* n_erased) {
  LOOM_NEED_SCHED(LOOM_ERR_INVALID_ARGUMENT);
  if (!valid_slot(sched, slot)) return fail_arg(__func__, "no such slot");
  if (n_erased) *n_erased = 0;
  return guarded_status(__func__, [&]() -> int32_t {
    const std::vector<int32_t> toks = sched->s->slot_tokens(slot);
    if (!toks.empty()) {
      const loom::Status st = sched->s->run_exclusive([&](loom::Context&, loom::serve::PrefixCache* cache) -> loom::Status {
        if (cache) (void)cache->erase(toks);
        return loom::Status::ok();
      });
      if (!st) return fail("loom_scheduler_slot_erase", st);
    }
    sched->s->set_slot_tokens(slot, {});
    if (n_erased) *n_erased = int32_t(toks.size());
    return LOOM_OK;
  });
}

int32_t loom_scheduler_clear_cache(loom_scheduler* sched) {
  LOOM_NEED_SCHED(LOOM_ERR_INVALID_ARGUMENT);
  return guarded_status(__func__, [&]() -> int32_t {
    return check("loom_scheduler_clear_cache", sched->s->run_exclusive([](loom::Context&, loom::serve::PrefixCache* cache) {
      if (cache) cache->clear_unlocked();
      return loom::Status::ok();
    }));
  });
}

int32_t loom_scheduler_set_lora(loom_scheduler* sched, const loom_lora_adapter* const* adapters, const float* scales,
                                int32_t n) {
  LOOM_NEED_SCHED(LOOM_ERR_INVALID_ARGUMENT);
  if (n < 0 || (n > 0 && (!adapters || !scales))) return fail_arg(__func__, "adapters / scales NULL or n negative");
  for (int32_t i = 0; i < n; ++i) {
    if (!adapters[i]) return fail_arg(__func__, "an adapter is NULL");
  }
  return guarded_status(__func__, [&]() -> int32_t {
    std::vector<std::pair<std::shared_ptr<const loom::LoraAdapter>, float>> want;
    for (int32_t i = 0; i < n; ++i) want.emplace_back(adapters[i]->a, scales[i]);
    loom::Status st = sched->s->run_exclusive([&](loom::Context& ctx, loom::serve::PrefixCache* cache) -> loom::Status {
      if (cache) cache->clear_unlocked();
      ctx.clear_lora();
      for (const auto& [a, scale] : want) {
        loom::Status s = ctx.set_lora(a, scale);
        if (!s) {
          ctx.clear_lora();
          return s;
        }
      }
      return loom::Status::ok();
    });
    if (!st) return fail("loom_scheduler_set_lora", st);
    std::lock_guard<std::mutex> l(sched->lora_mu);
    sched->loras = std::move(want);
    return LOOM_OK;
  });
}

int32_t loom_scheduler_bench(loom_scheduler* sched, int32_t pp, int32_t tg, int32_t pl, int32_t nr, char* buf,
                             size_t buf_size) {
  LOOM_NEED_SCHED(LOOM_SIZE_ERROR);
  if (pp < 0 || tg < 0 || pl < 1 || nr < 1 || pp + tg < 1) {
    set_error(__func__, "need pp >= 0, tg >= 0, pp + tg >= 1, pl >= 1, nr >= 1");
    return LOOM_SIZE_ERROR;
  }
  return guarded<int32_t>(__func__, LOOM_SIZE_ERROR, [&]() -> int32_t {
    std::vector<double> t_pp, t_tg;
    loom::Status st = sched->s->run_exclusive([&](loom::Context& ctx, loom::serve::PrefixCache* cache) -> loom::Status {
      if (cache) cache->clear_unlocked();
      if (pl > ctx.n_seq_max())
        return loom::invalid_argument("pl is more than the context's sequences (" + std::to_string(ctx.n_seq_max()) + ")");
      if (int64_t(pl) * (pp + tg) > ctx.kv().size()) {
        return loom::invalid_argument("pl x (pp + tg) is more than n_ctx = " + std::to_string(ctx.kv().size()));
      }
      const int32_t n_vocab = ctx.model().vocab().n_tokens();
      // Logits for each sequence's last token, as llama-batched-bench, up to what the context's
      // logits buffer holds (one row per slot).
      const int max_out = ctx.params().n_outputs_max > 0 ? ctx.params().n_outputs_max : pl;
      auto clear = [&] {
        for (int s = 0; s < pl; ++s) (void)ctx.seq_rm(s, -1, -1);
      };
      using clock = std::chrono::steady_clock;
      for (int r = 0; r < nr; ++r) {
        clear();
        auto t0 = clock::now();
        // Prompts: pl sequences of pp tokens, in batches of n_batch tokens.
        loom::Batch b;
        for (int s = 0; s < pl; ++s) {
          for (int i = 0; i < pp; ++i) {
            b.add(int32_t((s * 131 + i * 7 + 1) % n_vocab), i, {s}, i == pp - 1 && s < max_out);
            if (b.size() >= ctx.n_batch()) {
              LOOM_RETURN_IF_ERROR(ctx.decode(b));
              b = loom::Batch();
            }
          }
        }
        if (b.size() > 0) LOOM_RETURN_IF_ERROR(ctx.decode(b));
        auto t1 = clock::now();
        for (int k = 0; k < tg; ++k) {
          loom::Batch d;
          for (int s = 0; s < pl; ++s) d.add(int32_t((s * 31 + k * 17 + 3) % n_vocab), pp + k, {s}, s < max_out);
          LOOM_RETURN_IF_ERROR(ctx.decode(d));
        }
        auto t2 = clock::now();
        t_pp.push_back(std::chrono::duration<double>(t1 - t0).count());
        t_tg.push_back(std::chrono::duration<double>(t2 - t1).count());
      }
      clear();
      return loom::Status::ok();
    });
    if (!st) {
      fail("loom_scheduler_bench", st);
      return LOOM_SIZE_ERROR;
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double tp = median(t_pp), tt = median(t_tg);
    const json j = {{"pp", pp},
                    {"tg", tg},
                    {"pl", pl},
                    {"nr", nr},
                    {"n_kv", pl * (pp + tg)},
                    {"t_pp", tp},
                    {"speed_pp", tp > 0 ? double(pl) * pp / tp : 0.0},
                    {"t_tg", tt},
                    {"speed_tg", tt > 0 ? double(pl) * tg / tt : 0.0},
                    {"t", tp + tt},
                    {"speed", tp + tt > 0 ? double(pl) * (pp + tg) / (tp + tt) : 0.0}};
    return copy_json("loom_scheduler_bench", j, buf, buf_size);
  });
}

int32_t loom_chat_format(const loom_model* model, const char* request_json, char* buf, size_t buf_size) {
  if (!model) {
    set_error(__func__, "model is NULL");
    return LOOM_SIZE_ERROR;
  }
  int32_t out = LOOM_SIZE_ERROR;
  const int32_t st = guarded_request(__func__, [&]() -> int32_t {
    const char* fn = "loom_chat_format";
    const json body = parse_request(request_json);
    const loom::serve::Fields f(body);
    std::string src;
    const bool has_override = f.has("chat_template") && !(src = f.string("chat_template")).empty();
    auto tmpl = loom::chat::ChatTemplate::from_model(*model->m, has_override ? &src : nullptr);
    if (!tmpl) return fail(fn, tmpl.status());
    loom::serve::ChatGeneration g = loom::serve::parse_chat_generation(f, *tmpl, model->m->vocab(), -1, 0);
    json triggers = json::array();
    for (const auto& t : loom::chat::tool_call_syntax(g.format).triggers) {
      if (g.parse_options.tools_present) triggers.push_back({{"type", "word"}, {"value", t}});
    }
    const json j = {{"prompt", g.prompt_text},
                    {"grammar", g.request.sampling.grammar},
                    {"grammar_lazy", false},
                    {"grammar_triggers", triggers},
                    {"additional_stops", g.request.stop},
                    {"preserved_tokens", g.preserved_tokens},
                    {"tool_call_format", loom::chat::tool_call_format_name(g.format)},
                    {"thinking_forced_open", g.parse_options.thinking_forced_open}};
    out = copy_json(fn, j, buf, buf_size);
    return LOOM_OK;
  });
  return st == LOOM_OK ? out : LOOM_SIZE_ERROR;
}

int32_t loom_chat_template_info(const loom_model* model, const char* template_override, char* buf, size_t buf_size) {
  if (!model) {
    set_error(__func__, "model is NULL");
    return LOOM_SIZE_ERROR;
  }
  return guarded<int32_t>(__func__, LOOM_SIZE_ERROR, [&]() -> int32_t {
    const char* fn = "loom_chat_template_info";
    std::string src = template_override ? template_override : "";
    char probe[2];
    const bool has_model_template = loom_model_meta_val_str(model, "tokenizer.chat_template", probe, sizeof probe) >= 0;
    auto tmpl = loom::chat::ChatTemplate::from_model(*model->m, template_override ? &src : nullptr);
    if (!tmpl) {
      fail(fn, tmpl.status());
      return LOOM_SIZE_ERROR;
    }
    const auto& caps = tmpl->caps();
    const json j = {{"has_template", has_model_template || template_override != nullptr},
                    {"template", tmpl->source()},
                    {"tool_call_format", loom::chat::tool_call_format_name(tmpl->tool_call_format())},
                    {"supports_tools", caps.supports_tools},
                    {"supports_tool_calls", caps.supports_tool_calls},
                    {"supports_tool_responses", caps.supports_tool_responses},
                    {"supports_parallel_tool_calls", caps.supports_parallel_tool_calls}};
    return copy_json(fn, j, buf, buf_size);
  });
}

}  // extern "C"
