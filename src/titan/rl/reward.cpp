#include "titan/rl/reward.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <regex>
#include <sstream>

#include "titan/core/error.h"
#include "titan/rl/reward_program.h"

namespace titan::rl {

namespace {

constexpr std::string_view kWhitespace = " \t\r\n\f\v";

std::string_view trim(std::string_view s) {
  const size_t first = s.find_first_not_of(kWhitespace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kWhitespace) - first + 1);
}

std::string after_marker_phrase(const std::string& marker) {
  return marker.empty() ? std::string("the completion") : "the text after the last \"" + marker + "\"";
}

class ExactReward : public Reward {
 public:
  explicit ExactReward(std::string marker) : marker_(std::move(marker)) {}

  std::vector<double> score(std::span<const RewardInput> inputs) override {
    std::vector<double> scores;
    scores.reserve(inputs.size());
    for (const RewardInput& in : inputs) {
      const std::optional<std::string> got = final_answer(in.completion, marker_);
      scores.push_back(got && *got == trim(in.answer) ? 1.0 : 0.0);
    }
    return scores;
  }

  std::string describe() const override {
    return "exact: " + after_marker_phrase(marker_) + " equals the answer";
  }

 private:
  std::string marker_;
};

class NumericReward : public Reward {
 public:
  NumericReward(std::string marker, double tolerance, bool relative)
      : marker_(std::move(marker)), tolerance_(tolerance), relative_(relative) {}

  std::vector<double> score(std::span<const RewardInput> inputs) override {
    std::vector<double> scores;
    scores.reserve(inputs.size());
    for (const RewardInput& in : inputs) {
      const std::optional<double> want = parse_number(trim(in.answer));
      // A bad reference is the prompt file's fault, not the model's: scoring it 0 would hide it.
      TITAN_CHECK(want, "grpo.reward_kind = \"numeric\": the answer \"", in.answer, "\" of prompt \"",
                  in.prompt,
                  "\" is not a number; give numeric answers in the prompt file, or use grpo.reward_kind = "
                  "\"exact\"");
      const std::optional<std::string> text = final_answer(in.completion, marker_);
      const std::optional<double> got = text ? parse_number(*text) : std::nullopt;
      scores.push_back(got && within(*got, *want) ? 1.0 : 0.0);
    }
    return scores;
  }

  // |got - want| <= the tolerance as the decimals read: 2.9 is within 0.1 of 3, though 3 - 2.9 is
  // 0.1000000000000001 in binary; a few units in the last place of the numbers cover that.
  bool within(double got, double want) const {
    const double allowed = relative_ ? tolerance_ * std::abs(want) : tolerance_;
    const double rounding =
        4 * std::numeric_limits<double>::epsilon() * std::max(std::abs(got), std::abs(want));
    return std::abs(got - want) <= allowed + rounding;
  }

  std::string describe() const override {
    std::ostringstream s;
    s << "numeric: " << after_marker_phrase(marker_) << " is within " << tolerance_
      << (relative_ ? " x |answer|" : "") << " of the answer";
    return s.str();
  }

