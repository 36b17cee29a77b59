#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "support/test_util.h"
#include "titan/core/rng.h"
#include "titan/data/byte_tokenizer.h"
#include "titan/data/loader.h"
#include "titan/data/text_dataset.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;
using data::Batch;
using data::ByteTokenizer;
using data::DataLoader;
using data::DocumentSplit;
using data::LoaderOptions;
using data::LoaderState;

// A fresh folder per test, removed afterwards, so tests can run in parallel under ctest.
class DataFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("titan_data_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write_plain(const std::string& name, const std::string& text) const {
    fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  fs::path write_gzip(const std::string& name, const std::string& text) const {
    fs::path path = dir_ / name;
    gzFile f = gzopen(path.c_str(), "wb9");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
    gzclose(f);
    return path;
  }

  fs::path dir_;
};

std::vector<int32_t> ids_of(const std::string& bytes) {
  std::vector<int32_t> ids;
  for (unsigned char c : bytes) ids.push_back(c);
  return ids;
}

// [bos] text [eos], as the dataset wraps each document.
std::vector<int32_t> wrapped(const std::string& text) {
  std::vector<int32_t> ids = ids_of(text);
  ids.insert(ids.begin(), ByteTokenizer::kBeginOfText);
  ids.push_back(ByteTokenizer::kEndOfText);
  return ids;
}

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<int32_t> iota_tokens(int64_t n) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  std::iota(tokens.begin(), tokens.end(), 0);
  return tokens;
}

// Token id at the start of each row of a batch's inputs: with iota tokens it names the window.
std::vector<int64_t> row_starts(const Batch& b) {
  std::vector<int64_t> in = b.inputs.to_vector<int64_t>(), starts;
  for (int64_t r = 0; r < b.inputs.size(0); ++r)
    starts.push_back(in[static_cast<size_t>(r * b.inputs.size(1))]);
  return starts;
}

void expect_same_batches(std::vector<Batch> a, std::vector<Batch> b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].inputs.to_vector<int64_t>(), b[i].inputs.to_vector<int64_t>()) << "batch " << i;
    EXPECT_EQ(a[i].labels.to_vector<int64_t>(), b[i].labels.to_vector<int64_t>()) << "batch " << i;
  }
}

std::vector<Batch> draw(DataLoader& loader, int n) {
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) out.push_back(loader.next());
  return out;
}

// ---- tokenizer ----------------------------------------------------------------------------------

TEST(ByteTokenizer, RoundTripsArbitraryBytes) {
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<char>(b));
  // Invalid UTF-8: a lone continuation byte, a truncated 3-byte sequence, an overlong NUL, 0xFF.
  bytes += std::string("\x80", 1) + "\xE2\x82" + std::string("\xC0\x80", 2) + "\xFF" + std::string(3, '\0');
  for (uint64_t i = 0; i < 1000; ++i)
    bytes.push_back(static_cast<char>(philox4x32({uint32_t(i), 0, 0, 0}, {7, 0})[0]));

  ByteTokenizer tok;
  std::vector<int32_t> ids = tok.encode(bytes, false, false);
  EXPECT_EQ(ids, ids_of(bytes));
  EXPECT_EQ(tok.decode(ids), bytes);
  EXPECT_EQ(tok.decode(tok.encode("", false, false)), "");
}

TEST(ByteTokenizer, SpecialsFollowTheBytes) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.bos_id(), 256);
  EXPECT_EQ(tok.eos_id(), 257);
  EXPECT_EQ(tok.pad_id(), 258);
  EXPECT_EQ(tok.encode("hi", true, true), (std::vector<int32_t>{256, 'h', 'i', 257}));
  EXPECT_EQ(tok.encode("hi", true, false), (std::vector<int32_t>{256, 'h', 'i'}));
  EXPECT_EQ(tok.encode("", false, true), (std::vector<int32_t>{257}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{256, 'a', 257, 258, 0}),
            std::string("<|begin_of_text|>a<|end_of_text|><|pad|>") + '\0');
}

TEST(ByteTokenizer, RejectsIdsOutsideTheVocabulary) {
  ByteTokenizer tok;
  EXPECT_TITAN_ERROR(tok.decode(std::vector<int32_t>{'a', 259}), "[0, 259)", "found 259", "position 1");
  EXPECT_TITAN_ERROR(tok.decode(std::vector<int32_t>{-1}), "found -1", "position 0");
}

// ---- text dataset -------------------------------------------------------------------------------

