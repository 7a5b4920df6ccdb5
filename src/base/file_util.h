// Whole-file reads and crash-safe writes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace loom {

// Writes `data` to a temporary file beside `path`, fsyncs it and renames it over `path`, so a
// reader sees either the old file or the complete new one, never a partial write (also when the
// disk fills up or the process dies midway). `what` names the file in error messages.
Status write_file_atomic(const std::string& path, std::span<const uint8_t> data, const char* what = "file");

// The whole file. `what` names the file in error messages.
Expected<std::vector<uint8_t>> read_file_bytes(const std::string& path, const char* what = "file");

}  // namespace loom
