#include "titan/apps/args.h"

#include <exception>

#include "titan/core/error.h"

namespace titan::apps {

int64_t parse_whole_number(const std::string& command, const std::string& flag, const std::string& value) {
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TITAN_CHECK(used == value.size() && used > 0, command, ": ", flag, " wants a whole number, got '", value, "'");
  return n;
}

}  // namespace titan::apps
