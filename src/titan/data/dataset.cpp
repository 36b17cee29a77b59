#include "titan/data/dataset.h"

#include <glob.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "titan/core/error.h"
#include "titan/data/jsonl_rows.h"
#include "titan/data/utf8.h"

namespace titan::data {

namespace fs = std::filesystem;

namespace {

// A batch handed to the callback holds about this much text: enough to keep every thread of a
// parallel encode busy, little enough that progress moves.
constexpr size_t kBatchBytes = 4 << 20;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t line_of(std::string_view text, size_t offset) {
  return 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n');
}

// Collects documents into batches for the callback; owns the text of documents that do not live
// in the file's buffer (JSONL strings).
class Batcher {
 public:
  explicit Batcher(const DocumentBatchFn& fn) : fn_(fn) {}
  void add(std::string_view doc, int64_t done_bytes) {
    docs_.push_back(doc);
    bytes_ += doc.size();
    if (bytes_ >= kBatchBytes) flush(done_bytes);
  }
  void add_owned(std::string doc, int64_t done_bytes) {
    owned_.push_back(std::make_unique<std::string>(std::move(doc)));
    add(*owned_.back(), done_bytes);
  }
  // Before the buffer the views point into is freed.
  void flush(int64_t done_bytes) {
    if (!docs_.empty()) fn_(docs_, done_bytes);
    docs_.clear();
    owned_.clear();
    bytes_ = 0;
  }

 private:
  const DocumentBatchFn& fn_;
  std::vector<std::string_view> docs_;
  std::vector<std::unique_ptr<std::string>> owned_;
  size_t bytes_ = 0;
};

}  // namespace

std::string DatasetStats::skipped_summary() const {
  int64_t total = 0;
  std::ostringstream parts;
  for (const auto& [reason, n] : skipped) {
    parts << (total ? ", " : "") << n << " " << reason;
    total += n;
  }
  if (total == 0) return "";
  return std::to_string(total) + " skipped (" + parts.str() + ")";
}

FileKind file_kind(const fs::path& path) {
  const std::string name = path.filename().string();
  if (ends_with(name, kTokenShardExtension)) return FileKind::shard;
  if (ends_with(name, ".jsonl") || ends_with(name, ".jsonl.gz")) return FileKind::jsonl;
  return FileKind::text;
}

std::vector<fs::path> resolve_dataset_files(const std::string& path, const std::string& key) {
  TITAN_CHECK(!path.empty(), key, " is empty; name a file, a folder or a glob");
  std::vector<fs::path> files;
  if (path.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    const int rc = ::glob(path.c_str(), GLOB_ERR, nullptr, &g);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i)
      if (fs::is_regular_file(g.gl_pathv[i])) files.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    TITAN_CHECK(!files.empty(), key, ": the glob '", path, "' matches no file (from ",
                fs::current_path().string(), ")");
    return files;  // glob sorts
  }
  const fs::path p(path);
  TITAN_CHECK(fs::exists(p), key, ": '", path, "' does not exist (from ", fs::current_path().string(),
              "); name a file, a folder or a glob");
  if (!fs::is_directory(p)) return {p};
  for (const auto& e : fs::recursive_directory_iterator(p)) {
    // Hidden files and unfinished shards are not data.
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && !name.starts_with(".") && !ends_with(name, ".tmp")) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  TITAN_CHECK(!files.empty(), key, ": the folder '", path, "' holds no files");
  return files;
}

void pack_document(std::span<const int32_t> ids, const Tokenizer& tokenizer, std::vector<int32_t>& out) {
  TITAN_CHECK(tokenizer.eos_id().has_value(), tokenizer.description(),
              " has no eos token, so packed documents could not be told apart; give tokenizer_config.json an "
              "eos_token");
  if (auto bos = tokenizer.bos_id()) out.push_back(*bos);
  out.insert(out.end(), ids.begin(), ids.end());
  out.push_back(*tokenizer.eos_id());
}

