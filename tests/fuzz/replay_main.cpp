// main() of a fuzz target outside libFuzzer (the plain and sanitizer builds): runs the target once
// on every file named on the command line or found (recursively) in a named directory, in sorted
// order, so CTest replays the seed corpora and every crash input found so far. A failing input
// aborts the process, and the test, with the file's name printed just before.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path p = argv[i];
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p)) {
        if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
      }
    } else if (fs::exists(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "replay: %s does not exist\n", p.c_str());
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", f.c_str(), bytes.size());
    // A copy of exactly the input's size, so ASan sees reads past its end.
    std::vector<uint8_t> data(bytes.begin(), bytes.end());
    static uint8_t none = 0;  // libFuzzer never passes a null pointer, even for an empty input
    LLVMFuzzerTestOneInput(data.empty() ? &none : data.data(), data.size());
  }
  std::printf("replayed %zu inputs\n", files.size());
  return 0;
}
