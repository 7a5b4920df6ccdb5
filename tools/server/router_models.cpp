// The router's model list (router.h, router_impl.h): --models-dir scanning, the preset file
// (llama-server's INI), load_router_models, and the Router's views of the list: find, reload and
// the /models JSON.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "router_impl.h"

namespace loom::server {

namespace router_detail {

std::string file_identity(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return std::string();
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
}

const char* state_name(State s) {
  switch (s) {
    case State::kLoading: return "loading";
    case State::kLoaded: return "loaded";
    default: return "unloaded";
  }
}

std::string Router::model_list_text() {
  std::lock_guard<std::mutex> l(mu_);
  std::string s;
  for (const auto& m : models_) {
    if (!m->removed) s += (s.empty() ? "" : ", ") + m->def.id;
  }
  return s.empty() ? std::string("none") : s;
}

Model* Router::find(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() || it->second->removed ? nullptr : it->second;
}

// GET /models?reload=1 (llama-server's): the models dir and the preset are read again. A model
// whose file, flags or preset lines changed is unloaded if it runs (its next load takes the new
// ones); one no longer there is unloaded and leaves the list; a new one is added, unloaded
// (load-on-startup applies at startup only). "" or why the sources could not be read (nothing
// changes then).
std::string Router::reload() {
  std::vector<RouterModel> defs;
  if (std::string err = load_router_models(o_, setup_, &defs); !err.empty()) return err;
  std::lock_guard<std::mutex> l(mu_);
  std::set<std::string> seen;
  for (RouterModel& d : defs) {
    seen.insert(d.id);
    auto it = by_id_.find(d.id);
    if (it == by_id_.end()) {
      auto m = std::make_unique<Model>();
      m->def = std::move(d);
      m->index = int(models_.size());
      by_id_[m->def.id] = m.get();
      models_.push_back(std::move(m));
      std::fprintf(stderr, "loom: router: new model %s\n", models_.back()->def.id.c_str());
      continue;
    }
    Model& m = *it->second;
    const bool changed = m.def.path != d.path || m.def.args != d.args || m.def.preset_lines != d.preset_lines ||
                         (m.state != State::kUnloaded && file_identity(d.path) != m.file_id);
    if (changed) stop_child(m);
    m.removed = false;
    m.def = std::move(d);
  }
  for (auto& p : models_) {
    if (p->removed || seen.count(p->def.id)) continue;
    p->removed = true;
    stop_child(*p);
    std::fprintf(stderr, "loom: router: model %s is gone from the sources\n", p->def.id.c_str());
  }
  cv_.notify_all();
  return std::string();
}

nlohmann::json Router::models_json() {
  std::lock_guard<std::mutex> l(mu_);
  nlohmann::json data = nlohmann::json::array();
  for (const auto& p : models_) {
    const Model& m = *p;
    if (m.removed) continue;
    nlohmann::json status = {{"value", m.state == State::kLoaded && m.sleeping ? "sleeping" : state_name(m.state)}};
    // The command line of its child: the current or last one, else the one it will get.
    status["args"] = m.gen > 0 ? m.argv : child_argv(m, dir_ + "/" + std::to_string(m.index) + "-1.sock");
    if (!m.def.preset_lines.empty()) {
      std::string ini;
      for (const std::string& line : m.def.preset_lines) ini += line + "\n";
      status["preset"] = ini;
    }
    if (m.state == State::kUnloaded && m.failed) {
      status["failed"] = true;
      status["exit_code"] = m.exit_code;
      status["message"] = m.failure;  // loom: why
    }
    if (m.pid > 0) status["pid"] = m.pid;  // loom: the child process
    nlohmann::json e = {{"id", m.def.id},
                        {"aliases", nlohmann::json::array()},
                        {"tags", nlohmann::json::array()},
                        {"object", "model"},
                        {"owned_by", "llamacpp"},
                        {"created", created_},
                        {"path", m.def.path},
                        {"status", status},
                        {"architecture", {{"input_modalities", {"text"}}, {"output_modalities", {"text"}}}},
                        {"source", m.def.source},
                        {"can_remove", false}};
    if (m.info.is_object() && m.state == State::kLoaded) {
      for (auto it = m.info.begin(); it != m.info.end(); ++it) {
        if (!e.contains(it.key())) e[it.key()] = it.value();
      }
    }
    data.push_back(std::move(e));
  }
  return {{"data", data}, {"object", "list"}};
}

}  // namespace router_detail

namespace {

namespace fs = std::filesystem;
using namespace router_detail;

bool truthy(std::string v) {
  for (char& c : v) c = char(std::tolower(static_cast<unsigned char>(c)));
  return v == "1" || v == "true" || v == "on" || v == "yes" || v == "enabled";
}

// ---- the preset file (llama-server's INI: [section] lines, key = value lines, ; or # comments) ----

struct IniEntry {
  std::string key, value;
  int line;
};
struct IniSection {
  std::string name;
  int line;
  std::vector<IniEntry> entries;
};

// Parses the INI grammar llama-server's preset reader accepts; "" or "FILE:LINE: why".
std::string parse_ini(const std::string& path, std::vector<IniSection>* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return path + ": cannot open the preset file: " + std::strerror(errno);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  IniSection* cur = nullptr;
  auto section = [&](const std::string& name, int line) -> IniSection* {
    for (IniSection& s : *out) {
      if (s.name == name) return &s;
    }
    out->push_back({name, line, {}});
    return &out->back();
  };
  int lineno = 0;
  size_t i = 0;
  while (i <= text.size()) {
    // A line ends at \r\n, \n or \r.
    size_t j = i;
    while (j < text.size() && text[j] != '\n' && text[j] != '\r') ++j;
    std::string line = text.substr(i, j - i);
    if (j < text.size() && text[j] == '\r' && j + 1 < text.size() && text[j + 1] == '\n') ++j;
    i = j + 1;
    ++lineno;
    auto fail = [&](const std::string& why) { return path + ":" + std::to_string(lineno) + ": " + why; };
    size_t p = 0;
    auto ws = [&] {
      while (p < line.size() && (line[p] == ' ' || line[p] == '\t')) ++p;
    };
    // After a value: optional blanks, then a comment or the end.
    auto eol_ok = [&] {
      ws();
      return p == line.size() || line[p] == ';' || line[p] == '#';
    };
    ws();
    if (p == line.size() || line[p] == ';' || line[p] == '#') continue;  // blank or comment
    if (line[p] == '[') {
      ++p;
      ws();
      const size_t close = line.find(']', p);
      if (close == std::string::npos) return fail("a section header without ']'");
      std::string name = line.substr(p, close - p);
      while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.pop_back();
      if (name.empty()) return fail("an empty section name");
      p = close + 1;
      if (!eol_ok()) return fail("text after the section header");
      cur = section(name, lineno);
      continue;
    }
    auto ident_start = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; };
    auto ident_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'; };
    if (!ident_start(line[p])) return fail("expected '[section]', 'key = value' or a comment");
    const size_t k0 = p;
    while (p < line.size() && ident_char(line[p])) ++p;
    const std::string key = line.substr(k0, p - k0);
    ws();
    if (p == line.size() || line[p] != '=') return fail("expected '=' after '" + key + "'");
    ++p;
    ws();
    // The value runs up to blanks followed by a comment, or the end.
    size_t v_end = p;
    for (size_t q = p; q < line.size(); ++q) {
      if ((line[q] == ';' || line[q] == '#') && (q == p || line[q - 1] == ' ' || line[q - 1] == '\t')) break;
      v_end = q + 1;
    }
    std::string value = line.substr(p, v_end - p);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.pop_back();
    if (!cur) cur = section("default", lineno);  // llama-server's name for keys before any section
    bool replaced = false;
    for (IniEntry& e : cur->entries) {
      if (e.key == key) e = {key, value, lineno}, replaced = true;
    }
    if (!replaced) cur->entries.push_back({key, value, lineno});
  }
  return std::string();
}

// Flags a preset may not set for a child: the router owns them (llama-server removes them too).
bool router_owned(const std::string& canonical) {
  static const std::set<std::string> kOwned = {
      "--host",          "--port",       "--api-key",         "--api-key-file", "--alias",   "--tags",      "--models-dir",
      "--models-preset", "--models-max", "--models-autoload", "--hf-repo",      "--hf-file", "--model-url", "--hf-token"};
  return kOwned.count(canonical) > 0;
}

// ---- --models-dir ----

bool is_gguf(const fs::path& p) { return ends_with(p.filename().string(), ".gguf"); }

// Files beside a model that are not models of their own: projectors and draft sidecars.
bool is_companion(const std::string& name) {
  return name.find("mmproj") != std::string::npos || name.rfind("mtp-", 0) == 0 || name.rfind("dspark-", 0) == 0 ||
         name.rfind("dflash-", 0) == 0;
}

// A model of several files: its first shard, else its one model file ("" when the folder has none).
std::string folder_model_file(const fs::path& dir) {
  std::error_code ec;
  std::string model_file, first_shard;
  std::vector<fs::path> files;
  for (const auto& f : fs::directory_iterator(dir, ec)) files.push_back(f.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    const std::string fn = f.filename().string();
    if (!is_gguf(f) || is_companion(fn)) continue;
    if (fn.find("-00001-of-") != std::string::npos) first_shard = f.string();
    else if (model_file.empty()) model_file = f.string();
  }
  return !first_shard.empty() ? first_shard : model_file;
}

// The models of --models-dir into *models: every *.gguf by file stem, every folder with a model
// file by the folder's name. "" or the error.
std::string read_models_dir(const std::string& dir, std::map<std::string, RouterModel>* models) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "--models-dir " + dir + ": not a readable directory";
  std::vector<fs::directory_entry> entries;
  for (const auto& e : fs::directory_iterator(dir, ec)) entries.push_back(e);
  if (ec) return "--models-dir " + dir + ": " + ec.message();
  for (const auto& e : entries) {
    const std::string name = e.path().filename().string();
    if (e.is_directory(ec)) {
      const std::string path = folder_model_file(e.path());
      if (!path.empty()) (*models)[name] = RouterModel{name, path, "models_dir", {}, {}, false, 10};
    } else if (is_gguf(e.path()) && !is_companion(name)) {
      const std::string id = name.substr(0, name.size() - 5);
      (*models)[id] = RouterModel{id, e.path().string(), "models_dir", {}, {}, false, 10};
    }
  }
  return std::string();
}

