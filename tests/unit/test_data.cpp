#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "support/test_util.h"
#include "titan/core/rng.h"
#include "titan/data/byte_tokenizer.h"
#include "titan/data/dataset.h"
#include "titan/data/loader.h"
#include "titan/data/text_dataset.h"
#include "titan/data/tokenizer.h"
#include "titan/data/utf8.h"

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

data::TokenStream iota_tokens(int64_t n) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  std::iota(tokens.begin(), tokens.end(), 0);
  return data::TokenStream(std::move(tokens));
}

std::vector<int32_t> all_ids(const data::TokenStream& s) {
  std::vector<int32_t> ids(static_cast<size_t>(s.size()));
  s.read(0, s.size(), ids.data());
  return ids;
}

data::Dataset load(const fs::path& path, data::DatasetOptions o = {}) {
  o.path = path.string();
  return data::load_dataset(o, *data::load_tokenizer(""));
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
  const std::string book1 = "In the beginning\nwas the word.\n", book2 = "And ünïcödé, 漢字 bytes.\n";
  const std::string text = "\n" + book1 + "\n \n" + book2;
  fs::path plain = write_plain("corpus.txt", text), gz = write_gzip("corpus.txt.gz", text);
  EXPECT_NE(fs::file_size(gz), text.size());

  data::Dataset a = load(plain), b = load(gz);
  EXPECT_EQ(all_ids(a.stream), concat({wrapped(book1), wrapped(book2)}));
  EXPECT_EQ(all_ids(b.stream), all_ids(a.stream));
  EXPECT_EQ(a.stats.documents, 2);
  EXPECT_EQ(a.stats.files, 1);
  EXPECT_EQ(a.stats.bytes, static_cast<int64_t>(text.size()));
  EXPECT_EQ(b.stats.bytes, a.stats.bytes);
  EXPECT_EQ(a.stats.tokens, a.stream.size());
}

TEST_F(DataFiles, FoldersAreReadRecursivelyInNameOrderAndGlobsExpand) {
  write_plain("b.txt", "second\n\nfile");
  write_gzip("a.gz", "first");
  fs::create_directories(dir_ / "c");
  write_plain("c/deeper.txt", "third");
  write_plain(".hidden", "never read");
  data::Dataset d = load(dir_, {.split = DocumentSplit::file});
  EXPECT_EQ(all_ids(d.stream), concat({wrapped("first"), wrapped("second\n\nfile"), wrapped("third")}));
  EXPECT_EQ(d.stats.files, 3);

  data::Dataset globbed = load(dir_ / "*.txt", {.split = DocumentSplit::blank_line});
  EXPECT_EQ(all_ids(globbed.stream), concat({wrapped("second\n"), wrapped("file")}));
  EXPECT_EQ(data::resolve_dataset_files((dir_ / "?.*").string()), (std::vector<fs::path>{dir_ / "a.gz", dir_ / "b.txt"}));
}

TEST_F(DataFiles, JsonlDocumentsComeFromTheNamedField) {
  write_plain("part1.jsonl", "{\"text\": \"one\", \"id\": 1}\n\n{\"text\": \"two\\nlines\"}\r\n");
  write_gzip("part2.jsonl.gz", "{\"content\": \"ignored\", \"text\": \"three\"}");
  data::Dataset d = load(dir_ / "part*");
  EXPECT_EQ(all_ids(d.stream), concat({wrapped("one"), wrapped("two\nlines"), wrapped("three")}));
  EXPECT_EQ(d.stats.documents, 3);

  write_plain("other.jsonl", "{\"content\": \"four\"}\n");
  EXPECT_EQ(all_ids(load(dir_ / "other.jsonl", {.text_field = "content"}).stream), wrapped("four"));
}

