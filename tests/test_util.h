// Helpers shared by tests: locating ../shared (models, goldens) and this repo's tests/data.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <span>
#include <functional>
#include <filesystem>
#include <string>
#include <vector>

namespace loom::test {

// The shared folder: $LOOM_SHARED, else ../shared beside the repository root. Fails the current
// test (ADD_FAILURE with the paths tried) and returns "" when missing.
std::string shared_dir();
// shared_dir() + "/" + rel; fails the test with a clear message if the file does not exist.
std::string shared_path(const std::string& rel);
// This repository's tests/data folder.
std::string data_dir();
// llama.cpp's source tree (its models/ folder: vocab tests, chat templates): $LOOM_LLAMA_CPP_SRC,
// else ~/.cache/loom-llama-cpp/src, where ../shared/tools/build-llama-cpp.sh and
// scripts/fetch-llama-cpp-src.sh put it. It may be missing: tests that need it skip, saying so.
std::string llama_cpp_src();
// Path of the built loom binary (build/bin/loom).
std::string loom_binary();
// loom_binary() shell-quoted for /bin/sh, prefixed with the emulator in cross builds (the
// toolchain's CMAKE_CROSSCOMPILING_EMULATOR, e.g. qemu-aarch64 -cpu max), so that CLI tests run
// the binary the same way ctest runs the test itself.
std::string loom_command();
// The same for another program the build makes in build/bin (e.g. make_arch_variant).
std::string tool_command(const std::string& tool);
// True in cross builds whose tests run under an emulator (QEMU runs floating-point code a few
// hundred times slower: tests may then cut their sweeps to representative cases).
bool under_emulator();

// Running the built `loom` binary (CLI tests).
struct RunResult {
  int exit_code = -1;  // 128 + signal when it died of a signal
  std::string out;     // stdout
  std::string err;     // stderr
};
// Quotes a string for /bin/sh.
std::string quote(const std::string& s);
// Runs `loom ARGS` (ARGS already shell-quoted as needed), feeding `stdin_text` to its stdin.
RunResult run_loom(const std::string& args, const std::string& stdin_text = "");

// A folder of this test program's own (under the system's temp folder, named by `prefix` and the
// process id), created on first use and removed with everything in it when the program exits.
const std::filesystem::path& scratch_dir(const std::string& prefix);

std::vector<uint8_t> read_file(const std::string& path);
std::vector<float> read_f32_file(const std::string& path);
std::string read_text_file(const std::string& path);

// A GoogleTest parameter name from any text: the file name without folder and extension, with
// every character that is not a letter or digit replaced by '_'.
std::string param_name(std::string text);

// Largest |a-b| over two equally long vectors; +inf when sizes differ.
float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);
float max_abs(const std::vector<float>& a);
// Cosine similarity of two equally long vectors (0 when sizes differ or a norm is 0).
double cosine(std::span<const float> a, std::span<const float> b);

// n normally distributed floats (mean 0, standard deviation scale) from a fixed seed.
inline std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Runs body once per Highway target this build generated and this CPU supports (x86: SSE4,
// AVX2, AVX3; AArch64: NEON, SVE...), dispatch pinned to it, each run traced with its name.
// Under LOOM_FORCE_SCALAR the kernels ignore the pin and run their scalar twins.
void for_each_simd_target(const std::function<void()>& body);

}  // namespace loom::test
