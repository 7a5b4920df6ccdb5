#include "api/native.h"

#include <cmath>
#include <limits>

#include "sample/sampling_defaults.h"  // header only: loom_api links no loom library

namespace loom::api {

namespace {

// A number field of the body under any of its names, else the default.
json pick(const json& body, std::initializer_list<const char*> names, json def) {
  if (!body.is_object()) return def;
  for (const char* n : names) {
    auto it = body.find(n);
    if (it != body.end() && !it->is_null()) return *it;
  }
  return def;
}

json bytes_of(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(int(c));
  return a;
}

// llama.cpp writes log(0) as the lowest float (JSON has no -inf).
double finite_logprob(double lp) { return std::isfinite(lp) ? lp : double(std::numeric_limits<float>::lowest()); }

}  // namespace

size_t valid_utf8_prefix(const std::string& s) {
  size_t i = 0, ok = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0) {  // a stray continuation byte or an invalid lead: counted as one byte, as llama.cpp does
      ++i;
      ok = i;
      continue;
    }
    if (i + len > n) break;
    i += len;
    ok = i;
  }
  return ok;
}

json generation_settings(const json& body, uint64_t seed, bool stream) {
  namespace d = sample::defaults;
  const json n_predict = pick(body, {"n_predict", "max_tokens"}, -1);
  json samplers =
      pick(body, {"samplers"},
           json::array({"penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"}));
  if (samplers.is_string()) {
    // llama-server also takes "penalties;top_k;..." — reported as the list it means.
    json list = json::array();
    std::string cur;
    for (char c : samplers.get<std::string>() + ";") {
      if (c == ';' || c == ',' || c == ' ') {
        if (!cur.empty()) list.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    samplers = list;
  }
  return json{
      {"seed", seed},
      {"temperature", pick(body, {"temperature"}, d::kTemperature)},
      {"dynatemp_range", pick(body, {"dynatemp_range"}, d::kDynatempRange)},
      {"dynatemp_exponent", pick(body, {"dynatemp_exponent"}, d::kDynatempExponent)},
      {"top_k", pick(body, {"top_k"}, d::kTopK)},
      {"top_p", pick(body, {"top_p"}, d::kTopP)},
      {"min_p", pick(body, {"min_p"}, d::kMinP)},
      {"top_n_sigma", pick(body, {"top_n_sigma"}, -1.0)},
      {"xtc_probability", pick(body, {"xtc_probability"}, d::kXtcProbability)},
      {"xtc_threshold", pick(body, {"xtc_threshold"}, d::kXtcThreshold)},
      {"typical_p", pick(body, {"typical_p", "typ_p"}, d::kTypicalP)},
      {"repeat_last_n", pick(body, {"repeat_last_n", "penalty_last_n"}, d::kPenaltyLastN)},
      {"repeat_penalty", pick(body, {"repeat_penalty", "penalty_repeat"}, d::kPenaltyRepeat)},
      {"presence_penalty", pick(body, {"presence_penalty", "penalty_present"}, d::kPenaltyPresent)},
      {"frequency_penalty", pick(body, {"frequency_penalty", "penalty_freq"}, d::kPenaltyFreq)},
      {"dry_multiplier", pick(body, {"dry_multiplier"}, d::kDryMultiplier)},
      {"dry_base", pick(body, {"dry_base"}, d::kDryBase)},
      {"dry_allowed_length", pick(body, {"dry_allowed_length"}, d::kDryAllowedLength)},
      {"dry_penalty_last_n", pick(body, {"dry_penalty_last_n"}, d::kDryPenaltyLastN)},
      {"mirostat", pick(body, {"mirostat"}, d::kMirostat)},
      {"mirostat_tau", pick(body, {"mirostat_tau"}, d::kMirostatTau)},
      {"mirostat_eta", pick(body, {"mirostat_eta"}, d::kMirostatEta)},
      {"max_tokens", n_predict},
      {"n_predict", n_predict},
      {"n_keep", pick(body, {"n_keep"}, 0)},
      {"n_discard", 0},
      {"ignore_eos", pick(body, {"ignore_eos"}, false)},
      {"stream", stream},
      {"n_probs", pick(body, {"n_probs"}, 0)},
      {"min_keep", pick(body, {"min_keep"}, d::kMinKeep)},
      {"samplers", samplers},
      {"timings_per_token", pick(body, {"timings_per_token"}, false)},
      {"post_sampling_probs", pick(body, {"post_sampling_probs"}, false)},
      {"lora", json::array()},
  };
}

json token_probs(const TokenProb& chosen, const std::vector<TokenProb>& top, bool post) {
  auto one = [&](const TokenProb& t) {
    json j = {{"id", t.id}, {"token", t.piece.substr(0, valid_utf8_prefix(t.piece))}, {"bytes", bytes_of(t.piece)}};
    if (post) j["prob"] = std::exp(t.logprob);
    else j["logprob"] = finite_logprob(t.logprob);
    return j;
  };
  json j = one(chosen);
  json list = json::array();
  for (const TokenProb& t : top) list.push_back(one(t));
  j[post ? "top_probs" : "top_logprobs"] = std::move(list);
  return j;
}

json native_partial(int index, const std::string& content, const std::vector<int32_t>& tokens, int id_slot,
                    int64_t tokens_predicted, int64_t tokens_evaluated, const json& probs) {
  json j = {{"index", index},
            {"content", content},
            {"tokens", tokens},
            {"stop", false},
            {"id_slot", id_slot},
            {"tokens_predicted", tokens_predicted},
            {"tokens_evaluated", tokens_evaluated}};
  if (!probs.is_null()) j["completion_probabilities"] = probs;
  return j;
}

json native_final(const NativeFinal& f) {
  json j = {{"index", f.index},
            {"content", f.content},
            {"tokens", f.tokens},
            {"id_slot", f.id_slot},
            {"stop", true},
            {"model", f.model},
            {"tokens_predicted", f.tokens_predicted},
            {"tokens_evaluated", f.tokens_evaluated},
            {"generation_settings", f.generation_settings},
            {"prompt", f.prompt},
            {"has_new_line", f.content.find('\n') != std::string::npos},
            {"truncated", f.truncated},
            {"stop_type", f.stop_type},
            {"stopping_word", f.stopping_word},
            {"tokens_cached", f.tokens_cached},
            {"timings", f.timings}};
  if (!f.completion_probabilities.is_null()) j["completion_probabilities"] = f.completion_probabilities;
  return j;
}

std::string native_stop_type(const std::string& reason, const std::string& stop_word) {
  if (reason == "stop") return stop_word.empty() ? "eos" : "word";
  if (reason == "length") return "limit";
  return "none";
}

}  // namespace loom::api
