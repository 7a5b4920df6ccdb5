// loom info -m MODEL [--json]: metadata and tensors of a GGUF file.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "commands.h"
#include "gguf/gguf.h"

namespace loom::cli {
namespace {

nlohmann::json array_to_json(const gguf::Array& a) {
  nlohmann::json j = nlohmann::json::array();
  for (uint64_t i = 0; i < a.count; ++i) {
    switch (a.elem_type) {
      case gguf::ValueType::kString: j.push_back(a.strings[i]); break;
      case gguf::ValueType::kArray: j.push_back(array_to_json(a.arrays[i])); break;
      case gguf::ValueType::kBool: j.push_back(a.raw[i] != 0); break;
      case gguf::ValueType::kFloat32:
      case gguf::ValueType::kFloat64: j.push_back(a.number_at(i)); break;
      case gguf::ValueType::kUint64: j.push_back(uint64_t(a.int_at(i))); break;
      default: j.push_back(a.int_at(i)); break;
    }
  }
  return j;
}

nlohmann::json value_to_json(const gguf::Value& v) {
  return std::visit(
      [](const auto& x) -> nlohmann::json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, gguf::Array>) return array_to_json(x);
        else return x;
      },
      v);
}

std::string shape_of(const gguf::TensorInfo& t) {
  std::string s;
  for (int d = 0; d < t.n_dims; ++d) s += (d ? " x " : "") + std::to_string(t.ne[d]);
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
    auto file = gguf::GgufFile::open(o->model);
    if (!file) { exit_code = fail(file.status()); return; }
    const gguf::GgufFile& f = *file;
    const std::string arch = f.get_string_or("general.architecture", "").has_value()
                                 ? *f.get_string_or("general.architecture", "") : "";
    if (o->json) {
      nlohmann::json j;
      j["architecture"] = arch;
      j["gguf_version"] = f.version();
      nlohmann::json meta = nlohmann::json::object();
      for (const auto& kv : f.metadata()) meta[kv.key] = value_to_json(kv.value);
      j["metadata"] = std::move(meta);
      nlohmann::json tensors = nlohmann::json::array();
      for (const auto& t : f.tensors()) {
        tensors.push_back({{"name", t.name},
                           {"type", std::string(tensor_type_name(t.type))},
                           {"shape", std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)},
                           {"bytes", t.nbytes}});
      }
      j["tensors"] = std::move(tensors);
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      std::printf("file: %s\nGGUF version %u, %zu metadata keys, %zu tensors, alignment %u\n", o->model.c_str(),
                  f.version(), f.metadata().size(), f.tensors().size(), f.alignment());
      std::printf("\nmetadata:\n");
      for (const auto& kv : f.metadata()) {
        std::printf("  %-48s %-7s %s\n", kv.key.c_str(), std::string(gguf::value_type_name(gguf::type_of(kv.value))).c_str(),
                    gguf::to_string(kv.value, 8).c_str());
      }
      uint64_t total = 0;
      std::printf("\ntensors:\n");
      for (const auto& t : f.tensors()) {
        std::printf("  %-40s %-7s %-22s %12llu bytes\n", t.name.c_str(), std::string(tensor_type_name(t.type)).c_str(),
                    shape_of(t).c_str(), static_cast<unsigned long long>(t.nbytes));
        total += t.nbytes;
      }
      std::printf("\ntotal tensor bytes: %llu\n", static_cast<unsigned long long>(total));
    }
    exit_code = 0;
  });
}

}  // namespace loom::cli