TEST(DataText, SplitsDocumentsOnBlankLines) {
  using V = std::vector<std::string_view>;
  auto blank = [](std::string_view t) { return data::split_documents(t, DocumentSplit::blank_line); };
  EXPECT_EQ(blank("a\nb\n\n\n \t\nc\n"), (V{"a\nb\n", "c\n"}));
  EXPECT_EQ(blank("\n\nx\n\ny"), (V{"x\n", "y"}));
  EXPECT_EQ(blank("a\r\n\r\nb\r\n"), (V{"a\r\n", "b\r\n"}));
  EXPECT_EQ(blank("\n  \n"), V{});
  EXPECT_EQ(blank(""), V{});
  EXPECT_EQ(data::split_documents("a\n\nb\n", DocumentSplit::file), V{"a\n\nb\n"});
  EXPECT_EQ(data::split_documents("", DocumentSplit::file), V{});
}

TEST_F(DataFiles, PlainAndGzipFilesGiveTheSameStream) {
  const std::string book1 = "In the beginning\nwas the word.\n", book2 = "And \xFF\0 bytes.\n"s;
  const std::string text = "\n" + book1 + "\n \n" + book2;
  ByteTokenizer tok;
  data::TextDatasetOptions opts{.split = DocumentSplit::blank_line};
  std::vector<fs::path> plain{write_plain("corpus.txt", text)}, gz{write_gzip("corpus.txt.gz", text)};
  EXPECT_GT(fs::file_size(gz[0]), 0u);
  EXPECT_NE(fs::file_size(gz[0]), text.size());

  data::TextDataset a = data::load_text_dataset(plain, tok, opts);
  data::TextDataset b = data::load_text_dataset(gz, tok, opts);
  EXPECT_EQ(a.train, concat({wrapped(book1), wrapped(book2)}));
  EXPECT_EQ(b.train, a.train);
  EXPECT_TRUE(a.validation.empty());
  EXPECT_EQ(a.num_documents, 2);
  EXPECT_EQ(b.num_documents, 2);
  EXPECT_EQ(a.num_bytes, static_cast<int64_t>(text.size()));
  EXPECT_EQ(b.num_bytes, a.num_bytes);
}

TEST_F(DataFiles, EachFileIsADocumentByDefault) {
  ByteTokenizer tok;
  std::vector<fs::path> files{write_plain("b.txt", "second\n\nfile"), write_gzip("a.gz", "first"),
                              write_plain("empty.txt", "")};
  data::TextDataset d = data::load_text_dataset(files, tok);
  EXPECT_EQ(d.train, concat({wrapped("second\n\nfile"), wrapped("first")}));
  EXPECT_EQ(d.num_documents, 2);
}

TEST_F(DataFiles, HoldsOutTheTailForValidation) {
  ByteTokenizer tok;
  std::vector<fs::path> files{write_plain("t.txt", std::string(18, 'x'))};  // 20 tokens with bos, eos
  data::TextDataset full = data::load_text_dataset(files, tok);
  data::TextDataset split = data::load_text_dataset(files, tok, {.validation_fraction = 0.25});
  ASSERT_EQ(full.train.size(), 20u);
  EXPECT_EQ(split.train.size(), 15u);
  EXPECT_EQ(split.validation.size(), 5u);
  EXPECT_EQ(concat({split.train, split.validation}), full.train);
  EXPECT_EQ(split.validation.back(), ByteTokenizer::kEndOfText);
}

