// Helpers the libFuzzer targets share: splitting one input into parts, and a private scratch
// folder in /dev/shm for the parsers that only take a path (files there never touch the disk).
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::fuzz {

// Splits at NUL bytes into at most `parts` pieces (the last keeps any further NULs), so each part
// of a multi-file input is text the mutator can grow and shrink on its own.
inline std::vector<std::string> split_nul(const uint8_t* data, size_t size, size_t parts) {
  std::vector<std::string> out;
  std::string_view s(reinterpret_cast<const char*>(data), size);
  while (out.size() + 1 < parts) {
    size_t z = s.find('\0');
    if (z == std::string_view::npos) break;
    out.emplace_back(s.substr(0, z));
    s.remove_prefix(z + 1);
  }
  out.emplace_back(s);
  out.resize(parts);
  return out;
}

// A folder of this process's own (the pid keeps concurrent runs apart), removed at exit.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string d = "/dev/shm/hearth-fuzz-" + std::to_string(getpid());
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all("/dev/shm/hearth-fuzz-" + std::to_string(getpid()), ec);
    });
    return d;
  }();
  return dir;
}

// Writes BYTES to PATH, replacing it; aborts if it cannot (a full /dev/shm is not a finding).
inline void write_file(const std::string& path, std::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

// An input refused with an error, as it may be; HEARTH_FUZZ_VERBOSE=1 prints why, for seeing what
// a corpus file actually reaches when replaying it (fuzz_NAME FILE).
inline void refused(const std::exception& e) {
  static const bool verbose = std::getenv("HEARTH_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "refused: %s\n", e.what());
}

// A finding that is not a crash: a broken invariant, reported the way a crash is.
#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

}  // namespace hearth::fuzz
