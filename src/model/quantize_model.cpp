#include "model/quantize_model.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "base/threadpool.h"
#include "quant/quant.h"

namespace loom::model {
namespace {

using gguf::TensorInfo;
using quant::dequantize_row;
using quant::quantize_row;

// Converts one tensor, rows split over the pool.
std::vector<uint8_t> convert_tensor(const TensorInfo& t, TensorType to, ThreadPool& pool) {
  const int64_t n0 = t.ne[0];
  const int64_t rows = t.n_elements() / std::max<int64_t>(1, n0);
  const int64_t in_rb = row_bytes(t.type, n0);
  const int64_t out_rb = row_bytes(to, n0);
  std::vector<uint8_t> out(size_t(out_rb * rows));
  // The slow searches (k-quants, IQ4) dominate; a few rows per thread keeps threads busy.
  pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(t.type == TensorType::F32 ? 0 : size_t(n0));
    for (int64_t r = begin; r < end; ++r) {
      const uint8_t* src = t.data + r * in_rb;
      const float* x = nullptr;
      std::vector<float> aligned;
      if (t.type == TensorType::F32) {
        if (reinterpret_cast<uintptr_t>(src) % alignof(float) == 0) {
          x = reinterpret_cast<const float*>(src);
        } else {
          aligned.resize(size_t(n0));
          std::memcpy(aligned.data(), src, size_t(n0) * sizeof(float));
          x = aligned.data();
        }
      } else {
        dequantize_row(t.type, src, buf.data(), n0);
        x = buf.data();
      }
      uint8_t* dst = out.data() + r * out_rb;
      if (to == TensorType::F32) std::memcpy(dst, x, size_t(n0) * sizeof(float));
      else quantize_row(to, x, dst, n0);
    }
  });
  return out;
}

}  // namespace

Expected<gguf::GgufWriter> quantize_model(const gguf::GgufFile& in, const QuantizeParams& params,
                                          const std::function<void(const TensorProgress&)>& progress,
                                          QuantizeStats* stats) {
  LOOM_ASSIGN_OR_RETURN(const std::vector<TensorPlan> plans, plan_tensor_types(in, params));

  gguf::GgufWriter w;
  for (const gguf::KeyValue& kv : in.metadata()) {
    if (kv.key == "general.file_type" || kv.key == "general.quantization_version" || kv.key == "split.no" ||
        kv.key == "split.count" || kv.key == "split.tensors.count") {
      continue;
    }
    LOOM_RETURN_IF_ERROR(w.set(kv.key, kv.value));
  }
  LOOM_RETURN_IF_ERROR(w.set_u32("general.quantization_version", 2));
  LOOM_RETURN_IF_ERROR(w.set_u32("general.file_type", static_cast<uint32_t>(params.ftype)));

  const auto& ts = in.tensors();
  std::vector<size_t> order;
  if (params.llama_cpp_order) {
    order = llama_cpp_tensor_order(ts);
  } else {
    order.resize(ts.size());
    std::iota(order.begin(), order.end(), size_t(0));
  }

  int n_threads = params.n_threads > 0 ? params.n_threads : int(std::thread::hardware_concurrency());
  ThreadPool pool(std::max(1, n_threads));
  QuantizeStats st;
  for (size_t k = 0; k < order.size(); ++k) {
    const TensorInfo& t = ts[order[k]];
    const TensorPlan& plan = plans[order[k]];
    const std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    uint64_t out_bytes = t.nbytes;
    if (plan.convert) {
      const std::vector<uint8_t> data = convert_tensor(t, plan.type, pool);
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
