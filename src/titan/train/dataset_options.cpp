#include "titan/train/dataset_options.h"

#include <filesystem>

#include "titan/core/error.h"

namespace titan::train {

namespace fs = std::filesystem;

data::DatasetOptions dataset_options(const std::string& section, const std::string& dataset,
                                     const std::string& dataset_path, const JobConfig::Training& format) {
  data::DatasetOptions o{
      .path = !dataset_path.empty() ? dataset_path : dataset,
      .text_field = format.dataset_field,
      .split = format.dataset_split == "file" ? data::DocumentSplit::file : data::DocumentSplit::blank_line,
      .bad_data = format.bad_data == "skip" ? data::BadData::skip : data::BadData::error};
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

}  // namespace titan::train
