#include "titan/data/sft_dataset.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/data/jsonl_rows.h"
#include "titan/data/text_dataset.h"

namespace titan::data {

namespace fs = std::filesystem;

namespace {

// A row read and not yet tokenized, with where it came from for messages.
struct PendingRow {
  std::string prompt = {}, completion = {}, where = {};
};

// The string field `name` of `row` into `out`, or the row skipped or refused.
bool read_field(const nlohmann::json& row, const std::string& name, const std::string& key,
                const std::string& where, const DatasetOptions& files, DatasetStats& stats,
                std::string& out) {
  auto field = row.find(name);
  if (field == row.end()) {
    skip_or_throw(files, stats, "without a field", where + " has no field \"" + name + "\" (" + key + ")");
    return false;
  }
  if (!field->is_string()) {
    skip_or_throw(
        files, stats, "with a field not a string",
        where + ": the field \"" + name + "\" (" + key + ") is " + field->type_name() + ", not a string");
    return false;
  }
  out = field->get<std::string>();
  return true;
}

std::vector<PendingRow> read_rows(const fs::path& path, const SftOptions& options, DatasetStats& stats) {
  const DatasetOptions& files = options.files;
  TITAN_CHECK(file_kind(path) == FileKind::jsonl, files.path_key, ": '", path.string(),
              "' is not JSONL (*.jsonl, *.jsonl.gz); training.objective = \"sft\" reads rows {\"",
              options.prompt_field, "\": ..., \"", options.completion_field, "\": ...}, one a line");
  const std::string text = read_text_file(path);
  ++stats.files;
  stats.bytes += static_cast<int64_t>(text.size());
  std::vector<PendingRow> rows;
  for_each_jsonl_row(
      text, path.string(), files, stats, [&](const nlohmann::json& row, const std::string& where, size_t) {
        TITAN_CHECK(
            !row.contains("messages"), where,
            " holds chat messages (\"messages\"): titan renders no chat templates yet; give each example as "
            "{\"",
            options.prompt_field, "\": ..., \"", options.completion_field,
            "\": ...} with the prompt's text already formatted");
        PendingRow r{.where = where};
        if (!read_field(row, options.prompt_field, "sft.prompt_field", where, files, stats, r.prompt) ||
            !read_field(row, options.completion_field, "sft.completion_field", where, files, stats,
                        r.completion))
          return;
        if (r.completion.empty()) {
          skip_or_throw(files, stats, "with an empty completion", where + ": the completion is empty");
          return;
        }
        rows.push_back(std::move(r));
      });
  return rows;
}

// Cuts the example to `seq_len` tokens; false when none of its labels that carry loss is left.
bool truncate(SftExample& e, int64_t seq_len) {
  e.ids.resize(static_cast<size_t>(seq_len));
  e.loss.resize(static_cast<size_t>(seq_len));
  return std::find(e.loss.begin(), e.loss.end(), 1) != e.loss.end();
}

}  // namespace

SftExample make_sft_example(std::span<const int32_t> prompt, std::span<const int32_t> completion,
                            const Tokenizer& tokenizer) {
  TITAN_CHECK(tokenizer.eos_id().has_value(), tokenizer.description(),
              " has no eos token, which SFT needs to end each completion and pad rows; give "
              "tokenizer_config.json an eos_token");
  SftExample e;
  if (auto bos = tokenizer.bos_id()) e.ids.push_back(*bos);
  e.ids.insert(e.ids.end(), prompt.begin(), prompt.end());
  e.loss.assign(e.ids.size(), 0);
  e.ids.insert(e.ids.end(), completion.begin(), completion.end());
  e.ids.push_back(*tokenizer.eos_id());
  e.loss.resize(e.ids.size(), 1);
  e.loss[0] = 0;  // nothing before an example's first token predicts it
  return e;
}

SftPacked pack_sft_examples(std::span<const SftExample> examples, int64_t seq_len, bool packing,
                            int32_t pad) {
  SftPacked out;
  auto pad_row = [&] {
    const size_t end = static_cast<size_t>(out.rows * seq_len);
    out.ids.resize(end, pad);
    out.loss.resize(end, 0);
  };
  int64_t used = seq_len;  // of the current row; a full one when there is none yet
  for (const SftExample& e : examples) {
    const auto n = static_cast<int64_t>(e.ids.size());
    TITAN_CHECK(n >= 1 && n <= seq_len && e.loss.size() == e.ids.size() && e.loss[0] == 0,
                "pack_sft_examples: an example must hold 1 to seq_len (", seq_len,
                ") tokens, its first carrying no loss; got ", n);
    if (!packing || used + n > seq_len) {
      pad_row();
      ++out.rows;
      used = 0;
    }
    out.ids.insert(out.ids.end(), e.ids.begin(), e.ids.end());
    out.loss.insert(out.loss.end(), e.loss.begin(), e.loss.end());
    used += n;
  }
  pad_row();
  // The last window's labels reach one token past the rows.
  out.ids.push_back(pad);
  out.loss.push_back(0);
  return out;
}

SftDataset load_sft_dataset(const SftOptions& options, const Tokenizer& tokenizer) {
  TITAN_CHECK(options.seq_len >= 2, "load_sft_dataset: seq_len must be at least 2, got ", options.seq_len);
  SftDataset out;
  DatasetStats& stats = out.data.stats;
  SftStats& sft = out.sft;
  std::vector<SftExample> examples;
  for (const fs::path& path : resolve_dataset_files(options.files.path, options.files.path_key)) {
    const std::vector<PendingRow> rows = read_rows(path, options, stats);
    std::vector<std::string_view> prompts, completions;
    for (const PendingRow& r : rows) {
      prompts.push_back(r.prompt);
      completions.push_back(r.completion);
    }
    const std::vector<std::vector<int32_t>> p = tokenizer.encode_batch(prompts),
                                            c = tokenizer.encode_batch(completions);
    for (size_t i = 0; i < rows.size(); ++i) {
      ++stats.documents;
      SftExample e = make_sft_example(p[i], c[i], tokenizer);
      const auto n = static_cast<int64_t>(e.ids.size());
      if (n > options.seq_len) {
        const std::string what =
            rows[i].where + ": the example is " + std::to_string(n) +
            " tokens, longer than a row of training.seq_len = " + std::to_string(options.seq_len);
        TITAN_CHECK(options.over_length != OverLength::error, what,
                    "; raise training.seq_len, shorten the example, or set sft.over_length = \"truncate\" or "
                    "\"skip\"");
        if (options.over_length == OverLength::skip) {
          ++stats.skipped["longer than seq_len"];
          continue;
        }
        if (!truncate(e, options.seq_len)) {
          ++stats.skipped["whose prompt fills seq_len"];
          continue;
        }
        ++sft.truncated;
      }
      ++sft.examples;
      sft.tokens += static_cast<int64_t>(e.ids.size());
      sft.loss_tokens += std::count(e.loss.begin(), e.loss.end(), 1);
      examples.push_back(std::move(e));
    }
  }
  TITAN_CHECK(!examples.empty(), "dataset: '", options.files.path, "' holds no example (", stats.files,
              " files", stats.skipped.empty() ? "" : "; " + stats.skipped_summary(), ")");
  SftPacked packed = pack_sft_examples(examples, options.seq_len, options.packing, *tokenizer.eos_id());
  sft.rows = packed.rows;
  stats.tokens = static_cast<int64_t>(packed.ids.size());
  out.data.stream = TokenStream(std::move(packed.ids));
  out.data.loss_mask = std::make_shared<const std::vector<uint8_t>>(std::move(packed.loss));
  return out;
}

}  // namespace titan::data
