// Damaged and hand-edited files: each is refused with a titan::Error naming the file, the field,
// what was expected and what was found; never a crash, a wrapped number or an alloc of exabytes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "support/test_util.h"
#include "titan/checkpoint/checkpoint.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/checked.h"
#include "titan/core/crc32c.h"
#include "titan/core/json_fields.h"
#include "titan/data/token_shard.h"
#include "titan/data/tokenizer/bpe_tokenizer.h"
#include "titan/models/common/size_limits.h"
#include "titan/models/llama3/model_args.h"
#include "titan/models/qwen3/model_args.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// ---- the helpers ---------------------------------------------------------------------------------

TEST(JsonFields, ErrorsNameTheFileThePathAndWhatWasFound) {
  using namespace json_fields;
  const JsonPath root{"f.json", ""};
  const json j = json::parse(R"({"a": {"list": [1, "x", 3000000000, -1, 2.0]}, "s": "t"})");
  EXPECT_EQ(field<std::string>(j, "s", root), "t");
  EXPECT_EQ(field_or<bool>(j, "absent", true, root), true);
  const json& list = member(member(j, "a", root), "list", root / "a");
  EXPECT_EQ(as<int32_t>(list[0], root / "a" / "list"), 1);
  EXPECT_TITAN_ERROR(as<int32_t>(list[1], (root / "a" / "list")[1]), "f.json: \"a.list[1]\"", "an integer",
                     "found a string \"x\"");
  EXPECT_TITAN_ERROR(as<int32_t>(list[2], (root / "a" / "list")[2]), "a.list[2]", "2147483647", "3000000000");
  EXPECT_EQ(as<int64_t>(list[2], root), 3000000000);
  EXPECT_TITAN_ERROR(as<uint64_t>(list[3], (root / "a" / "list")[3]), "a.list[3]", "[0, ", "-1");
  EXPECT_TITAN_ERROR(as<int64_t>(list[4], root), "an integer", "found a number 2.0");
  EXPECT_TITAN_ERROR(field<std::string>(j, "missing", root), "f.json: \"missing\" is missing");
  EXPECT_TITAN_ERROR(field<bool>(list, "x", root / "a" / "list"), "\"a.list\" must be a JSON object",
                     "found an array");
  EXPECT_TITAN_ERROR(object(json::array({1, 2, 3}), root), "f.json must be a JSON object", "[1,2,3]");
}

TEST(Checked, ArithmeticThatWouldWrapIsRefused) {
  EXPECT_EQ(product<uint64_t>(1ull << 31, 4), 1ull << 33);
  EXPECT_FALSE(product<uint64_t>(1ull << 62, 4).has_value());
  EXPECT_FALSE(sum<int64_t>(INT64_MAX, 1).has_value());
  EXPECT_TITAN_ERROR(checked_mul<int64_t>(INT64_MAX / 2, 3, "x's byte count"), "x's byte count", "overflows");
  EXPECT_EQ(checked_add<int32_t>(2, 3, "sum"), 5);
}

// ---- tokenizer.json and tokenizer_config.json ---------------------------------------------------

class HostileTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path dir = fs::path(TITAN_SOURCE_DIR) / "data" / "kjv_tokenizer";
    if (!fs::exists(dir / "tokenizer.json")) TITAN_MISSING_REFERENCE("data/kjv_tokenizer is missing");
    good_ = json::parse(slurp(dir / "tokenizer.json"));
    config_ = slurp(dir / "tokenizer_config.json");
  }
  // The good tokenizer, edited.
  data::BpeTokenizer with(const std::function<void(json&)>& edit, const std::string& config = "") const {
    json j = good_;
    edit(j);
    return data::BpeTokenizer::parse(j.dump(), config.empty() ? config_ : config, "/t/tokenizer.json",
                                     "/t/tokenizer_config.json");
  }

  json good_;
  std::string config_;
};

