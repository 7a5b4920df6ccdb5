// Parsing and validation of GGUF files. Every read goes through Cursor, which checks bounds
// before touching memory, so a malformed file yields a Status naming the problem and offset.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_set>

#include "gguf/gguf.h"

namespace loom::gguf {

struct GgufFile::Storage {
  const uint8_t* data = nullptr;
  size_t size = 0;
  void* map = nullptr;         // mmap base when mapped
  std::vector<uint8_t> owned;  // in-memory image otherwise

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (map) munmap(map, size);
  }
};

namespace {

std::string at(uint64_t offset) { return " at offset " + std::to_string(offset); }

class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  Status need(uint64_t n, const char* what) const {
    if (n > remaining()) {
      return corrupt(std::string("truncated file: ") + what + " needs " + std::to_string(n) + " bytes but only " +
                     std::to_string(remaining()) + " remain" + at(pos_));
    }
    return Status::ok();
  }

  template <typename T>
  Status read(T* out, const char* what) {
    LOOM_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }

  Status read_string(std::string* out, const char* what) {
    const uint64_t start = pos_;
    uint64_t len = 0;
    LOOM_RETURN_IF_ERROR(read(&len, what));
    if (len > remaining()) {
      return corrupt(std::string(what) + " length " + std::to_string(len) + " runs past the end of the file" + at(start));
    }
    out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return Status::ok();
  }

  Status read_bytes(std::vector<uint8_t>* out, uint64_t n, const char* what) {
    LOOM_RETURN_IF_ERROR(need(n, what));
    out->assign(data_ + pos_, data_ + pos_ + n);
    pos_ += n;
    return Status::ok();
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::kFloat64); }

Status read_array(Cursor& c, Array* arr, int depth);

template <typename T>
Status read_scalar(Cursor& c, Value* v, const char* what) {
  T x{};
  LOOM_RETURN_IF_ERROR(c.read(&x, what));
  *v = x;
  return Status::ok();
}

Status read_value(Cursor& c, ValueType type, Value* v, int depth) {
  switch (type) {
    case ValueType::kUint8: return read_scalar<uint8_t>(c, v, "u8 value");
    case ValueType::kInt8: return read_scalar<int8_t>(c, v, "i8 value");
    case ValueType::kUint16: return read_scalar<uint16_t>(c, v, "u16 value");
    case ValueType::kInt16: return read_scalar<int16_t>(c, v, "i16 value");
    case ValueType::kUint32: return read_scalar<uint32_t>(c, v, "u32 value");
    case ValueType::kInt32: return read_scalar<int32_t>(c, v, "i32 value");
    case ValueType::kFloat32: return read_scalar<float>(c, v, "f32 value");
    case ValueType::kUint64: return read_scalar<uint64_t>(c, v, "u64 value");
    case ValueType::kInt64: return read_scalar<int64_t>(c, v, "i64 value");
    case ValueType::kFloat64: return read_scalar<double>(c, v, "f64 value");
    case ValueType::kBool: {
      const uint64_t start = c.pos();
      uint8_t b = 0;
      LOOM_RETURN_IF_ERROR(c.read(&b, "bool value"));
      if (b > 1) return corrupt("bool value " + std::to_string(b) + " is not 0 or 1" + at(start));
      *v = b != 0;
      return Status::ok();
    }
    case ValueType::kString: {
      std::string s;
      LOOM_RETURN_IF_ERROR(c.read_string(&s, "string value"));
      *v = std::move(s);
      return Status::ok();
    }
    case ValueType::kArray: {
      Array a;
      LOOM_RETURN_IF_ERROR(read_array(c, &a, depth + 1));
      *v = std::move(a);
      return Status::ok();
    }
  }
  return internal_error("unreachable value type");
}

