#pragma once
// tests/parity/flux_live_pipeline.py's diffusers FLUX folder (tiny seeded encoders of flux-tiny's
// widths) for the tests of training with the encoders run every step, unit and distributed.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "support/paths.h"

namespace titan::test {

// TITAN_PARITY_DIR/flux_live/pipeline, made (after the FLUX tokenizers it copies,
// tests/tokenizer/make_flux_fixtures.py) when missing or older than the script; "" when the
// reference Python could not make it.
inline std::filesystem::path flux_live_pipeline() {
  namespace fs = std::filesystem;
  const fs::path parity(TITAN_PARITY_DIR), source = fs::path(TITAN_SOURCE_DIR) / "tests";
  auto stale = [](const fs::path& made, const fs::path& script) {
    return !fs::exists(made) || fs::last_write_time(made) < fs::last_write_time(script);
  };
  auto run = [](const fs::path& script, const std::string& args) {
    const std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + script.string() + "' " + args + " > /dev/null 2>&1";
    return std::system(cmd.c_str()) == 0;
  };
  const fs::path tokenizers = parity / "flux_tokenizers", tokenizer_script = source / "tokenizer" / "make_flux_fixtures.py";
  if (stale(tokenizers / "clip" / "reference.json", tokenizer_script) &&
      !run(tokenizer_script, "--out '" + tokenizers.string() + "'"))
    return {};
  const fs::path out = parity / "flux_live", script = source / "parity" / "flux_live_pipeline.py";
  if (stale(out / "pipeline" / "vae" / "config.json", script) &&
      !run(script, "--tokenizers '" + tokenizers.string() + "' --out '" + out.string() + "'"))
    return {};
  return out / "pipeline";
}

}  // namespace titan::test
