#pragma once
// Errors a user can act on: TITAN_CHECK(cond, parts...) throws titan::Error whose message is
// the concatenation of `parts` (anything with operator<<), prefixed by the failing condition's
// source location. Ops name themselves, their shapes and dtypes in `parts`.
#include <sstream>
#include <stdexcept>
#include <string>

namespace titan {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Parts>
[[noreturn]] void fail(const char* file, int line, const char* cond, const Parts&... parts) {
  std::ostringstream os;
  ((os << parts), ...);
  os << "  [check `" << cond << "` failed at " << file << ":" << line << "]";
  throw Error(os.str());
}
}  // namespace detail

}  // namespace titan

#define TITAN_CHECK(cond, ...)                                                   \
  do {                                                                           \
    if (!(cond)) [[unlikely]] {                                                  \
      ::titan::detail::fail(__FILE__, __LINE__, #cond __VA_OPT__(, ) __VA_ARGS__); \
    }                                                                            \
  } while (0)
