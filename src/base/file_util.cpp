#include "base/file_util.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace loom {

Status write_file_atomic(const std::string& path, std::span<const uint8_t> data, const char* what) {
  // pid + a process-wide counter: concurrent writers (threads or processes) never share a temporary.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return io_error(std::string("cannot write ") + what + " " + tmp + ": " + std::strerror(errno));
  const bool ok =
      std::fwrite(data.data(), 1, data.size(), f) == data.size() && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return io_error(std::string("cannot write ") + what + " " + path + (ok ? "" : std::string(": ") + std::strerror(err)));
  }
  return Status::ok();
}

Expected<std::vector<uint8_t>> read_file_bytes(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error(std::string("cannot open ") + what + " " + path);
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return io_error(std::string("cannot read ") + what + " " + path);
  return data;
}

}  // namespace loom
