#pragma once
// CLIP's tokenizer.json, built from the files CLIP's tokenizer is often shipped as instead
// (FLUX.1's tokenizer/ folder holds vocab.json, merges.txt and tokenizer_config.json, no
// tokenizer.json), the way transformers' CLIPTokenizer builds it from them: byte-level BPE with
// "</w>" ending words, NFC then whitespace runs to one space then lowercase, CLIP's split pattern,
// and <|startoftext|> ... <|endoftext|> around a text encoder's input.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace titan::data {

struct ClipVocabFiles {
  nlohmann::json vocab;         // vocab.json: token -> id
  std::string_view merges;      // merges.txt: "#version" line (optional), then "a b" per line
  std::string vocab_source, merges_source;  // the files' paths, for errors
  std::string bos, eos, unk;    // tokenizer_config.json's tokens, each in the vocabulary
};

nlohmann::json clip_tokenizer_json(const ClipVocabFiles& files);

}  // namespace titan::data
