#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_util.h"
#include "titan/checkpoint/checkpoint.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/crc32c.h"

namespace titan::checkpoint {
namespace {

using json = nlohmann::json;

// A fresh, empty folder per test, so that tests may run in parallel.
fs::path fresh_dir(const std::string& name) {
  return test::fresh_temp_dir("ckpt_format_" + name);
}

Tensor iota(const Shape& shape, double start = 0) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(start + static_cast<double>(i));
  return t;
}

void expect_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>()) << what;
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

void write_json(const fs::path& p, const json& j) {
  std::ofstream(p, std::ios::trunc) << j.dump(1);
}

// ---- CRC-32C --------------------------------------------------------------------------------

TEST(Crc32c, PiecewiseEqualsWhole) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  std::string data;
  for (int i = 0; i < 301; ++i) data.push_back(static_cast<char>(i * 37 + 11));
  const uint32_t whole = crc32c(data);
  // Split points that leave every alignment and length below and above 8 bytes on each side.
  for (size_t cut = 0; cut <= data.size(); ++cut)
    ASSERT_EQ(crc32c_extend(crc32c(data.substr(0, cut)), data.data() + cut, data.size() - cut), whole) << cut;
}

// ---- safetensors ----------------------------------------------------------------------------

TEST(Safetensors, RoundTripsEveryDtypeWithAnAlignedDataSection) {
  fs::path dir = fresh_dir("safetensors");
  Tensor f32 = iota({3, 5});
  Tensor strided = iota({4, 3}).as_strided({3, 4}, {1, 3}, 0);  // a transposed view
  std::map<std::string, Tensor> in = {{"a.f32", f32},
                                      {"b.strided", strided},
                                      {"c.f64", Tensor::full({2}, 0.1, {.dtype = kF64})},
                                      {"d.bf16", Tensor::full({7}, 1.5, {.dtype = kBF16})},
                                      {"e.i32", Tensor::full({1, 1}, -3, {.dtype = kI32})},
                                      {"f.i64", Tensor::scalar<int64_t>(1ll << 40)},
                                      {"g.empty", Tensor::empty({0, 4})}};
  const std::string path = (dir / "t.safetensors").string();
  WrittenFile w = write_safetensors(path, in, {{"format", "pt"}}, /*durable=*/true);
  EXPECT_EQ(w.bytes, fs::file_size(path));
  SafetensorsReader r(path);
  EXPECT_EQ(crc32c(r.bytes()), w.crc32c);
  EXPECT_EQ(r.metadata().at("format"), "pt");
  uint64_t data_start = fs::file_size(path);
  for (const auto& [name, e] : r.entries()) data_start = std::min(data_start, e.offset);
  EXPECT_EQ(data_start % 8, 0u) << "the data section is not 8-byte aligned";
  SafetensorsFile back = read_safetensors(path);
  ASSERT_EQ(back.tensors.size(), in.size());
  for (const auto& [name, t] : in)
    expect_equal(back.tensors.at(name), Tensor::empty(t.sizes(), {.dtype = t.dtype()}).copy_(t), name);
}

TEST(Safetensors, TruncatedOrGarbledFilesAreClearErrors) {
  fs::path dir = fresh_dir("safetensors_bad");
  const std::string path = (dir / "t.safetensors").string();
  write_safetensors(path, {{"w", iota({16, 16})}});
  fs::resize_file(path, fs::file_size(path) - 4);
  EXPECT_TITAN_ERROR(SafetensorsReader{path}, path, "'w'", "outside", "truncated");
  fs::resize_file(path, 5);
  EXPECT_TITAN_ERROR(SafetensorsReader{path}, path, "too short");
  std::ofstream(path, std::ios::trunc | std::ios::binary).write("\x04\0\0\0\0\0\0\0{no}", 12);
  EXPECT_TITAN_ERROR(SafetensorsReader{path}, path, "not valid JSON");
  EXPECT_TITAN_ERROR(SafetensorsReader{(dir / "absent.safetensors").string()}, "cannot open",
                     "absent.safetensors");
}

// ---- checkpoints: format and resharding --------------------------------------------------------

