// Importance-matrix files of llama.cpp (GGUF and legacy .dat): see imatrix.h for the formats and
// the values produced, which follow llama-quantize's loader (common/imatrix-loader.cpp and
// load_imatrix in tools/quantize/quantize.cpp of llama.cpp).
#include "model/imatrix.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "base/file_util.h"
#include "gguf/gguf.h"

namespace loom::model {
namespace {

constexpr std::string_view kSumsSuffix = ".in_sum2";
constexpr std::string_view kCountsSuffix = ".counts";
constexpr std::string_view kKeyDatasets = "imatrix.datasets";
constexpr std::string_view kKeyChunkCount = "imatrix.chunk_count";
constexpr std::string_view kKeyChunkSize = "imatrix.chunk_size";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Status check_finite(const std::string& what, const Imatrix& m) {
  for (const auto& [name, values] : m.entries) {
    for (size_t i = 0; i < values.size(); ++i) {
      if (!std::isfinite(values[i])) {
        return corrupt(what + ": importance value " + std::to_string(i) + " of '" + name + "' is not finite (" +
                       std::to_string(values[i]) + ")");
      }
    }
  }
  return Status::ok();
}

Expected<int32_t> metadata_i32(const gguf::GgufFile& f, std::string_view key, const std::string& what) {
  auto v = f.get_int(key);
  if (!v) return corrupt(what + ": " + v.status().message());
  if (*v < 0 || *v > std::numeric_limits<int32_t>::max()) {
    return corrupt(what + ": metadata '" + std::string(key) + "' = " + std::to_string(*v) + " is out of range");
  }
  return int32_t(*v);
}

std::vector<float> read_f32(const gguf::TensorInfo& t) {
  std::vector<float> v(size_t(t.n_elements()));
  if (!v.empty()) std::memcpy(v.data(), t.data, v.size() * sizeof(float));
  return v;
}

Expected<Imatrix> from_gguf(const gguf::GgufFile& f, const std::string& what) {
  Imatrix m;
  if (f.tensors().empty())
    return corrupt(what + ": no tensors (an imatrix file holds <name>.in_sum2 / <name>.counts pairs)");
  const bool has_metadata = f.has(kKeyDatasets) && f.has(kKeyChunkCount) && f.has(kKeyChunkSize);
  if (!has_metadata) {
    return corrupt(what + ": missing imatrix metadata (" + std::string(kKeyDatasets) + ", " + std::string(kKeyChunkCount) +
                   ", " + std::string(kKeyChunkSize) + ")");
  }
  // llama.cpp reads the datasets only when they are an array of strings and ignores them otherwise.
  if (auto a = f.get_array(kKeyDatasets); a && (*a)->elem_type == gguf::ValueType::kString) {
    m.datasets = (*a)->strings;
  }
  auto cc = metadata_i32(f, kKeyChunkCount, what);
  if (!cc) return cc.status();
  auto cs = metadata_i32(f, kKeyChunkSize, what);
  if (!cs) return cs.status();
  m.chunk_count = *cc;
  m.chunk_size = *cs;

  struct Pair {
    const gguf::TensorInfo* sums = nullptr;
    const gguf::TensorInfo* counts = nullptr;
  };
  std::map<std::string, Pair, std::less<>> pairs;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (ends_with(t.name, kSumsSuffix)) {
      pairs[t.name.substr(0, t.name.size() - kSumsSuffix.size())].sums = &t;
    } else if (ends_with(t.name, kCountsSuffix)) {
      pairs[t.name.substr(0, t.name.size() - kCountsSuffix.size())].counts = &t;
    }
  }
  for (const auto& [name, p] : pairs) {
    if (!p.sums || !p.counts) {
      return corrupt(what + ": tensor '" + name + "' has " + (p.sums ? "sums but no counts" : "counts but no sums"));
    }
    if (p.sums->type != TensorType::F32 || p.counts->type != TensorType::F32) {
      return corrupt(what + ": the sums and counts of '" + name + "' must be F32");
    }
    const int64_t nval = p.sums->n_elements(), ncounts = p.counts->n_elements();
    if (ncounts < 1) return corrupt(what + ": '" + name + "' has no counts");
    if (nval % ncounts != 0) {
      return corrupt(what + ": '" + name + "' has " + std::to_string(nval) + " sums, not a multiple of its " +
                     std::to_string(ncounts) + " counts");
    }
    const std::vector<float> sums = read_f32(*p.sums);
    const std::vector<float> counts_f = read_f32(*p.counts);
    const int64_t ne0 = nval / ncounts;
    std::vector<float> values(size_t(nval), 0.0f);
    for (int64_t j = 0; j < ncounts; ++j) {
      const float c = counts_f[size_t(j)];
      // llama.cpp rounds each count to an integer (lround); beyond int64 that is undefined.
      if (!std::isfinite(c) || std::fabs(c) >= 9.2e18f) {
        return corrupt(what + ": count " + std::to_string(j) + " of '" + name + "' is " + std::to_string(c));
      }
      const float count = float(std::lround(double(c)));
      for (int64_t i = 0; i < ne0; ++i) {
        const size_t k = size_t(j * ne0 + i);
        values[k] = count > 0.0f ? sums[k] / count : 1.0f;
      }
    }
    m.entries[name] = std::move(values);
  }
  LOOM_RETURN_IF_ERROR(check_finite(what, m));
  return m;
}

// Little-endian reader over the legacy format's bytes.
struct Cursor {
  std::span<const uint8_t> b;
  size_t pos = 0;
  size_t left() const { return b.size() - pos; }
  bool i32(int32_t* v) {
    if (left() < 4) return false;
    std::memcpy(v, b.data() + pos, 4);
    pos += 4;
    return true;
  }
};

Expected<Imatrix> from_legacy(std::span<const uint8_t> bytes, const std::string& what) {
  Imatrix m;
  m.legacy = true;
  Cursor c{bytes};
  int32_t n_entries = 0;
  if (!c.i32(&n_entries) || n_entries < 1) {
    return corrupt(what + ": not an imatrix file (neither GGUF nor a legacy .dat with at least one entry)");
  }
  // Each entry takes at least 16 bytes (name length, ncall, nval, one value).
  if (uint64_t(n_entries) > c.left() / 16) {
    return corrupt(what + ": " + std::to_string(n_entries) + " entries do not fit in " + std::to_string(bytes.size()) +
                   " bytes");
  }
  for (int32_t e = 0; e < n_entries; ++e) {
    const std::string at = what + ": entry " + std::to_string(e + 1) + " of " + std::to_string(n_entries);
    int32_t len = 0;
    if (!c.i32(&len)) return corrupt(at + ": truncated before its name length");
    if (len < 0) return corrupt(at + ": negative name length " + std::to_string(len));
    if (size_t(len) > c.left()) return corrupt(at + ": name length " + std::to_string(len) + " runs past the end");
    const char* p = reinterpret_cast<const char*>(bytes.data() + c.pos);
    std::string name(p, strnlen(p, size_t(len)));  // llama.cpp keeps the name up to a NUL
    c.pos += size_t(len);
    int32_t ncall = 0, nval = 0;
    if (!c.i32(&ncall) || !c.i32(&nval)) return corrupt(at + " ('" + name + "'): truncated before its value count");
    if (nval < 1) return corrupt(at + " ('" + name + "'): value count " + std::to_string(nval) + " < 1");
    if (uint64_t(nval) * 4 > c.left()) {
      return corrupt(at + " ('" + name + "'): " + std::to_string(nval) + " values run past the end");
    }
    std::vector<float> values(static_cast<size_t>(nval));
    std::memcpy(values.data(), bytes.data() + c.pos, size_t(nval) * 4);
    c.pos += size_t(nval) * 4;
    if (ncall > 0) {
      for (float& v : values) v = v / float(int64_t(ncall));
    }
    m.entries[std::move(name)] = std::move(values);
  }
  // Optional trailer: chunk count, then the dataset name; llama.cpp keeps what it can read of it.
  if (c.left() > 0) {
    int32_t n_calls = 0;
    if (c.i32(&n_calls)) {
      m.chunk_count = n_calls;
      int32_t len = 0;
      if (c.i32(&len) && len > 0 && size_t(len) <= c.left()) {
        const char* p = reinterpret_cast<const char*>(bytes.data() + c.pos);
        m.datasets.emplace_back(p, strnlen(p, size_t(len)));
      }
    }
  }
  LOOM_RETURN_IF_ERROR(check_finite(what, m));
  return m;
}

bool is_gguf(std::span<const uint8_t> head) { return head.size() >= 4 && std::memcmp(head.data(), "GGUF", 4) == 0; }

}  // namespace

