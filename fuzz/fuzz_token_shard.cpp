// A token shard (*.tok, from `titan tokenize`): its 64-byte header, size and ids.
#include "fuzz_input.h"
#include "titan/data/token_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace titan;
  const fuzz::fs::path path = fuzz::scratch_dir() / "fuzz.tok";
  fuzz::write_file(path, {reinterpret_cast<const char*>(data), size});
  return fuzz::accepting_titan_errors([&] { data::TokenShard::open(path); });
}
