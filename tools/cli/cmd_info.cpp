// loom info -m MODEL [--json]: metadata and tensors of a GGUF file (loom_gguf_describe).
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

}  // namespace

void register_info(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string model;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("info", "Print a GGUF file's metadata and tensors");
  sub->add_option("-m,--model", o->model, "GGUF file")->required();
  sub->add_flag("--json", o->json, "print one JSON object");
  sub->callback([o, &exit_code] {
    auto described = api::gguf_describe(o->model);
    if (!described) { exit_code = fail(described.status()); return; }
    const nlohmann::json f = nlohmann::json::parse(*described);
    const nlohmann::json& meta = f["metadata"];
    const nlohmann::json& tensors = f["tensors"];
    if (o->json) {
      nlohmann::json j;
      j["architecture"] = f["architecture"];
      j["gguf_version"] = f["gguf_version"];
      nlohmann::json m = nlohmann::json::object();
      for (const auto& kv : meta) m[kv["key"].get<std::string>()] = kv["value"];
      j["metadata"] = std::move(m);
      nlohmann::json ts = nlohmann::json::array();
      for (const auto& t : tensors) {
        ts.push_back({{"name", t["name"]}, {"type", t["type"]}, {"shape", t["shape"]}, {"bytes", t["bytes"]}});
      }
      j["tensors"] = std::move(ts);
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      std::printf("file: %s\nGGUF version %u, %zu metadata keys, %zu tensors, alignment %u\n", o->model.c_str(),
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
                    t["type"].get<std::string>().c_str(), shape_of(t["shape"]).c_str(),
                    static_cast<unsigned long long>(bytes));
        total += bytes;
      }
      std::printf("\ntotal tensor bytes: %llu\n", static_cast<unsigned long long>(total));
    }
    exit_code = 0;
  });
}

}  // namespace loom::cli
