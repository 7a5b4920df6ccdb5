// GGUF serialization. Inputs are validated on entry (set / add_tensor) against the same rules the
// reader enforces, so that anything this writer produces is a file GgufFile (and llama.cpp) accept.
#include "gguf/gguf_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <limits>

namespace loom::gguf {

namespace {

// llama.cpp (ggml) refuses tensor names of GGML_MAX_NAME (64) bytes or more.
constexpr size_t kMaxTensorName = 63;
// The reader refuses larger alignments; keep the two in step.
constexpr uint64_t kMaxAlignment = uint64_t(1) << 30;

bool valid_value_type(ValueType t) { return static_cast<uint32_t>(t) <= static_cast<uint32_t>(ValueType::kFloat64); }

Status check_array(const Array& a, int depth, const std::string& key) {
  auto bad = [&](const std::string& why) { return invalid_argument("metadata key '" + key + "': " + why); };
  if (depth > kMaxArrayNesting) {
    return bad("arrays nested deeper than " + std::to_string(kMaxArrayNesting));
  }
  if (!valid_value_type(a.elem_type)) {
    return bad("unknown array element type " + std::to_string(static_cast<uint32_t>(a.elem_type)));
  }
  const size_t esize = value_type_size(a.elem_type);
  if (esize) {
    if (!a.strings.empty() || !a.arrays.empty() || a.count > a.raw.size() / esize || a.raw.size() != a.count * esize) {
      return bad("array of " + std::to_string(a.count) + " " + std::string(value_type_name(a.elem_type)) + " holds " +
                 std::to_string(a.raw.size()) + " raw bytes");
    }
    if (a.elem_type == ValueType::kBool) {
      for (uint8_t b : a.raw) {
        if (b > 1) return bad("bool array element " + std::to_string(b) + " is not 0 or 1");
      }
    }
  } else if (a.elem_type == ValueType::kString) {
    if (!a.raw.empty() || !a.arrays.empty() || a.strings.size() != a.count) {
      return bad("string array count " + std::to_string(a.count) + " does not match its " +
                 std::to_string(a.strings.size()) + " strings");
    }
  } else {
    if (!a.raw.empty() || !a.strings.empty() || a.arrays.size() != a.count) {
      return bad("array count " + std::to_string(a.count) + " does not match its " + std::to_string(a.arrays.size()) +
                 " nested arrays");
    }
    for (const Array& sub : a.arrays) LOOM_RETURN_IF_ERROR(check_array(sub, depth + 1, key));
  }
  return Status::ok();
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Collects bytes for a sink and tracks the position (for padding).
class Emitter {
 public:
  explicit Emitter(const std::function<bool(const void*, size_t)>& sink) : sink_(sink) {}

  bool ok() const { return ok_; }
  uint64_t pos() const { return pos_; }

  void put(const void* p, size_t n) {
    if (!ok_ || n == 0) return;
    ok_ = sink_(p, n);
    pos_ += n;
  }
  template <typename T>
  void scalar(T x) {
    put(&x, sizeof x);
  }  // the host is little-endian, like the format
  void str(const std::string& s) {
    scalar<uint64_t>(s.size());
    put(s.data(), s.size());
  }
  void zeros(uint64_t n) {
    static const uint8_t kZeros[256] = {};
    while (n > 0) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof kZeros));
      put(kZeros, k);
      n -= k;
    }
  }

  void array(const Array& a) {
    scalar<uint32_t>(static_cast<uint32_t>(a.elem_type));
    scalar<uint64_t>(a.count);
    if (a.elem_type == ValueType::kString) {
      for (const auto& s : a.strings) str(s);
    } else if (a.elem_type == ValueType::kArray) {
      for (const auto& sub : a.arrays) array(sub);
    } else {
      put(a.raw.data(), a.raw.size());
    }
  }

  void value(const Value& v) {
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) str(x);
          else if constexpr (std::is_same_v<T, Array>) array(x);
          else if constexpr (std::is_same_v<T, bool>) scalar<uint8_t>(x ? 1 : 0);
          else scalar<T>(x);
        },
        v);
  }

 private:
  const std::function<bool(const void*, size_t)>& sink_;
  uint64_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace

Expected<GgufWriter> GgufWriter::from_file(const GgufFile& file) {
  GgufWriter w;
  LOOM_RETURN_IF_ERROR(w.set_version(file.version()));
  for (const auto& kv : file.metadata()) LOOM_RETURN_IF_ERROR(w.set(kv.key, kv.value));
  w.sources_.push_back(file);
  for (const auto& t : file.tensors()) {
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    LOOM_RETURN_IF_ERROR(w.check_tensor(t.name, t.type, ne, t.nbytes));
    Tensor tensor;
    tensor.name = t.name;
    tensor.type = t.type;
    tensor.ne = std::move(ne);
    tensor.view = std::span<const uint8_t>(t.data, t.nbytes);
    w.tensors_.push_back(std::move(tensor));
  }
  return w;
}

Status GgufWriter::set_version(uint32_t version) {
  if (version != 2 && version != 3) {
    return invalid_argument("GGUF version " + std::to_string(version) + " cannot be written (only 2 and 3)");
  }
  version_ = version;
  return Status::ok();
}

Status GgufWriter::set(std::string key, Value value) {
  if (find(key)) return invalid_argument("duplicate metadata key '" + key + "'");
  if (const Array* a = std::get_if<Array>(&value)) LOOM_RETURN_IF_ERROR(check_array(*a, 1, key));
  if (key == "general.alignment") {
    // llama.cpp reads the alignment as u32 only; the reader refuses non-powers of two.
    const uint32_t* a = std::get_if<uint32_t>(&value);
    if (!a) {
      return invalid_argument("general.alignment must be a u32, got " + std::string(value_type_name(type_of(value))));
    }
    if (*a == 0 || (*a & (*a - 1)) != 0 || *a > kMaxAlignment) {
      return invalid_argument("general.alignment must be a power of two up to 2^30, got " + std::to_string(*a));
    }
    alignment_ = *a;
  }
  kv_.push_back({std::move(key), std::move(value)});
  return Status::ok();
}

bool GgufWriter::remove(std::string_view key) {
  auto it = std::find_if(kv_.begin(), kv_.end(), [&](const KeyValue& kv) { return kv.key == key; });
  if (it == kv_.end()) return false;
  if (key == "general.alignment") alignment_ = kDefaultAlignment;
  kv_.erase(it);
  return true;
}

