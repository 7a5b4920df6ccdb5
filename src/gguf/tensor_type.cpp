#include "gguf/tensor_type.h"

#include <cctype>

#include "gguf/tensor_type_table.h"

namespace loom::gguf {

std::optional<TensorTypeInfo> tensor_type_info(uint32_t id) { return gguf_types::find(id); }

std::string_view tensor_type_name(TensorType t) {
  auto info = tensor_type_info(t);
  return info ? info->name : std::string_view("unknown");
}

std::optional<TensorType> parse_tensor_type(std::string_view name) {
  for (const auto& e : gguf_types::kTable) {
    if (e.info.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) {
      same = std::tolower(static_cast<unsigned char>(name[i])) == e.info.name[i];
    }
    if (same) return e.type;
  }
  return std::nullopt;
}

int64_t row_bytes(TensorType t, int64_t n) {
  auto info = tensor_type_info(t);
  if (!info || n < 0 || n % info->block_size != 0) return -1;
  return n / info->block_size * info->block_bytes;
}

}  // namespace loom::gguf
