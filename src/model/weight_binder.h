// The weight binder of the model loaders (model.cpp, bind_decoder.cpp): tensors bound by name
// with their presence, shape and type checked, and the block binders the loaders share.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/quant.h"

namespace loom::model::detail {

inline std::string shape_str(std::initializer_list<int64_t> ne) {
  std::string s = "[";
  for (int64_t x : ne) s += (s.size() > 1 ? ", " : "") + std::to_string(x);
  return s + "]";
}

inline std::string shape_str(const gguf::TensorInfo& t) {
  std::string s = "[";
  for (int d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

// Binds tensors by name, checking presence, shape and type; the first problem is kept.
class Binder {
 public:
  Binder(const gguf::GgufFile& f, std::vector<std::vector<float>>& owned) : f_(f), owned_(owned) {}

  const gguf::TensorInfo* find(const std::string& name, std::initializer_list<int64_t> shape, bool required) {
    if (!st_.is_ok()) return nullptr;
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (required) st_ = not_found("missing tensor '" + name + "' (expected shape " + shape_str(shape) + ")");
      return nullptr;
    }
    bool ok = true;
    int d = 0;
    for (int64_t want : shape) ok = ok && t->ne[d++] == want;
    for (; d < gguf::kMaxDims; ++d) ok = ok && t->ne[d] == 1;
    if (!ok) {
      st_ = corrupt("tensor '" + name + "' has shape " + shape_str(*t) + ", expected " + shape_str(shape));
      return nullptr;
    }
    return t;
  }

  TensorView matrix(const std::string& name, int64_t cols, int64_t rows, bool required = true) {
    return computable(find(name, {cols, rows}, required), cols, rows);
  }

  // A {cols, rows, n} tensor as one matrix of n·rows rows (rows_of picks each slice).
  TensorView matrix3(const std::string& name, int64_t cols, int64_t rows, int64_t n, bool required = true) {
    return computable(find(name, {cols, rows, n}, required), cols, rows * n);
  }

  // The view of a found tensor as `rows` rows of `cols`, counted in the totals, when this build
  // computes with its type.
  TensorView computable(const gguf::TensorInfo* t, int64_t cols, int64_t rows) {
    if (!t) return {};
    if (!quant::is_supported(t->type)) {
      st_ = unsupported("tensor '" + t->name + "' has type " + std::string(tensor_type_name(t->type)) +
                        ", which this build cannot compute with yet");
      return {};
    }
    bytes_ += t->nbytes;
    params_ += uint64_t(t->n_elements());
    return TensorView{t->type, t->data, cols, rows, size_t(row_bytes(t->type, cols))};
  }

  // Rows [first, first + rows) of a matrix stored fused with others.
  TensorView rows_of(const TensorView& fused, int64_t first, int64_t rows) {
    if (fused.empty()) return {};
    TensorView v = fused;
    v.data = fused.row(first);
    v.rows = rows;
    return v;
  }

  // Q, K and V of a block: three matrices, or row ranges of a fused attn_qkv.
  void qkv(const std::string& p, bool fused, int64_t E, int64_t Q, int64_t KV, LayerWeights& l) {
    if (fused) {
      const TensorView t = matrix(p + "attn_qkv.weight", E, Q + 2 * KV);
      l.wq = rows_of(t, 0, Q);
      l.wk = rows_of(t, Q, KV);
      l.wv = rows_of(t, Q + KV, KV);
    } else {
      l.wq = matrix(p + "attn_q.weight", E, Q);
      l.wk = matrix(p + "attn_k.weight", E, KV);
      l.wv = matrix(p + "attn_v.weight", E, KV);
    }
  }

  const float* vector(const std::string& name, int64_t n, bool required = true) { return floats(name, {n}, required); }

  // A small tensor of any shape as dense floats (converted when stored otherwise).
  const float* floats(const std::string& name, std::initializer_list<int64_t> shape, bool required = true) {
    const gguf::TensorInfo* t = find(name, shape, required);
    if (!t) return nullptr;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    params_ += uint64_t(n);
    if (t->type == TensorType::F32 && reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0) {
      return reinterpret_cast<const float*>(t->data);
    }
    if (!quant::is_supported(t->type)) {
      st_ = unsupported("tensor '" + name + "' has unsupported type " + std::string(tensor_type_name(t->type)));
      return nullptr;
    }
    owned_.emplace_back(size_t(n));
    const int64_t cols = *shape.begin();
    const int64_t rb64 = row_bytes(t->type, cols);
    if (rb64 <= 0) {
      st_ = unsupported("tensor '" + name + "' has type " + std::string(tensor_type_name(t->type)) +
                        " with rows that are not whole blocks");
      return nullptr;
    }
    const size_t rb = size_t(rb64);
    for (int64_t r = 0; r < n / cols; ++r) {
      quant::dequantize_row(t->type, t->data + size_t(r) * rb, owned_.back().data() + r * cols, cols);
    }
    return owned_.back().data();
  }

  // token_embd, the final norm and the LM head (tied to the embedding when output.weight is
  // absent). lfm2 files name the final norm token_embd_norm.weight (the reference's name for it).
  void embedding_and_output(int64_t E, int64_t V, ModelWeights& w, const char* output_norm = "output_norm.weight") {
    w.tok_embd = matrix("token_embd.weight", E, V);
    w.output_norm = vector(output_norm, E);
    w.output = matrix("output.weight", E, V, /*required=*/false);
    if (st_.is_ok() && w.output.empty()) {
      w.output = w.tok_embd;
      w.tied_output = true;
    }
  }

  const Status& status() const { return st_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t params() const { return params_; }

 private:
  const gguf::GgufFile& f_;
  std::vector<std::vector<float>>& owned_;
  Status st_;
  uint64_t bytes_ = 0;
  uint64_t params_ = 0;
};

// The selective state-space mixer of one block (Mamba-1; Mamba-2 for mamba2 and the recurrent
// layers of hybrids), prefix p = "blk.N."; the block's norm is bound by the caller (model.cpp).
Status bind_ssm_mixer(Binder& b, const ModelHparams& hp, const std::string& p, LayerWeights& l);

}  // namespace loom::model::detail
