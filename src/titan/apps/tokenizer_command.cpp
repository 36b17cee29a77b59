#include "titan/apps/tokenizer_command.h"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "titan/apps/args.h"
#include "titan/core/error.h"
#include "titan/data/text_dataset.h"
#include "titan/data/tokenizer/bpe_tokenizer.h"
#include "titan/data/tokenizer/bpe_trainer.h"

namespace titan::apps {

namespace {

constexpr const char* kTokenizerUsage =
    "usage: titan tokenizer encode --tokenizer DIR [--add-special]  < text  > ids\n"
    "       titan tokenizer decode --tokenizer DIR [--skip-special] < ids   > text\n"
    "       titan tokenizer train --vocab-size N --out DIR FILE...\n"
    "  --tokenizer DIR   a folder holding a Hugging Face tokenizer.json (BPE: byte-level or\n"
    "                    SentencePiece-style) and, optionally, tokenizer_config.json; or the\n"
    "                    tokenizer.json itself\n"
    "  encode            reads UTF-8 text from stdin, prints its ids as one JSON array\n"
    "  --add-special     adds bos/eos as tokenizer_config.json says (default: none added)\n"
    "  decode            reads a JSON array of ids from stdin, prints the text\n"
    "  --skip-special    leaves special tokens out of the text\n"
    "  train             learns a byte-level BPE of N tokens (256 bytes, merges, bos and eos)\n"
    "                    from the files (plain or gzip) and writes DIR/tokenizer.json and\n"
    "                    DIR/tokenizer_config.json\n";

std::string read_stdin() {
  // Synced with C stdio, cin reads a character at a time: seconds for a large corpus.
  std::ios::sync_with_stdio(false);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

struct Options {
  std::string tokenizer, out;
  bool add_special = false, skip_special = false;
  int64_t vocab_size = 0;
  std::vector<std::string> files;
};

Options parse(const std::string& sub, const std::vector<std::string>& args) {
  Options o;
  auto value = [&](size_t& i) -> const std::string& {
    TITAN_CHECK(i + 1 < args.size(), "titan tokenizer ", sub, ": ", args[i], " needs a value\n",
                kTokenizerUsage);
    return args[++i];
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--tokenizer") {
      o.tokenizer = value(i);
    } else if (a == "--out") {
      o.out = value(i);
    } else if (a == "--vocab-size") {
      o.vocab_size = parse_whole_number("titan tokenizer train", a, value(i));
    } else if (a == "--add-special" && sub == "encode") {
      o.add_special = true;
    } else if (a == "--skip-special" && sub == "decode") {
      o.skip_special = true;
    } else if (sub == "train" && !a.starts_with("--")) {
      o.files.push_back(a);
    } else {
      TITAN_CHECK(false, "titan tokenizer ", sub, ": unknown argument '", a, "'\n", kTokenizerUsage);
    }
  }
  return o;
}

int encode(const Options& o) {
  TITAN_CHECK(!o.tokenizer.empty(), "titan tokenizer encode: no --tokenizer given\n", kTokenizerUsage);
  data::BpeTokenizer tokenizer = data::BpeTokenizer::load(o.tokenizer);
  std::cout << nlohmann::json(tokenizer.encode(read_stdin(), o.add_special)).dump() << "\n";
  return 0;
}

int decode(const Options& o) {
  TITAN_CHECK(!o.tokenizer.empty(), "titan tokenizer decode: no --tokenizer given\n", kTokenizerUsage);
  data::BpeTokenizer tokenizer = data::BpeTokenizer::load(o.tokenizer);
  nlohmann::json ids = nlohmann::json::parse(read_stdin(), nullptr, /*allow_exceptions=*/false);
  TITAN_CHECK(ids.is_array(),
              "titan tokenizer decode: stdin must hold one JSON array of ids, e.g. [9906, 1917]");
  std::vector<int32_t> v;
  v.reserve(ids.size());
  for (const nlohmann::json& id : ids) {
    // Range-checked before narrowing: 2^32 + 5 read as an int32 would silently become 5.
    const bool in_range =
        id.is_number_integer() &&
        (id.is_number_unsigned() ? id.get<uint64_t>() < static_cast<uint64_t>(tokenizer.vocab_size())
                                 : id.get<int64_t>() >= 0 && id.get<int64_t>() < tokenizer.vocab_size());
    TITAN_CHECK(in_range, "titan tokenizer decode: stdin's id ", id.dump(), " at position ", v.size(),
                " is not an integer id in [0, ", tokenizer.vocab_size(), "), the vocabulary of ", o.tokenizer,
                "; decode ids made by this tokenizer");
    v.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  std::cout << tokenizer.decode(v, o.skip_special);
  return 0;
}

int train(const Options& o) {
  TITAN_CHECK(o.vocab_size > 0 && !o.out.empty() && !o.files.empty(),
              "titan tokenizer train: needs --vocab-size, --out and at least one file\n", kTokenizerUsage);
  TITAN_CHECK(o.vocab_size <= INT32_MAX, "titan tokenizer train: --vocab-size ", o.vocab_size,
              " is too large");
  auto start = std::chrono::steady_clock::now();
  std::vector<std::string> texts;
  int64_t bytes = 0;
  for (const std::string& f : o.files) {
    texts.push_back(data::read_text_file(f));
    bytes += static_cast<int64_t>(texts.back().size());
  }
  std::vector<std::string_view> views(texts.begin(), texts.end());
  data::BpeTrainerOptions options;
  options.vocab_size = static_cast<int32_t>(o.vocab_size);
  nlohmann::ordered_json tokenizer = data::train_bpe(views, options);
  data::save_trained_tokenizer(tokenizer, options, o.out);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "titan: trained " << tokenizer["model"]["vocab"].size() + tokenizer["added_tokens"].size()
            << " tokens (" << tokenizer["model"]["merges"].size() << " merges) on " << bytes << " bytes in "
            << seconds << " s -> " << (std::filesystem::path(o.out) / "tokenizer.json").string() << "\n";
  return 0;
}

}  // namespace

int tokenizer_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::cout << kTokenizerUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string& sub = args[0];
  TITAN_CHECK(sub == "encode" || sub == "decode" || sub == "train", "titan tokenizer: unknown subcommand '",
              sub, "'\n", kTokenizerUsage);
  Options o = parse(sub, std::vector<std::string>(args.begin() + 1, args.end()));
  if (sub == "encode") return encode(o);
  if (sub == "decode") return decode(o);
  return train(o);
}

}  // namespace titan::apps
