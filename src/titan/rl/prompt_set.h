#pragma once
// GRPO's prompts: a JSONL file (plain or gzip), one object per line with the prompt's text and the
// reference answer its reward compares against, each prompt tokenized once as its rollouts start:
// [bos] ids, as the SFT examples' prompts are.
#include <cstdint>
#include <string>
#include <vector>

#include "titan/data/tokenizer.h"

namespace titan::rl {

struct Prompt {
  std::string text;
  std::string answer;
  std::vector<int64_t> ids;
};

struct PromptFileOptions {
  std::string path;
  std::string prompt_field = "prompt";
  std::string answer_field = "answer";
  std::string key = "grpo.prompts_path";  // what messages call `path`
  int64_t limit = 0;                      // read the first this many; 0: all
  // Tokens a prompt may take: its rollouts add up to max_new_tokens after it within the model's
  // positions.
  int64_t max_prompt_tokens = 0;
};

// Throws naming the file and line on a line that is not a JSON object, a missing or non-string
// prompt field, an answer that is neither a string nor a number, an empty prompt, or a prompt longer
// than max_prompt_tokens; and on a file without prompts.
std::vector<Prompt> read_prompts(const PromptFileOptions& options, const data::Tokenizer& tokenizer);

}  // namespace titan::rl
