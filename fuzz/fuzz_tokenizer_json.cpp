// A Hugging Face tokenizer.json (with no tokenizer_config.json beside it), loaded and used.
#include "tokenizer_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace titan;
  const fuzz::fs::path dir = fuzz::fresh_dir("tokenizer");
  fuzz::write_file(dir / "tokenizer.json", {reinterpret_cast<const char*>(data), size});
  return fuzz::accepting_titan_errors([&] { fuzz::load_and_use_tokenizer(dir); });
}
