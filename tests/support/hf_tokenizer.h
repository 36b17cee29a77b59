#pragma once
// BpeTokenizer against Hugging Face tokenizers: tests/tokenizer/hf_encode.py, run through the
// venv's python, gives the reference ids and decodings.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "titan/data/tokenizer/bpe_tokenizer.h"

namespace titan::test {

struct HfTokenization {
  std::vector<std::vector<int32_t>> ids;  // of each text, no special tokens added
  std::vector<std::string> decoded;       // decode(ids), special tokens kept
};

// Hugging Face's ids and decodings of `texts` with the tokenizer.json at `file`; `scratch` is a
// folder for the texts' file. Adds a test failure, and returns nothing, when the script fails.
HfTokenization hf_tokenize(const std::filesystem::path& file, const std::vector<std::string>& texts,
                           const std::filesystem::path& scratch);

// What Hugging Face's decode returns for `bytes`: each ill-formed UTF-8 sequence replaced by U+FFFD,
// which titan's decode leaves to its caller.
std::string replace_invalid_utf8(const std::string& bytes);

// The same ids as Hugging Face on every text, the same decoding, and encode_batch agreeing.
void expect_hf_parity(const data::BpeTokenizer& tok, const std::filesystem::path& file,
                      const std::vector<std::string>& texts, const std::filesystem::path& scratch);

// The folder `name` (t5, t5_sequence, clip) of tests/tokenizer/make_flux_fixtures.py's output in the
// build folder, made first when it is missing or older than the script.
std::filesystem::path flux_tokenizer_fixture(const std::string& name);

// The reference.json of such a folder: encode() gives its "ids" on every text, encode_for_model()
// its "fixed" ids at each length, decode() its "decoded" text.
void expect_reference_parity(const data::BpeTokenizer& tok, const std::filesystem::path& folder);

}  // namespace titan::test