TEST_F(HostileTokenizer, WrongTypesAndRangesNameTheFileAndField) {
  EXPECT_NO_THROW(with([](json&) {}));
  EXPECT_TITAN_ERROR(
      data::BpeTokenizer::parse("[1,2,3]", "{}", "/t/tokenizer.json", "/t/tokenizer_config.json"),
      "/t/tokenizer.json must be a JSON object", "found an array [1,2,3]");
  EXPECT_TITAN_ERROR(with([](json& j) { j["model"]["vocab"]["a"] = "64"; }), "/t/tokenizer.json",
                     "\"model.vocab.a\"", "an integer", "found a string \"64\"");
  EXPECT_TITAN_ERROR(with([](json& j) { j["added_tokens"][1].erase("content"); }), "/t/tokenizer.json",
                     "\"added_tokens[1].content\" is missing");
  EXPECT_TITAN_ERROR(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["type"] = 7; }),
                     "\"pre_tokenizer.pretokenizers[0].type\"", "a string", "found an integer 7");
  EXPECT_TITAN_ERROR(with([](json& j) { j["pre_tokenizer"]["type"] = 7; }), "\"pre_tokenizer.type\"",
                     "a string");
  EXPECT_TITAN_ERROR(with([](json& j) {
                       j["normalizer"] = {{"type", 1}};
                     }),
                     "\"normalizer.type\"", "a string");
  EXPECT_TITAN_ERROR(with([](json& j) { j["decoder"]["type"] = false; }), "\"decoder.type\"", "a string");
  EXPECT_TITAN_ERROR(with([](json& j) { j["added_tokens"][0]["special"] = "yes"; }),
                     "\"added_tokens[0].special\"", "true or false", "\"yes\"");
  // 2e9 is a float in JSON, 2000000000 an int32: both are past the 2048 tokens the file lists,
  // and neither may size the tables.
  EXPECT_TITAN_ERROR(with([](json& j) { j["model"]["vocab"]["a"] = 2e9; }), "\"model.vocab.a\"",
                     "an integer");
  EXPECT_TITAN_ERROR(with([](json& j) { j["model"]["vocab"]["a"] = 2000000000; }), "\"model.vocab.a\"",
                     "[0, 2047]", "2000000000");
  EXPECT_TITAN_ERROR(with([](json& j) { j["added_tokens"][0]["id"] = 2000000000; }), "\"added_tokens[0].id\"",
                     "[0, 2047]", "2000000000");
  EXPECT_TITAN_ERROR(with([](json& j) { j["added_tokens"][0]["id"] = 5000000000; }),
                     "\"added_tokens[0].id\"");
}

TEST_F(HostileTokenizer, ConfigTokensOfTheWrongTypeNameTheConfigFile) {
  EXPECT_EQ(with([](json&) {}, R"({"bos_token": {"content": "<|begin_of_text|>"}})").bos_id(), 2046);
  EXPECT_TITAN_ERROR(with([](json&) {}, R"({"bos_token": 5})"), "/t/tokenizer_config.json", "\"bos_token\"",
                     "the token's text or {\"content\": text}", "found an integer 5");
  EXPECT_TITAN_ERROR(with([](json&) {}, R"({"eos_token": {"text": "x"}})"), "/t/tokenizer_config.json",
                     "\"eos_token.content\" is missing");
  EXPECT_TITAN_ERROR(with([](json&) {}, R"({"bos_token": "<|begin_of_text|>", "add_bos_token": "no"})"),
                     "\"add_bos_token\"", "true or false");
  EXPECT_TITAN_ERROR(with([](json&) {}, "[]"), "/t/tokenizer_config.json must be a JSON object");
}

// ---- token shards --------------------------------------------------------------------------------

