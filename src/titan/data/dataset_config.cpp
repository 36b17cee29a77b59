#include "titan/data/dataset_config.h"

#include <filesystem>

#include "titan/core/error.h"

namespace titan::data {

namespace fs = std::filesystem;

DatasetOptions DatasetConfig::options(const std::string& section) const {
  DatasetOptions o{.path = !dataset_path.empty() ? dataset_path : dataset,
                   .text_field = dataset_field,
                   .split = dataset_split == "file" ? DocumentSplit::file : DocumentSplit::blank_line,
                   .bad_data = bad_data == "skip" ? BadData::skip : BadData::error,
                   // The key the user set: dataset names a path too when dataset_path is empty.
                   .path_key = section + (dataset_path.empty() ? ".dataset" : ".dataset_path")};
  if (dataset_path.empty() && dataset == "kjv") {
    for (fs::path candidate : {fs::path("data/kjv.txt.gz"), fs::path(TITAN_SOURCE_DIR) / "data/kjv.txt.gz"})
      if (fs::exists(candidate)) {
        o.path = candidate.string();
        return o;
      }
    TITAN_CHECK(false, section,
                ".dataset = \"kjv\": the bundled corpus data/kjv.txt.gz was found neither in ",
                fs::current_path().string(), " nor in ", TITAN_SOURCE_DIR, "; set ", section,
                ".dataset_path to a text file");
  }
  return o;
}

void declare_keys(config::Keys<DatasetConfig>& keys) {
  using C = DatasetConfig;
  keys.add("dataset", &C::dataset, config::non_empty(),
           "a built-in dataset (kjv: the bundled corpus), or a path as dataset_path takes; with dataset_path "
           "set, the data's name in the log")
      .add("dataset_path", &C::dataset_path, {},
           "a file, folder or glob of text (.txt, .gz), JSONL (.jsonl, .jsonl.gz) and token shards (.tok); "
           "empty: the dataset's own")
      .add("dataset_field", &C::dataset_field, config::non_empty(),
           "JSONL: the field holding a document's text")
      .add("dataset_split", &C::dataset_split, config::one_of({"blank_line", "file"}),
           "text files: documents end at blank lines, or each file is one")
      .add("bad_data", &C::bad_data, config::one_of({"error", "skip"}),
           "invalid UTF-8, empty documents, bad JSONL lines, damaged shards: stop, or skip and count");
}

}  // namespace titan::data
