#pragma once
// What the image tests share: the reference images Pillow wrote (tests/fixtures/image_reference.py,
// run once per test process) and the shapes data set (scripts/make_shapes.py).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "support/test_util.h"

namespace titan::test {

// Runs `args` through the reference Python; false when it failed (Pillow or numpy missing).
inline bool run_python(const std::string& args) {
  const std::string cmd = std::string("'") + TITAN_PYTHON + "' " + args + " > /dev/null";
  return std::system(cmd.c_str()) == 0;
}

// The folder of reference images, or "" when the script could not run.
inline std::filesystem::path image_reference_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = fresh_temp_dir("image_reference");
    const bool ok = run_python(std::string("'") + TITAN_SOURCE_DIR + "/tests/fixtures/image_reference.py' '" +
                               d.string() + "'");
    return ok ? d : std::filesystem::path();
  }();
  return dir;
}

// `count` shapes pairs (seed 0) in a fresh folder `name`, as `extra` options say (--shards K, ...);
// "" when the script could not run.
inline std::filesystem::path make_shapes(const std::string& name, int count, const std::string& extra = "") {
  std::filesystem::path d = fresh_temp_dir(name);
  const bool ok = run_python(std::string("'") + TITAN_SOURCE_DIR + "/scripts/make_shapes.py' make --out '" +
                             d.string() + "' --count " + std::to_string(count) + " " + extra);
  return ok ? d : std::filesystem::path();
}

}  // namespace titan::test

#define TITAN_NEED_IMAGE_REFERENCE(dir) \
  if ((dir).empty())                    \
  TITAN_MISSING_REFERENCE("the reference Python (numpy, Pillow) did not run: make deps-test")
