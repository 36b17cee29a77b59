#pragma once
// Small helpers the subcommands share to read their arguments.
#include <cstdint>
#include <string>

namespace titan::apps {

// `value` as a whole number; a clear error naming `command` and `flag` otherwise.
int64_t parse_whole_number(const std::string& command, const std::string& flag, const std::string& value);

}  // namespace titan::apps
