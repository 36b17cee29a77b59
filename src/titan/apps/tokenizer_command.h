#pragma once
// `titan tokenizer encode|decode|train ...`; see kTokenizerUsage in tokenizer_command.cpp.
#include <string>
#include <vector>

namespace titan::apps {

// `args` follow the word "tokenizer". Returns the process exit code.
int tokenizer_command(const std::vector<std::string>& args);

}  // namespace titan::apps