TEST_F(DataFiles, BadDataIsAnErrorNamingThePlaceOrACountedSkip) {
  fs::path text = write_plain("mixed.txt", "good one\n\nbad \xC3\x28 byte\n\nalso good\n");
  EXPECT_TITAN_ERROR(load(text), text.string(), "byte 14", "line 3", "not valid UTF-8", "bad_data = \"skip\"");
  data::Dataset d = load(text, {.bad_data = data::BadData::skip});
  EXPECT_EQ(all_ids(d.stream), concat({wrapped("good one\n"), wrapped("also good\n")}));
  EXPECT_EQ(d.stats.skipped.at("not UTF-8"), 1);

  fs::path jsonl = write_plain("bad.jsonl",
                               "{\"text\": \"fine\"}\n{\"text\": 3}\nnot json\n{\"text\": \"\"}\n[1]\n"
                               "{\"text\": \"\xFF\"}\n{\"text\": \"fine too\"}\n");
  EXPECT_TITAN_ERROR(load(jsonl), jsonl.string(), "line 2", "no string field \"text\"");
  data::Dataset j = load(jsonl, {.bad_data = data::BadData::skip});
  EXPECT_EQ(all_ids(j.stream), concat({wrapped("fine"), wrapped("fine too")}));
  EXPECT_EQ(j.stats.skipped, (std::map<std::string, int64_t>{
                                 {"without the text field", 1}, {"not JSON objects", 2}, {"empty", 1}, {"not UTF-8", 1}}));
  EXPECT_EQ(j.stats.skipped_summary(), "5 skipped (1 empty, 2 not JSON objects, 1 not UTF-8, 1 without the text field)");

  fs::path empty = write_plain("empty.txt", "\n \n");
  EXPECT_TITAN_ERROR(load(empty), empty.string(), "holds no document");
  fs::create_directories(dir_ / "only_empty");
  write_plain("only_empty/e.txt", "");
  EXPECT_TITAN_ERROR(load(dir_ / "only_empty", {.bad_data = data::BadData::skip}), "holds no document",
                     "1 skipped (1 empty files)");
}

TEST_F(DataFiles, MissingInputsAreAlwaysErrors) {
  data::DatasetOptions skip{.bad_data = data::BadData::skip};
  EXPECT_TITAN_ERROR(load(dir_ / "no_such.txt", skip), "training.dataset_path", "no_such.txt", "does not exist");
  EXPECT_TITAN_ERROR(load(dir_ / "*.nothing", skip), "glob", "matches no file");
  fs::create_directories(dir_ / "void");
  EXPECT_TITAN_ERROR(load(dir_ / "void", skip), "void", "holds no files");

  fs::path missing = dir_ / "no_such_corpus.txt";
  EXPECT_TITAN_ERROR(data::read_text_file(missing), missing.string(), "does not exist");
  EXPECT_TITAN_ERROR(data::read_text_file(dir_), dir_.string(), "not a regular file", "not a folder");
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
}

TEST(DataUtf8, AcceptsWellFormedSequencesAndFindsTheFirstBadByte) {
  constexpr size_t kOk = std::string_view::npos;
  EXPECT_EQ(data::find_invalid_utf8(""), kOk);
  EXPECT_EQ(data::find_invalid_utf8("plain ascii, longer than eight bytes"), kOk);
  EXPECT_EQ(data::find_invalid_utf8("ü 漢 \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF \xEF\xBF\xBF"), kOk);
  EXPECT_EQ(data::find_invalid_utf8("abc\x80"), 3u);                 // lone continuation byte
  EXPECT_EQ(data::find_invalid_utf8("abcdefghij\xC0\x80"), 10u);     // overlong NUL
  EXPECT_EQ(data::find_invalid_utf8("\xE0\x80\xAF"), 0u);            // overlong '/'
  EXPECT_EQ(data::find_invalid_utf8("x\xED\xA0\x80"), 1u);           // a UTF-16 surrogate
  EXPECT_EQ(data::find_invalid_utf8("\xF4\x90\x80\x80"), 0u);        // above U+10FFFF
  EXPECT_EQ(data::find_invalid_utf8("ok\xE2\x82"), 2u);              // cut short at the end
  EXPECT_EQ(data::find_invalid_utf8("\xE2\x28\xA1"), 0u);            // bad continuation
  EXPECT_EQ(data::find_invalid_utf8("\xFF"), 0u);
}

// ---- token shards -------------------------------------------------------------------------------

data::TokenShardInfo info_of(const data::Tokenizer& t) {
  return {.vocab_size = t.vocab_size(), .bos = *t.bos_id(), .eos = *t.eos_id(), .tokenizer_fingerprint = t.fingerprint()};
}

