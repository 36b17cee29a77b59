#include "titan/core/process_malloc.h"

#include <dlfcn.h>
#include <malloc.h>

namespace titan {
namespace {

// tcmalloc's own entry points, looked up rather than linked so that this builds (and answers
// "glibc malloc") where tcmalloc is not linked.
void* tcmalloc_symbol(const char* name) {
  return dlsym(RTLD_DEFAULT, name);
}

bool malloc_is_tcmalloc() {
  void* tc = tcmalloc_symbol("tc_malloc");
  return tc != nullptr && tc == dlsym(RTLD_DEFAULT, "malloc");
}

}  // namespace

std::string process_malloc() {
  if (!malloc_is_tcmalloc()) return "glibc malloc";
  using Version = const char* (*)(int*, int*, const char**);
  const auto version = reinterpret_cast<Version>(tcmalloc_symbol("tc_version"));
  return version ? "tcmalloc (" + std::string(version(nullptr, nullptr, nullptr)) + ")" : std::string("tcmalloc");
}

void release_free_memory() {
  if (malloc_is_tcmalloc()) {
    using Release = void (*)();
    if (const auto release = reinterpret_cast<Release>(tcmalloc_symbol("MallocExtension_ReleaseFreeMemory")))
      release();
    return;
  }
  malloc_trim(0);
}

}  // namespace titan
