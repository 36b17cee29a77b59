#pragma once
// Text files and the documents in them (dataset.h packs documents into the token stream).
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

enum class DocumentSplit {
  // Each file is one document.
  file,
  // Runs of blank lines (nothing but spaces, tabs or '\r') separate documents; a document keeps
  // the newline ending its last line. The bundled data/kjv.txt.gz wants this: a blank line
  // separates its books.
  blank_line,
};

// The whole file, decompressed when it is gzip (told by its contents, not its name).
std::string read_text_file(const std::filesystem::path& path);

// Views into `text`, one per document, in order; no empty document is returned.
std::vector<std::string_view> split_documents(std::string_view text, DocumentSplit split);

}  // namespace titan::data
