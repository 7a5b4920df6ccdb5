#include "sample/sampler.h"

#include <algorithm>
#include <cmath>

#include "vocab/vocab.h"

namespace loom::sample {

// ---------------------------------------------------------------------------------------------
// SamplerChain

SamplerChain::SamplerChain(const SamplerChain& o) {
  stages_.reserve(o.stages_.size());
  for (const auto& s : o.stages_) stages_.push_back(s->clone());
}

SamplerChain& SamplerChain::operator=(const SamplerChain& o) {
  if (this != &o) {
    SamplerChain copy(o);
    stages_ = std::move(copy.stages_);
  }
  return *this;
}

SamplerChain& SamplerChain::add(std::unique_ptr<SamplerStage> stage) {
  stages_.push_back(std::move(stage));
  return *this;
}

std::string SamplerChain::describe() const {
  std::string s;
  for (const auto& st : stages_) {
    if (!s.empty()) s += " -> ";
    s += st->name();
  }
  return s;
}

void SamplerChain::apply(Candidates& c) {
  for (auto& s : stages_) s->apply(c);
}

namespace {
int32_t pick(const Candidates& c) {
  if (c.empty()) return -1;
  if (c.selected >= 0 && size_t(c.selected) < c.size()) return c.data[size_t(c.selected)].id;
  size_t best = 0;
  for (size_t i = 1; i < c.size(); ++i)
    if (c.data[i].logit > c.data[best].logit) best = i;
  return c.data[best].id;
}
}  // namespace

int32_t SamplerChain::sample(std::span<const float> logits) {
  cur_.fill(logits);
  apply(cur_);
  return pick(cur_);
}

void SamplerChain::accept(int32_t token) {
  for (auto& s : stages_) s->accept(token);
}

void SamplerChain::reset() {
  for (auto& s : stages_) s->reset();
}

// ---------------------------------------------------------------------------------------------
// Order and params

Expected<std::vector<SamplerType>> parse_sampler_order(std::string_view text) {
  std::vector<SamplerType> out;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find_first_of(";, ", i);
    if (j == std::string_view::npos) j = text.size();
    std::string name(text.substr(i, j - i));
    i = j + 1;
    if (name.empty()) continue;
    std::replace(name.begin(), name.end(), '-', '_');
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    SamplerType t;
    if (name == "penalties" || name == "penalty" || name == "repetition") t = SamplerType::kPenalties;
    else if (name == "dry") t = SamplerType::kDry;
    else if (name == "top_k" || name == "k") t = SamplerType::kTopK;
    else if (name == "typ_p" || name == "typical_p" || name == "typical" || name == "y") t = SamplerType::kTypicalP;
    else if (name == "top_p" || name == "nucleus" || name == "p") t = SamplerType::kTopP;
    else if (name == "min_p" || name == "m") t = SamplerType::kMinP;
    else if (name == "xtc" || name == "x") t = SamplerType::kXtc;
    else if (name == "temperature" || name == "temp" || name == "t") t = SamplerType::kTemperature;
    else
      return invalid_argument("unknown sampler '" + name +
                              "' (known: penalties, dry, top_k, typ_p, top_p, min_p, xtc, temperature)");
    out.push_back(t);
  }
  return out;
}

const char* sampler_type_name(SamplerType t) {
  switch (t) {
    case SamplerType::kPenalties: return "penalties";
    case SamplerType::kDry: return "dry";
    case SamplerType::kTopK: return "top_k";
    case SamplerType::kTypicalP: return "typ_p";
    case SamplerType::kTopP: return "top_p";
    case SamplerType::kMinP: return "min_p";
    case SamplerType::kXtc: return "xtc";
    case SamplerType::kTemperature: return "temperature";
  }
  return "?";
}