TEST_F(DataFiles, ErrorsNameTheFileAndTheRemedy) {
  ByteTokenizer tok;
  fs::path missing = dir_ / "no_such_corpus.txt";
  EXPECT_TITAN_ERROR(data::read_text_file(missing), missing.string(), "does not exist");
  EXPECT_TITAN_ERROR(data::read_text_file(dir_), dir_.string(), "not a regular file", "not a folder");

  std::vector<fs::path> blank{write_plain("empty.txt", ""), write_gzip("blank.gz", "\n \n\n")};
  EXPECT_TITAN_ERROR(data::load_text_dataset(blank, tok, {.split = DocumentSplit::blank_line}),
                     "empty corpus", blank[0].string(), blank[1].string());
  EXPECT_TITAN_ERROR(data::load_text_dataset(std::vector<fs::path>{}, tok), "no files");

  // A gzip file cut in half: the data read so far must not pass for the whole text.
  fs::path gz = write_gzip("whole.gz", std::string(100000, 'a') + std::string(100000, 'b'));
  std::string bytes;
  {
    std::ifstream in(gz, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  fs::path cut = write_plain("cut.gz", bytes.substr(0, bytes.size() / 2));
  EXPECT_TITAN_ERROR(data::read_text_file(cut), cut.string(), "truncated or corrupt");
  fs::path garbage = write_plain("garbage.gz", "\x1f\x8b\x08\x00garbage that is not deflate"s);
  EXPECT_TITAN_ERROR(data::read_text_file(garbage), garbage.string(), "truncated or corrupt");

  std::vector<fs::path> small{write_plain("small.txt", "abc")};
  EXPECT_TITAN_ERROR(data::load_text_dataset(small, tok, {.validation_fraction = 1.0}), "validation_fraction",
                     "[0, 1)");
  EXPECT_TITAN_ERROR(data::load_text_dataset(small, tok, {.validation_fraction = 0.1}), "holds out no token");
}

// ---- loader -------------------------------------------------------------------------------------

TEST(DataLoader, WindowsOverlapByOneAndLabelsShiftByOne) {
  // 43 tokens, seq_len 8: windows start at 0, 8, ..., 32 (the last ends at token 40); 41, 42 unused.
  DataLoader loader(iota_tokens(43), {.seq_len = 8, .local_batch_size = 2, .shuffle = false});
  EXPECT_EQ(loader.num_windows(), 5);
  Batch b = loader.next();
  EXPECT_EQ(b.inputs.dtype(), kI64);
  EXPECT_EQ(b.labels.dtype(), kI64);
  EXPECT_EQ(b.inputs.sizes(), (Shape{2, 8}));
  EXPECT_EQ(b.labels.sizes(), (Shape{2, 8}));
  std::vector<int64_t> in = b.inputs.to_vector<int64_t>(), lab = b.labels.to_vector<int64_t>();
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(in[static_cast<size_t>(i)], i);
    EXPECT_EQ(lab[static_cast<size_t>(i)], i + 1);
  }
  EXPECT_EQ(row_starts(loader.next()), (std::vector<int64_t>{16, 24}));
  // The epoch has one window left; the batch carries on into the next epoch.
  EXPECT_EQ(row_starts(loader.next()), (std::vector<int64_t>{32, 0}));
  EXPECT_EQ(loader.get_state(), (LoaderState{1, 1}));
}

TEST(DataLoader, AShuffledEpochVisitsEveryWindowOnce) {
  const int64_t windows = 50;
  DataLoader loader(iota_tokens(windows * 4 + 1), {.seq_len = 4, .local_batch_size = 5, .seed = 3});
  std::vector<std::vector<int64_t>> epochs(2);
  for (auto& order : epochs) {
    for (int i = 0; i < 10; ++i) {
      Batch b = loader.next();
      std::vector<int64_t> in = b.inputs.to_vector<int64_t>(), lab = b.labels.to_vector<int64_t>();
      for (size_t k = 0; k < in.size(); ++k) EXPECT_EQ(lab[k], in[k] + 1);
      for (int64_t s : row_starts(b)) order.push_back(s / 4);
    }
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(windows);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all);
  }
  EXPECT_EQ(loader.get_state(), (LoaderState{2, 0}));
  EXPECT_NE(epochs[0], epochs[1]);
  std::vector<int64_t> in_order(windows);
  std::iota(in_order.begin(), in_order.end(), 0);
  EXPECT_NE(epochs[0], in_order);
}

TEST(DataLoader, TheSeedAloneFixesTheBatches) {
  LoaderOptions opts{.seq_len = 16, .local_batch_size = 4, .seed = 1234};
  DataLoader a(iota_tokens(16 * 100 + 1), opts), b(iota_tokens(16 * 100 + 1), opts);
  opts.seed = 1235;
  DataLoader c(iota_tokens(16 * 100 + 1), opts);
  std::vector<Batch> from_a = draw(a, 30), from_b = draw(b, 30), from_c = draw(c, 30);
  expect_same_batches(from_a, from_b);
  int differing = 0;
  for (size_t i = 0; i < from_a.size(); ++i)
    differing += from_a[i].inputs.to_vector<int64_t>() != from_c[i].inputs.to_vector<int64_t>();
  EXPECT_GT(differing, 25);
}