TEST(HostileTokenShard, ACountThatWrapsTheSizeCheckIsRefused) {
  const fs::path dir = test::fresh_temp_dir("hostile_shard");
  data::TokenShardWriter w(dir / "shards", {.vocab_size = 100, .bos = -1, .eos = 1}, 1000);
  w.append(std::vector<int32_t>{5, 6, 7, 1});
  w.finish();
  const fs::path shard = w.shards().at(0);
  std::string bytes = slurp(shard);
  // 64 + 4 (n + 2^62) wraps around to 64 + 4n, the file's true size.
  uint64_t n = 0;
  std::memcpy(&n, bytes.data() + 16, 8);
  n += uint64_t{1} << 62;
  std::memcpy(bytes.data() + 16, &n, 8);
  const uint32_t crc = crc32c(std::string_view(bytes.data(), 36));
  std::memcpy(bytes.data() + 36, &crc, 4);
  spit(shard, bytes);
  EXPECT_TITAN_ERROR(data::TokenShard::open(shard), shard.string(), std::to_string(n) + " ids",
                     "holds " + std::to_string(bytes.size()) + " bytes", "damaged");
}

// ---- safetensors ---------------------------------------------------------------------------------

// A safetensors file of `header` (JSON) and `data_bytes` zero bytes.
std::string safetensors_bytes(const json& header, size_t data_bytes) {
  const std::string h = header.dump();
  const uint64_t len = h.size();
  std::string out(reinterpret_cast<const char*>(&len), 8);
  out += h;
  out.append(data_bytes, '\0');
  return out;
}

TEST(HostileSafetensors, TensorsMustTileTheDataSection) {
  const fs::path path = test::fresh_temp_dir("hostile_safetensors") / "m.safetensors";
  auto tensor = [](uint64_t begin, uint64_t end, const json& shape = {4, 4}) {
    return json{{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, end}}};
  };
  auto open = [&](const json& header, size_t data_bytes) {
    spit(path, safetensors_bytes(header, data_bytes));
    return checkpoint::SafetensorsReader(path.string());
  };
  EXPECT_EQ(open({{"a", tensor(0, 64)}, {"b", tensor(64, 128)}}, 128).entries().size(), 2u);
  // Every tensor at byte 0: each would read the same bytes.
  EXPECT_TITAN_ERROR(open({{"a", tensor(0, 64)}, {"b", tensor(0, 64)}}, 128), path.string(), "tensor 'b'",
                     "overlapping", "ends at byte 64");
  EXPECT_TITAN_ERROR(open({{"a", tensor(0, 64)}, {"b", tensor(96, 160)}}, 160), path.string(), "tensor 'b'",
                     "[96, 160]", "gap");
  EXPECT_TITAN_ERROR(open({{"a", tensor(0, 64)}}, 128), path.string(), "cover 64 bytes of the 128-byte");
  EXPECT_TITAN_ERROR(open({{"a", tensor(64, 0)}}, 64), "tensor 'a'", "end comes before its begin");
  EXPECT_TITAN_ERROR(open({{"a", tensor(0, 64, {4, -4})}}, 64), "\"a.shape[1]\"", "found an integer -4");
  EXPECT_TITAN_ERROR(open({{"a", tensor(0, 64, {uint64_t{1} << 62, 16})}}, 64), "tensor 'a' byte size",
                     "overflows");
  EXPECT_TITAN_ERROR(open({{"a", {{"dtype", 3}, {"shape", {1}}, {"data_offsets", {0, 4}}}}}, 4),
                     "\"a.dtype\"", "a string");
  EXPECT_TITAN_ERROR(open({{"a", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, "4"}}}}}, 4),
                     "\"a.data_offsets[1]\"", "found a string");
  // A header length past the format's 100 MB limit is refused before it is read.
  std::string bytes = safetensors_bytes({{"a", tensor(0, 64)}}, 64);
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(bytes.data(), &huge, 8);
  spit(path, bytes);
  EXPECT_TITAN_ERROR(checkpoint::SafetensorsReader(path.string()), path.string(), "header length", "limit");
}