TEST(CheckpointFormat, SaveWritesMetadataShardsAndState) {
  fs::path dir = fresh_dir("save") / "step-3";
  Pieces pieces = {{"w", whole(iota({4, 6}))}, {"s", whole(Tensor::scalar<int64_t>(7))}};
  save(dir, pieces, {{"step", 3}});
  EXPECT_FALSE(fs::exists(staging_dir(dir)));
  Metadata m = read_metadata(dir);
  EXPECT_EQ(m.state.at("step"), 3);
  ASSERT_EQ(m.tensors.size(), 2u);
  const TensorMeta& w = m.tensors.at("w");
  EXPECT_EQ(w.dtype, kF32);
  EXPECT_EQ(w.shape, (Shape{4, 6}));
  ASSERT_EQ(w.shards.size(), 1u);
  EXPECT_EQ(w.shards[0].offsets, (Shape{0, 0}));
  EXPECT_EQ(w.shards[0].sizes, (Shape{4, 6}));
  ASSERT_EQ(m.files.size(), 1u);
  const auto& [file, meta] = *m.files.begin();
  EXPECT_EQ(meta.bytes, fs::file_size(dir / file));
  std::ifstream in(dir / file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(meta.crc32c, crc32c(bytes));

  Pieces back = {{"w", whole(Tensor::zeros({4, 6}))}, {"s", whole(Tensor::scalar<int64_t>(0))}};
  Reader(dir).load(back);
  expect_equal(back.at("w").data, iota({4, 6}), "w");
  EXPECT_EQ(back.at("s").data.item(), 7);
}

TEST(CheckpointFormat, SavingOverAnExistingCheckpointReplacesItWhole) {
  fs::path dir = fresh_dir("replace") / "step-1";
  save(dir, {{"a", whole(iota({3}))}, {"b", whole(iota({2}))}}, {{"v", 1}});
  save(dir, {{"a", whole(iota({3}, 10))}}, {{"v", 2}});
  EXPECT_FALSE(fs::exists(staging_dir(dir)));
  Reader r(dir);
  EXPECT_EQ(r.metadata().state.at("v"), 2);
  EXPECT_EQ(r.metadata().tensors.count("b"), 0u);
  Pieces a = {{"a", whole(Tensor::zeros({3}))}};
  r.load(a);
  expect_equal(a.at("a").data, iota({3}, 10), "a");
}

TEST(CheckpointFormat, AFailedSaveLeavesThePreviousCheckpointAsItWas) {
  fs::path dir = fresh_dir("failed_save") / "step-1";
  save(dir, {{"a", whole(iota({3}))}}, {{"v", 1}});
  // A piece outside its tensor: refused when the metadata is checked, after the shard file.
  Pieces bad = {{"a", {iota({3}), {2}, {3}}}};
  EXPECT_TITAN_ERROR(save(dir, bad, {{"v", 2}}), "refusing", "'a'", "not a box inside");
  EXPECT_FALSE(fs::exists(staging_dir(dir)));
  Reader r(dir);
  EXPECT_EQ(r.metadata().state.at("v"), 1);
  Pieces a = {{"a", whole(Tensor::zeros({3}))}};
  r.load(a);
  expect_equal(a.at("a").data, iota({3}), "a");
}

// Two "ranks" save a [6, 4] tensor by rows and a [2, 4, 6] one as a 2 x 2 grid; three others
// load them split another way, and one loads them whole.
TEST(CheckpointFormat, PiecesSavedByNRanksLoadOnM) {
  fs::path dir = fresh_dir("reshard");
  Tensor w = iota({6, 4}), v = iota({2, 4, 6}, 100);
  auto box = [](const Tensor& t, const Shape& lo, const Shape& sizes) {
    Tensor out = Tensor::empty(sizes);
    Shape strides = contiguous_strides(t.sizes());
    int64_t off = 0;
    for (size_t d = 0; d < lo.size(); ++d) off += lo[d] * strides[d];
    return out.copy_(t.as_strided(sizes, strides, off));
  };
  Metadata m;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = std::to_string(rank);
    Shape lo = {rank * 3, 0};
    merge(m, write_shard_file(dir, "w" + r + ".safetensors", {{"w", {box(w, lo, {3, 4}), lo, {6, 4}}}}));
    // Rank r holds [2r, 2r + 2) of v's second dim, in two pieces along the last.
    for (int half = 0; half < 2; ++half) {
      Shape vlo = {0, 2 * rank, 3 * half};
      merge(m, write_shard_file(dir, "v" + r + std::to_string(half) + ".safetensors",
                                {{"v", {box(v, vlo, {2, 2, 3}), vlo, {2, 4, 6}}}}));
    }
  }
  write_metadata(dir, m);
  Reader r(dir);
  EXPECT_EQ(r.metadata().tensors.at("w").shards.size(), 2u);
  EXPECT_EQ(r.metadata().tensors.at("v").shards.size(), 4u);

  // Three ranks: w by columns [0, 1), [1, 3), [3, 4); v by its first dim and a middle slab.
  const std::vector<std::pair<int64_t, int64_t>> cols = {{0, 1}, {1, 2}, {3, 1}};
  for (auto [lo, n] : cols) {
    Pieces mine = {{"w", {Tensor::zeros({6, n}), {0, lo}, {6, 4}}}};
    r.load(mine, {.scope = "w"});
    expect_equal(mine.at("w").data, box(w, {0, lo}, {6, n}), "w columns from " + std::to_string(lo));
  }
  Pieces slab = {{"v", {Tensor::zeros({1, 3, 4}), {1, 1, 1}, {2, 4, 6}}}};
  r.load(slab, {.scope = "v"});
  expect_equal(slab.at("v").data, box(v, {1, 1, 1}, {1, 3, 4}), "v slab");
  Pieces all = {{"w", whole(Tensor::zeros({6, 4}))}, {"v", whole(Tensor::zeros({2, 4, 6}))}};
  r.load(all);
  expect_equal(all.at("w").data, w, "w whole");
  expect_equal(all.at("v").data, v, "v whole");
}

