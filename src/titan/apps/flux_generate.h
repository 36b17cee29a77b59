#pragma once
// `titan generate --pipeline DIR --prompt TEXT --out IMAGE.png ...`: FLUX text to image; see
// kFluxGenerateUsage in flux_generate.cpp. generate_command.cpp hands over every call that names
// --pipeline.
#include <string>
#include <vector>

namespace titan::apps {

// Whether `args` (those after "generate") ask for FLUX rather than a language model.
bool is_flux_generate(const std::vector<std::string>& args);

// `args` follow the word "generate". Returns the process exit code.
int flux_generate_command(const std::vector<std::string>& args);

}  // namespace titan::apps
