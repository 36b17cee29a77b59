// Tokenizer encoding throughput, MB/s of UTF-8 text, for titan's BpeTokenizer and Hugging Face
// tokenizers (bench/tokenizer_hf.py) on the same documents, tokenizer files and thread counts:
// encode_batch over a corpus of documents, on one thread and on all of them (titan's OpenMP team,
// HF's rayon pool). Each figure is the median of the timed batches, after one batch to warm up
// (titan's word caches, HF's too). The token counts of both sides are compared as a check that
// they do the same work.
//
// Corpora: the KJV (data/kjv.txt.gz, English prose), a verse per document; titan's own sources
// (src/titan, C++ code), a file per document. Tokenizers: Llama 3 and Qwen 3 (from
// ../shared/tokenizers, when there) and the KJV's own (data/kjv_tokenizer).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "support/torch_reference.h"
#include "titan/core/parallel.h"
#include "titan/data/text_dataset.h"
#include "titan/data/tokenizer/bpe_tokenizer.h"

namespace {

namespace fs = std::filesystem;
namespace bench = titan::bench;
using nlohmann::json;

constexpr int kReps = 3;

struct Corpus {
  std::string name;
  std::vector<std::string> docs;
  double bytes = 0;
  fs::path json_file;  // the documents, for the reference
};

std::vector<Corpus> corpora(const fs::path& dir) {
  fs::path root(TITAN_SOURCE_DIR);
  Corpus kjv{"kjv", {}, 0, dir / "kjv.json"};
  std::string text = titan::data::read_text_file(root / "data" / "kjv.txt.gz");
  for (size_t start = 0; start < text.size();) {
    size_t end = std::min(text.find('\n', start), text.size() - 1) + 1;
    kjv.docs.push_back(text.substr(start, end - start));
    start = end;
  }
  Corpus code{"code", {}, 0, dir / "code.json"};
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(root / "src" / "titan"))
    if (entry.path().extension() == ".cpp" || entry.path().extension() == ".h") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) code.docs.push_back(titan::data::read_text_file(f));
  std::vector<Corpus> all = {std::move(kjv), std::move(code)};
  for (Corpus& c : all) {
    for (const std::string& d : c.docs) c.bytes += static_cast<double>(d.size());
    std::ofstream(c.json_file) << json(c.docs).dump();
  }
  return all;
}

struct Figure {
  double seconds;
  size_t tokens;
};

Figure time_titan(const titan::data::BpeTokenizer& tok, const Corpus& corpus) {
  std::vector<std::string_view> views(corpus.docs.begin(), corpus.docs.end());
  size_t tokens = 0;
  for (const auto& ids : tok.encode_batch(views)) tokens += ids.size();
  std::vector<double> times;
  for (int r = 0; r < kReps; ++r) {
    auto start = std::chrono::steady_clock::now();
    auto out = tok.encode_batch(views);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], tokens};
}

}  // namespace

int main() {
  fs::path dir = fs::temp_directory_path() / ("titan_bench_tokenizer_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  bench::mark_start();
  std::vector<Corpus> texts = corpora(dir);
  fs::path root(TITAN_SOURCE_DIR);
  std::vector<std::pair<std::string, fs::path>> tokenizers = {
      {"llama3", root / ".." / "shared" / "tokenizers" / "llama3" / "tokenizer.json"},
      {"qwen3", root / ".." / "shared" / "tokenizers" / "qwen3" / "tokenizer.json"},
      {"kjv", root / "data" / "kjv_tokenizer" / "tokenizer.json"}};
  std::erase_if(tokenizers, [](const auto& t) { return !fs::exists(t.second); });

  const int all_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::vector<int> thread_counts =
      all_threads > 1 ? std::vector<int>{1, all_threads} : std::vector<int>{1};
  std::map<std::string, Figure> titan;  // by "tokenizer/corpus/threads"
  json spec = {{"reps", kReps}, {"cases", json::array()}};
  for (const auto& [name, file] : tokenizers) {
    titan::data::BpeTokenizer tok = titan::data::BpeTokenizer::load(file);
    for (const Corpus& c : texts) {
      std::string key = name + "/" + c.name;
      spec["cases"].push_back(
          {{"name", key}, {"tokenizer", file.string()}, {"corpus", c.json_file.string()}});
      for (int t : thread_counts) {
        titan::set_num_threads(t);
        titan[key + "/" + std::to_string(t)] = time_titan(tok, c);
        std::cerr << "bench_tokenizer: titan " << key << " on " << t << " thread(s) done\n";
      }
    }
  }
  titan::set_num_threads(all_threads);

  fs::path spec_file = dir / "spec.json";
  std::ofstream(spec_file) << spec.dump();
  std::map<int, json> hf;  // by threads
  for (int t : thread_counts)
    hf[t] = bench::run_for_json("RAYON_NUM_THREADS=" + std::to_string(t) + " " +
                                bench::shell_quote(bench::python_path()) + " " +
                                bench::shell_quote(std::string(TITAN_SOURCE_DIR) + "/bench/tokenizer_hf.py") +
                                " " + bench::shell_quote(spec_file.string()));
  fs::remove_all(dir);

  bench::TorchResults about;
  about.available = hf.begin()->second.contains("results");
  about.about = about.available
                    ? "reference: Hugging Face tokenizers " + hf.begin()->second.value("tokenizers", "?") +
                          ", encode_batch, RAYON_NUM_THREADS = threads"
                    : "no reference: " + hf.begin()->second.value("error", std::string("?"));
  bench::Table table;
  table.title = "Tokenizer encode_batch throughput over a corpus of documents";
  table.unit = "MB/s";
  table.reference_label = "HF";
  table.variants = {""};
  table.extra_headers = {"docs", "MB", "tokens", "same count"};
  for (const auto& [name, file] : tokenizers) {
    for (const Corpus& c : texts) {
      for (int t : thread_counts) {
        std::string key = name + "/" + c.name;
        const Figure& f = titan[key + "/" + std::to_string(t)];
        bench::Row row;
        row.name = key + "/" + std::to_string(t) + (t == 1 ? " thread" : " threads");
        row.titan = c.bytes / 1e6 / f.seconds;
        std::string same = "n/a";
        const json& r = hf[t].value("results", json::object()).value(key, json::object());
        if (r.contains("seconds")) {
          row.torch[""] = c.bytes / 1e6 / r["seconds"].get<double>();
          same = r["tokens"].get<size_t>() == f.tokens
                     ? "yes"
                     : "NO (" + std::to_string(r["tokens"].get<size_t>()) + ")";
        } else if (r.contains("error")) {
          table.notes.push_back("HF failed on " + key + ": " + r["error"].get<std::string>());
        }
        row.extra = {std::to_string(c.docs.size()), bench::fixed(c.bytes / 1e6, 2), std::to_string(f.tokens),
                     same};
        table.rows.push_back(std::move(row));
      }
    }
  }
  if (tokenizers.size() < 3)
    table.notes.push_back("Llama 3 / Qwen 3 rows need ../shared/tokenizers/{llama3,qwen3}");
  bench::print_table(table, about);
  return 0;
}
