#pragma once
// Datasets: what [training] dataset_path names, turned into one packed token stream.
//   - text files (plain or gzip), cut into documents (one per file, or at blank lines);
//   - JSONL files (*.jsonl, *.jsonl.gz), one document per line, its text in a named field;
//   - token shards (*.tok, from `titan tokenize`), memory-mapped as they are.
// dataset_path is a file, a folder (every file under it, recursively, in name order) or a glob
// (`data/*.jsonl.gz`). Documents are packed in file order as [bos] ids eos (pack_document).
//
// Bad data — bytes that are not UTF-8, an empty document, a JSONL line that is not JSON or lacks
// the field, a damaged or truncated shard — is an error naming the file and the place, or, with
// BadData::skip, skipped and counted in DatasetStats (the trainer logs the counts). A path that
// does not exist, or a glob that matches nothing, is always an error.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "titan/data/text_dataset.h"
#include "titan/data/token_shard.h"
#include "titan/data/token_stream.h"
#include "titan/data/tokenizer.h"

namespace titan::data {

enum class BadData { error, skip };

struct DatasetOptions {
  std::string path = {};  // a file, a folder or a glob
  std::string text_field = "text";  // JSONL: the field that holds the text
  DocumentSplit split = DocumentSplit::blank_line;  // text files
  BadData bad_data = BadData::error;
  std::string path_key = "training.dataset_path";  // what messages call `path`
};

struct DatasetStats {
  int64_t files = 0;
  int64_t documents = 0;
  int64_t bytes = 0;   // of text read (after decompression) and of shards mapped
  int64_t tokens = 0;
  std::map<std::string, int64_t> skipped;  // reason -> count (BadData::skip)
  // "12 documents skipped (3 not UTF-8, 9 empty)", or "" when none were.
  std::string skipped_summary() const;
};

enum class FileKind { text, jsonl, shard };
FileKind file_kind(const std::filesystem::path& path);

// The files `path` names, in order; throws when there are none.
std::vector<std::filesystem::path> resolve_dataset_files(const std::string& path,
                                                         const std::string& key = "training.dataset_path");

// Appends one document's ids to `out` as the stream holds it: bos (when the tokenizer has one),
// the ids, eos. Throws when the tokenizer has no eos: without it documents would run together.
void pack_document(std::span<const int32_t> ids, const Tokenizer& tokenizer, std::vector<int32_t>& out);

// The documents of the text and JSONL files among `files`, in order, a batch at a time (so a
// caller can encode a batch in parallel); `done_bytes` counts the input files' bytes on disk
// consumed so far, for progress. Shards are not read here; bad documents are skipped and counted
// or thrown as `options.bad_data` says.
using DocumentBatchFn = std::function<void(std::span<const std::string_view> documents, int64_t done_bytes)>;
void for_each_document_batch(std::span<const std::filesystem::path> files, const DatasetOptions& options,
                             DatasetStats& stats, const DocumentBatchFn& fn);

struct Dataset {
  TokenStream stream;
  DatasetStats stats;
  // Null: every label carries loss. Else one flag per token of the stream: 1 when the token, as a
  // label, carries loss (SFT's completions, sft_dataset.h).
  LossMask loss_mask = nullptr;
};

// Text and JSONL files are tokenized with `tokenizer`; shards must have been made by the same
// tokenizer (same fingerprint), else it is an error naming both.
Dataset load_dataset(const DatasetOptions& options, const Tokenizer& tokenizer);

}  // namespace titan::data
