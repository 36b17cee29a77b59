#include "titan/apps/tokenize_command.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "titan/apps/args.h"
#include "titan/apps/progress_line.h"
#include "titan/core/error.h"
#include "titan/data/dataset.h"

namespace titan::apps {

namespace {

namespace fs = std::filesystem;

constexpr const char* kTokenizeUsage =
    "usage: titan tokenize --out DIR [--tokenizer DIR] [options] INPUT...\n"
    "  INPUT               a file, folder or glob of text (.txt, .gz) or JSONL (.jsonl, .jsonl.gz)\n"
    "  --out DIR           where the shards go (shard-00000.tok, ...); must hold no shards yet\n"
    "  --tokenizer DIR     a Hugging Face tokenizer.json folder; default: the byte tokenizer.\n"
    "                      Train with the same one (model.tokenizer_path): shards record it\n"
    "  --field NAME        JSONL: the field holding the text (default: text)\n"
    "  --split MODE        text files: blank_line (default) or file (one document per file)\n"
    "  --bad-data MODE     error (default) or skip: skip and count bad documents\n"
    "  --shard-tokens N    ids per shard (default: 268435456, 1 GiB a shard)\n"
    "Then train on them with --training.dataset_path=DIR.\n";

struct Options {
  std::string out, tokenizer;
  data::DatasetOptions dataset;
  int64_t shard_tokens = int64_t{1} << 28;
  std::vector<std::string> inputs;
};

Options parse(const std::vector<std::string>& args) {
  Options o;
  auto value = [&](size_t& i) -> const std::string& {
    TITAN_CHECK(i + 1 < args.size(), "titan tokenize: ", args[i], " needs a value\n", kTokenizeUsage);
    return args[++i];
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--out") {
      o.out = value(i);
    } else if (a == "--tokenizer") {
      o.tokenizer = value(i);
    } else if (a == "--field") {
      o.dataset.text_field = value(i);
    } else if (a == "--split") {
      const std::string& v = value(i);
      TITAN_CHECK(v == "blank_line" || v == "file", "titan tokenize: --split is blank_line or file, got '", v, "'");
      o.dataset.split = v == "file" ? data::DocumentSplit::file : data::DocumentSplit::blank_line;
    } else if (a == "--bad-data") {
      const std::string& v = value(i);
      TITAN_CHECK(v == "error" || v == "skip", "titan tokenize: --bad-data is error or skip, got '", v, "'");
      o.dataset.bad_data = v == "skip" ? data::BadData::skip : data::BadData::error;
    } else if (a == "--shard-tokens") {
      o.shard_tokens = parse_whole_number("titan tokenize", a, value(i));
    } else if (!a.starts_with("--")) {
      o.inputs.push_back(a);
    } else {
      TITAN_CHECK(false, "titan tokenize: unknown argument '", a, "'\n", kTokenizeUsage);
    }
  }
  TITAN_CHECK(!o.out.empty(), "titan tokenize: no --out given\n", kTokenizeUsage);
  TITAN_CHECK(!o.inputs.empty(), "titan tokenize: no INPUT given\n", kTokenizeUsage);
  return o;
}

}  // namespace

int tokenize_command(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "-h" || args[0] == "--help")) {
    std::cout << kTokenizeUsage;
    return 0;
  }
  const Options o = parse(args);
  std::shared_ptr<const data::Tokenizer> tokenizer = data::load_tokenizer(o.tokenizer);
  std::vector<fs::path> files;
  for (const std::string& input : o.inputs)
    for (fs::path& f : data::resolve_dataset_files(input, "titan tokenize: INPUT")) {
      TITAN_CHECK(data::file_kind(f) != data::FileKind::shard, "titan tokenize: ", f.string(),
                  " is already a token shard; give text or JSONL files");
      files.push_back(std::move(f));
    }
  int64_t total = 0;
  for (const fs::path& f : files) total += static_cast<int64_t>(fs::file_size(f));

  data::TokenShardWriter writer(o.out,
                                {.vocab_size = tokenizer->vocab_size(),
                                 .bos = tokenizer->bos_id().value_or(-1),
                                 .eos = tokenizer->eos_id().value_or(-1),
                                 .tokenizer_fingerprint = tokenizer->fingerprint()},
                                o.shard_tokens);
  data::DatasetStats stats;
  ProgressLine progress;
  // The bar's figures after `done` bytes.
  auto figures = [&](int64_t done, int64_t tokens) {
    char text[160];
    std::snprintf(text, sizeof text, "%.1f/%.1f MB  %.1f MB/s  %lld documents  %lld tokens",
                  static_cast<double>(done) / 1e6, static_cast<double>(total) / 1e6,
                  static_cast<double>(done) / 1e6 / std::max(progress.seconds(), 1e-9),
                  static_cast<long long>(stats.documents), static_cast<long long>(tokens));
    return std::string(text);
  };
  std::vector<int32_t> packed;
  int64_t tokens = 0;
  data::for_each_document_batch(files, o.dataset, stats, [&](std::span<const std::string_view> docs, int64_t done) {
    packed.clear();
    for (const auto& ids : tokenizer->encode_batch(docs)) data::pack_document(ids, *tokenizer, packed);
    writer.append(packed);
    tokens += static_cast<int64_t>(packed.size());
    progress.update(done, total, figures(done, tokens));
  });
  writer.finish();
  progress.update(total, total, figures(total, writer.tokens_written()), /*last=*/true);
  TITAN_CHECK(writer.tokens_written() > 0, "titan tokenize: the inputs hold no document",
              stats.skipped.empty() ? "" : " (" + stats.skipped_summary() + ")");
  std::cout << "titan tokenize: " << stats.files << " files, " << stats.documents << " documents, "
            << writer.tokens_written() << " tokens in " << writer.shards().size() << " shards under " << o.out
            << " (" << tokenizer->description() << ", " << static_cast<double>(stats.bytes) / 1e6 / progress.seconds()
            << " MB/s)\n";
  if (!stats.skipped.empty()) std::cout << "titan tokenize: " << stats.skipped_summary() << "\n";
  return 0;
}

}  // namespace titan::apps
