#include "titan/data/text_dataset.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <type_traits>

#include "titan/core/error.h"

namespace titan::data {

namespace {
struct GzCloser {
  void operator()(gzFile f) const { gzclose_r(f); }
};
using GzHandle = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

}  // namespace

std::string read_text_file(const std::filesystem::path& path) {
  std::error_code ec;
  TITAN_CHECK(std::filesystem::exists(path, ec), "text dataset: '", path.string(),
              "' does not exist; check the path (a relative path is taken from ",
              std::filesystem::current_path(ec).string(), ")");
  TITAN_CHECK(std::filesystem::is_regular_file(path, ec), "text dataset: '", path.string(),
              "' is not a regular file; name a text file (plain or gzip), not a folder");
  // zlib reads a file that is not gzip as it is, so plain and compressed text share this path.
  GzHandle file(gzopen(path.c_str(), "rb"));
  TITAN_CHECK(file != nullptr, "text dataset: cannot open '", path.string(), "': ", std::strerror(errno));
  gzbuffer(file.get(), 1 << 20);
  std::string text;
  std::vector<char> chunk(1 << 20);
  for (;;) {
    int n = gzread(file.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n <= 0) {
      int code = Z_OK;
      const char* message = gzerror(file.get(), &code);
      // Z_BUF_ERROR at the end means the input stopped inside a gzip stream: a truncated file.
      TITAN_CHECK(n == 0 && code == Z_OK, "text dataset: reading '", path.string(), "' failed: ", message,
                  "; the gzip file is truncated or corrupt: make it again");
      break;
    }
    text.append(chunk.data(), static_cast<size_t>(n));
  }
  return text;
}

std::vector<std::string_view> split_documents(std::string_view text, DocumentSplit split) {
  std::vector<std::string_view> docs;
  if (split == DocumentSplit::file) {
    if (!text.empty()) docs.push_back(text);
    return docs;
  }
  size_t doc_begin = std::string_view::npos;
  for (size_t pos = 0; pos < text.size();) {
    size_t newline = text.find('\n', pos);
    size_t line_end = newline == std::string_view::npos ? text.size() : newline + 1;
    if (!is_blank(text.substr(pos, line_end - pos))) {
      if (doc_begin == std::string_view::npos) doc_begin = pos;
    } else if (doc_begin != std::string_view::npos) {
      docs.push_back(text.substr(doc_begin, pos - doc_begin));
      doc_begin = std::string_view::npos;
    }
    pos = line_end;
  }
  if (doc_begin != std::string_view::npos) docs.push_back(text.substr(doc_begin));
  return docs;
}

}  // namespace titan::data
