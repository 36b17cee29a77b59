#include "support/hf_tokenizer.h"

#include <gtest/gtest.h>
#include <unicode/unistr.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/paths.h"

namespace titan::test {

namespace fs = std::filesystem;

HfTokenization hf_tokenize(const fs::path& file, const std::vector<std::string>& texts,
                           const fs::path& scratch) {
  fs::path input = scratch / "texts.json";
  std::ofstream(input) << nlohmann::json(texts).dump();
  std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + TITAN_SOURCE_DIR +
                    "/tests/tokenizer/hf_encode.py' '" + file.string() + "' < '" + input.string() + "'";
  FILE* pipe = popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << cmd;
  std::string out;
  char buf[1 << 16];
  for (size_t n; pipe != nullptr && (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  int status = pipe != nullptr ? pclose(pipe) : -1;
  EXPECT_EQ(status, 0) << cmd << "\n(is tokenizers installed in the venv? run make deps-test)";
  if (status != 0) return {};
  nlohmann::json j = nlohmann::json::parse(out);
  return {j["ids"].get<std::vector<std::vector<int32_t>>>(), j["decoded"].get<std::vector<std::string>>()};
}

std::string replace_invalid_utf8(const std::string& bytes) {
  std::string out;
  return icu::UnicodeString::fromUTF8(bytes).toUTF8String(out);
}

void expect_hf_parity(const data::BpeTokenizer& tok, const fs::path& file,
                      const std::vector<std::string>& texts, const fs::path& scratch) {
  HfTokenization ref = hf_tokenize(file, texts, scratch);
  ASSERT_EQ(ref.ids.size(), texts.size());
  std::vector<std::string_view> views(texts.begin(), texts.end());
  std::vector<std::vector<int32_t>> batch = tok.encode_batch(views);
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> ids = tok.encode(texts[i]);
    ASSERT_EQ(ids, ref.ids[i]) << "text " << i << ": '" << texts[i].substr(0, 200) << "'";
    EXPECT_EQ(batch[i], ids) << "text " << i;
    EXPECT_EQ(replace_invalid_utf8(tok.decode(ids)), ref.decoded[i]) << "text " << i;
  }
}

fs::path flux_tokenizer_fixture(const std::string& name) {
  const fs::path out = fs::path(TITAN_PARITY_DIR) / "flux_tokenizers";
  const fs::path script = fs::path(TITAN_SOURCE_DIR) / "tests" / "tokenizer" / "make_flux_fixtures.py";
  const fs::path stamp = out / "clip" / "reference.json";
  if (!fs::exists(stamp) || fs::last_write_time(stamp) < fs::last_write_time(script)) {
    const std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + script.string() + "' --out '" + out.string() + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n(run scripts/setup.sh reference for the venv and CLIP's merges)";
  }
  return out / name;
}

void expect_reference_parity(const data::BpeTokenizer& tok, const fs::path& folder) {
  std::ifstream file(folder / "reference.json");
  ASSERT_TRUE(file.good()) << folder;
  const nlohmann::json ref = nlohmann::json::parse(file);
  const auto texts = ref["texts"].get<std::vector<std::string>>();
  const auto ids = ref["ids"].get<std::vector<std::vector<int32_t>>>();
  const auto decoded = ref["decoded"].get<std::vector<std::string>>();
  ASSERT_GE(texts.size(), 1000u);
  size_t mismatched = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<int32_t> got = tok.encode(texts[i]);
    EXPECT_EQ(got, ids[i]) << "text " << i << ": '" << texts[i].substr(0, 200) << "'";
    mismatched += got != ids[i];
    if (got == ids[i]) {
      EXPECT_EQ(tok.decode(got), decoded[i]) << "text " << i << ": '" << texts[i].substr(0, 200) << "'";
    }
  }
  EXPECT_EQ(mismatched, 0u) << "of " << texts.size() << " texts";
  for (const auto& [length, fixed] : ref["fixed"].items()) {
    const auto want = fixed.get<std::vector<std::vector<int32_t>>>();
    for (size_t i = 0; i < texts.size(); ++i)
      EXPECT_EQ(tok.encode_for_model(texts[i], std::stoll(length)), want[i])
          << "length " << length << ", text " << i << ": '" << texts[i].substr(0, 200) << "'";
  }
}

}  // namespace titan::test
