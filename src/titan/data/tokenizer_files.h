#pragma once
// The files of a Hugging Face tokenizer in a model folder, so that tools which move a model
// (titan convert) can carry its tokenizer along and tools which read one (titan generate) find it.
#include <array>
#include <filesystem>

namespace titan::data {

// What load_tokenizer reads from a folder: tokenizer.json, and tokenizer_config.json (bos, eos)
// when it is there.
inline constexpr const char* kTokenizerFile = "tokenizer.json";
inline constexpr std::array<const char*, 2> kTokenizerFiles = {kTokenizerFile, "tokenizer_config.json"};

// Whether load_tokenizer(dir) would read a tokenizer.json (rather than find none).
bool holds_tokenizer(const std::filesystem::path& dir);

// Copies those of kTokenizerFiles that `from` holds into the existing folder `to`, replacing
// any there; returns holds_tokenizer(from).
bool copy_tokenizer(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace titan::data
