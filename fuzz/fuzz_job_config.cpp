// The TOML job config and its --section.key=value overrides: the input's first NUL-separated part
// is the file, the others are the command line's arguments after it.
//
// A config that parses must also survive what titan does with it next: printed by
// `titan train --print-config` and read back, and kept as JSON in every checkpoint's state
// (saved_model reads it back from there). A failure of either is a finding too.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "titan/train/config/job_config.h"

namespace {

using titan::train::JobConfig;

[[noreturn]] void round_trip_failed(const char* how, const titan::Error& e) {
  std::fprintf(stderr, "a config that parses does not read back through %s: %s\n", how, e.what());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace titan;
  const std::vector<std::string_view> parts = fuzz::split_parts(data, size);
  const std::vector<std::string> overrides(parts.begin() + 1, parts.end());
  return fuzz::accepting_titan_errors([&] {
    const JobConfig cfg = train::parse_job_config(std::string(parts[0]), "fuzz.toml", overrides);
    try {
      train::parse_job_config(train::to_toml(cfg), "printed.toml", {});
    } catch (const Error& e) {
      round_trip_failed("to_toml", e);
    }
    try {
      train::job_config_from_json(nlohmann::json::parse(train::to_json(cfg).dump()), "state.config");
    } catch (const Error& e) {
      round_trip_failed("to_json", e);
    }
  });
}
