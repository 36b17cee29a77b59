// A Hugging Face model.safetensors.index.json over two shard files (tensors "a" and "b" in the
// first, "c" in the second), opened as a sharded model folder is and its tensors loaded.
#include "fuzz_input.h"
#include "titan/checkpoint/hf_checkpoint.h"

namespace {

// A safetensors file holding each of `names` as an F32 of shape [1].
std::string shard_file(const std::vector<std::string>& names) {
  std::string header = "{";
  for (size_t i = 0; i < names.size(); ++i)
    header += (i ? "," : "") + ("\"" + names[i] + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[") +
              std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
  header += "}";
  std::string file(8, '\0');
  for (size_t b = 0, n = header.size(); b < 8; ++b, n >>= 8) file[b] = static_cast<char>(n & 0xff);
  return file + header + std::string(4 * names.size(), '\0');
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace titan;
  static const std::string first = shard_file({"a", "b"}), second = shard_file({"c"});
  const fuzz::fs::path dir = fuzz::fresh_dir("hf");
  fuzz::write_file(dir / checkpoint::kHfConfigFile, "{}");
  fuzz::write_file(dir / "model-00001-of-00002.safetensors", first);
  fuzz::write_file(dir / "model-00002-of-00002.safetensors", second);
  fuzz::write_file(dir / checkpoint::kHfIndexFile, {reinterpret_cast<const char*>(data), size});
  return fuzz::accepting_titan_errors([&] {
    const checkpoint::HfReader reader(dir);
    reader.load({{"a", {1}}, {"b", {1}}, {"c", {1}}});
  });
}
