// LoRA adapter and control-vector files (GGUF) against a base model. Input: [flags] GGUF bytes.
// Either the file is refused with a Status, or the adapter attaches to a context and a decode
// with it runs. Seeds: ../shared/golden/adapters.
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "context/context.h"
#include "fuzz_util.h"
#include "gguf/gguf.h"

using namespace loom;

namespace {
std::unique_ptr<Context>* g_ctx = nullptr;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto model = Model::load(fuzz::shared_file("golden/adapters/synth-llama-lorabase-f32.gguf"));
  LOOM_FUZZ_CHECK(model.has_value());
  ContextParams cp;
  cp.n_ctx = 16;
  cp.n_batch = 16;
  cp.n_ubatch = 16;
  cp.n_threads = 1;
  auto ctx = Context::create(*model, cp);
  LOOM_FUZZ_CHECK(ctx.has_value());
  g_ctx = new std::unique_ptr<Context>(std::move(*ctx));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Context& c = **g_ctx;
  const uint8_t flags = data[0];
  auto f = gguf::GgufFile::from_bytes(std::span<const uint8_t>(data + 1, size - 1));
  if (!f) return 0;
  const std::vector<int32_t> prompt{1, 2, 3};
  if (flags & 1) {
    auto cv = ControlVector::from_gguf(*f, (flags & 2) ? -0.5f : 1.0f);
    if (!cv) {
      LOOM_FUZZ_CHECK(!cv.status().message().empty());
      return 0;
    }
    const int il_start = (flags >> 2) % 4, il_end = il_start + (flags >> 4) % 4;
    const Status st = c.set_control_vector(cv->data, cv->n_embd, il_start, il_end);
    if (!st) return 0;
  } else {
    auto lora = LoraAdapter::from_gguf(*f, c.model());
    if (!lora) {
      LOOM_FUZZ_CHECK(!lora.status().message().empty());
      return 0;
    }
    if (!c.set_lora(*lora, (flags & 2) ? 0.5f : 1.0f)) return 0;
  }
  c.kv_clear();
  (void)c.decode(Batch::from_tokens(prompt, 0, 0));
  c.clear_lora();
  (void)c.set_control_vector({}, 0, 0, 0);
  c.kv_clear();
  return 0;
}
