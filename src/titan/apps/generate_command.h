#pragma once
// `titan generate --checkpoint PATH --prompt TEXT ...`; see kGenerateUsage in generate_command.cpp.
#include <string>
#include <vector>

namespace titan::apps {

// `args` follow the word "generate". Returns the process exit code.
int generate_command(const std::vector<std::string>& args);

}  // namespace titan::apps