TEST(DataTokenStream, ReadsAcrossPieces) {
  data::TokenStream s;
  s.append({0, 1, 2});
  s.append(std::vector<int32_t>{});
  auto mapped = std::make_shared<std::vector<int32_t>>(std::vector<int32_t>{3, 4});
  s.append(mapped->data(), 2, mapped);
  s.append({5, 6, 7, 8});
  EXPECT_EQ(s.size(), 9);
  std::vector<int32_t> out(6);
  s.read(2, 6, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{2, 3, 4, 5, 6, 7}));
  EXPECT_TITAN_ERROR(s.read(5, 5, out.data()), "[5, 10)", "stream of 9 ids");
}

TEST_F(DataFiles, ShardsHoldTheSameStreamAsTheText) {
  const std::string text = "First book.\n\nSecond, longer book with more words.\n\nThird.\n";
  fs::path corpus = write_plain("corpus.txt", text);
  auto tok = data::load_tokenizer("data/kjv_tokenizer");
  data::Dataset from_text = data::load_dataset({.path = corpus.string()}, *tok);

  // Shards of 7 ids, so documents straddle shard boundaries.
  data::TokenShardWriter w(dir_ / "shards", info_of(*tok), 7);
  data::DatasetStats stats;
  std::vector<fs::path> files{corpus};
  data::for_each_document_batch(files, {}, stats, [&](std::span<const std::string_view> docs, int64_t) {
    std::vector<int32_t> packed;
    for (const auto& ids : tok->encode_batch(docs)) data::pack_document(ids, *tok, packed);
    w.append(packed);
  });
  w.finish();
  EXPECT_EQ(w.tokens_written(), from_text.stream.size());
  EXPECT_EQ(static_cast<int64_t>(w.shards().size()), (from_text.stream.size() + 6) / 7);

  data::Dataset from_shards = data::load_dataset({.path = (dir_ / "shards").string()}, *tok);
  EXPECT_EQ(all_ids(from_shards.stream), all_ids(from_text.stream));
  EXPECT_EQ(from_shards.stats.documents, 3);
  EXPECT_EQ(from_shards.stats.files, static_cast<int64_t>(w.shards().size()));

  // Shards and text mixed keep file order.
  fs::copy_file(corpus, dir_ / "shards" / "zz_after.txt");
  data::Dataset mixed = data::load_dataset({.path = (dir_ / "shards").string()}, *tok);
  std::vector<int32_t> twice = all_ids(from_text.stream);
  twice.insert(twice.end(), twice.begin(), twice.end());
  EXPECT_EQ(all_ids(mixed.stream), twice);

  // The byte tokenizer is not the one the shards were made with.
  fs::remove(dir_ / "shards" / "zz_after.txt");
  EXPECT_TITAN_ERROR(load(dir_ / "shards"), "made by another tokenizer", "model.tokenizer_path");
  EXPECT_TITAN_ERROR(data::TokenShardWriter(dir_ / "shards", info_of(*tok), 7), "already holds shards");
}

TEST_F(DataFiles, DamagedShardsAreErrorsOrCountedSkips) {
  auto tok = data::load_tokenizer("");
  data::TokenShardWriter w(dir_ / "s", info_of(*tok), 100);
  std::vector<int32_t> ids(250, 'a');
  w.append(ids);
  w.finish();
  ASSERT_EQ(w.shards().size(), 3u);
  auto bytes_of = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto rewrite = [](const fs::path& p, const std::string& b) { std::ofstream(p, std::ios::binary) << b; };
  const fs::path first = w.shards()[0], second = w.shards()[1];
  const std::string whole = bytes_of(first);
  EXPECT_EQ(whole.size(), 64u + 400u);

  rewrite(first, whole.substr(0, whole.size() - 6));
  EXPECT_TITAN_ERROR(data::TokenShard::open(first), first.string(), "truncated", "promises 100 ids");
  EXPECT_TITAN_ERROR(load(dir_ / "s"), first.string(), "truncated", "bad_data = \"skip\"");
  data::Dataset d = load(dir_ / "s", {.bad_data = data::BadData::skip});
  EXPECT_EQ(d.stream.size(), 150);
  EXPECT_EQ(d.stats.skipped.at("damaged shards"), 1);

  std::string header_hit = whole;
  header_hit[20] ^= 1;
  rewrite(first, header_hit);
  EXPECT_TITAN_ERROR(data::TokenShard::open(first), "checksum");
  std::string bad_id = whole;
  bad_id[64 + 4 * 7 + 1] = 0x7f;  // id 7 becomes far above the vocabulary
  rewrite(first, bad_id);
  EXPECT_TITAN_ERROR(data::TokenShard::open(first), "at position 7", "vocab_size 259");
  rewrite(second, "not a shard at all");
  EXPECT_TITAN_ERROR(data::TokenShard::open(second), "not a titan token shard", "titan tokenize");
}

