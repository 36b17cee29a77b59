// A token shard (*.tok, from `titan tokenize`): its 64-byte header, size and ids. The header's
// CRC-32C stops almost every mutation at the first check, so when the input's first byte is odd
// the rest gets a correct CRC before it is written, and the checks behind it (version, sizes,
// ids against the vocabulary) see the mutations too.
#include <cstring>

#include "fuzz_input.h"
#include "titan/core/crc32c.h"
#include "titan/data/token_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace titan;
  if (size == 0) return 0;
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  constexpr size_t kChecked = 36;  // the CRC covers bytes [0, 36) and sits at 36
  if ((data[0] & 1) && file.size() >= kChecked + 4) {
    const uint32_t crc = crc32c(std::string_view(file).substr(0, kChecked));
    std::memcpy(file.data() + kChecked, &crc, 4);  // little-endian, as the format's fields
  }
  const fuzz::fs::path path = fuzz::scratch_dir() / "fuzz.tok";
  fuzz::write_file(path, file);
  return fuzz::accepting_titan_errors([&] { data::TokenShard::open(path); });
}