SamplerChain build_chain(const SamplerParams& p, const Vocab* vocab, int32_t n_vocab) {
  SamplerChain chain;
  const size_t min_keep = size_t(std::max(p.min_keep, 0));
  if (!p.logit_bias.empty()) chain.add(make_logit_bias(p.logit_bias));
  if (p.mirostat == 1 || p.mirostat == 2) {
    chain.add(make_temperature(p.temp));
    if (p.mirostat == 1) chain.add(make_mirostat(n_vocab, p.seed, p.mirostat_tau, p.mirostat_eta, 100));
    else chain.add(make_mirostat_v2(p.seed, p.mirostat_tau, p.mirostat_eta));
    return chain;
  }
  const int32_t n_ctx = std::max(p.n_ctx, 1);
  for (SamplerType t : p.order) {
    switch (t) {
      case SamplerType::kPenalties:
        if (p.penalty_last_n != 0 && (p.penalty_repeat != 1.0f || p.penalty_freq != 0.0f || p.penalty_present != 0.0f))
          chain.add(make_penalties(p.penalty_last_n < 0 ? n_ctx : p.penalty_last_n, p.penalty_repeat, p.penalty_freq,
                                   p.penalty_present));
        break;
      case SamplerType::kDry:
        if (p.dry.multiplier != 0.0f && p.dry.base >= 1.0f && p.dry.penalty_last_n != 0)
          chain.add(make_dry(p.dry, vocab, n_ctx));
        break;
      case SamplerType::kTopK:
        if (p.top_k > 0) chain.add(make_top_k(p.top_k));
        break;
      case SamplerType::kTypicalP:
        if (p.typical_p < 1.0f) chain.add(make_typical(p.typical_p, min_keep));
        break;
      case SamplerType::kTopP:
        if (p.top_p < 1.0f) chain.add(make_top_p(p.top_p, min_keep));
        break;
      case SamplerType::kMinP:
        if (p.min_p > 0.0f) chain.add(make_min_p(p.min_p, min_keep));
        break;
      case SamplerType::kXtc:
        if (p.xtc_probability > 0.0f && p.xtc_threshold <= 0.5f)
          chain.add(make_xtc(p.xtc_probability, p.xtc_threshold, min_keep, p.seed));
        break;
      case SamplerType::kTemperature: chain.add(make_temperature_ext(p.temp, p.dynatemp_range, p.dynatemp_exponent)); break;
    }
  }
  if (p.temp <= 0.0f && p.dynatemp_range <= 0.0f) chain.add(make_greedy());
  else chain.add(make_dist(p.seed));
  return chain;
}

// ---------------------------------------------------------------------------------------------
// Sampler

Sampler::Sampler(const SamplerParams& p) : p_(p), chain_(build_chain(p, nullptr, 0)), argmax_(argmax_suffices(p)) {
  assert(p.grammar.empty() && "a grammar needs Sampler::create with a vocabulary");
}

Expected<Sampler> Sampler::create(const SamplerParams& p, const Vocab* vocab) {
  auto bad = [](const std::string& m) { return invalid_argument(m); };
  if (!std::isfinite(p.temp)) return bad("temperature must be a finite number");
  if (!(p.top_p >= 0.0f)) return bad("top-p must be >= 0");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min-p must be in [0, 1]");
  if (!(p.typical_p >= 0.0f)) return bad("typical-p must be >= 0");
  if (!(p.penalty_repeat > 0.0f)) return bad("repeat-penalty must be > 0");
  if (p.penalty_last_n < -1) return bad("repeat-last-n must be >= -1");
  if (p.dry.penalty_last_n < -1) return bad("dry-penalty-last-n must be >= -1");
  if (p.dry.allowed_length < 0) return bad("dry-allowed-length must be >= 0");
  if (!(p.dry.multiplier >= 0.0f)) return bad("dry-multiplier must be >= 0");
  if (p.mirostat < 0 || p.mirostat > 2) return bad("mirostat must be 0, 1 or 2");
  if (!(p.mirostat_eta >= 0.0f) || !std::isfinite(p.mirostat_tau))
    return bad("mirostat learning rate / target entropy out of range");
  if (!(p.xtc_probability >= 0.0f && p.xtc_probability <= 1.0f)) return bad("xtc-probability must be in [0, 1]");
  if (!(p.dynatemp_range >= 0.0f)) return bad("dynatemp-range must be >= 0");
  const int32_t n_vocab = vocab ? vocab->n_tokens() : 0;
  if (vocab) {
    for (const auto& [id, b] : p.logit_bias)
      if (!vocab->is_valid(id))
        return out_of_range("logit bias for token " + std::to_string(id) + ", outside the vocabulary");
  }
  Sampler s;
  s.p_ = p;
  s.chain_ = build_chain(p, vocab, n_vocab);
  s.argmax_ = argmax_suffices(p);
  if (!p.grammar.empty()) {
    if (!vocab) return bad("a grammar needs the model's vocabulary");
    auto g = Grammar::parse(p.grammar, p.grammar_root);
    if (!g) return g.status();
    auto gv = std::make_shared<GrammarVocab>(GrammarVocab::from_vocab(*vocab));
    s.grammar_ = std::make_unique<GrammarStage>(*g, std::move(gv));
    if (s.grammar_->matcher().is_dead()) return bad("the grammar matches nothing");
  }
  if (p.reasoning_budget >= 0 || p.reasoning_control) {
    if (!vocab) return bad("a reasoning budget needs the model's vocabulary");
    // Reasoning control without a budget: a budget that never runs out, forced by end_reasoning().
    s.budget_.emplace(*vocab, p.reasoning_budget >= 0 ? p.reasoning_budget : INT32_MAX, p.reasoning_budget_message);
  }
  return s;
}

