#pragma once
// A parity reference made by a script of tests/parity that writes DIR/<folder> under
// `--out TITAN_PARITY_DIR`: made on first use when ctest's fixture has not, and again when the
// script is newer than its output, so that an edited script never leaves a stale reference.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "support/paths.h"

namespace titan::test {

// TITAN_PARITY_DIR/<folder>, or empty when the script failed. `marker` is a file the script
// writes inside it.
inline std::filesystem::path parity_fixture(const std::string& script, const std::string& folder,
                                            const std::string& marker) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(TITAN_PARITY_DIR) / folder;
  const fs::path source = fs::path(TITAN_SOURCE_DIR) / "tests" / "parity" / script;
  if (!fs::exists(root / marker) || fs::last_write_time(root / marker) < fs::last_write_time(source)) {
    const std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + source.string() + "' --out '" +
                            TITAN_PARITY_DIR + "' > /dev/null";
    if (std::system(cmd.c_str()) != 0) return {};
  }
  return root;
}

}  // namespace titan::test