const Value* GgufWriter::find(std::string_view key) const {
  for (const auto& kv : kv_) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

Status GgufWriter::check_tensor(const std::string& name, TensorType type, const std::vector<int64_t>& ne,
                                size_t nbytes) const {
  auto bad = [&](const std::string& why) { return invalid_argument("tensor '" + name + "': " + why); };
  if (name.size() > kMaxTensorName) {
    return bad("name is " + std::to_string(name.size()) + " bytes, more than llama.cpp's " + std::to_string(kMaxTensorName));
  }
  for (const auto& t : tensors_) {
    if (t.name == name) return invalid_argument("duplicate tensor name '" + name + "'");
  }
  if (ne.empty() || ne.size() > size_t(kMaxDims)) {
    return bad(std::to_string(ne.size()) + " dimensions (need 1 to " + std::to_string(kMaxDims) + ")");
  }
  auto info = tensor_type_info(type);
  if (!info) return bad("unknown tensor type id " + std::to_string(static_cast<uint32_t>(type)));
  int64_t n_elements = 1;
  for (int64_t d : ne) {
    if (d <= 0 || d > std::numeric_limits<int64_t>::max() / n_elements) {
      return bad("invalid dimension " + std::to_string(d));
    }
    n_elements *= d;
  }
  if (ne[0] % info->block_size != 0) {
    return bad("row length " + std::to_string(ne[0]) + " is not a multiple of the " + std::string(info->name) +
               " block size " + std::to_string(info->block_size));
  }
  const uint64_t n_blocks = uint64_t(n_elements / info->block_size);
  if (n_blocks > std::numeric_limits<uint64_t>::max() / uint64_t(info->block_bytes)) return bad("too large");
  const uint64_t want = n_blocks * uint64_t(info->block_bytes);
  if (want != nbytes) {
    return bad(std::to_string(nbytes) + " data bytes given, but " + std::string(info->name) + " of " +
               std::to_string(n_elements) + " elements needs " + std::to_string(want));
  }
  return Status::ok();
}

Status GgufWriter::add_tensor(std::string name, TensorType type, const std::vector<int64_t>& ne,
                              std::span<const uint8_t> bytes) {
  LOOM_RETURN_IF_ERROR(check_tensor(name, type, ne, bytes.size()));
  Tensor t;
  t.name = std::move(name);
  t.type = type;
  t.ne = ne;
  t.owned.assign(bytes.begin(), bytes.end());
  tensors_.push_back(std::move(t));
  return Status::ok();
}

bool GgufWriter::remove_tensor(std::string_view name) {
  auto it = std::find_if(tensors_.begin(), tensors_.end(), [&](const Tensor& t) { return t.name == name; });
  if (it == tensors_.end()) return false;
  tensors_.erase(it);
  return true;
}

bool GgufWriter::serialize(const std::function<bool(const void*, size_t)>& sink) const {
  Emitter e(sink);
  e.scalar<uint32_t>(kMagic);
  e.scalar<uint32_t>(version_);
  e.scalar<uint64_t>(tensors_.size());
  e.scalar<uint64_t>(kv_.size());
  for (const auto& kv : kv_) {
    e.str(kv.key);
    e.scalar<uint32_t>(static_cast<uint32_t>(type_of(kv.value)));
    e.value(kv.value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    e.str(t.name);
    e.scalar<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) e.scalar<uint64_t>(static_cast<uint64_t>(d));
    e.scalar<uint32_t>(static_cast<uint32_t>(t.type));
    e.scalar<uint64_t>(offset);
    offset += align_up(t.bytes().size(), alignment_);
  }
  if (!tensors_.empty()) {
    e.zeros(align_up(e.pos(), alignment_) - e.pos());
    for (const auto& t : tensors_) {
      e.put(t.bytes().data(), t.bytes().size());
      e.zeros(align_up(t.bytes().size(), alignment_) - t.bytes().size());
    }
  }
  return e.ok();
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> out;
  serialize([&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
    return true;
  });
  return out;
}

Status GgufWriter::write_file(const std::string& path) const {
  // A unique temporary name in the same directory, so rename() is atomic (same filesystem).
  static std::atomic<uint64_t> counter{0};
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return io_error("cannot create " + tmp + ": " + std::strerror(errno));

  // Buffer small header fields so the file is written in large chunks.
  std::vector<uint8_t> buf;
  buf.reserve(1 << 20);
  int write_errno = 0;
  auto flush = [&](const uint8_t* p, size_t n) {
    while (n > 0) {
      ssize_t k = ::write(fd, p, n);
      if (k < 0) {
        if (errno == EINTR) continue;
        write_errno = errno;
        return false;
      }
      p += k;
      n -= size_t(k);
    }
    return true;
  };
  bool ok = serialize([&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    if (buf.size() + n > buf.capacity()) {
      if (!flush(buf.data(), buf.size())) return false;
      buf.clear();
      if (n >= buf.capacity()) return flush(b, n);
    }
    buf.insert(buf.end(), b, b + n);
    return true;
  });
  if (ok) ok = flush(buf.data(), buf.size());
  if (ok && ::fsync(fd) != 0) {
    ok = false;
    write_errno = errno;
  }
  if (::close(fd) != 0 && ok) {
    ok = false;
    write_errno = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return io_error("cannot write " + tmp + ": " + std::strerror(write_errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return io_error("cannot rename " + tmp + " to " + path + ": " + std::strerror(e));
  }
  return Status::ok();
}

}  // namespace loom::gguf
