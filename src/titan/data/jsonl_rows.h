#pragma once
// What the JSONL readers share (dataset.h's documents, sft_dataset.h's examples): the lines of a
// file as JSON objects, and how a bad row is an error or a counted skip (training.bad_data).
#include <cstddef>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "titan/data/dataset.h"

namespace titan::data {

// Throws `what` with a hint at training.bad_data under BadData::error; counts a skip for `reason`
// under BadData::skip.
void skip_or_throw(const DatasetOptions& options, DatasetStats& stats, const std::string& reason,
                   const std::string& what);

// Each non-blank line of `text` (the contents of `file`) that is valid UTF-8 and a JSON object,
// with "dataset: 'file' line N" for messages and the offset just past the line; other lines go to
// skip_or_throw.
using JsonlRowFn = std::function<void(const nlohmann::json& row, const std::string& where, size_t end)>;
void for_each_jsonl_row(std::string_view text, const std::string& file, const DatasetOptions& options,
                        DatasetStats& stats, const JsonlRowFn& fn);

}  // namespace titan::data