// ---- loader -------------------------------------------------------------------------------------

TEST(DataLoader, DocumentIdsCountTheEosTokensBeforeEachPosition) {
  // Windows of 6 inputs: [9 1 9 9 2 3] and [9 4 5 6 7 8]; 9 ends a document.
  data::TokenStream s(std::vector<int32_t>{9, 1, 9, 9, 2, 3, 9, 4, 5, 6, 7, 8, 0});
  DataLoader loader(std::move(s), {.seq_len = 6, .local_batch_size = 2, .shuffle = false, .eos_id = 9});
  Batch b = loader.next();
  ASSERT_TRUE(b.document_ids.defined());
  EXPECT_EQ(b.document_ids.dtype(), kI32);
  EXPECT_EQ(b.document_ids.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 1, 2, 3, 3, 0, 1, 1, 1, 1, 1}));
  DataLoader plain(iota_tokens(13), {.seq_len = 6, .local_batch_size = 1});
  EXPECT_FALSE(plain.next().document_ids.defined());
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
                     "seq_len 100 is larger than the corpus", "seq_len + 1 tokens", "holds 100",
                     "at most 99");
  // The largest seq_len: told as it is, without a sum that overflows.
  EXPECT_TITAN_ERROR(
      DataLoader(iota_tokens(100), {.seq_len = std::numeric_limits<int64_t>::max(), .local_batch_size = 1}),
      "seq_len 9223372036854775807 is larger than the corpus", "holds 100");
  try {
    DataLoader(iota_tokens(100), {.seq_len = std::numeric_limits<int64_t>::max(), .local_batch_size = 1});
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("-9223372036854775808"), std::string::npos) << e.what();
  }
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
  const std::string kjv = (fs::path(TITAN_SOURCE_DIR) / "data" / "kjv.txt.gz").string();
  auto bytes = data::load_tokenizer("");
  data::Dataset d = data::load_dataset({.path = kjv}, *bytes);
  EXPECT_EQ(d.stats.documents, 66);
  // Every byte but the 65 blank lines between books, plus a bos and an eos per book.
  EXPECT_EQ(d.stream.size(), d.stats.bytes - 65 + 2 * 66);
  std::vector<int32_t> ids = all_ids(d.stream);
  EXPECT_EQ(bytes->decode(std::span(ids).first(56)),
            "<|begin_of_text|>In the beginning God created the heaven and the earth.\n");
  EXPECT_EQ(bytes->decode(std::span(ids).last(24)), "be with you all. Amen.\n<|end_of_text|>");

  // Its own BPE tokenizer: 3.7 bytes a token (data/kjv_tokenizer/README.md), the same documents.
  auto bpe = data::load_tokenizer("data/kjv_tokenizer");
  data::Dataset b = data::load_dataset({.path = kjv}, *bpe);
  EXPECT_EQ(b.stats.documents, 66);
  EXPECT_EQ(b.stream.size(), 1121910 + 2 * 66 - 65);
  std::vector<int32_t> bpe_ids = all_ids(b.stream);
  EXPECT_EQ(bpe->decode(std::span(bpe_ids).first(15)),
            "<|begin_of_text|>In the beginning God created the heaven and the earth.\n");

  DataLoader loader(std::move(b.stream), {.seq_len = 256, .local_batch_size = 4, .seed = 0, .eos_id = *bpe->eos_id()});
  Batch batch = loader.next();
  EXPECT_EQ(batch.inputs.sizes(), (Shape{4, 256}));
  EXPECT_EQ(batch.document_ids.sizes(), (Shape{4, 256}));
}

}  // namespace
}  // namespace titan
