#include "gguf/tensor_type.h"

#include <array>
#include <cctype>

namespace loom {
namespace {

struct Entry {
  uint32_t id;
  TensorTypeInfo info;
};

// Block sizes/bytes follow the block structs of the GGUF/ggml format.
constexpr std::array kTypes = {
    Entry{0, {"f32", 1, 4}},        Entry{1, {"f16", 1, 2}},
    Entry{2, {"q4_0", 32, 18}},     Entry{3, {"q4_1", 32, 20}},
    Entry{6, {"q5_0", 32, 22}},     Entry{7, {"q5_1", 32, 24}},
    Entry{8, {"q8_0", 32, 34}},     Entry{9, {"q8_1", 32, 36}},
    Entry{10, {"q2_k", 256, 84}},   Entry{11, {"q3_k", 256, 110}},
    Entry{12, {"q4_k", 256, 144}},  Entry{13, {"q5_k", 256, 176}},
    Entry{14, {"q6_k", 256, 210}},  Entry{15, {"q8_k", 256, 292}},
    Entry{16, {"iq2_xxs", 256, 66}}, Entry{17, {"iq2_xs", 256, 74}},
    Entry{18, {"iq3_xxs", 256, 98}}, Entry{19, {"iq1_s", 256, 50}},
    Entry{20, {"iq4_nl", 32, 18}},  Entry{21, {"iq3_s", 256, 110}},
    Entry{22, {"iq2_s", 256, 82}},  Entry{23, {"iq4_xs", 256, 136}},
    Entry{24, {"i8", 1, 1}},        Entry{25, {"i16", 1, 2}},
    Entry{26, {"i32", 1, 4}},       Entry{27, {"i64", 1, 8}},
    Entry{28, {"f64", 1, 8}},       Entry{29, {"iq1_m", 256, 56}},
    Entry{30, {"bf16", 1, 2}},      Entry{34, {"tq1_0", 256, 54}},
    Entry{35, {"tq2_0", 256, 66}},  Entry{39, {"mxfp4", 32, 17}},
    Entry{40, {"nvfp4", 64, 36}},   Entry{41, {"q1_0", 128, 18}},
    Entry{42, {"q2_0", 64, 18}},
};

}  // namespace

std::optional<TensorTypeInfo> tensor_type_info(uint32_t id) {
  for (const auto& e : kTypes) {
    if (e.id == id) return e.info;
  }
  return std::nullopt;
}

std::string_view tensor_type_name(TensorType t) {
  auto info = tensor_type_info(t);
  return info ? info->name : std::string_view("unknown");
}

std::optional<TensorType> parse_tensor_type(std::string_view name) {
  for (const auto& e : kTypes) {
    if (e.info.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) {
      same = std::tolower(static_cast<unsigned char>(name[i])) == e.info.name[i];
    }
    if (same) return static_cast<TensorType>(e.id);
  }
  return std::nullopt;
}

int64_t row_bytes(TensorType t, int64_t n) {
  auto info = tensor_type_info(t);
  if (!info || n < 0 || n % info->block_size != 0) return -1;
  return n / info->block_size * info->block_bytes;
}

}  // namespace loom