const std::vector<float>* Imatrix::find(std::string_view tensor_name) const {
  auto it = entries.find(tensor_name);
  return it == entries.end() ? nullptr : &it->second;
}

Expected<const float*> Imatrix::for_tensor(std::string_view tensor_name, int64_t ne0, int64_t ne2) const {
  const std::vector<float>* v = find(tensor_name);
  if (!v) return static_cast<const float*>(nullptr);
  if (ne0 < 0 || ne2 < 0 || uint64_t(v->size()) != uint64_t(ne0) * uint64_t(ne2)) {
    return invalid_argument("imatrix size " + std::to_string(v->size()) + " is different from tensor size " +
                            std::to_string(ne0 * ne2) + " for " + std::string(tensor_name));
  }
  return v->data();
}

Expected<Imatrix> parse_imatrix(std::span<const uint8_t> bytes, const std::string& name) {
  return out_of_memory_as_status("reading an imatrix", [&]() -> Expected<Imatrix> {
    if (is_gguf(bytes)) {
      auto f = gguf::GgufFile::from_bytes(bytes);
      if (!f) return corrupt(name + ": " + f.status().message());
      return from_gguf(*f, name);
    }
    return from_legacy(bytes, name);
  });
}

Expected<Imatrix> read_imatrix(const std::string& path) {
  auto bytes = read_file_bytes(path, "imatrix file");
  if (!bytes) return bytes.status();
  return parse_imatrix(*bytes, path);
}

}  // namespace loom::model
