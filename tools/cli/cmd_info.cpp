// loom info -m MODEL [--json] [-c N [-np N] [--swa-full]]: metadata and tensors of a GGUF file
// (loom_gguf_describe); with -c, the memory a context of N cells allocates (loom_context_memory_json),
// with -np that of a server with that many slots (a window cache and recurrent states per slot).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "commands.h"

namespace loom::cli {
namespace {

std::string shape_of(const nlohmann::json& shape) {
  std::string s;
  for (size_t d = 0; d < shape.size(); ++d) s += (d ? " x " : "") + std::to_string(shape[d].get<int64_t>());
  return s;
}

// What `loom info` prints, as its flags set it.
struct InfoOptions {
  std::string model;
  bool json = false;
  int n_ctx = 0, slots = 1;
  bool swa_full = false;
};

// The memory a context of o.n_ctx cells (o.slots sequences) allocates (loads the model).
api::Expected<nlohmann::json> context_memory(const InfoOptions& o) {
  auto model = api::Model::load(o.model);
  if (!model) return model.status();
  api::ContextParams cp;
  cp.p.n_ctx = o.n_ctx;
  cp.p.n_seq_max = o.slots;
  cp.p.n_threads = 1;
  const nlohmann::json options = {{"swa_full", o.swa_full}, {"kv_unified", true}};
  auto ctx = api::Context::create(*model, cp, options.dump());
  if (!ctx) return ctx.status();
  auto m = api::Model::detail_json([&](char* b, size_t n) { return loom_context_memory_json(ctx->handle(), b, n); });
  if (!m) return m.status();
  nlohmann::json memory = nlohmann::json::parse(*m);
  memory["n_ctx"] = o.n_ctx;
  memory["slots"] = o.slots;
  memory["swa_full"] = o.swa_full;
  return memory;
}

// --json: the file (f, from loom_gguf_describe) and memory (null without -c) as one object.
void print_json(const nlohmann::json& f, const nlohmann::json& memory) {
  nlohmann::json j;
  j["architecture"] = f["architecture"];
  j["gguf_version"] = f["gguf_version"];
  nlohmann::json m = nlohmann::json::object();
  for (const auto& kv : f["metadata"]) m[kv["key"].get<std::string>()] = kv["value"];
  j["metadata"] = std::move(m);
  nlohmann::json ts = nlohmann::json::array();
  for (const auto& t : f["tensors"]) {
    ts.push_back({{"name", t["name"]}, {"type", t["type"]}, {"shape", t["shape"]}, {"bytes", t["bytes"]}});
  }
  j["tensors"] = std::move(ts);
  if (!memory.is_null()) j["memory"] = memory;
  std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

// The text report's memory table.
void print_memory_text(const InfoOptions& o, const nlohmann::json& memory) {
  std::printf("\nmemory of a context of %d cells, %d slot(s)%s:\n", o.n_ctx, o.slots, o.swa_full ? ", --swa-full" : "");
  for (const char* part : {"kv", "kv_swa", "recurrent"}) {
    const auto& p = memory[part];
    if (p["bytes"].get<uint64_t>() == 0) continue;
    std::printf("  %-10s %12llu bytes  %7d cells  %3d layers\n", part,
                static_cast<unsigned long long>(p["bytes"].get<uint64_t>()), p["cells"].get<int>(), p["layers"].get<int>());
  }
  std::printf("  %-10s %12llu bytes\n", "total", static_cast<unsigned long long>(memory["total_bytes"].get<uint64_t>()));
}

// The text report: header, metadata, tensors, and the memory table with -c.
void print_text(const InfoOptions& o, const nlohmann::json& f, const nlohmann::json& memory) {
  const nlohmann::json& meta = f["metadata"];
  const nlohmann::json& tensors = f["tensors"];
  std::printf("file: %s\nGGUF version %u, %zu metadata keys, %zu tensors, alignment %u\n", o.model.c_str(),
              f["gguf_version"].get<unsigned>(), meta.size(), tensors.size(), f["alignment"].get<unsigned>());
  std::printf("\nmetadata:\n");
  for (const auto& kv : meta) {
    std::printf("  %-48s %-7s %s\n", kv["key"].get<std::string>().c_str(), kv["type"].get<std::string>().c_str(),
                kv["text"].get<std::string>().c_str());
  }
  uint64_t total = 0;
  std::printf("\ntensors:\n");
  for (const auto& t : tensors) {
    const uint64_t bytes = t["bytes"].get<uint64_t>();
    std::printf("  %-40s %-7s %-22s %12llu bytes\n", t["name"].get<std::string>().c_str(),
                t["type"].get<std::string>().c_str(), shape_of(t["shape"]).c_str(), static_cast<unsigned long long>(bytes));
    total += bytes;
  }
  std::printf("\ntotal tensor bytes: %llu\n", static_cast<unsigned long long>(total));
  if (!memory.is_null()) print_memory_text(o, memory);
}

// `loom info`: 0 on success, 1 on a runtime error.
int run_info(const InfoOptions& o) {
  auto described = api::gguf_describe(o.model);
  if (!described) return fail(described.status());
  const nlohmann::json f = nlohmann::json::parse(*described);
  nlohmann::json memory;
  if (o.n_ctx > 0) {
    auto m = context_memory(o);
    if (!m) return fail(m.status());
    memory = std::move(*m);
  }
  if (o.json) print_json(f, memory);
  else print_text(o, f, memory);
  return 0;
}

}  // namespace

void register_info(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<InfoOptions>();
  CLI::App* sub = app.add_subcommand("info", "Print a GGUF file's metadata and tensors");
  sub->add_option("-m,--model", o->model, "GGUF file")->required();
  sub->add_flag("--json", o->json, "print one JSON object");
  sub->add_option("-c,--ctx-size", o->n_ctx, "also the memory of a context of this many cells (loads the model)")
      ->check(CLI::Range(0, 1 << 24));
  sub->add_option("--parallel", o->slots, "with -c: of a server with this many slots (-np)")->check(CLI::Range(1, 256));
  sub->add_flag("--swa-full", o->swa_full, "with -c: full-size caches for sliding-window layers");
  sub->callback([o, &exit_code] { exit_code = run_info(*o); });
}

}  // namespace loom::cli
