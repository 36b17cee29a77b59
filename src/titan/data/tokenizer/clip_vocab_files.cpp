#include "titan/data/tokenizer/clip_vocab_files.h"

#include <vector>

#include "titan/core/error.h"

namespace titan::data {

namespace {

// `text` as a regex that matches it literally.
std::string regex_escaped(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

nlohmann::json merge_pairs(std::string_view text, const std::string& source) {
  nlohmann::json pairs = nlohmann::json::array();
  int64_t line_number = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && line.starts_with("#version"))) continue;
    const size_t space = line.find(' ');
    TITAN_CHECK(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                    line.find(' ', space + 1) == std::string_view::npos,
                source, ":", line_number, ": a merge is two tokens separated by one space, found '",
                std::string(line.substr(0, 80)), "'");
    pairs.push_back({std::string(line.substr(0, space)), std::string(line.substr(space + 1))});
  }
  return pairs;
}

}  // namespace

nlohmann::json clip_tokenizer_json(const ClipVocabFiles& f) {
  TITAN_CHECK(f.vocab.is_object() && !f.vocab.empty(), f.vocab_source,
              " must be a JSON object of token -> id; found ", f.vocab.type_name());
  auto id_of = [&](const std::string& token, const char* role) {
    const auto it = f.vocab.find(token);
    TITAN_CHECK(it != f.vocab.end() && it->is_number_integer(), f.vocab_source, " has no id for the ", role,
                " token '", token, "' that tokenizer_config.json names");
    return it->get<int64_t>();
  };
  const int64_t bos = id_of(f.bos, "bos"), eos = id_of(f.eos, "eos");
  (void)id_of(f.unk, "unk");
  auto special = [](const std::string& content, int64_t id) {
    return nlohmann::json{{"id", id},           {"content", content}, {"single_word", false}, {"lstrip", false},
                          {"rstrip", false},    {"normalized", false}, {"special", true}};
  };
  nlohmann::json added = nlohmann::json::array({special(f.bos, bos)});
  if (f.eos != f.bos) added.push_back(special(f.eos, eos));
  // transformers puts the special tokens ahead of CLIP's pattern, so that one spelled in the
  // normalized text stays one piece.
  const std::string pattern = regex_escaped(f.bos) + "|" + regex_escaped(f.eos) +
                              R"(|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+)";
  return {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "NFC"}},
          {{"type", "Replace"}, {"pattern", {{"Regex", R"(\s+)"}}}, {"content", " "}},
          {{"type", "Lowercase"}}}}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Removed"}, {"invert", true}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}}}}},
      {"post_processor",
       {{"type", "RobertaProcessing"},
        {"sep", {f.eos, eos}},
        {"cls", {f.bos, bos}},
        {"trim_offsets", false},
        {"add_prefix_space", false}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", f.unk},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", "</w>"},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", f.vocab},
        {"merges", merge_pairs(f.merges, f.merges_source)}}}};
}

}  // namespace titan::data
