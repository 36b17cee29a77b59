#pragma once
// `titan flux ...`: FLUX's tools; see kFluxUsage in flux_command.cpp.
#include <string>
#include <vector>

namespace titan::apps {

// `args` follow the word "flux". Returns the process exit code.
int flux_command(const std::vector<std::string>& args);

}  // namespace titan::apps
