// Parsing `loom serve`'s command line against the flag table (serve_flags.cpp): the environment,
// then the arguments, each use applied by its row's handler; then router mode's split of the
// command line between the router and its children, and run_serve.
#include "serve_flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "router.h"
#include "serve_flags_internal.h"

namespace loom::cli {

using namespace serve_internal;  // NOLINT(google-build-using-namespace): this file's own internals

namespace {

// Router mode: the flags the router owns (where it listens, its keys, its model list); every other
// flag of its command line is given to each model's child.
bool router_owned(const Flag& f) {
  static const std::set<std::string> kOwned = {"--model",         "--host",       "--port",           "--api-key",
                                               "--api-key-file",  "--alias",      "--tags",           "--models-dir",
                                               "--models-preset", "--models-max", "--models-autoload"};
  return !f.pos.empty() && kOwned.count(f.pos.back()) > 0;
}

// Every spelling -> its row, and whether it is a positive spelling (not a --no-x).
std::map<std::string, std::pair<const Flag*, bool>> flags_by_name() {
  std::map<std::string, std::pair<const Flag*, bool>> by_name;
  for (const Flag& f : table()) {
    for (const auto& n : f.pos) by_name[n] = {&f, true};
    for (const auto& n : f.neg) by_name[n] = {&f, false};
  }
  return by_name;
}

// How many of the arguments after args[i] a use of f takes: its count, none for a negation; a
// flag with one optional value takes the next argument when it is one of its values.
int n_values(const Flag& f, bool pos, const std::vector<std::string>& args, size_t i) {
  const int n = pos ? f.nargs : 0;
  if (n != -1) return n;
  if (i + 1 < args.size()) {
    const std::string& next = args[i + 1];
    if (truthy(next) || falsey(next) || autoy(next)) return 1;
  }
  return 0;
}

// The router's command line (already checked by parse_serve_args) without the router's own flags.
std::vector<std::string> router_child_args(const std::vector<std::string>& args) {
  const auto by_name = flags_by_name();
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a.rfind("--", 0) == 0) std::replace(a.begin(), a.end(), '_', '-');
    auto it = by_name.find(a);
    if (it == by_name.end()) {
      out.push_back(args[i]);
      continue;
    }
    const Flag& f = *it->second.first;
    const int n = n_values(f, it->second.second, args, i);
    const bool own = router_owned(f);
    for (int k = 0; k <= n && i < args.size(); ++k, ++i) {
      if (!own) out.push_back(args[i]);
    }
    --i;
  }
  return out;
}

// A key of llama-server's preset INI (a flag without dashes, long or short, or its environment
// variable) -> the child's arguments.
std::string preset_option(const std::string& key, const std::string& value, std::string* canonical,
                          std::vector<std::string>* args) {
  static const auto by_name = flags_by_name();
  const Flag* f = nullptr;
  bool pos = true;
  for (const std::string& n : {"--" + key, "-" + key}) {
    if (auto it = by_name.find(n); it != by_name.end()) {
      f = it->second.first;
      pos = it->second.second;
      break;
    }
  }
  if (!f) {
    for (const Flag& x : table()) {
      if (!x.env.empty() && x.env == key) f = &x;
    }
  }
  if (!f) return "not a llama-server flag";
  *canonical = f->pos.back();
  args->clear();
  if (f->nargs == 0) {
    bool on;
    if (value.empty() || truthy(value)) on = true;
    else if (falsey(value)) on = false;
    else return "expected true or false, not '" + value + "'";
    if (!pos) on = !on;
    if (on) {
      if (f->kind == Kind::kRefused) return "not supported: " + f->note;
      args->push_back(f->pos.back());
    } else if (!f->neg.empty()) {
      args->push_back(f->neg.back());
    }
    return std::string();
  }
  if (f->kind == Kind::kRefused) return "not supported: " + f->note;
  args->push_back(f->pos.back());
  if (f->nargs == 2) {
    std::istringstream ss(value);
    std::string a, b;
    if (!(ss >> a >> b)) return "expected two values";
    args->push_back(a);
    args->push_back(b);
  } else {
    args->push_back(value);
  }
  return std::string();
}

// Says once on stderr that a flag accepted without effect (or not yet) was given.
void note_accepted(Ctx& c, const Flag& f, const Use& u) {
  const bool says = f.kind == Kind::kCpu || f.kind == Kind::kNoop || f.kind == Kind::kNotYet;
  if (!says || c.quiet || !c.noted.insert(&f).second) return;
  if (f.kind == Kind::kCpu) {
    std::fprintf(stderr, "loom: %s has no effect on a CPU server\n", u.name.c_str());
  } else if (f.kind == Kind::kNoop) {
    std::fprintf(stderr, "loom: %s has no effect in loom (%s)\n", u.name.c_str(), f.note.c_str());
  } else {
    std::fprintf(stderr, "loom: %s is accepted but not yet supported (%s)\n", u.name.c_str(), f.note.c_str());
  }
}

// Applies one use of a flag; false after printing an error.
bool apply_flag(Ctx& c, const Flag& f, const Use& u) {
  if (f.kind == Kind::kRefused && u.pos) {
    c.quiet = false;
    if (f.h) f.h(c, u);  // a refused flag's handler only says whether this value is harmless
    if (!c.quiet) {
      std::fprintf(stderr, "loom: %s is not supported: %s\n", u.name.c_str(), f.note.c_str());
      return false;
    }
    c.quiet = false;
    return true;
  }
  if (f.kind == Kind::kRefused) return true;  // its negation asks for llama-server's default
  c.quiet = false;
  if (f.h) {
    const std::string err = f.h(c, u);
    if (!err.empty()) {
      std::fprintf(stderr, "loom: %s: %s\n", u.name.c_str(), err.c_str());
      return false;
    }
  }
  note_accepted(c, f, u);
  c.quiet = false;
  return true;
}