TEST(DataLoader, DataParallelRanksReadDisjointSharesOfOneGlobalBatch) {
  const int64_t world = 3, batch = 2, seq = 4, windows = 30;
  std::vector<DataLoader> ranks;
  for (int64_t r = 0; r < world; ++r)
    ranks.emplace_back(
        iota_tokens(windows * seq + 1),
        LoaderOptions{.seq_len = seq, .local_batch_size = batch, .seed = 9, .dp_rank = r, .dp_world = world});
  // One loader reading the whole global batch sees the ranks' rows, in rank order.
  DataLoader single(iota_tokens(windows * seq + 1),
                    {.seq_len = seq, .local_batch_size = world * batch, .seed = 9});
  std::set<int64_t> epoch;
  for (int step = 0; step < 5; ++step) {
    std::vector<int64_t> global;
    for (DataLoader& rank : ranks)
      for (int64_t s : row_starts(rank.next())) global.push_back(s);
    EXPECT_EQ(global, row_starts(single.next())) << "step " << step;
    epoch.insert(global.begin(), global.end());
  }
  EXPECT_EQ(epoch.size(), static_cast<size_t>(windows));  // 5 global batches of 6: the epoch, no repeats
  for (const DataLoader& rank : ranks) EXPECT_EQ(rank.get_state(), single.get_state());
}

TEST(DataLoader, ResumesExactlyFromItsState) {
  // 7 windows of 2 per batch: the 15 batches cross four epochs, and two batches straddle epochs.
  LoaderOptions opts{.seq_len = 5, .local_batch_size = 2, .seed = 42};
  DataLoader loader(iota_tokens(7 * 5 + 1), opts);
  draw(loader, 10);
  LoaderState saved = loader.get_state();
  std::vector<Batch> after = draw(loader, 5);

  loader.set_state(saved);
  expect_same_batches(draw(loader, 5), after);
  DataLoader fresh(iota_tokens(7 * 5 + 1), opts);
  fresh.set_state(saved);
  expect_same_batches(draw(fresh, 5), after);
}

TEST(DataLoader, RejectsWhatCannotBeLoaded) {
  EXPECT_TITAN_ERROR(DataLoader(iota_tokens(100), {.seq_len = 100, .local_batch_size = 1}),
                     "seq_len 100 is larger than the corpus", "101", "holds 100");
  EXPECT_TITAN_ERROR(DataLoader(iota_tokens(100), {.seq_len = 0, .local_batch_size = 1}), "seq_len");
  EXPECT_TITAN_ERROR(DataLoader(iota_tokens(100), {.seq_len = 4, .local_batch_size = 0}), "local_batch_size");
  EXPECT_TITAN_ERROR(
      DataLoader(iota_tokens(100), {.seq_len = 4, .local_batch_size = 1, .dp_rank = 2, .dp_world = 2}),
      "dp_rank 2", "dp_world 2");
  DataLoader loader(iota_tokens(41), {.seq_len = 4, .local_batch_size = 1});
  EXPECT_TITAN_ERROR(loader.set_state({0, 10}), "[0, 10)", "index 10");
  EXPECT_TITAN_ERROR(loader.set_state({-1, 0}), "epoch -1");
}

// ---- the bundled corpus -------------------------------------------------------------------------

TEST(DataCorpus, TheKingJamesBibleLoadsOneDocumentPerBook) {
  ByteTokenizer tok;
  std::vector<fs::path> files{fs::path(TITAN_SOURCE_DIR) / "data" / "kjv.txt.gz"};
  data::TextDataset d =
      data::load_text_dataset(files, tok, {.split = DocumentSplit::blank_line, .validation_fraction = 0.05});
  EXPECT_EQ(d.num_documents, 66);
  const int64_t tokens = static_cast<int64_t>(d.train.size() + d.validation.size());
  // Every byte but the 65 blank lines between books, plus a bos and an eos per book.
  EXPECT_EQ(tokens, d.num_bytes - 65 + 2 * 66);
  EXPECT_EQ(tok.decode(std::span(d.train).first(56)),
            "<|begin_of_text|>In the beginning God created the heaven and the earth.\n");
  EXPECT_EQ(tok.decode(std::span(d.validation).last(24)), "be with you all. Amen.\n<|end_of_text|>");
  for (int32_t id : d.train) ASSERT_TRUE(id >= 0 && id < ByteTokenizer::kPad);

  DataLoader loader(std::move(d.train), {.seq_len = 256, .local_batch_size = 4, .seed = 0});
  Batch b = loader.next();
  EXPECT_EQ(b.inputs.sizes(), (Shape{4, 256}));
}

}  // namespace
}  // namespace titan
