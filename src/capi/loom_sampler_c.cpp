// The C API's sampler (loom_sampler_* in include/loom/loom.h): loom::Sampler with its parameters
// given as JSON, the sampling fields of a generation request (serve/request_json), so that a
// program driving a context itself samples exactly as `loom serve` and the scheduler do.
#include <memory>
#include <span>
#include <string>

#include "capi/capi_internal.h"
#include "sample/sampler.h"
#include "serve/request_json.h"

using namespace loom::capi;

struct loom_sampler {
  std::unique_ptr<loom::Sampler> s;
  int32_t n_vocab = 0;
};

extern "C" {

loom_sampler* loom_sampler_new(const loom_model* model, const char* params_json) {
  return guarded<loom_sampler*>(__func__, nullptr, [&]() -> loom_sampler* {
    const char* fn = "loom_sampler_new";
    if (!model) {
      set_error(fn, "model is NULL");
      return nullptr;
    }
    try {
      const loom::serve::json body = loom::serve::parse_body(params_json ? params_json : "{}");
      loom::serve::GenerateRequest r;
      loom::serve::parse_generation(loom::serve::Fields(body), model->m->vocab(), -1, /*chat=*/false, r);
      // The C API's own field: what a look-back of -1 (repeat_last_n, dry_penalty_last_n) means.
      if (body.is_object() && body.contains("n_ctx")) {
        const auto& v = body["n_ctx"];
        if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t(1) << 24)) {
          set_error(fn, "n_ctx must be an integer in [1, 2^24]");
          return nullptr;
        }
        r.sampling.n_ctx = v.get<int>();
      }
      auto s = loom::Sampler::create(r.sampling, &model->m->vocab());
      if (!s) {
        fail(fn, s.status());
        return nullptr;
      }
      auto h = std::make_unique<loom_sampler>();
      h->s = std::make_unique<loom::Sampler>(std::move(*s));
      h->n_vocab = model->m->vocab().n_tokens();
      return h.release();
    } catch (const loom::serve::RequestError& e) {
      fail(fn, e.status());
      return nullptr;
    }
  });
}

loom_token loom_sampler_sample(loom_sampler* sampler, const loom_context* ctx, int32_t idx) {
  if (!sampler || !ctx) {
    set_error(__func__, !sampler ? "sampler is NULL" : "context is NULL");
    return LOOM_TOKEN_NULL;
  }
  return guarded<loom_token>(__func__, LOOM_TOKEN_NULL, [&]() -> loom_token {
    auto logits = ctx->c->logits(idx);
    if (!logits) {
      set_error("loom_sampler_sample", logits.status().message());
      return LOOM_TOKEN_NULL;
    }
    const int32_t t = sampler->s->sample(*logits);
    if (t < 0) set_error("loom_sampler_sample", "the grammar admits no token here");
    return t < 0 ? LOOM_TOKEN_NULL : t;
  });
}

int32_t loom_sampler_accept(loom_sampler* sampler, loom_token token) {
  if (!sampler) return fail_arg(__func__, "sampler is NULL");
  if (token < 0 || token >= sampler->n_vocab) return fail_arg(__func__, "token is not in the vocabulary");
  return guarded_status(__func__, [&] {
    sampler->s->accept(token);
    return LOOM_OK;
  });
}

bool loom_sampler_grammar_done(const loom_sampler* sampler) { return sampler && sampler->s->grammar_done(); }

loom_token loom_sampler_sample_logits(loom_sampler* sampler, const float* logits, int32_t n_vocab) {
  if (!sampler || !logits) {
    set_error(__func__, !sampler ? "sampler is NULL" : "logits is NULL");
    return LOOM_TOKEN_NULL;
  }
  if (n_vocab != sampler->n_vocab) {
    set_error(__func__, "n_vocab is " + std::to_string(n_vocab) + ", the model's vocabulary has " +
                            std::to_string(sampler->n_vocab) + " tokens");
    return LOOM_TOKEN_NULL;
  }
  return guarded<loom_token>(__func__, LOOM_TOKEN_NULL, [&]() -> loom_token {
    const int32_t t = sampler->s->sample(std::span<const float>(logits, size_t(n_vocab)));
    if (t < 0) set_error("loom_sampler_sample_logits", "the grammar admits no token here");
    return t < 0 ? LOOM_TOKEN_NULL : t;
  });
}

int32_t loom_sampler_accept_history(loom_sampler* sampler, const loom_token* tokens, int32_t n_tokens) {
  if (!sampler) return fail_arg(__func__, "sampler is NULL");
  if (n_tokens < 0 || (n_tokens > 0 && !tokens)) return fail_arg(__func__, "tokens is NULL or n_tokens is negative");
  for (int32_t i = 0; i < n_tokens; ++i) {
    if (tokens[i] < 0 || tokens[i] >= sampler->n_vocab) return fail_arg(__func__, "a token is not in the vocabulary");
  }
  return guarded_status(__func__, [&] {
    for (int32_t i = 0; i < n_tokens; ++i) sampler->s->accept(tokens[i], /*accept_grammar=*/false);
    return LOOM_OK;
  });
}

bool loom_sampler_has_grammar(const loom_sampler* sampler) { return sampler && sampler->s->has_grammar(); }

bool loom_sampler_grammar_can_end(const loom_sampler* sampler) {
  return !sampler || !sampler->s->has_grammar() || sampler->s->grammar()->matcher().can_end();
}

void loom_sampler_reset(loom_sampler* sampler) {
  if (sampler) sampler->s->reset();
}

void loom_sampler_free(loom_sampler* sampler) { delete sampler; }

}  // extern "C"