 private:
  std::string marker_;
  double tolerance_;
  bool relative_;
};

class RegexReward : public Reward {
 public:
  explicit RegexReward(const std::string& pattern) : pattern_(pattern) {
    try {
      regex_ = std::regex(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      TITAN_CHECK(false, "grpo.reward_pattern = \"", pattern, "\" is not an ECMAScript regular expression (",
                  e.what(), ")");
    }
  }

  std::vector<double> score(std::span<const RewardInput> inputs) override {
    std::vector<double> scores;
    scores.reserve(inputs.size());
    for (const RewardInput& in : inputs) scores.push_back(matches(in) ? 1.0 : 0.0);
    return scores;
  }

  std::string describe() const override {
    return regex_.mark_count() > 0
               ? "regex: group 1 of the last match of \"" + pattern_ + "\" equals the answer"
               : "regex: the completion matches \"" + pattern_ + "\"";
  }

 private:
  bool matches(const RewardInput& in) const {
    try {
      if (regex_.mark_count() == 0) return std::regex_search(in.completion, regex_);
      std::smatch last;
      for (auto it = std::sregex_iterator(in.completion.begin(), in.completion.end(), regex_);
           it != std::sregex_iterator(); ++it)
        last = *it;
      return !last.empty() && last[1].matched && trim(last.str(1)) == trim(in.answer);
    } catch (const std::regex_error& e) {
      // libstdc++ matches by backtracking; a pattern such as (a*)*b can exhaust it on a long
      // completion.
      TITAN_CHECK(false, "grpo.reward_pattern = \"", pattern_, "\" failed on a completion of ",
                  in.completion.size(), " bytes (", e.what(), "); simplify the pattern (nested repetitions)");
    }
  }

  std::string pattern_;
  std::regex regex_;
};

// Throws when an option that `kind` does not read is set: a key that is ignored would leave the
// user believing it works.
void refuse_unread_options(const RewardOptions& opts) {
  const RewardOptions defaults;
  struct Option {
    const char* key;
    bool set;
    std::vector<std::string_view> read_by;
  };
  const Option options[] = {
      {"grpo.reward_marker", opts.marker != defaults.marker, {"exact", "numeric"}},
      {"grpo.reward_tolerance", opts.tolerance != defaults.tolerance, {"numeric"}},
      {"grpo.reward_relative", opts.relative != defaults.relative, {"numeric"}},
      {"grpo.reward_pattern", opts.pattern != defaults.pattern, {"regex"}},
      {"grpo.reward_command", opts.command != defaults.command, {"program"}},
      {"grpo.reward_timeout_seconds", opts.timeout_seconds != defaults.timeout_seconds, {"program"}},
  };
  for (const Option& o : options) {
    const bool read = std::find(o.read_by.begin(), o.read_by.end(), opts.kind) != o.read_by.end();
    std::string readers;
    for (std::string_view k : o.read_by)
      readers += (readers.empty() ? "\"" : " or \"") + std::string(k) + "\"";
    TITAN_CHECK(read || !o.set, o.key, " is set but grpo.reward_kind = \"", opts.kind,
                "\" does not read it (only ", readers, " does); remove it or change grpo.reward_kind");
  }
}

}  // namespace

Reward::~Reward() = default;

std::optional<std::string> final_answer(std::string_view completion, std::string_view marker) {
  std::string_view rest = completion;
  if (!marker.empty()) {
    const size_t at = completion.rfind(marker);
    if (at == std::string_view::npos) return std::nullopt;
    rest = completion.substr(at + marker.size());
  }
  const size_t start = rest.find_first_not_of(kWhitespace);
  if (start == std::string_view::npos) return std::string();
  rest = rest.substr(start);
  return std::string(trim(rest.substr(0, rest.find('\n'))));
}

std::optional<double> parse_number(std::string_view text) {
  static const std::regex number(R"([+-]?(\d+|\d{1,3}(,\d{3})+)?(\.\d*)?)");
  if (!std::regex_match(text.begin(), text.end(), number)) return std::nullopt;
  std::string digits;
  for (char c : text)
    if (c != ',' && c != '+') digits += c;
  if (digits.find_first_of("0123456789") == std::string::npos) return std::nullopt;
  double value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::unique_ptr<Reward> make_reward(const RewardOptions& opts) {
  TITAN_CHECK(
      opts.kind == "exact" || opts.kind == "numeric" || opts.kind == "regex" || opts.kind == "program",
      "grpo.reward_kind = \"", opts.kind,
      "\" is not a reward; use \"exact\", \"numeric\", \"regex\" or \"program\"");
  refuse_unread_options(opts);
  if (opts.kind == "exact") return std::make_unique<ExactReward>(opts.marker);
  if (opts.kind == "numeric") {
    TITAN_CHECK(std::isfinite(opts.tolerance) && opts.tolerance >= 0,
                "grpo.reward_tolerance = ", opts.tolerance,
                " must be a finite number >= 0 (0: the answer exactly)");
    return std::make_unique<NumericReward>(opts.marker, opts.tolerance, opts.relative);
  }
  if (opts.kind == "regex") {
    TITAN_CHECK(!opts.pattern.empty(),
                "grpo.reward_kind = \"regex\" needs grpo.reward_pattern (an ECMAScript "
                "regular expression; with a group, group 1 is compared with the answer)");
    return std::make_unique<RegexReward>(opts.pattern);
  }
  return make_program_reward(opts.command, opts.timeout_seconds);
}

}  // namespace titan::rl
