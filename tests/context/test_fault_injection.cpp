// Fault injection: nothing is lost and nothing crashes when the world misbehaves.
//   - every allocation of a model load and of a context creation fails in turn (a replacement
//     operator new counts them): a clean kResourceExhausted, then a normal load works;
//   - files truncated on disk at many lengths (model, state, LoRA): clean errors, the context
//     unchanged;
//   - the abort callback firing at each of its polls in a multi-micro-batch decode: kAborted,
//     and every sequence's KV cells byte for byte as before;
//   - a state save that fails midway (a file size limit: the disk is full) or cannot start: the
//     previous file intact, no temporary file left behind.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>

#include "context_test_util.h"
#include "model/adapters.h"

namespace {

// Allocation countdown for the calling thread only (worker threads allocate freely): the n-th
// allocation after arm(n) throws std::bad_alloc (nothrow forms return null), once.
thread_local long t_countdown = -1;

bool fail_now() {
  if (t_countdown < 0) return false;
  return t_countdown-- == 0;
}

void* allocate(size_t n, size_t align) {
  if (n == 0) n = 1;
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align) : std::malloc(n);
  return p;
}

}  // namespace

// GCC sees through the replacement and warns that free() does not match `new`: here it does.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(size_t n) {
  if (fail_now()) throw std::bad_alloc();
  if (void* p = allocate(n, 0)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return ::operator new(n); }