TEST(HostileSafetensors, AnIndexWhoseWeightMapIsNotAnObjectIsNamed) {
  const fs::path dir = test::fresh_temp_dir("hostile_hf_index");
  spit(dir / "config.json", "{}");
  spit(dir / "model.safetensors.index.json", R"({"weight_map": ["model-00001.safetensors"]})");
  EXPECT_TITAN_ERROR(checkpoint::HfReader{dir}, (dir / "model.safetensors.index.json").string(),
                     "\"weight_map\"", "a JSON object", "found an array");
}

// ---- checkpoint metadata.json --------------------------------------------------------------------

TEST(HostileCheckpointMetadata, StateAndFieldsAreTypeAndRangeChecked) {
  const fs::path dir = test::fresh_temp_dir("hostile_metadata") / "step-3";
  checkpoint::save(dir, {{"w", checkpoint::whole(Tensor::zeros({2, 3}))}},
                   {{"step", 3}, {"lr_scheduler", {{"step", 3}}}, {"rng", {{"seed", 1}, {"offset", 9}}}});
  const fs::path file = dir / checkpoint::kMetadataFile;
  const json good = json::parse(slurp(file));
  auto read_with = [&](const std::function<void(json&)>& edit) {
    json j = good;
    edit(j);
    spit(file, j.dump());
    return checkpoint::read_metadata(dir);
  };
  EXPECT_EQ(read_with([](json&) {}).state.at("step"), 3);
  EXPECT_TITAN_ERROR(read_with([](json& j) { j["state"]["step"] = 1'000'000'000'000'000; }), file.string(),
                     "\"state.step\"", "[0, 1000000000000]", "1000000000000000");
  EXPECT_TITAN_ERROR(read_with([](json& j) { j["state"]["step"] = -1; }), "\"state.step\"",
                     "found an integer -1");
  EXPECT_TITAN_ERROR(read_with([](json& j) { j["state"]["step"] = "3"; }), "\"state.step\"",
                     "found a string");
  EXPECT_TITAN_ERROR(read_with([](json& j) { j["state"]["lr_scheduler"]["step"] = 3.5; }),
                     "\"state.lr_scheduler.step\"", "found a number 3.5");
  EXPECT_TITAN_ERROR(read_with([](json& j) { j["state"]["rng"]["seed"] = -2; }), "\"state.rng.seed\"");
  EXPECT_TITAN_ERROR(read_with([](json& j) { j["state"] = json::array(); }),
                     "\"state\" must be a JSON object");
  EXPECT_TITAN_ERROR(read_with([](json& j) { j["version"] = "1"; }), file.string(), "\"version\"",
                     "an integer");
  EXPECT_TITAN_ERROR(read_with([](json& j) {
                       j["tensors"]["w"]["shape"] = {2, "3"};
                     }),
                     "\"tensors.w.shape[1]\"");
  EXPECT_TITAN_ERROR(read_with([](json& j) {
                       j["tensors"]["w"]["shape"] = {int64_t{1} << 40, int64_t{1} << 40};
                     }),
                     "\"tensors.w.shape\"", "more than 2^63 elements");
  EXPECT_TITAN_ERROR(read_with([](json& j) { j["tensors"]["w"]["shards"][0].erase("key"); }),
                     "\"tensors.w.shards[0].key\" is missing");
  EXPECT_TITAN_ERROR(read_with([](json& j) { j["files"].begin().value()["crc32c"] = int64_t{1} << 33; }),
                     "crc32c\"", "4294967295");
}

// ---- model sizes ---------------------------------------------------------------------------------

TEST(HostileModelArgs, SizesPastTheLimitsAreRefusedNamingTheKey) {
  models::llama3::ModelArgs a = models::llama3::flavor("debugmodel");
  a.vocab_size = int64_t{1} << 40;
  EXPECT_TITAN_ERROR(models::llama3::summarize(a, 16), "llama3 ModelArgs", "vocab_size", "2147483647",
                     std::to_string(a.vocab_size));
  a = models::llama3::flavor("debugmodel");
  a.n_layers = int64_t{1} << 50;
  EXPECT_TITAN_ERROR(a.validate(), "n_layers", "4096");
  a = models::llama3::flavor("debugmodel");
  a.ffn_dim_multiplier = 1e30;
  EXPECT_TITAN_ERROR(a.validate(), "ffn_dim_multiplier");
  models::qwen3::ModelArgs q;
  q.dim = int64_t{1} << 40;
  EXPECT_TITAN_ERROR(q.validate(), "qwen3 ModelArgs", "dim", "131072");
  // The largest model the limits allow still has a positive, exact parameter count.
  models::qwen3::ModelArgs big;
  big.dim = big.head_dim = big.ffn_dim = models::common::kMaxWidth;
  big.n_layers = big.n_heads = big.n_kv_heads = models::common::kMaxCount;
  big.vocab_size = models::common::kMaxVocab;
  big.max_seq_len = 16;
  EXPECT_GT(models::qwen3::summarize(big, 16).num_params, 0);
}

// ---- the titan CLI -------------------------------------------------------------------------------

struct CliRun {
  int status = -1;
  std::string err;
};

CliRun titan_cli(const std::string& args, const std::string& stdin_text, const fs::path& dir) {
  spit(dir / "stdin", stdin_text);
  const std::string cmd = "cd " + std::string(TITAN_SOURCE_DIR) + " && " + TITAN_CLI + " " + args + " < " +
                          (dir / "stdin").string() + " > " + (dir / "stdout").string() + " 2> " +
                          (dir / "stderr").string();
  const int raw = std::system(cmd.c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, slurp(dir / "stderr")};
}

TEST(HostileCli, DecodeRefusesIdsOutsideTheVocabulary) {
  const fs::path dir = test::fresh_temp_dir("hostile_cli_decode");
  CliRun ok = titan_cli("tokenizer decode --tokenizer data/kjv_tokenizer", "[100, 2047]", dir);
  EXPECT_EQ(ok.status, 0) << ok.err;
  // 2^32 + 100 would wrap to 100 as an int32.
  CliRun wrapped = titan_cli("tokenizer decode --tokenizer data/kjv_tokenizer", "[1, 4294967396]", dir);
  EXPECT_EQ(wrapped.status, 1);
  EXPECT_NE(wrapped.err.find("titan: error: titan tokenizer decode: stdin's id 4294967396 at position 1"),
            std::string::npos)
      << wrapped.err;
  EXPECT_NE(wrapped.err.find("[0, 2048)"), std::string::npos) << wrapped.err;
  for (const char* bad : {"[2048]", "[-1]", "[1.5]", "[18446744073709551615]"}) {
    CliRun r = titan_cli("tokenizer decode --tokenizer data/kjv_tokenizer", bad, dir);
    EXPECT_EQ(r.status, 1) << bad;
    EXPECT_NE(r.err.find("is not an integer id in [0, 2048)"), std::string::npos) << bad << ": " << r.err;
  }
}

TEST(HostileCli, AnyExceptionEndsInAMessageAndExitCodeOne) {
  const fs::path dir = test::fresh_temp_dir("hostile_cli_any");
  spit(dir / "corpus.jsonl", "{\"text\": \"In the beginning\"}\n");
  spit(dir / "a_file", "");
  // Making a folder under a file fails in std::filesystem, which throws its own exception type.
  CliRun r = titan_cli("tokenize --tokenizer data/kjv_tokenizer --out " +
                           (dir / "a_file" / "shards").string() + " " + (dir / "corpus.jsonl").string(),
                       "", dir);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.err.rfind("titan: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("a_file"), std::string::npos) << r.err;
}

TEST(HostileCli, BadTokenizerFilesAreErrorsNotCrashes) {
  const fs::path dir = test::fresh_temp_dir("hostile_cli_tokenizer");
  spit(dir / "tokenizer.json", "[1,2,3]");
  CliRun r = titan_cli("tokenizer encode --tokenizer " + dir.string(), "hi", dir);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("titan: error: " + (dir / "tokenizer.json").string() + " must be a JSON object"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace titan