void for_each_document_batch(std::span<const fs::path> files, const DatasetOptions& options, DatasetStats& stats,
                             const DocumentBatchFn& fn) {
  Batcher batcher(fn);
  int64_t before = 0;  // bytes on disk of the files already read
  for (const fs::path& path : files) {
    const FileKind kind = file_kind(path);
    if (kind == FileKind::shard) continue;
    const auto disk = static_cast<int64_t>(fs::file_size(path));
    const std::string text = read_text_file(path);
    ++stats.files;
    stats.bytes += static_cast<int64_t>(text.size());
    // Progress within a file, scaled from the text read to its size on disk.
    auto done = [&](size_t offset) {
      return before + (text.empty() ? disk : static_cast<int64_t>(static_cast<double>(disk) * offset / text.size()));
    };
    if (kind == FileKind::text) {
      std::vector<std::string_view> docs = split_documents(text, options.split);
      if (docs.empty())
        skip_or_throw(options, stats, "empty files", "dataset: '" + path.string() + "' holds no document");
      for (std::string_view doc : docs) {
        const size_t offset = static_cast<size_t>(doc.data() - text.data());
        if (size_t i = find_invalid_utf8(doc); i != std::string_view::npos) {
          skip_or_throw(options, stats, "not UTF-8",
                        "dataset: '" + path.string() + "': byte " + std::to_string(offset + i) + " (line " +
                            std::to_string(line_of(text, offset + i)) + ") is not valid UTF-8");
          continue;
        }
        ++stats.documents;
        batcher.add(doc, done(offset + doc.size()));
      }
    } else {
      for_each_jsonl_row(text, path.string(), options, stats,
                         [&](const nlohmann::json& j, const std::string& where, size_t end) {
                           auto field = j.find(options.text_field);
                           if (field == j.end() || !field->is_string()) {
                             skip_or_throw(options, stats, "without the text field",
                                           where + " has no string field \"" + options.text_field +
                                               "\" (training.dataset_field)");
                             return;
                           }
                           std::string doc = field->get<std::string>();
                           if (doc.empty()) {
                             skip_or_throw(options, stats, "empty", where + ": the document is empty");
                             return;
                           }
                           ++stats.documents;
                           batcher.add_owned(std::move(doc), done(end));
                         });
    }
    before += disk;
    batcher.flush(before);
  }
}

Dataset load_dataset(const DatasetOptions& options, const Tokenizer& tokenizer) {
  const std::vector<fs::path> files = resolve_dataset_files(options.path, options.path_key);
  Dataset out;
  DatasetStats& stats = out.stats;
  std::vector<int32_t> packed;
  auto flush_text = [&] {
    stats.tokens += static_cast<int64_t>(packed.size());
    out.stream.append(std::move(packed));
    packed = {};
  };
  // Runs of text files between shards keep their place in the stream.
  for (size_t i = 0; i < files.size();) {
    if (file_kind(files[i]) != FileKind::shard) {
      size_t j = i;
      while (j < files.size() && file_kind(files[j]) != FileKind::shard) ++j;
      for_each_document_batch(std::span(files).subspan(i, j - i), options, stats,
                              [&](std::span<const std::string_view> docs, int64_t) {
                                for (const auto& ids : tokenizer.encode_batch(docs)) pack_document(ids, tokenizer, packed);
                              });
      flush_text();
      i = j;
      continue;
    }
    const fs::path& path = files[i++];
    std::shared_ptr<const TokenShard> shard;
    try {
      shard = TokenShard::open(path);
    } catch (const Error& e) {
      skip_or_throw(options, stats, "damaged shards", e.what());
      continue;
    }
    const TokenShardInfo& info = shard->info();
    TITAN_CHECK(info.tokenizer_fingerprint == tokenizer.fingerprint() && info.vocab_size == tokenizer.vocab_size(),
                "dataset: token shard ", path.string(), " was made by another tokenizer (fingerprint ",
                info.tokenizer_fingerprint, ", ", info.vocab_size, " ids) than this run's ", tokenizer.description(),
                " (fingerprint ", tokenizer.fingerprint(),
                "); set model.tokenizer_path to the tokenizer the shards were made with, or tokenize again");
    ++stats.files;
    stats.bytes += static_cast<int64_t>(fs::file_size(path));
    stats.tokens += shard->num_tokens();
    if (info.eos >= 0) {
      const int32_t* ids = shard->ids();
      stats.documents += std::count(ids, ids + shard->num_tokens(), info.eos);
    }
    out.stream.append(shard->ids(), shard->num_tokens(), shard);
  }
  TITAN_CHECK(out.stream.size() > 0, "dataset: '", options.path, "' holds no document (", stats.files, " files, ",
              stats.bytes, " bytes", stats.skipped.empty() ? "" : "; " + stats.skipped_summary(), ")");
  return out;
}

}  // namespace titan::data
