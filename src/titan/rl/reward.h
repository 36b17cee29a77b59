#pragma once
// GRPO's rewards: a score per completion. The built-in ones check a verifiable answer (the text
// after a marker, equal to the reference or within a numeric tolerance, or a regex's capture); a
// user's program scores anything else, reading JSON lines and writing a number per line.
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace titan::rl {

struct RewardInput {
  std::string prompt, completion;
  std::string answer;  // the reference from the prompt file (may be empty)
};

struct RewardOptions {
  std::string kind = "exact";   // "exact" | "numeric" | "regex" | "program"
  std::string marker = "";      // exact, numeric: the final answer follows its last occurrence
  double tolerance = 0;         // numeric: the largest accepted |x - answer|
  bool relative = false;        // numeric: tolerance is a fraction of |answer|
  std::string pattern;          // regex (ECMAScript)
  std::string command;          // program: run through /bin/sh -c
  double timeout_seconds = 30;  // program: per score() call
};

class Reward {
 public:
  virtual ~Reward();
  // One score per input, in order.
  virtual std::vector<double> score(std::span<const RewardInput> inputs) = 0;
  // What is scored, in a phrase for the run's log.
  virtual std::string describe() const = 0;
};

// Throws on bad options, naming them as the [grpo] section's keys (grpo.reward_kind,
// grpo.reward_pattern, ...): an unknown kind, a negative tolerance, a pattern that does not
// compile, an empty command, a timeout <= 0, or an option the kind does not read set away from
// its default.
std::unique_ptr<Reward> make_reward(const RewardOptions& opts);

// The final answer of `completion`: after the last occurrence of `marker` (everywhere when it is
// empty), the first line that is not blank, trimmed of whitespace. nullopt when the marker is
// absent.
std::optional<std::string> final_answer(std::string_view completion, std::string_view marker);
// `text` as a number: an optional sign, digits (commas allowed between groups of three), an
// optional decimal part. nullopt for anything else.
std::optional<double> parse_number(std::string_view text);

}  // namespace titan::rl
