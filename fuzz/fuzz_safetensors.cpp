// A safetensors file: header length, JSON header, then every tensor read out of the data section.
#include "fuzz_input.h"
#include "titan/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace titan;
  const fuzz::fs::path path = fuzz::scratch_dir() / "fuzz.safetensors";
  fuzz::write_file(path, {reinterpret_cast<const char*>(data), size});
  return fuzz::accepting_titan_errors([&] { checkpoint::read_safetensors(path.string()); });
}
