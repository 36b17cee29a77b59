#include "titan/data/jsonl_rows.h"

#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/data/utf8.h"

namespace titan::data {

void skip_or_throw(const DatasetOptions& options, DatasetStats& stats, const std::string& reason,
                   const std::string& what) {
  TITAN_CHECK(options.bad_data == BadData::skip, what,
              "; fix the data, or set training.bad_data = \"skip\" to skip and count such documents");
  ++stats.skipped[reason];
}

void for_each_jsonl_row(std::string_view text, const std::string& file, const DatasetOptions& options,
                        DatasetStats& stats, const JsonlRowFn& fn) {
  size_t pos = 0;
  for (int64_t line_no = 1; pos < text.size(); ++line_no) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = "dataset: '" + file + "' line " + std::to_string(line_no);
    if (size_t i = find_invalid_utf8(line); i != std::string_view::npos) {
      skip_or_throw(options, stats, "not UTF-8",
                    where + ": byte " + std::to_string(i) + " is not valid UTF-8");
      continue;
    }
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      skip_or_throw(options, stats, "not JSON objects", where + " is not a JSON object");
      continue;
    }
    fn(j, where, end);
  }
}

}  // namespace titan::data