Status read_array(Cursor& c, Array* arr, int depth) {
  const uint64_t start = c.pos();
  if (depth > kMaxArrayNesting) {
    return corrupt("arrays nested deeper than " + std::to_string(kMaxArrayNesting) + at(start));
  }
  uint32_t elem = 0;
  LOOM_RETURN_IF_ERROR(c.read(&elem, "array element type"));
  if (!valid_value_type(elem)) {
    return corrupt("unknown array element type " + std::to_string(elem) + at(start));
  }
  arr->elem_type = static_cast<ValueType>(elem);
  const uint64_t count_pos = c.pos();
  LOOM_RETURN_IF_ERROR(c.read(&arr->count, "array length"));
  // Each element occupies at least one byte (strings 8, arrays 12): refuse counts the rest of
  // the file cannot hold before allocating anything.
  const size_t esize = value_type_size(arr->elem_type);
  const uint64_t min_elem = esize ? esize : (arr->elem_type == ValueType::kString ? 8 : 12);
  if (arr->count > c.remaining() / min_elem) {
    return corrupt("array length " + std::to_string(arr->count) + " runs past the end of the file" + at(count_pos));
  }
  if (esize) {
    if (arr->elem_type == ValueType::kBool) {
      for (uint64_t i = 0; i < arr->count; ++i) {
        Value v;
        LOOM_RETURN_IF_ERROR(read_value(c, ValueType::kBool, &v, depth));
        arr->raw.push_back(std::get<bool>(v) ? 1 : 0);
      }
      return Status::ok();
    }
    return c.read_bytes(&arr->raw, arr->count * esize, "array data");
  }
  if (arr->elem_type == ValueType::kString) {
    arr->strings.resize(arr->count);
    for (auto& s : arr->strings) LOOM_RETURN_IF_ERROR(c.read_string(&s, "array string"));
    return Status::ok();
  }
  arr->arrays.resize(arr->count);
  for (auto& a : arr->arrays) LOOM_RETURN_IF_ERROR(read_array(c, &a, depth + 1));
  return Status::ok();
}

// The fixed header: magic, version (2 or 3), tensor and metadata counts (each bounded by what the
// rest of the file can hold).
struct Header {
  uint32_t version = 0;
  uint64_t n_tensors = 0, n_kv = 0;
};

Expected<Header> read_header(Cursor& c) {
  Header h;
  uint32_t magic = 0;
  LOOM_RETURN_IF_ERROR(c.read(&magic, "magic"));
  if (magic != kMagic) return corrupt("not a GGUF file (bad magic)" + at(0));
  LOOM_RETURN_IF_ERROR(c.read(&h.version, "version"));
  if (h.version == 1) return unsupported("GGUF version 1 is not supported (only 2 and 3)" + at(4));
  if (h.version != 2 && h.version != 3) {
    return corrupt("unknown GGUF version " + std::to_string(h.version) + at(4));
  }
  LOOM_RETURN_IF_ERROR(c.read(&h.n_tensors, "tensor count"));
  LOOM_RETURN_IF_ERROR(c.read(&h.n_kv, "metadata count"));
  // A key-value needs at least 8 (key length) + 4 (type) + 1 bytes; a tensor info 8+4+4+8.
  if (h.n_kv > c.remaining() / 13) {
    return corrupt("metadata count " + std::to_string(h.n_kv) + " exceeds what the file can hold" + at(16));
  }
  if (h.n_tensors > c.remaining() / 24) {
    return corrupt("tensor count " + std::to_string(h.n_tensors) + " exceeds what the file can hold" + at(8));
  }
  return h;
}

// The n_kv key-values into kv: unique keys, known value types.
Status read_metadata(Cursor& c, uint64_t n_kv, std::vector<KeyValue>& kvs) {
  kvs.reserve(n_kv);
  std::unordered_set<std::string> keys;
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t kv_pos = c.pos();
    KeyValue kv;
    LOOM_RETURN_IF_ERROR(c.read_string(&kv.key, "metadata key"));
    if (!keys.insert(kv.key).second) return corrupt("duplicate metadata key '" + kv.key + "'" + at(kv_pos));
    const uint64_t type_pos = c.pos();
    uint32_t type = 0;
    LOOM_RETURN_IF_ERROR(c.read(&type, "metadata value type"));
    if (!valid_value_type(type)) {
      return corrupt("unknown value type " + std::to_string(type) + " for key '" + kv.key + "'" + at(type_pos));
    }
    Status st = read_value(c, static_cast<ValueType>(type), &kv.value, 0);
    if (!st) return Status(st.code(), st.message() + " (key '" + kv.key + "')");
    kvs.push_back(std::move(kv));
  }
  return Status::ok();
}

