#pragma once
// Errors a user can act on: TITAN_CHECK(cond, parts...) throws titan::Error whose message is
// the concatenation of `parts` (anything with operator<<); what() adds the failing condition's
// source location, which helps a report of an internal failure. Messages about a user's input
// (a config key, a file) are shown with message(): they must say all a user needs on their own.
#include <sstream>
#include <stdexcept>
#include <string>

namespace titan {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, const std::string& location = "")
      : std::runtime_error(location.empty() ? message : message + "  [" + location + "]"), message_(message) {}
  // The message without the source location.
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// `message` as one printed error: its trailing whitespace (newlines a message ends with, or a
// usage text's) replaced by exactly one newline, so that what follows starts a line of its own.
inline std::string as_error_line(std::string message) {
  message.erase(message.find_last_not_of(" \t\r\n") + 1);
  return message + "\n";
}

namespace detail {
template <typename... Parts>
[[noreturn]] void fail(const char* file, int line, const char* cond, const Parts&... parts) {
  std::ostringstream message, location;
  ((message << parts), ...);
  location << "check `" << cond << "` failed at " << file << ":" << line;
  throw Error(message.str(), location.str());
}
}  // namespace detail

}  // namespace titan

#define TITAN_CHECK(cond, ...)                                                   \
  do {                                                                           \
    if (!(cond)) [[unlikely]] {                                                  \
      ::titan::detail::fail(__FILE__, __LINE__, #cond __VA_OPT__(, ) __VA_ARGS__); \
    }                                                                            \
  } while (0)
