#pragma once
// Text files -> documents -> one token stream. Each document is wrapped in <|begin_of_text|> ...
// <|end_of_text|> and the documents are concatenated in file order, ready to be packed into
// fixed-length windows by the loader (a window may span a document boundary; the specials tell
// the model where one ends).
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "titan/data/byte_tokenizer.h"

namespace titan::data {

enum class DocumentSplit {
  // Each file is one document.
  file,
  // Runs of blank lines (nothing but spaces, tabs or '\r') separate documents; a document keeps
  // the newline ending its last line. The bundled data/kjv.txt.gz wants this: a blank line
  // separates its books.
  blank_line,
};

struct TextDatasetOptions {
  DocumentSplit split = DocumentSplit::file;
  // This fraction of the token stream, taken from its end, is held out for validation; in [0, 1).
  double validation_fraction = 0.0;
};

struct TextDataset {
  std::vector<int32_t> train;
  std::vector<int32_t> validation;
  int64_t num_documents = 0;
  int64_t num_bytes = 0;  // of text, after decompression
};

// The whole file, decompressed when it is gzip (told by its contents, not its name).
std::string read_text_file(const std::filesystem::path& path);

// Views into `text`, one per document, in order; no empty document is returned.
std::vector<std::string_view> split_documents(std::string_view text, DocumentSplit split);

// Throws, naming the files, when they hold no document, and on a validation fraction that
// leaves either split empty.
TextDataset load_text_dataset(std::span<const std::filesystem::path> files, const ByteTokenizer& tokenizer,
                              const TextDatasetOptions& options = {});

}  // namespace titan::data
