// GGUF reader: any bytes either parse into a file whose every value and tensor can be read, or
// are refused with a Status. A parsed file survives a round trip through the writer: writing it
// again and reading that back gives the same metadata and tensors.
#include <cstdint>
#include <span>

#include "fuzz_util.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"

using namespace loom;

namespace {

void touch_values(const gguf::GgufFile& f) {
  for (const gguf::KeyValue& kv : f.metadata()) {
    (void)gguf::to_string(kv.value, 4);
    LOOM_FUZZ_CHECK(f.find(kv.key) != nullptr);
    (void)f.get_int(kv.key);
    (void)f.get_uint(kv.key);
    (void)f.get_float(kv.key);
    (void)f.get_bool(kv.key);
    (void)f.get_string(kv.key);
    if (auto a = f.get_array(kv.key); a && (*a)->is_numeric() && (*a)->count > 0) {
      (void)(*a)->number_at(0);
      (void)(*a)->int_at((*a)->count - 1);
    }
  }
  const uint64_t data_bytes = f.file_size() - f.data_offset();
  for (const gguf::TensorInfo& t : f.tensors()) {
    LOOM_FUZZ_CHECK(t.n_dims >= 0 && t.n_dims <= gguf::kMaxDims);  // 0: a scalar, as in ggml
    LOOM_FUZZ_CHECK(t.offset <= data_bytes && t.nbytes <= data_bytes - t.offset);
    LOOM_FUZZ_CHECK(f.find_tensor(t.name) != nullptr);
    // The first and last byte are readable (ASan checks the mapping bounds).
    if (t.nbytes > 0) {
      volatile uint8_t x = t.data[0];
      x = t.data[t.nbytes - 1];
      (void)x;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = gguf::GgufFile::from_bytes(std::span<const uint8_t>(data, size));
  if (!f) {
    LOOM_FUZZ_CHECK(!f.status().message().empty());
    return 0;
  }
  touch_values(*f);
  auto w = gguf::GgufWriter::from_file(*f);
  if (!w) return 0;  // e.g. a tensor name the writer refuses: reported, fine
  const std::vector<uint8_t> again = w->to_bytes();
  auto g = gguf::GgufFile::from_bytes(again);
  LOOM_FUZZ_CHECK(g.has_value());
  LOOM_FUZZ_CHECK(g->metadata().size() == f->metadata().size());
  LOOM_FUZZ_CHECK(g->tensors().size() == f->tensors().size());
  for (size_t i = 0; i < f->metadata().size(); ++i) {
    LOOM_FUZZ_CHECK(g->metadata()[i].key == f->metadata()[i].key);
    LOOM_FUZZ_CHECK(gguf::to_string(g->metadata()[i].value, 1u << 20) == gguf::to_string(f->metadata()[i].value, 1u << 20));
  }
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    const gguf::TensorInfo &a = f->tensors()[i], &b = g->tensors()[i];
    LOOM_FUZZ_CHECK(a.name == b.name && a.type == b.type && a.ne == b.ne && a.nbytes == b.nbytes);
    LOOM_FUZZ_CHECK(a.nbytes == 0 || std::memcmp(a.data, b.data, a.nbytes) == 0);
  }
  return 0;
}