// general.alignment (a power of two up to 2^30, of an unsigned type or a positive int32) into
// alignment; a non-positive int32 leaves it as it is.
Status read_alignment(const Value& a, uint32_t& alignment) {
  uint64_t align = 0;
  if (type_of(a) == ValueType::kUint32) align = std::get<uint32_t>(a);
  else if (type_of(a) == ValueType::kUint64) align = std::get<uint64_t>(a);
  else if (type_of(a) == ValueType::kInt32 && std::get<int32_t>(a) > 0) align = std::get<int32_t>(a);
  else if (type_of(a) != ValueType::kInt32) {
    return corrupt("general.alignment has type " + std::string(value_type_name(type_of(a))) +
                   ", expected an unsigned integer");
  }
  if (align == 0 || (align & (align - 1)) != 0 || align > (1u << 30)) {
    return corrupt("general.alignment must be a power of two, got " + to_string(a));
  }
  alignment = static_cast<uint32_t>(align);
  return Status::ok();
}

// A tensor's dimension count and dimensions into t (each positive, their product within
// int64_t); returns the element count.
Expected<int64_t> read_dims(Cursor& c, TensorInfo& t) {
  const uint64_t dims_pos = c.pos();
  uint32_t n_dims = 0;
  LOOM_RETURN_IF_ERROR(c.read(&n_dims, "tensor dimension count"));
  if (n_dims > static_cast<uint32_t>(kMaxDims)) {
    return corrupt("tensor '" + t.name + "' has " + std::to_string(n_dims) + " dimensions (max 4)" + at(dims_pos));
  }
  t.n_dims = static_cast<int>(n_dims);
  int64_t n_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t ne_pos = c.pos();
    uint64_t ne = 0;
    LOOM_RETURN_IF_ERROR(c.read(&ne, "tensor dimension"));
    if (ne == 0 || ne > uint64_t(std::numeric_limits<int64_t>::max()) ||
        int64_t(ne) > std::numeric_limits<int64_t>::max() / n_elements) {
      return corrupt("tensor '" + t.name + "' has invalid dimension " + std::to_string(ne) + at(ne_pos));
    }
    t.ne[d] = static_cast<int64_t>(ne);
    n_elements *= t.ne[d];
  }
  return n_elements;
}

// One tensor info: a unique name (names: those seen so far), its dimensions, a known type whose
// blocks divide the rows, an aligned data offset, and its size in bytes.
Expected<TensorInfo> read_tensor_info(Cursor& c, uint32_t alignment, std::unordered_set<std::string>& names) {
  const uint64_t info_pos = c.pos();
  TensorInfo t;
  LOOM_RETURN_IF_ERROR(c.read_string(&t.name, "tensor name"));
  if (!names.insert(t.name).second) return corrupt("duplicate tensor name '" + t.name + "'" + at(info_pos));
  const uint64_t dims_pos = c.pos();
  LOOM_ASSIGN_OR_RETURN(const int64_t n_elements, read_dims(c, t));
  const uint64_t type_pos = c.pos();
  uint32_t type = 0;
  LOOM_RETURN_IF_ERROR(c.read(&type, "tensor type"));
  auto info = tensor_type_info(type);
  if (!info) {
    return corrupt("tensor '" + t.name + "' has unknown type id " + std::to_string(type) + at(type_pos));
  }
  t.type = static_cast<TensorType>(type);
  if (t.ne[0] % info->block_size != 0) {
    return corrupt("tensor '" + t.name + "': row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                   std::string(info->name) + " block size " + std::to_string(info->block_size) + at(dims_pos));
  }
  const uint64_t off_pos = c.pos();
  LOOM_RETURN_IF_ERROR(c.read(&t.offset, "tensor data offset"));
  if (t.offset % alignment != 0) {
    return corrupt("tensor '" + t.name + "' data offset " + std::to_string(t.offset) +
                   " is not a multiple of the alignment " + std::to_string(alignment) + at(off_pos));
  }
  const uint64_t n_blocks = uint64_t(n_elements / info->block_size);
  if (n_blocks > std::numeric_limits<uint64_t>::max() / uint64_t(info->block_bytes)) {
    return corrupt("tensor '" + t.name + "' is too large" + at(dims_pos));
  }
  t.nbytes = uint64_t(n_elements / info->block_size) * uint64_t(info->block_bytes);
  return t;
}

// The data section (at the first aligned offset after the header) of a file of `size` bytes at
// `data`: each tensor's bytes must lie within it; sets their data pointers and returns its offset.
Expected<uint64_t> place_tensor_data(std::vector<TensorInfo>& tensors, uint64_t header_end, uint32_t alignment,
                                     const uint8_t* data, uint64_t size) {
  uint64_t data_offset = (header_end + alignment - 1) / alignment * alignment;
  if (!tensors.empty() && data_offset > size) {
    return corrupt("truncated file: tensor data section starts at " + std::to_string(data_offset) +
                   " past the end of the file" + at(header_end));
  }
  const uint64_t data_size = size > data_offset ? size - data_offset : 0;
  for (auto& t : tensors) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      return corrupt("tensor '" + t.name + "' data [" + std::to_string(data_offset + t.offset) + ", " +
                     std::to_string(data_offset + t.offset + t.nbytes) + ") runs past the end of the file (" +
                     std::to_string(size) + " bytes)");
    }
    t.data = data + data_offset + t.offset;
  }
  return data_offset;
}

}  // namespace

