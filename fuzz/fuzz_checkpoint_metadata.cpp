// A titan checkpoint's metadata.json, read as `titan train` resumes and `titan generate` loads.
#include "fuzz_input.h"
#include "titan/checkpoint/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace titan;
  const fuzz::fs::path dir = fuzz::fresh_dir("checkpoint");
  fuzz::write_file(dir / checkpoint::kMetadataFile, {reinterpret_cast<const char*>(data), size});
  return fuzz::accepting_titan_errors([&] { checkpoint::read_metadata(dir); });
}
