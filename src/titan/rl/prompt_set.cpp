#include "titan/rl/prompt_set.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "titan/core/error.h"
#include "titan/data/text_dataset.h"

namespace titan::rl {

std::vector<Prompt> read_prompts(const PromptFileOptions& o, const data::Tokenizer& tokenizer) {
  const std::string text = data::read_text_file(o.path);
  std::vector<Prompt> prompts;
  std::istringstream lines(text);
  std::string line;
  for (int64_t number = 1;
       std::getline(lines, line) && (o.limit == 0 || static_cast<int64_t>(prompts.size()) < o.limit);
       ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = o.key + " " + o.path + ":" + std::to_string(number);
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    TITAN_CHECK(row.is_object(), where, ": expected one JSON object per line");
    const auto prompt = row.find(o.prompt_field);
    TITAN_CHECK(prompt != row.end() && prompt->is_string(), where, ": expected a string field \"",
                o.prompt_field, "\" (grpo.prompt_field)");
    Prompt p{.text = prompt->get<std::string>(), .answer = {}, .ids = {}};
    TITAN_CHECK(!p.text.empty(), where, ": the prompt is empty");
    if (const auto answer = row.find(o.answer_field); answer != row.end()) {
      TITAN_CHECK(answer->is_string() || answer->is_number(), where, ": field \"", o.answer_field,
                  "\" must be a string or a number, found ", answer->type_name());
      p.answer = answer->is_string() ? answer->get<std::string>() : answer->dump();
    }
    if (const std::optional<int32_t> bos = tokenizer.bos_id()) p.ids.push_back(*bos);
    for (int32_t id : tokenizer.encode(p.text)) p.ids.push_back(id);
    TITAN_CHECK(
        o.max_prompt_tokens <= 0 || static_cast<int64_t>(p.ids.size()) <= o.max_prompt_tokens, where,
        ": the prompt takes ", p.ids.size(), " tokens, more than the ", o.max_prompt_tokens,
        " that training.seq_len leaves before grpo.max_new_tokens; shorten it or raise training.seq_len");
    prompts.push_back(std::move(p));
  }
  TITAN_CHECK(!prompts.empty(), o.key, " ", o.path, ": no prompts in the file");
  return prompts;
}

}  // namespace titan::rl
