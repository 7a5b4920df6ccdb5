// The batch layout of packed activations (packed_act_panels.h): quantize_packed_act_rows.
#include <vector>

#include "quant/packed.h"
#include "quant/packed_act_panels.h"

namespace loom::quant {

void quantize_packed_act_rows(TensorType t, const float* x, int64_t cols, int n, int i0, int i1, void* dst) {
  const size_t rb = packed_act_row_bytes(t, cols);
  auto* out = static_cast<uint8_t*>(dst);
  if (!detail::act_panels(t)) {
    for (int i = i0; i < i1; ++i) quantize_packed_act(t, x + size_t(i) * size_t(cols), cols, out + size_t(i) * rb);
    return;
  }
  // Each row quantized as quantize_packed_act does (the same bytes), then placed in its panel.
  thread_local std::vector<uint8_t> row;
  const int64_t nb = cols / detail::kPackBlock;
  for (int i = i0; i < i1; ++i) {
    const detail::ActPanelOf at = detail::act_panel_of(n, i);
    const float* xi = x + size_t(i) * size_t(cols);
    if (at.rows == 1) {
      quantize_packed_act(t, xi, cols, out + size_t(i) * rb);
      continue;
    }
    row.resize(rb);
    quantize_packed_act(t, xi, cols, row.data());
    uint8_t* panel = out + size_t(at.i0) * rb;
    for (int64_t b = 0; b < nb; ++b) {
      detail::PackedActBlock blk;
      std::memcpy(&blk, row.data() + size_t(b) * sizeof(blk), sizeof(blk));
      detail::act_panel_put(panel, at.rows, i - at.i0, b, blk);
    }
  }
}

}  // namespace loom::quant