void* operator new(size_t n, std::align_val_t a) {
  if (fail_now()) throw std::bad_alloc();
  if (void* p = allocate(n, size_t(a))) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n, std::align_val_t a) { return ::operator new(n, a); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return fail_now() ? nullptr : allocate(n, 0); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return fail_now() ? nullptr : allocate(n, 0); }
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return fail_now() ? nullptr : allocate(n, size_t(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace loom::test {
namespace {

constexpr const char* kModel = "models/stories260K.gguf";

// Allocations `f` makes on this thread.
template <typename F>
long count_allocations(F&& f) {
  const long start = long(1) << 40;
  t_countdown = start;
  f();
  const long used = start - t_countdown;
  t_countdown = -1;
  return used;
}

// Runs f (returning a Status) with its k-th allocation failing, for every k below `total` when
// that is at most `samples`, else for the first 64 and `samples` more spread over the range. Each
// failure must be a clean kResourceExhausted (or nothing, where the code can do without).
template <typename F>
void fail_each_allocation(long total, long samples, F&& f) {
  const long step = total <= samples ? 1 : total / samples;
  for (long k = 0; k < total; k += (k < 64 ? 1 : step)) {
    t_countdown = k;
    const Status st = f();
    t_countdown = -1;
    if (st.is_ok()) continue;
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << "allocation " << k << ": " << st.message();
    EXPECT_NE(st.message().find("out of memory"), std::string::npos) << st.message();
  }
}

TEST(FaultInjection, AllocationFailureAtLoadIsAnError) {
  const std::string path = shared_path(kModel);
  const long total = count_allocations([&] { ASSERT_TRUE(Model::load(path).has_value()); });
  ASSERT_GT(total, 10);
  fail_each_allocation(total, 2000, [&] { return Model::load(path).status(); });
  EXPECT_TRUE(Model::load(path).has_value());
}

TEST(FaultInjection, AllocationFailureAtContextCreationIsAnError) {
  auto model = load_shared_model(kModel);
  ContextParams cp = small_params(64, 2);
  cp.n_threads = 3;  // the pool starts two workers: a failure after the first one is started
  const long total = count_allocations([&] { ASSERT_TRUE(Context::create(model, cp).has_value()); });
  ASSERT_GT(total, 5);
  fail_each_allocation(total, 1000, [&] { return Context::create(model, cp).status(); });
  auto ctx = new_context(model, cp);
  ASSERT_TRUE(ctx);
  feed(*ctx, {1, 403, 407}, 0);
}

TEST(FaultInjection, AbortAtEveryPollLeavesTheCacheByteIdentical) {
  auto model = load_shared_model(kModel);
  ContextParams cp = small_params(64, 2);
  cp.n_ubatch = 4;
  auto ctx = new_context(model, cp);
  feed(*ctx, {1, 403, 407, 261, 108}, 0, 0);
  feed(*ctx, {1, 9, 33}, 0, 1);
  const std::vector<uint8_t> s0 = *ctx->seq_state_save(0), s1 = *ctx->seq_state_save(1);
  // Tokens of both sequences, several micro-batches.
  Batch b;
  for (int i = 0; i < 7; ++i) {
    b.tokens.push_back(300 + i);
    b.pos.push_back(5 + i);
    b.seq_ids.push_back({0});
    b.tokens.push_back(200 + i);
    b.pos.push_back(3 + i);
    b.seq_ids.push_back({1});
  }
  struct Poll {
    int calls = 0, abort_at = -1;
  } poll;
  auto cb = [](void* d) {
    auto* p = static_cast<Poll*>(d);
    return p->calls++ == p->abort_at;
  };
  ctx->set_abort_callback(cb, &poll);
  // How many times one decode polls (without aborting); then back to the saved cells.
  ASSERT_TRUE(ctx->decode(b).is_ok());
  const int polls = poll.calls;
  ASSERT_GE(polls, 2 * model->hparams().n_layer);
  ASSERT_TRUE(ctx->seq_rm(0, 5, -1).is_ok());
  ASSERT_TRUE(ctx->seq_rm(1, 3, -1).is_ok());
  ASSERT_EQ(*ctx->seq_state_save(0), s0);
  for (int k = 0; k < polls; ++k) {
    poll = {0, k};
    const Status st = ctx->decode(b);
    ASSERT_EQ(st.code(), StatusCode::kAborted) << "abort at poll " << k << ": " << st.message();
    EXPECT_EQ(*ctx->seq_state_save(0), s0) << "abort at poll " << k;
    EXPECT_EQ(*ctx->seq_state_save(1), s1) << "abort at poll " << k;
    EXPECT_EQ(ctx->kv().used(), 8);
  }
  poll = {0, -1};
  EXPECT_TRUE(ctx->decode(b).is_ok());
  // A batch without room changes nothing, not even a pending shift (found by the capi target:
  // the shift used to be applied before the room check).
  ASSERT_TRUE(ctx->seq_add(0, 0, -1, 3).is_ok());
  const std::vector<uint8_t> shifted = *ctx->seq_state_save(0);
  Batch big = Batch::from_tokens(std::vector<int32_t>(60, 7), 100, 1);
  EXPECT_EQ(ctx->decode(big).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(*ctx->seq_state_save(0), shifted);
}

// ---- files ----

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("loom_fault_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Names in the directory (to see that no temporary file was left).
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const auto& e : std::filesystem::directory_iterator(path_)) n.push_back(e.path().filename().string());
    std::sort(n.begin(), n.end());
    return n;
  }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_all(const std::string& path, const std::vector<uint8_t>& bytes, size_t n) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(n));
}

// Prefix lengths to try for a file of `size` bytes: every one of the first 256, then ~200 more.
std::vector<size_t> cut_points(size_t size) {
  std::vector<size_t> cuts;
  for (size_t n = 0; n < size && n < 256; ++n) cuts.push_back(n);
  for (size_t n = 256; n < size; n += std::max<size_t>(1, size / 200)) cuts.push_back(n);
  cuts.push_back(size - 1);
  return cuts;
}

TEST(FaultInjection, TruncatedModelFilesAreRefused) {
  TempDir dir;
  const std::vector<uint8_t> bytes = read_all(shared_path(kModel));
  const std::string path = dir.file("model.gguf");
  for (size_t n : cut_points(bytes.size())) {
    write_all(path, bytes, n);
    auto m = Model::load(path);
    ASSERT_FALSE(m.has_value()) << "a model cut at " << n << " of " << bytes.size() << " bytes loaded";
    EXPECT_FALSE(m.status().message().empty());
  }
}

TEST(FaultInjection, TruncatedStateAndAdapterFilesChangeNothing) {
  TempDir dir;
  auto model = load_shared_model(kModel);
  auto ctx = new_context(model, small_params(64, 2));
  feed(*ctx, {1, 403, 407, 261}, 0);
  const std::string whole = dir.file("whole.state"), seq = dir.file("seq.state");
  ASSERT_TRUE(ctx->state_save_file(whole, std::vector<int32_t>{1, 403, 407, 261}).is_ok());
  ASSERT_TRUE(ctx->seq_state_save_file(seq, 0, std::vector<int32_t>{1, 403, 407, 261}).is_ok());
  feed(*ctx, {9, 33}, 4);
  const std::vector<uint8_t> before = ctx->state_save();
  for (const std::string& file : {whole, seq}) {
    const std::vector<uint8_t> bytes = read_all(file);
    const std::string cut = dir.file("cut.state");
    for (size_t n : cut_points(bytes.size())) {
      write_all(cut, bytes, n);
      std::vector<int32_t> tokens;
      const Status st = file == whole ? ctx->state_load_file(cut, &tokens) : ctx->seq_state_load_file(cut, 1, &tokens);
      ASSERT_FALSE(st.is_ok()) << file << " cut at " << n;
      ASSERT_EQ(ctx->state_save(), before) << file << " cut at " << n;
    }
  }
  // A LoRA adapter cut short, against its base model.
  auto base = load_shared_model("golden/adapters/synth-llama-lorabase-f32.gguf");
  const std::vector<uint8_t> lora = read_all(shared_path("golden/adapters/lora-C-embd-output.gguf"));
  const std::string cut = dir.file("cut.gguf");
  for (size_t n : cut_points(lora.size())) {
    write_all(cut, lora, n);
    EXPECT_FALSE(LoraAdapter::load(cut, *base).has_value()) << "LoRA cut at " << n;
    EXPECT_FALSE(ControlVector::load(cut, 1.0f).has_value()) << "control vector cut at " << n;
  }
}

// Runs f with the process's file size limit at `limit` bytes (writes past it fail with EFBIG, as
// on a full disk; SIGXFSZ is ignored meanwhile).
template <typename F>
void with_file_size_limit(rlim_t limit, F&& f) {
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit lim = old;
  lim.rlim_cur = limit;
  auto* prev = signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  f();
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, prev);
}

TEST(FaultInjection, FailedStateSaveKeepsThePreviousFile) {
  TempDir dir;
  auto model = load_shared_model(kModel);
  auto ctx = new_context(model, small_params(64, 2));
  feed(*ctx, {1, 403, 407}, 0);
  const std::string whole = dir.file("whole.state"), seq = dir.file("seq.state");
  ASSERT_TRUE(ctx->state_save_file(whole).is_ok());
  ASSERT_TRUE(ctx->seq_state_save_file(seq, 0).is_ok());
  const std::vector<uint8_t> whole_before = read_all(whole), seq_before = read_all(seq);
  feed(*ctx, {261, 108, 9, 33, 44, 55, 66}, 3);  // the new states are larger
  ASSERT_GT(ctx->state_save().size(), whole_before.size());
  for (rlim_t limit : {rlim_t(0), rlim_t(1), rlim_t(100), rlim_t(whole_before.size() / 2), rlim_t(whole_before.size())}) {
    with_file_size_limit(limit, [&] {
      const Status a = ctx->state_save_file(whole);
      const Status b = ctx->seq_state_save_file(seq, 0);
      EXPECT_EQ(a.code(), StatusCode::kIo) << "limit " << limit << ": " << a.message();
      EXPECT_EQ(b.code(), StatusCode::kIo) << "limit " << limit << ": " << b.message();
    });
    EXPECT_EQ(read_all(whole), whole_before) << "limit " << limit;
    EXPECT_EQ(read_all(seq), seq_before) << "limit " << limit;
    EXPECT_EQ(dir.names(), (std::vector<std::string>{"seq.state", "whole.state"})) << "a temporary file was left";
  }
  // A directory that does not exist, and a path that is a directory: errors, nothing created.
  EXPECT_EQ(ctx->state_save_file(dir.file("missing/x.state")).code(), StatusCode::kIo);
  std::filesystem::create_directory(dir.file("sub"));
  EXPECT_EQ(ctx->state_save_file(dir.file("sub")).code(), StatusCode::kIo);
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"seq.state", "sub", "whole.state"}));
  // And the previous files still load.
  auto other = new_context(model, small_params(64, 2));
  EXPECT_TRUE(other->state_load_file(whole).is_ok());
  EXPECT_TRUE(other->seq_state_load_file(seq, 1).is_ok());
}

}  // namespace
}  // namespace loom::test
