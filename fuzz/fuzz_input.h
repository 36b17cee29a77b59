#pragma once
// What the fuzz targets share. Most parsers read files by path, so a target writes its input into
// a scratch folder on tmpfs (no disk traffic per run) and hands the parser the path; the parsers
// stay as the titan command runs them.
//
// A titan::Error is the parsers' clear refusal of bad input: an accepted outcome. Any other
// exception leaves the target, and libFuzzer reports it (as an abort) with the input that threw.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "titan/core/error.h"

namespace titan::fuzz {

namespace fs = std::filesystem;

// This process's scratch folder: under $TITAN_FUZZ_SCRATCH (scripts/fuzz.sh makes one and
// removes it), else /dev/shm; one per process, so that parallel runs do not share files.
inline const fs::path& scratch_dir() {
  static const fs::path dir = [] {
    const char* root = std::getenv("TITAN_FUZZ_SCRATCH");
    fs::path d = fs::path(root ? root : "/dev/shm") / ("titan-fuzz-" + std::to_string(getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

// An empty folder `name` in the scratch folder: what the previous input left there is gone.
inline fs::path fresh_dir(const std::string& name) {
  fs::path d = scratch_dir() / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

inline void write_file(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) std::abort();  // a full tmpfs, not a finding in the parser
}

// The input's parts, split at NUL bytes: targets that take more than one piece of text (a file
// and command-line overrides) read the first part as the file and the rest as the others.
inline std::vector<std::string_view> split_parts(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t nul; (nul = all.find('\0', start)) != std::string_view::npos; start = nul + 1)
    parts.push_back(all.substr(start, nul - start));
  parts.push_back(all.substr(start));
  return parts;
}

// Runs `parse`; titan::Error is accepted, anything else propagates to libFuzzer.
template <typename F>
int accepting_titan_errors(F&& parse) {
  try {
    parse();
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace titan::fuzz
