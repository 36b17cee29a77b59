// A JSONL dataset file, one document per line in field "text". The input's first byte chooses
// training.bad_data (error or skip), so that both ways through a bad line are run.
#include "fuzz_input.h"
#include "titan/data/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace titan;
  if (size == 0) return 0;
  data::DatasetOptions options;
  options.bad_data = data[0] & 1 ? data::BadData::skip : data::BadData::error;
  const fuzz::fs::path path = fuzz::scratch_dir() / "fuzz.jsonl";
  fuzz::write_file(path, {reinterpret_cast<const char*>(data) + 1, size - 1});
  const std::vector<fuzz::fs::path> files{path};
  data::DatasetStats stats;
  return fuzz::accepting_titan_errors([&] {
    data::for_each_document_batch(files, options, stats, [](std::span<const std::string_view>, int64_t) {});
  });
}
