#include "model/quantize_model.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "base/threadpool.h"
#include "model/imatrix.h"
#include "quant/iq_quantize.h"
#include "quant/quant.h"
#include "quant/small_types.h"

namespace loom::model {
namespace {

using gguf::TensorInfo;
using quant::dequantize_row;
using quant::quantize_row;

// ggml_quantize_chunk for nrows rows of n floats with the same importance values (or none).
// Returns false when the quantizer refused (a type that needs importance values without them).
bool quantize_rows(TensorType to, const float* x, uint8_t* dst, int64_t nrows, int64_t n, const float* imatrix) {
  using TT = TensorType;
  const int64_t rb = row_bytes(to, n);
  switch (to) {
    case TT::F32: std::memcpy(dst, x, size_t(nrows * n) * sizeof(float)); return true;
    case TT::F16:
    case TT::BF16:
    case TT::Q8_0:
      for (int64_t r = 0; r < nrows; ++r) quantize_row(to, x + r * n, dst + r * rb, n);
      return true;
    // These ignore importance values in ggml too.
    case TT::TQ1_0: quant::ref::quantize_row_tq1_0(x, dst, nrows * n); return true;
    case TT::TQ2_0: quant::ref::quantize_row_tq2_0(x, dst, nrows * n); return true;
    case TT::MXFP4: quant::ref::quantize_row_mxfp4(x, dst, nrows * n); return true;
    case TT::Q1_0: quant::ref::quantize_row_q1_0(x, dst, nrows * n); return true;
    case TT::Q2_0: quant::ref::quantize_row_q2_0(x, dst, nrows * n); return true;
    default: return quant::quantize_chunk(to, x, dst, nrows, n, imatrix) == size_t(nrows * rb);
  }
}

// Converts one tensor, rows split over the pool. imatrix: ne[2] matrices of ne[0] values (rows
// of matrix e use matrix e's), or null.
Expected<std::vector<uint8_t>> convert_tensor(const TensorInfo& t, TensorType to, const float* imatrix, ThreadPool& pool) {
  const int64_t n0 = t.ne[0];
  const int64_t rows = t.n_elements() / std::max<int64_t>(1, n0);
  const int64_t rows_per_matrix = std::max<int64_t>(1, t.ne[1]);
  const int64_t in_rb = row_bytes(t.type, n0);
  const int64_t out_rb = row_bytes(to, n0);
  std::vector<uint8_t> out(size_t(out_rb * rows));
  std::atomic<bool> refused{false};
  // Chunks of rows that stay within one matrix (one expert's importance values).
  constexpr int64_t kChunkRows = 4;
  const int64_t chunks_per_matrix = (rows_per_matrix + kChunkRows - 1) / kChunkRows;
  const int64_t n_matrices = (rows + rows_per_matrix - 1) / rows_per_matrix;
  pool.parallel_for(n_matrices * chunks_per_matrix, [&](int64_t begin, int64_t end) {
    std::vector<float> buf;
    for (int64_t c = begin; c < end; ++c) {
      const int64_t e = c / chunks_per_matrix;
      const int64_t r0 = e * rows_per_matrix + (c % chunks_per_matrix) * kChunkRows;
      const int64_t r1 = std::min({r0 + kChunkRows, (e + 1) * rows_per_matrix, rows});
      if (r0 >= r1) continue;
      const int64_t nr = r1 - r0;
      const uint8_t* src = t.data + r0 * in_rb;
      const float* x = nullptr;
      if (t.type == TensorType::F32 && reinterpret_cast<uintptr_t>(src) % alignof(float) == 0) {
        x = reinterpret_cast<const float*>(src);
      } else {
        buf.resize(size_t(nr * n0));
        for (int64_t r = 0; r < nr; ++r) {
          if (t.type == TensorType::F32) std::memcpy(buf.data() + r * n0, src + r * in_rb, size_t(n0) * sizeof(float));
          else dequantize_row(t.type, src + r * in_rb, buf.data() + r * n0, n0);
        }
        x = buf.data();
      }
      const float* im = imatrix ? imatrix + (e % std::max<int64_t>(1, t.ne[2])) * n0 : nullptr;
      if (!quantize_rows(to, x, out.data() + r0 * out_rb, nr, n0, im)) refused = true;
    }
  });
  if (refused) {
    return internal_error("tensor " + t.name + ": the " + std::string(tensor_type_name(to)) + " quantizer refused its rows");
  }
  return out;
}

// Tensor t's refusals without importance values (has_imatrix: whether it has them): a plan that
// requires them (very low-bit mixes), or a type whose quantizer cannot go without.
Status check_importance(const TensorInfo& t, const TensorPlan& plan, const Imatrix* imatrix, bool has_imatrix) {
  if (!has_imatrix && plan.requires_imatrix) {
    return invalid_argument("missing importance matrix for tensor " + t.name + " in a very low-bit quantization (" +
                            std::string(tensor_type_name(plan.type)) + "): the imatrix has no entry for it");
  }
  if (!has_imatrix && quant::iq_requires_imatrix(plan.type)) {
    return invalid_argument("tensor " + t.name + " cannot be quantized to " + std::string(tensor_type_name(plan.type)) +
                            " without importance values, and " +
                            (imatrix ? "the imatrix has no entry for it" : "no --imatrix was given") +
                            " (llama-quantize aborts here; choose another type for it" +
                            (t.name == "output.weight"       ? std::string(", e.g. with --output-tensor-type")
                             : t.name == "token_embd.weight" ? std::string(", e.g. with --token-embedding-type")
                                                             : std::string()) +
                            ")");
  }
  return Status::ok();
}

// Each converted tensor's importance values, as llama-quantize picks them (null: none); its
// refusals before anything is converted.
Expected<std::vector<const float*>> importance_per_tensor(const std::vector<TensorInfo>& ts,
                                                          const std::vector<TensorPlan>& plans, const Imatrix* imatrix) {
  std::vector<const float*> tensor_imatrix(ts.size(), nullptr);
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorInfo& t = ts[i];
    const TensorPlan& plan = plans[i];
    if (!plan.convert) continue;
    if (imatrix) {
      auto v = imatrix->for_tensor(t.name, t.ne[0], std::max<int64_t>(1, t.ne[2]));
      if (v) {
        tensor_imatrix[i] = *v;
      } else if (t.name != "token_embd.weight" && t.name != "per_layer_token_embd.weight") {
        return v.status();  // llama-quantize lets only the token embeddings go without
      }
    }
    LOOM_RETURN_IF_ERROR(check_importance(t, plan, imatrix, tensor_imatrix[i] != nullptr));
  }
  return tensor_imatrix;
}

// Metadata: the input's, general.quantization_version and general.file_type moved to the end,
// then llama-quantize's quantize.imatrix.* keys; split.* dropped.
Status write_metadata(const gguf::GgufFile& in, const QuantizeParams& params, const Imatrix* imatrix, gguf::GgufWriter& w) {
  const auto cut127 = [](const std::string& s) { return s.substr(0, std::min<size_t>(s.size(), 127)); };
  for (const gguf::KeyValue& kv : in.metadata()) {
    if (kv.key == "general.file_type" || kv.key == "general.quantization_version" || kv.key == "split.no" ||
        kv.key == "split.count" || kv.key == "split.tensors.count") {
      continue;
    }
    if (imatrix && (kv.key == "quantize.imatrix.file" || kv.key == "quantize.imatrix.entries_count" ||
                    (kv.key == "quantize.imatrix.dataset" && !imatrix->datasets.empty()) ||
                    (kv.key == "quantize.imatrix.chunks_count" && imatrix->chunk_count > 0))) {
      continue;  // replaced below (llama.cpp's gguf_set_val_* moves a key to the end)
    }
    LOOM_RETURN_IF_ERROR(w.set(kv.key, kv.value));
  }
  LOOM_RETURN_IF_ERROR(w.set_u32("general.quantization_version", 2));
  LOOM_RETURN_IF_ERROR(w.set_u32("general.file_type", static_cast<uint32_t>(params.ftype)));
  if (imatrix) {
    LOOM_RETURN_IF_ERROR(w.set_string("quantize.imatrix.file", cut127(params.imatrix_path)));
    if (!imatrix->datasets.empty()) {
      LOOM_RETURN_IF_ERROR(w.set_string("quantize.imatrix.dataset", cut127(imatrix->datasets[0])));
    }
    LOOM_RETURN_IF_ERROR(w.set_u32("quantize.imatrix.entries_count", uint32_t(imatrix->entries.size())));
    if (imatrix->chunk_count > 0) {
      LOOM_RETURN_IF_ERROR(w.set_u32("quantize.imatrix.chunks_count", uint32_t(imatrix->chunk_count)));
    }
  }
  return Status::ok();
}

// The order the tensors are written in: llama-quantize's, or the input's.
std::vector<size_t> output_order(const std::vector<TensorInfo>& ts, const QuantizeParams& params) {
  std::vector<size_t> order;
  if (params.llama_cpp_order) {
    order = llama_cpp_tensor_order(ts);
  } else {
    order.resize(ts.size());
    std::iota(order.begin(), order.end(), size_t(0));
  }
  return order;
}

// Tensor t converted to its plan's type (or copied) into w; returns its output bytes.
Expected<uint64_t> write_tensor(const TensorInfo& t, const TensorPlan& plan, const float* imatrix, ThreadPool& pool,
                                gguf::GgufWriter& w, QuantizeStats& st) {
  const std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
  uint64_t out_bytes = t.nbytes;
  if (plan.convert) {
    LOOM_ASSIGN_OR_RETURN(const std::vector<uint8_t> data, convert_tensor(t, plan.type, imatrix, pool));
    out_bytes = data.size();
    LOOM_RETURN_IF_ERROR(w.add_tensor(t.name, plan.type, ne, data));
    ++st.n_converted;
    if (plan.fallback) ++st.n_fallback;
  } else {
    LOOM_RETURN_IF_ERROR(w.add_tensor(t.name, t.type, ne, std::span<const uint8_t>(t.data, size_t(t.nbytes))));
    ++st.n_copied;
  }
  st.in_tensor_bytes += t.nbytes;
  st.out_tensor_bytes += out_bytes;
  return out_bytes;
}

}  // namespace

