#include "test_util.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cctype>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

namespace loom::test {
namespace fs = std::filesystem;

std::string shared_dir() {
  if (const char* env = std::getenv("LOOM_SHARED"); env && *env) {
    if (fs::is_directory(env)) return env;
    ADD_FAILURE() << "LOOM_SHARED=" << env << " is not a directory";
    return "";
  }
  fs::path p = fs::path(LOOM_SOURCE_DIR) / ".." / "shared";
  if (fs::is_directory(p)) return fs::canonical(p).string();
  ADD_FAILURE() << "shared test data not found: set LOOM_SHARED to the shared folder or place it at " << p.string()
                << " (it holds models/ and golden/)";
  return "";
}

std::string shared_path(const std::string& rel) {
  std::string dir = shared_dir();
  if (dir.empty()) return "";
  std::string p = dir + "/" + rel;
  if (!fs::exists(p)) ADD_FAILURE() << "missing shared file: " << p;
  return p;
}

const fs::path& scratch_dir(const std::string& prefix) {
  // One folder per prefix; a static object's destructor removes them all at exit.
  struct Folders {
    std::vector<std::pair<std::string, fs::path>> made;
    ~Folders() {
      std::error_code ec;
      for (const auto& [prefix, dir] : made) fs::remove_all(dir, ec);
    }
  };
  static Folders folders;
  for (const auto& [p, dir] : folders.made) {
    if (p == prefix) return dir;
  }
  fs::path dir = fs::temp_directory_path() / (prefix + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  folders.made.emplace_back(prefix, dir);
  return folders.made.back().second;
}

std::string data_dir() { return std::string(LOOM_SOURCE_DIR) + "/tests/data"; }

std::string llama_cpp_src() {
  if (const char* e = std::getenv("LOOM_LLAMA_CPP_SRC"); e && *e) return e;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/loom-llama-cpp/src";
}
std::string loom_binary() { return std::string(LOOM_BINARY_DIR) + "/bin/loom"; }

bool under_emulator() {
#if defined(LOOM_TEST_EMULATOR)
  return true;
#else
  return false;
#endif
}

std::string loom_command() { return tool_command("loom"); }

std::string tool_command(const std::string& tool) {
  std::string cmd;
#if defined(LOOM_TEST_EMULATOR)
  // The emulator program and its arguments, separated by spaces.
  const std::string emulator = LOOM_TEST_EMULATOR;
  for (size_t at = 0; at <= emulator.size();) {
    size_t end = emulator.find(' ', at);
    if (end == std::string::npos) end = emulator.size();
    if (end > at) cmd += quote(emulator.substr(at, end - at)) + " ";
    at = end + 1;
  }
#endif
  return cmd + quote(std::string(LOOM_BINARY_DIR) + "/bin/" + tool);
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

RunResult run_loom(const std::string& args, const std::string& stdin_text) {
  RunResult r;
  char err_path[] = "/tmp/loom_test_err_XXXXXX";
  char in_path[] = "/tmp/loom_test_in_XXXXXX";
  const int err_fd = mkstemp(err_path);
  const int in_fd = mkstemp(in_path);
  if (err_fd < 0 || in_fd < 0) {
    ADD_FAILURE() << "cannot create temporary files";
    return r;
  }
  if (!stdin_text.empty() && write(in_fd, stdin_text.data(), stdin_text.size()) != ssize_t(stdin_text.size())) {
    ADD_FAILURE() << "cannot write the stdin file";
  }
  close(err_fd);
  close(in_fd);
  const std::string cmd = loom_command() + " " + args + " <" + in_path + " 2>" + err_path;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int status = pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  r.err = read_text_file(err_path);
  std::remove(err_path);
  std::remove(in_path);
  return r;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    ADD_FAILURE() << "cannot read " << path;
    return {};
  }
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<float> read_f32_file(const std::string& path) {
  auto bytes = read_file(path);
  std::vector<float> v(bytes.size() / 4);
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

std::string read_text_file(const std::string& path) {
  auto bytes = read_file(path);
  return std::string(bytes.begin(), bytes.end());
}

std::string param_name(std::string n) {
  if (auto slash = n.rfind('/'); slash != std::string::npos) n = n.substr(slash + 1);
  if (auto dot = n.find(".json"); dot != std::string::npos) n = n.substr(0, dot);
  for (char& ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<float>::infinity();
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    float d = std::fabs(a[i] - b[i]);
    if (!(d <= m)) m = d;  // NaN propagates as "not <=" -> recorded
  }
  return m;
}

double cosine(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return 0.0;
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += double(a[i]) * b[i];
    na += double(a[i]) * a[i];
    nb += double(b[i]) * b[i];
  }
  return na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : 0.0;
}

float max_abs(const std::vector<float>& a) {
  float m = 0;
  for (float x : a) m = std::max(m, std::fabs(x));
  return m;
}

}  // namespace loom::test