Sampler::Sampler(const Sampler& o) : p_(o.p_), chain_(o.chain_), argmax_(o.argmax_), budget_(o.budget_) {
  if (o.grammar_) grammar_ = std::make_unique<GrammarStage>(*o.grammar_);
}

Sampler& Sampler::operator=(const Sampler& o) {
  if (this != &o) {
    Sampler copy(o);
    *this = std::move(copy);
  }
  return *this;
}

// Whether the chain can only return the most likely token: greedy (temperature 0), and no stage
// that could remove the maximum or change which logit is largest (logit bias, penalties, DRY,
// typical-p, XTC, mirostat). top-k, top-p, min-p and temperature 0 always keep the maximum.
bool Sampler::argmax_suffices(const SamplerParams& p) {
  if (!(p.temp <= 0.0f && p.dynatemp_range <= 0.0f) || p.mirostat != 0 || !p.logit_bias.empty()) return false;
  if (p.penalty_last_n != 0 && (p.penalty_repeat != 1.0f || p.penalty_freq != 0.0f || p.penalty_present != 0.0f))
    return false;
  if (p.dry.multiplier != 0.0f && p.dry.base >= 1.0f && p.dry.penalty_last_n != 0) return false;
  if (p.typical_p < 1.0f) return false;
  if (p.xtc_probability > 0.0f && p.xtc_threshold <= 0.5f) return false;
  return true;
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (budget_) {
    // The reasoning budget is spent: the block's end is emitted (unless the grammar forbids it).
    if (auto f = budget_->forced()) {
      if (!grammar_ || grammar_->allows(*f)) return *f;
      budget_->give_up();
    }
  }
  if (argmax_ && !logits.empty()) {
    // Greedy without a stage that matters: the first largest logit, no candidate list to build.
    const int32_t best = argmax(logits);
    if (!grammar_ || grammar_->allows(best)) return best;
    cur_.fill(logits);
    grammar_->apply(cur_);
    if (cur_.empty()) return -1;
    chain_.apply(cur_);
    return pick(cur_);
  }
  cur_.fill(logits);
  chain_.apply(cur_);
  int32_t tok = pick(cur_);
  if (!grammar_ || (tok >= 0 && grammar_->allows(tok))) return tok;
  // The pick does not fit the grammar: constrain first, then sample again.
  cur_.fill(logits);
  grammar_->apply(cur_);
  if (cur_.empty()) return -1;
  chain_.apply(cur_);
  return pick(cur_);
}

void Sampler::accept(int32_t token, bool accept_grammar) {
  if (accept_grammar && grammar_) grammar_->accept(token);
  chain_.accept(token);
  // Prompt tokens come without the grammar (accept_grammar false): they are not counted.
  if (budget_) budget_->observe(token, accept_grammar);
}

void Sampler::reset() {
  if (grammar_) grammar_->reset();
  chain_.reset();
  if (budget_) budget_->reset();
}

}  // namespace loom::sample
