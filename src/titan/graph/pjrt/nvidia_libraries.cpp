#include "titan/graph/pjrt/nvidia_libraries.h"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace titan::graph::pjrt {

namespace {

namespace fs = std::filesystem;

// The libraries' names up to their version: CUDA 13's and CUDA 12's wheels alike.
constexpr const char* kPrefixes[] = {"libcudart.so.",  "libnvrtc.so.",    "libnvrtc-builtins.so.", "libnvJitLink.so.",
                                     "libcublasLt.so.", "libcublas.so.",  "libcufft.so.",          "libcusolver.so.",
                                     "libcusparse.so.", "libcupti.so.",   "libnccl.so.",           "libcudnn.so."};

// The index in kPrefixes of the library `name` is a version of; the array's size for none.
size_t prefix_rank(const std::string& name) {
  const auto* it = std::find_if(std::begin(kPrefixes), std::end(kPrefixes),
                                [&](const char* prefix) { return name.starts_with(prefix); });
  return static_cast<size_t>(it - std::begin(kPrefixes));
}

}  // namespace

std::vector<std::string> preload_nvidia_libraries(const std::string& plugin_path) {
  std::error_code ec;
  const fs::path nvidia = fs::path(plugin_path).parent_path().parent_path().parent_path() / "nvidia";
  if (!fs::is_directory(nvidia, ec)) return {};
  std::vector<fs::path> files;
  for (const fs::directory_entry& wheel : fs::directory_iterator(nvidia, ec)) {
    const fs::path lib = wheel.path() / "lib";
    if (!fs::is_directory(lib, ec)) continue;
    for (const fs::directory_entry& f : fs::directory_iterator(lib, ec))
      if (prefix_rank(f.path().filename().string()) < std::size(kPrefixes)) files.push_back(f.path());
  }
  // In the order of kPrefixes (what others open comes first), then by name, so that every run
  // opens them alike.
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
    return std::pair(prefix_rank(a.filename().string()), a.filename()) <
           std::pair(prefix_rank(b.filename().string()), b.filename());
  });
  std::vector<std::string> opened;
  for (const fs::path& f : files)
    if (dlopen(f.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr) opened.push_back(f.string());
  return opened;
}

}  // namespace titan::graph::pjrt