TEST(CheckpointFormat, LoadsIntoStridedTargetsAndCastsOnlyWhenAllowed) {
  fs::path dir = fresh_dir("cast") / "c";
  Tensor bf = Tensor::empty({3, 2}, {.dtype = kBF16}).copy_(iota({3, 2}, 0.5));
  save(dir, {{"w", whole(bf)}}, {});
  Reader r(dir);
  Pieces f32 = {{"w", whole(Tensor::zeros({3, 2}))}};
  EXPECT_TITAN_ERROR(r.load(f32), "tensor 'w'", "expected f32[3, 2]", "has bf16[3, 2]");
  r.load(f32, {.scope = "", .allow_cast = true});
  expect_equal(f32.at("w").data, iota({3, 2}, 0.5), "cast");
  Tensor storage = Tensor::zeros({2, 3}, {.dtype = kBF16});
  Pieces transposed = {{"w", whole(storage.as_strided({3, 2}, {1, 3}, 0))}};
  r.load(transposed);
  expect_equal(storage.as_strided({3, 2}, {1, 3}, 0), bf, "strided target");
}

// ---- checkpoints: everything a damaged or foreign checkpoint can get wrong ---------------------

class CheckpointDamage : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name()) / "step-5";
    save(dir, {{"w", whole(iota({8, 8}))}, {"b", whole(iota({8}))}}, {{"step", 5}});
    Metadata m = read_metadata(dir);
    shard = dir / m.files.begin()->first;
  }
  Pieces targets(const Shape& w_shape = {8, 8}, DType b_dtype = kF32) {
    return {{"w", whole(Tensor::full(w_shape, -1))}, {"b", whole(Tensor::full({8}, -1, {.dtype = b_dtype}))}};
  }
  fs::path dir, shard;
};

TEST_F(CheckpointDamage, TruncatedShardFile) {
  fs::resize_file(shard, fs::file_size(shard) - 100);
  Pieces t = targets();
  EXPECT_TITAN_ERROR(Reader(dir).load(t), shard.filename().string(), "truncated", "metadata.json says");
  EXPECT_EQ(t.at("w").data.to_vector<float>(), std::vector<float>(64, -1))
      << "a failed load wrote into a target";
}

