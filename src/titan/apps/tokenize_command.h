#pragma once
// `titan tokenize ...`: a corpus to token shards; see kTokenizeUsage in tokenize_command.cpp.
#include <string>
#include <vector>

namespace titan::apps {

// `args` follow the word "tokenize". Returns the process exit code.
int tokenize_command(const std::vector<std::string>& args);

}  // namespace titan::apps
