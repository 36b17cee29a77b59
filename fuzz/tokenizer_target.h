#pragma once
// What the two tokenizer targets do with the folder they wrote: load it as
// model.tokenizer_path names one, then encode and decode a text with special tokens, bytes of
// several lengths and a long run, as a run's first batch would.
#include "fuzz_input.h"
#include "titan/data/tokenizer.h"

namespace titan::fuzz {

inline void load_and_use_tokenizer(const fs::path& dir) {
  const auto tokenizer = data::load_tokenizer(dir.string());
  static constexpr std::string_view kText =
      "<|begin_of_text|>In the beginning God created the heaven and the earth.\n\n"
      "  Tabs\tand 12345 numbers, caf\xc3\xa9, \xe4\xb8\xad\xe6\x96\x87, \xf0\x9f\x98\x80!!!"
      "<|end_of_text|><|im_start|>aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa<|im_end|>";
  const std::vector<int32_t> ids = tokenizer->encode(kText);
  tokenizer->decode(ids);
}

}  // namespace titan::fuzz