TEST_F(CheckpointDamage, FlippedByteFailsTheChecksum) {
  std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(-3, std::ios::end);
  f.put('\x7f');
  f.close();
  Pieces t = targets();
  EXPECT_TITAN_ERROR(Reader(dir).load(t), shard.filename().string(), "CRC-32C", "changed after saving");
  EXPECT_EQ(t.at("b").data.to_vector<float>(), std::vector<float>(8, -1));
}

TEST_F(CheckpointDamage, MissingShardFileAndMissingMetadata) {
  fs::remove(shard);
  Pieces t = targets();
  EXPECT_TITAN_ERROR(Reader(dir).load(t), shard.filename().string(), "is missing");
  fs::remove(dir / kMetadataFile);
  EXPECT_TITAN_ERROR(Reader{dir}, "no metadata.json", "incomplete");
}

TEST_F(CheckpointDamage, MissingAndExtraTensors) {
  Pieces more = targets();
  more["extra.bias"] = whole(Tensor::zeros({2}));
  EXPECT_TITAN_ERROR(Reader(dir).load(more), "missing tensor 'extra.bias'", "expected f32[2]",
                     "Nothing was loaded");
  Pieces fewer = {{"w", whole(Tensor::zeros({8, 8}))}};
  EXPECT_TITAN_ERROR(Reader(dir).load(fewer), "unexpected tensor 'b'", "f32[8]");
  Reader(dir).load(fewer, {.scope = "w"});  // out of scope, "b" is none of this load's business
}

TEST_F(CheckpointDamage, WrongShapeAndDtype) {
  Pieces shape = targets({8, 4});
  EXPECT_TITAN_ERROR(Reader(dir).load(shape), "tensor 'w'", "expected f32[8, 4]", "has f32[8, 8]");
  Pieces dtype = targets({8, 8}, kI64);
  EXPECT_TITAN_ERROR(Reader(dir).load(dtype), "tensor 'b'", "expected i64[8]", "has f32[8]");
}

TEST_F(CheckpointDamage, FileNamesThatLeaveTheFolderAreRefused) {
  json m = read_json(dir / kMetadataFile);
  const std::string real = shard.filename().string();
  for (std::string evil : {"../x", "/etc/passwd", "sub/x.safetensors", "..", ""}) {
    json e = m;
    e["files"][evil] = e["files"][real];
    e["files"].erase(real);
    for (auto& [name, t] : e["tensors"].items()) t["shards"][0]["file"] = evil;
    write_json(dir / kMetadataFile, e);
    EXPECT_TITAN_ERROR(Reader{dir}, "\"" + evil + "\"", "not a plain file name inside the checkpoint folder");
  }
}

TEST_F(CheckpointDamage, MetadataThatDisagreesWithItselfOrTheFile) {
  json m = read_json(dir / kMetadataFile);
  json e = m;
  e["tensors"]["w"]["shards"][0]["sizes"] = {4, 8};
  write_json(dir / kMetadataFile, e);
  EXPECT_TITAN_ERROR(Reader{dir}, "tensor 'w'", "hold 32 of its 64 elements");

  e = m;
  e["tensors"]["w"]["shards"].push_back(e["tensors"]["w"]["shards"][0]);
  e["tensors"]["w"]["shards"][1]["key"] = "w2";
  write_json(dir / kMetadataFile, e);
  EXPECT_TITAN_ERROR(Reader{dir}, "tensor 'w'", "shards 0 and 1 overlap");

  e = m;
  e["tensors"]["w"]["shape"] = {8, 16};
  e["tensors"]["w"]["shards"][0]["sizes"] = {8, 16};
  write_json(dir / kMetadataFile, e);
  Pieces t = {{"w", whole(Tensor::zeros({8, 16}))}, {"b", whole(Tensor::zeros({8}))}};
  EXPECT_TITAN_ERROR(Reader(dir).load(t), "does not match", "'w'", "f32[8, 8] in the file",
                     "says f32[8, 16]");

  write_json(dir / kMetadataFile, {{"format", "something-else"}});
  EXPECT_TITAN_ERROR(Reader{dir}, "not a titan checkpoint");
  std::ofstream(dir / kMetadataFile, std::ios::trunc) << "{\"format\": ";
  EXPECT_TITAN_ERROR(Reader{dir}, "metadata.json", "not valid JSON");
}

}  // namespace
}  // namespace titan::checkpoint