Expected<GgufFile> GgufFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return io_error("cannot stat " + path + ": " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return io_error(path + " is not a regular file");
  }
  auto storage = std::make_shared<Storage>();
  storage->size = static_cast<size_t>(st.st_size);
  if (storage->size > 0) {
    void* p = mmap(nullptr, storage->size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return io_error("cannot mmap " + path + ": " + std::strerror(e));
    }
    storage->map = p;
    storage->data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  auto file = parse(std::move(storage), path);
  if (!file) return Status(file.status().code(), path + ": " + file.status().message());
  return file;
}

void GgufFile::release_pages(const void* p, size_t n) const {
  if (!storage_ || !storage_->map || n == 0) return;
  const auto base = reinterpret_cast<uintptr_t>(storage_->map);
  const auto lo = reinterpret_cast<uintptr_t>(p);
  if (lo < base || lo + n > base + storage_->size) return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (lo + page - 1) / page * page, last = (lo + n) / page * page;
  if (last > first)
    madvise(reinterpret_cast<void*>(first), last - first,
            MADV_DONTNEED);  // NOLINT(performance-no-int-to-ptr): page bounds are computed as integers
}

Expected<GgufFile> GgufFile::from_bytes(std::span<const uint8_t> bytes) {
  auto storage = std::make_shared<Storage>();
  storage->owned.assign(bytes.begin(), bytes.end());
  storage->data = storage->owned.data();
  storage->size = storage->owned.size();
  return parse(std::move(storage), "<memory>");
}

Expected<GgufFile> GgufFile::parse(std::shared_ptr<Storage> storage, std::string path) {
  GgufFile f;
  f.path_ = std::move(path);
  f.size_ = storage->size;
  Cursor c(storage->data, storage->size);

  LOOM_ASSIGN_OR_RETURN(const Header h, read_header(c));
  f.version_ = h.version;
  LOOM_RETURN_IF_ERROR(read_metadata(c, h.n_kv, f.kv_));
  if (const Value* a = f.find("general.alignment")) LOOM_RETURN_IF_ERROR(read_alignment(*a, f.alignment_));

  f.tensors_.reserve(h.n_tensors);
  std::unordered_set<std::string> names;
  for (uint64_t i = 0; i < h.n_tensors; ++i) {
    LOOM_ASSIGN_OR_RETURN(TensorInfo t, read_tensor_info(c, f.alignment_, names));
    f.tensors_.push_back(std::move(t));
  }
  LOOM_ASSIGN_OR_RETURN(f.data_offset_, place_tensor_data(f.tensors_, c.pos(), f.alignment_, storage->data, f.size_));
  f.storage_ = std::move(storage);
  return f;
}

const Value* GgufFile::find(std::string_view key) const {
  for (const auto& kv : kv_) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace loom::gguf
