// `loom serve`'s flag values: llama.cpp's spellings of booleans and numbers, and the handlers the
// flag table's rows are built from (into a ServeOptions field, into the server-wide request
// defaults, checks of values accepted without effect).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "serve_flags_internal.h"

namespace loom::cli::serve_internal {

std::vector<std::string> split_csv(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::stringstream ss(s);
  while (std::getline(ss, item, sep)) {
    const size_t a = item.find_first_not_of(" \t");
    const size_t b = item.find_last_not_of(" \t");
    if (a != std::string::npos) out.push_back(item.substr(a, b - a + 1));
  }
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// llama.cpp's is_truthy / is_falsey / is_autoy.
bool truthy(const std::string& v) {
  const std::string l = lower(v);
  return l == "on" || l == "enabled" || l == "true" || l == "1";
}
bool falsey(const std::string& v) {
  const std::string l = lower(v);
  return l == "off" || l == "disabled" || l == "false" || l == "0";
}
bool autoy(const std::string& v) { return lower(v) == "auto" || v == "-1"; }

bool to_int(const std::string& s, long long* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(s.c_str(), &end, 10);
  if (errno || *end != '\0') return false;
  *out = x;
  return true;
}
bool to_float(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  if (errno || *end != '\0') return false;
  *out = x;
  return true;
}

std::string int_error(const std::string& v, long long lo, long long hi) {
  return "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", not '" + v + "'";
}

// An integer option into an int field; `negative_to`: what values below 0 mean (llama.cpp's
// -1 = auto / default) when lo < 0 is not allowed for loom's field.
Handler int_to(int ServeOptions::*field, long long lo, long long hi) {
  return [=](Ctx& c, const Use& u) -> std::string {
    long long x;
    if (!to_int(u.v[0], &x) || x < lo || x > hi) return int_error(u.v[0], lo, hi);
    c.o->*field = int(x);
    return "";
  };
}
// -1 (or any negative) keeps loom's default, as llama.cpp's "-1 = auto".
Handler int_or_default(int ServeOptions::*field, long long hi) {
  return [=](Ctx& c, const Use& u) -> std::string {
    long long x;
    if (!to_int(u.v[0], &x) || x > hi) return int_error(u.v[0], -1, hi);
    c.o->*field = x < 0 ? ServeOptions{}.*field : int(x);
    return "";
  };
}
Handler str_to(std::string ServeOptions::*field) {
  return [=](Ctx& c, const Use& u) -> std::string {
    c.o->*field = u.v[0];
    return "";
  };
}
Handler bool_to(bool ServeOptions::*field) {
  return [=](Ctx& c, const Use& u) -> std::string {
    c.o->*field = u.pos;
    return "";
  };
}
// A server-wide request default (ServeOptions::request_defaults, a JSON object of request fields).
Handler request_default(std::string key, DefaultKind kind) {
  return [key, kind](Ctx& c, const Use& u) -> std::string {
    nlohmann::ordered_json d = c.o->request_defaults.empty() ? nlohmann::ordered_json::object()
                                                             : nlohmann::ordered_json::parse(c.o->request_defaults);
    switch (kind) {
      case DefaultKind::kNumber: {
        double x;
        if (!to_float(u.v[0], &x)) return "expected a number, not '" + u.v[0] + "'";
        d[key] = x;
        break;
      }
      case DefaultKind::kInt: {
        long long x;
        if (!to_int(u.v[0], &x)) return "expected an integer, not '" + u.v[0] + "'";
        d[key] = x;
        break;
      }
      case DefaultKind::kString: d[key] = u.v[0]; break;
      case DefaultKind::kTrue: d[key] = u.pos; break;
      case DefaultKind::kAppend:
        if (!d.contains(key) || !d[key].is_array()) d[key] = nlohmann::ordered_json::array();
        d[key].push_back(u.v[0]);
        break;
      case DefaultKind::kFile: {
        std::ifstream f(u.v[0], std::ios::binary);
        if (!f) return "cannot read " + u.v[0];
        std::stringstream ss;
        ss << f.rdbuf();
        d[key] = ss.str();
        break;
      }
    }
    c.o->request_defaults = d.dump();
    return "";
  };
}
// -l TOKEN_ID(+/-)BIAS: one [id, bias] pair of logit_bias.
Handler logit_bias_default() {
  return [](Ctx& c, const Use& u) -> std::string {
    const std::string& v = u.v[0];
    const size_t at = v.find_first_of("+-", 1);
    long long id;
    double bias;
    if (at == std::string::npos || !to_int(v.substr(0, at), &id) || !to_float(v.substr(at), &bias)) {
      return "expected TOKEN_ID(+/-)BIAS, e.g. 15043+1, not '" + v + "'";
    }
    nlohmann::ordered_json d = c.o->request_defaults.empty() ? nlohmann::ordered_json::object()
                                                             : nlohmann::ordered_json::parse(c.o->request_defaults);
    if (!d.contains("logit_bias") || !d["logit_bias"].is_array()) d["logit_bias"] = nlohmann::ordered_json::array();
    d["logit_bias"].push_back({id, bias});
    c.o->request_defaults = d.dump();
    return "";
  };
}

// Checks that a value is a number (the flag is otherwise accepted without effect).
Handler number() {
  return [](Ctx&, const Use& u) -> std::string {
    double x;
    for (const auto& v : u.v) {
      if (!to_float(v, &x)) return "expected a number, not '" + v + "'";
    }
    return "";
  };
}
Handler one_of(std::vector<std::string> allowed) {
  return [allowed](Ctx&, const Use& u) -> std::string {
    if (std::find(allowed.begin(), allowed.end(), u.v[0]) != allowed.end()) return "";
    std::string list;
    for (size_t i = 0; i < allowed.size(); ++i) list += (i ? ", " : "") + allowed[i];
    return "expected one of " + list + ", not '" + u.v[0] + "'";
  };
}
// on / off / auto in llama.cpp's spellings.
Handler on_off_auto(bool with_auto) {
  return [with_auto](Ctx&, const Use& u) -> std::string {
    if (u.v.empty() || truthy(u.v[0]) || falsey(u.v[0]) || (with_auto && autoy(u.v[0]))) return "";
    return std::string("expected on, off") + (with_auto ? " or auto" : "") + ", not '" + u.v[0] + "'";
  };
}
// Quiet unless the value differs from `quiet_value` (llama-server's default).
Handler quiet_if(std::string quiet_value) {
  return [quiet_value](Ctx& c, const Use& u) -> std::string {
    if (!u.v.empty() && u.v[0] == quiet_value) c.quiet = true;
    return "";
  };
}
Handler quiet_if_negative() {
  return [](Ctx& c, const Use& u) -> std::string {
    if (!u.pos) c.quiet = true;
    return "";
  };
}
Handler quiet_if_positive() {
  return [](Ctx& c, const Use& u) -> std::string {
    if (u.pos) c.quiet = true;
    return "";
  };
}

std::string cache_type(const std::string& v, int32_t* out) {
  static const std::pair<const char*, int32_t> kTypes[] = {{"f32", LOOM_TYPE_F32},
                                                           {"f16", LOOM_TYPE_F16},
                                                           {"bf16", LOOM_TYPE_BF16},
                                                           {"q8_0", LOOM_TYPE_Q8_0},
                                                           {"q4_0", LOOM_TYPE_Q4_0}};
  const std::string l = lower(v);
  for (const auto& [name, type] : kTypes) {
    if (l == name) {
      *out = type;
      return "";
    }
  }
  if (l == "q4_1" || l == "iq4_nl" || l == "q5_0" || l == "q5_1")
    return "the cache type " + v + " is not supported by loom (f32, f16, bf16, q8_0, q4_0)";
  return "expected f32, f16, bf16, q8_0 or q4_0, not '" + v + "'";
}

void add_lora(Ctx& c, const std::string& item, bool scaled_form, std::string* err) {
  // --lora-scaled FNAME:SCALE; --lora FNAME (loom also reads FNAME:SCALE there, as before).
  const size_t colon = item.rfind(':');
  if (colon != std::string::npos && colon + 1 < item.size()) {
    double s;
    if (to_float(item.substr(colon + 1), &s)) {
      c.o->loras.emplace_back(item.substr(0, colon), float(s));
      return;
    }
  }
  if (scaled_form) {
    *err = "expected FNAME:SCALE, not '" + item + "'";
    return;
  }
  c.o->loras.emplace_back(item, 1.0f);
}

}  // namespace loom::cli::serve_internal