Expected<gguf::GgufWriter> quantize_model(const gguf::GgufFile& in, const QuantizeParams& params,
                                          const std::function<void(const TensorProgress&)>& progress, QuantizeStats* stats) {
  LOOM_ASSIGN_OR_RETURN(const std::vector<TensorPlan> plans, plan_tensor_types(in, params));
  const auto& ts = in.tensors();
  const Imatrix* imatrix = params.imatrix != nullptr && !params.imatrix->entries.empty() ? params.imatrix : nullptr;
  LOOM_ASSIGN_OR_RETURN(const std::vector<const float*> tensor_imatrix, importance_per_tensor(ts, plans, imatrix));
  gguf::GgufWriter w;
  LOOM_RETURN_IF_ERROR(write_metadata(in, params, imatrix, w));
  const std::vector<size_t> order = output_order(ts, params);

  int n_threads = params.n_threads > 0 ? params.n_threads : int(std::thread::hardware_concurrency());
  ThreadPool pool(std::max(1, n_threads));
  QuantizeStats st;
  for (size_t k = 0; k < order.size(); ++k) {
    const TensorInfo& t = ts[order[k]];
    const TensorPlan& plan = plans[order[k]];
    LOOM_ASSIGN_OR_RETURN(const uint64_t out_bytes, write_tensor(t, plan, tensor_imatrix[order[k]], pool, w, st));
    if (progress) {
      TensorProgress p;
      p.index = k;
      p.count = order.size();
      p.tensor = &t;
      p.out_type = plan.type;
      p.out_bytes = out_bytes;
      p.converted = plan.convert;
      p.fallback = plan.fallback;
      progress(p);
    }
  }
  if (stats) *stats = st;
  return w;
}

}  // namespace loom::model