// The environment variables that are set, in the table's order; false after printing an error.
bool apply_environment(Ctx& c) {
  for (const Flag& f : table()) {
    if (f.env.empty()) continue;
    const char* v = std::getenv(f.env.c_str());
    if (!v) continue;
    Use u;
    u.name = f.env + " (" + (f.pos.back()) + ")";
    const std::string value = v;
    if (f.nargs == 0 && f.neg.empty()) {
      if (!truthy(value)) continue;
    } else if (f.nargs == 0) {
      if (truthy(value)) u.pos = true;
      else if (falsey(value)) u.pos = false;
      else {
        std::fprintf(stderr, "loom: %s=%s: expected true or false\n", f.env.c_str(), v);
        return false;
      }
    } else {
      u.v.push_back(value);
    }
    if (!apply_flag(c, f, u)) return false;
  }
  return true;
}

// The arguments in order; false after printing an error.
bool apply_arguments(Ctx& c, const std::vector<std::string>& args) {
  const auto by_name = flags_by_name();
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a.rfind("--", 0) == 0) std::replace(a.begin(), a.end(), '_', '-');
    auto it = by_name.find(a);
    if (it == by_name.end()) {
      if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
        std::fprintf(stderr, "loom: invalid argument: %s (llama-server's flags take their value as the next argument)\n",
                     args[i].c_str());
      } else {
        std::fprintf(stderr, "loom: invalid argument: %s (loom serve --help lists the flags)\n", args[i].c_str());
      }
      return false;
    }
    const Flag& f = *it->second.first;
    Use u;
    u.name = args[i];
    u.pos = it->second.second;
    const int n = n_values(f, u.pos, args, i);
    if (i + size_t(n) >= args.size()) {
      std::fprintf(stderr, "loom: %s: expected %s\n", args[i].c_str(), f.hint.empty() ? "a value" : f.hint.c_str());
      return false;
    }
    for (int k = 0; k < n; ++k) u.v.push_back(args[++i]);
    if (!apply_flag(c, f, u)) return false;
  }
  return true;
}

// --flag-table-markdown, --help, --version, --list-devices (the first given of these, in this
// order): prints it and returns true.
bool print_info(const Ctx& c) {
  if (c.markdown) {
    std::fputs(serve_flag_table_markdown().c_str(), stdout);
  } else if (c.help) {
    print_help();
  } else if (c.version) {
    std::printf("loom %s (llama-server's command line)\n", loom_version());
  } else if (c.list_devices) {
    std::printf("Available devices:\n  (none: loom runs on the CPU)\n");
  } else {
    return false;
  }
  return true;
}

// What flags decide together once all are read: --kv-unified-per-slot without -c, LoRAs loaded
// unapplied, the reasoning effort as a chat template argument.
void finish_options(const Ctx& c, ServeOptions* o) {
  if (c.kv_per_slot > 0 && !c.ctx_set) o->n_ctx = c.kv_per_slot * o->slots;
  if (c.lora_unapplied) {
    for (auto& l : o->loras) l.second = 0.0f;
  }
  if (c.effort_set) {
    nlohmann::json kw =
        o->chat_template_kwargs.empty() ? nlohmann::json::object() : nlohmann::json::parse(o->chat_template_kwargs);
    if (c.effort == "default") kw.erase("reasoning_effort");
    else if (!kw.contains("reasoning_effort")) kw["reasoning_effort"] = c.effort;
    o->chat_template_kwargs = kw.empty() ? std::string() : kw.dump();
  }
}

}  // namespace

ServeParse parse_serve_args(const std::vector<std::string>& args, server::ServeOptions* o) {
  ServeParse result;
  result.outcome = ServeParse::Outcome::kExit;
  result.exit_code = 2;
  Ctx c;
  c.o = o;
  // The environment first, then the arguments (llama.cpp's order: an argument overrides its
  // variable; comma lists such as LLAMA_API_KEY and --api-key add up).
  if (!apply_environment(c) || !apply_arguments(c, args)) return result;
  if (print_info(c)) {
    result.exit_code = 0;
    return result;
  }
  if (o->model.empty() && o->models_dir.empty() && o->models_preset.empty()) {
    // llama-server would start its router over its download cache; loom has no such cache.
    std::fprintf(stderr,
                 "loom: no model: give -m FILE, or --models-dir DIR and/or --models-preset FILE.ini for router mode "
                 "(several models, loaded on demand)\n");
    return result;
  }
  finish_options(c, o);
  result.outcome = ServeParse::Outcome::kServe;
  result.exit_code = 0;
  return result;
}

int run_serve(const std::vector<std::string>& args) {
  server::ServeOptions o;
  const ServeParse p = parse_serve_args(args, &o);
  if (p.outcome == ServeParse::Outcome::kExit) return p.exit_code;
  if (o.model.empty()) {
    // Router mode (no -m, a --models-dir or --models-preset): one child `loom serve` per model.
    server::RouterSetup setup;
    setup.child_args = router_child_args(args);
    setup.preset_option = preset_option;
    return server::run_router(o, setup, nullptr);
  }
  return server::run_server(o, nullptr);
}

}  // namespace loom::cli
