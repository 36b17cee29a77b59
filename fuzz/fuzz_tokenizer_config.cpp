// A Hugging Face tokenizer_config.json beside a tokenizer.json, loaded and used: the config
// chooses bos and eos among the tokenizer's tokens. The tokenizer.json is the cut-down KJV one of
// the tokenizer_json seeds: the whole bundled one (72 KB) would be parsed 15 times more slowly
// every run.
#include <fstream>
#include <sstream>

#include "tokenizer_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace titan;
  static const std::string tokenizer_json = [] {
    std::ifstream in(fuzz::fs::path(TITAN_FUZZ_SOURCE_DIR) / "fuzz/corpus/tokenizer_json/kjv_small",
                     std::ios::binary);
    if (!in) std::abort();
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }();
  const fuzz::fs::path dir = fuzz::fresh_dir("tokenizer");
  fuzz::write_file(dir / "tokenizer.json", tokenizer_json);
  fuzz::write_file(dir / "tokenizer_config.json", {reinterpret_cast<const char*>(data), size});
  return fuzz::accepting_titan_errors([&] { fuzz::load_and_use_tokenizer(dir); });
}
