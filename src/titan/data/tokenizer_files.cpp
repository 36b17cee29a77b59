#include "titan/data/tokenizer_files.h"

#include "titan/core/error.h"

namespace titan::data {

namespace fs = std::filesystem;

bool holds_tokenizer(const fs::path& dir) {
  return fs::is_regular_file(dir / kTokenizerFile);
}

bool copy_tokenizer(const fs::path& from, const fs::path& to) {
  if (!holds_tokenizer(from)) return false;
  for (const char* name : kTokenizerFiles) {
    if (!fs::is_regular_file(from / name)) continue;
    std::error_code ec;
    fs::copy_file(from / name, to / name, fs::copy_options::overwrite_existing, ec);
    TITAN_CHECK(!ec, "copying the tokenizer file ", (from / name).string(), " to ", to.string(), " failed (",
                ec.message(), "); check that ", to.string(), " is writable and has space");
  }
  return true;
}

}  // namespace titan::data
