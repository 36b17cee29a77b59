#pragma once
// `titan convert --to hf|titan ...`: Hugging Face export and import of a model's weights; see
// kConvertUsage in convert_command.cpp.
#include <string>
#include <vector>

namespace titan::apps {

// `args` follow the word "convert". Returns the process exit code.
int convert_command(const std::vector<std::string>& args);

}  // namespace titan::apps