// ---- --models-preset ----

// What one preset section says.
struct PresetSection {
  std::vector<std::string> args, lines;
  std::string model;
  int model_line = 0;
  bool load_on_startup = false, has_los = false;
  int stop_timeout = 10;
  bool has_stop = false;
};

// The entries of section s into *p: the router's keys (load-on-startup, stop-timeout), the model
// file, and every other key as the child's flags (those the router owns dropped). "" or
// "FILE:LINE: why".
std::string read_preset_section(const std::string& file, const RouterSetup& setup, const IniSection& s, PresetSection* p) {
  for (const IniEntry& e : s.entries) {
    auto where = [&] { return file + ":" + std::to_string(e.line) + ": "; };
    if (e.key == "version") continue;
    p->lines.push_back(e.key + " = " + e.value);
    if (e.key == "load-on-startup") {
      p->load_on_startup = truthy(e.value);
      p->has_los = true;
      continue;
    }
    if (e.key == "stop-timeout") {
      char* end = nullptr;
      const long v = std::strtol(e.value.c_str(), &end, 10);
      if (e.value.empty() || *end || v < 0 || v > 86400)
        return where() + "stop-timeout: expected seconds, not '" + e.value + "'";
      p->stop_timeout = int(v);
      p->has_stop = true;
      continue;
    }
    if (e.key == "dedup-cache-models") continue;  // about cached downloads, which loom has none of
    std::string canonical;
    std::vector<std::string> args;
    if (!setup.preset_option) return where() + "option '" + e.key + "' not recognized in preset '" + s.name + "'";
    if (std::string why = setup.preset_option(e.key, e.value, &canonical, &args); !why.empty()) {
      return where() + "option '" + e.key + "' in preset '" + s.name + "': " + why;
    }
    if (canonical == "--model") {
      p->model = e.value;
      p->model_line = e.line;
      continue;
    }
    if (router_owned(canonical)) continue;  // the router's: removed, as llama-server does
    p->args.insert(p->args.end(), args.begin(), args.end());
  }
  return std::string();
}

