#include "titan/data/text_dataset.h"

#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>
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

std::string file_list(std::span<const std::filesystem::path> files) {
  std::ostringstream os;
  for (size_t i = 0; i < files.size(); ++i) os << (i ? ", " : "") << "'" << files[i].string() << "'";
  return os.str();
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

TextDataset load_text_dataset(std::span<const std::filesystem::path> files, const ByteTokenizer& tokenizer,
                              const TextDatasetOptions& options) {
  TITAN_CHECK(!files.empty(), "text dataset: no files given; name at least one text file (plain or .gz)");
  TITAN_CHECK(options.validation_fraction >= 0 && options.validation_fraction < 1,
              "text dataset: validation_fraction must lie in [0, 1), got ", options.validation_fraction);
  TextDataset out;
  std::vector<int32_t> stream;
  for (const std::filesystem::path& path : files) {
    std::string text = read_text_file(path);
    out.num_bytes += static_cast<int64_t>(text.size());
    for (std::string_view doc : split_documents(text, options.split)) {
      std::vector<int32_t> ids = tokenizer.encode(doc, /*add_bos=*/true, /*add_eos=*/true);
      stream.insert(stream.end(), ids.begin(), ids.end());
      ++out.num_documents;
    }
  }
  TITAN_CHECK(out.num_documents > 0, "text dataset: empty corpus: no document in ", file_list(files), " (",
              out.num_bytes, " bytes in all, none outside blank lines); give files with text");

  auto total = static_cast<int64_t>(stream.size());
  auto held_out = static_cast<int64_t>(std::floor(options.validation_fraction * static_cast<double>(total)));
  TITAN_CHECK(options.validation_fraction == 0 || held_out > 0, "text dataset: validation_fraction ",
              options.validation_fraction, " of ", total,
              " tokens holds out no token; raise it or set it to 0");
  out.validation.assign(stream.end() - held_out, stream.end());
  stream.resize(static_cast<size_t>(total - held_out));
  out.train = std::move(stream);
  return out;
}

}  // namespace titan::data