// The models of --models-preset merged into *models: a section per model (one that --models-dir
// does not have needs "model = PATH"), [*] applied to every model. "" or "FILE:LINE: why".
std::string apply_preset(const std::string& file, const RouterSetup& setup, std::map<std::string, RouterModel>* models) {
  std::vector<IniSection> sections;
  if (std::string err = parse_ini(file, &sections); !err.empty()) return err;
  PresetSection global;
  for (const IniSection& s : sections) {
    if (s.name != "*") continue;
    if (std::string err = read_preset_section(file, setup, s, &global); !err.empty()) return err;
  }
  for (const IniSection& s : sections) {
    if (s.name == "*") continue;
    PresetSection p;
    if (std::string err = read_preset_section(file, setup, s, &p); !err.empty()) return err;
    if (s.name == "default" && p.lines.empty()) continue;
    auto it = models->find(s.name);
    if (it == models->end()) {
      if (p.model.empty()) {
        return file + ":" + std::to_string(s.line) + ": preset '" + s.name +
               "' names no model file (model = PATH) and no model of --models-dir has its name";
      }
      it = models->emplace(s.name, RouterModel{s.name, p.model, "preset", {}, {}, false, 10}).first;
    } else if (!p.model.empty()) {
      it->second.path = p.model;
    }
    RouterModel& m = it->second;
    m.preset_lines = global.lines;
    m.preset_lines.insert(m.preset_lines.end(), p.lines.begin(), p.lines.end());
    m.args = global.args;
    m.args.insert(m.args.end(), p.args.begin(), p.args.end());
    m.load_on_startup = p.has_los ? p.load_on_startup : global.load_on_startup;
    m.stop_timeout_s = p.has_stop ? p.stop_timeout : global.stop_timeout;
  }
  // [*] applies to the models of --models-dir too.
  for (auto& [id, m] : *models) {
    if (m.preset_lines.empty() && !global.lines.empty()) {
      m.preset_lines = global.lines;
      m.args = global.args;
      m.load_on_startup = global.load_on_startup;
      m.stop_timeout_s = global.stop_timeout;
    }
  }
  return std::string();
}

}  // namespace

std::string load_router_models(const ServeOptions& opts, const RouterSetup& setup, std::vector<RouterModel>* out) {
  std::map<std::string, RouterModel> models;
  if (!opts.models_dir.empty()) {
    if (std::string err = read_models_dir(opts.models_dir, &models); !err.empty()) return err;
  }
  if (!opts.models_preset.empty()) {
    if (std::string err = apply_preset(opts.models_preset, setup, &models); !err.empty()) return err;
  }
  out->clear();
  for (auto& [id, m] : models) out->push_back(std::move(m));
  return std::string();
}

}  // namespace loom::server
