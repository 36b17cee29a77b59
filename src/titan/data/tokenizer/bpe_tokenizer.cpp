#include "titan/data/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "titan/core/crc32c.h"
#include "titan/core/error.h"
#include "titan/core/json_fields.h"
#include "titan/core/parallel.h"
#include "titan/data/tokenizer/byte_level.h"
#include "titan/data/tokenizer/clip_vocab_files.h"

namespace titan::data {

using json_fields::JsonPath;

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  TITAN_CHECK(in.good(), "cannot open ", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return std::move(text).str();
}

nlohmann::json parse_json(std::string_view text, const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  TITAN_CHECK(!j.is_discarded(), path, " is not valid JSON");
  return j;
}

// tokenizer_config.json spells a token as its text, as {"content": text, ...}, or as null.
std::optional<std::string> config_token(const nlohmann::json& config, const char* key, const JsonPath& at) {
  const nlohmann::json& t = json_fields::optional_member(config, key, at);
  if (t.is_null()) return std::nullopt;
  if (t.is_object()) return json_fields::field<std::string>(t, "content", at / key);
  TITAN_CHECK(t.is_string(), (at / key).str(), " must be the token's text or {\"content\": text}, found ",
              json_fields::found(t), "; correct tokenizer_config.json");
  return t.get<std::string>();
}

// A section of tokenizer.json; null when absent.
const nlohmann::json& section(const nlohmann::json& tokenizer, const char* key, const std::string& source) {
  return json_fields::optional_member(tokenizer, key, {source, ""});
}

// The largest id a token may have. Ids number the tokens the file lists, the vocabulary's and the
// added ones, so none lies past their count: a larger id would size the tables by a number the
// file merely states (2e9 ids: tens of GB).
int32_t max_token_id(const nlohmann::json& tokenizer, const std::string& source) {
  const nlohmann::json& vocab =
      json_fields::optional_member(section(tokenizer, "model", source), "vocab", {source, "model"});
  const size_t listed = vocab.size() + section(tokenizer, "added_tokens", source).size();
  return static_cast<int32_t>(std::min<size_t>(listed, INT32_MAX) - 1);
}

}  // namespace

BpeTokenizer BpeTokenizer::load(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  fs::path file = fs::is_directory(path) ? path / "tokenizer.json" : path;
  const fs::path vocab_file = path / "vocab.json", merges_file = path / "merges.txt";
  const bool vocab_files = fs::is_directory(path) && !fs::exists(file) && fs::is_regular_file(vocab_file) &&
                           fs::is_regular_file(merges_file);
  TITAN_CHECK(vocab_files || fs::is_regular_file(file), "no tokenizer at ", path.string(),
              ": name a folder holding tokenizer.json (or CLIP's vocab.json, merges.txt and tokenizer_config.json), "
              "or the tokenizer.json itself");
  fs::path config_file = file.parent_path() / "tokenizer_config.json";
  const std::string config_text = fs::exists(config_file) ? read_file(config_file) : "{}";
  if (!vocab_files) return parse(read_file(file), config_text, file.string(), config_file.string());
  const nlohmann::json config = parse_json(config_text, config_file.string());
  const JsonPath at{config_file.string(), ""};
  const std::string kind = json_fields::field_or<std::string>(config, "tokenizer_class", "", at);
  TITAN_CHECK(kind == "CLIPTokenizer" || kind == "CLIPTokenizerFast", path.string(),
              " holds vocab.json and merges.txt but no tokenizer.json; titan builds one from them for CLIP's "
              "tokenizer alone (tokenizer_config.json's tokenizer_class CLIPTokenizer), and ",
              config_file.string(), " says '", kind,
              "'; write tokenizer.json with transformers: AutoTokenizer.from_pretrained(dir).save_pretrained(dir)");
  auto token = [&](const char* key) {
    const std::optional<std::string> t = config_token(config, key, at);
    TITAN_CHECK(t.has_value(), config_file.string(), " names no ", key, "; CLIP's tokenizer needs it");
    return *t;
  };
  const std::string merges = read_file(merges_file);
  const nlohmann::json tokenizer = clip_tokenizer_json({.vocab = parse_json(read_file(vocab_file), vocab_file.string()),
                                                        .merges = merges,
                                                        .vocab_source = vocab_file.string(),
                                                        .merges_source = merges_file.string(),
                                                        .bos = token("bos_token"),
                                                        .eos = token("eos_token"),
                                                        .unk = token("unk_token")});
  return parse(tokenizer.dump(), config_text, vocab_file.string() + " and merges.txt", config_file.string());
}

BpeTokenizer BpeTokenizer::parse(std::string_view tokenizer_text, std::string_view config_text,
                                 const std::string& source, const std::string& config_source) {
  BpeTokenizer t(parse_json(tokenizer_text, source), parse_json(config_text, config_source), source,
                 config_source);
  // The config counts: it chooses bos and eos.
  t.fingerprint_ = crc32c_extend(crc32c(tokenizer_text), config_text.data(), config_text.size());
  return t;
}

BpeTokenizer::BpeTokenizer(const nlohmann::json& tokenizer, const nlohmann::json& config,
                           const std::string& source, const std::string& config_source)
    : normalizer_(section(tokenizer, "normalizer", source), source),
      pretokenizer_(section(tokenizer, "pre_tokenizer", source), source),
      model_(load_word_model(section(tokenizer, "model", source), source, max_token_id(tokenizer, source),
                             pretokenizer_.byte_level())),
      decoder_(section(tokenizer, "decoder", source), source),
      post_processor_(section(tokenizer, "post_processor", source), source, max_token_id(tokenizer, source)) {
  const JsonPath root{source, ""};
  TITAN_CHECK(
      decoder_.byte_level() == pretokenizer_.byte_level(), source, ": decoder ",
      section(tokenizer, "decoder", source).dump().substr(0, 200),
      pretokenizer_.byte_level()
          ? " does not go with the ByteLevel pre-tokenizer; byte-level BPE needs the ByteLevel decoder"
          : " is ByteLevel, but the pre_tokenizer is not; titan reads byte-level BPE (ByteLevel in both) "
            "or SentencePiece-style BPE (ByteLevel in neither)");

  pieces_.resize(model_->size());
  kinds_.assign(model_->size(), Kind::absent);
  for (int32_t id = 0; id < model_->size(); ++id) {
    if (const std::string* bytes = model_->token(id)) {
      pieces_[id] = *bytes;
      kinds_[id] = Kind::token;
    }
  }
  const nlohmann::json& added = section(tokenizer, "added_tokens", source);
  const JsonPath added_at = root / "added_tokens";
  if (!added.is_null()) json_fields::array(added, added_at);
  const int32_t max_id = max_token_id(tokenizer, source);
  std::vector<AddedToken> raw, normalized;  // as matched
  for (size_t i = 0; i < added.size(); ++i) {
    const nlohmann::json& a = added[i];
    const JsonPath at = added_at[i];
    AddedToken t{
        json_fields::field<std::string>(a, "content", at),
        static_cast<int32_t>(json_fields::as_integer(json_fields::member(a, "id", at), at / "id", 0, max_id)),
        json_fields::field_or(a, "special", false, at), json_fields::field_or(a, "normalized", false, at)};
    TITAN_CHECK(!json_fields::field_or(a, "single_word", false, at) &&
                    !json_fields::field_or(a, "lstrip", false, at) &&
                    !json_fields::field_or(a, "rstrip", false, at),
                source, ": added token ", t.content,
                " sets single_word, lstrip or rstrip, which titan does not support");
    TITAN_CHECK(!t.content.empty(), at.str(), ": added token with id ", t.id,
                " has empty \"content\"; it needs some text");
    if (t.id >= vocab_size()) {
      pieces_.resize(t.id + 1);
      kinds_.resize(t.id + 1, Kind::absent);
    }
    // Hugging Face matches a token marked "normalized" in the normalized text as the normalizer
    // writes it (Llama 2's "a b" as "▁a▁b"), and decodes it so too.
    AddedToken spelled = t;
    std::string scratch;
    if (t.normalized && normalizer_.active()) spelled.content = normalizer_.apply(t.content, scratch);
    // The ByteLevel decoder reads an added token as any other token: through the alphabet when
    // its every character is in it, else as its text.
    pieces_[t.id] =
        byte_level() ? byte_level_decode(spelled.content).value_or(spelled.content) : spelled.content;
    kinds_[t.id] = t.special ? Kind::special : Kind::token;
    (t.normalized && normalizer_.active() ? normalized : raw).push_back(std::move(spelled));
    added_.push_back(std::move(t));
  }
  raw_matcher_ = AddedTokenMatcher(raw);
  normalized_matcher_ = AddedTokenMatcher(normalized);

  const JsonPath config_at{config_source, ""};
  json_fields::object(config, config_at);
  auto special = [&](const char* key) -> std::optional<int32_t> {
    std::optional<std::string> text = config_token(config, key, config_at);
    if (!text) return std::nullopt;
    std::optional<int32_t> id = token_id(*text);
    TITAN_CHECK(id.has_value(), (config_at / key).str(), " names the token '", *text,
                "', which is neither an added token nor in the vocab of ", source);
    return id;
  };
  bos_ = special("bos_token");
  eos_ = special("eos_token");
  pad_ = special("pad_token");
  add_bos_ = bos_.has_value() && json_fields::field_or(config, "add_bos_token", true, config_at);
  add_eos_ = eos_.has_value() && json_fields::field_or(config, "add_eos_token", false, config_at);
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view token) const {
  for (const AddedToken& t : added_)
    if (t.content == token) return t.id;
  return model_->id_of(token);
}

void BpeTokenizer::encode_normalized(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  normalized_matcher_.split(
      text,
      [&](std::string_view plain) {
        pretokenizer_.split(plain, at_start && plain.data() == text.data(),
                            [&](std::string_view word) { model_->encode_word(word, out); });
      },
      [&](int32_t id) { out.push_back(id); });
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && add_bos_) out.push_back(*bos_);
  std::string scratch;
  raw_matcher_.split(
      text,
      [&](std::string_view plain) {
        encode_normalized(normalizer_.apply(plain, scratch), plain.data() == text.data(), out);
      },
      [&](int32_t id) { out.push_back(id); });
  if (add_special && add_eos_) out.push_back(*eos_);
  return out;
}

std::vector<int32_t> BpeTokenizer::encode_for_model(std::string_view text, int64_t length) const {
  const auto added = static_cast<int64_t>(post_processor_.added());
  TITAN_CHECK(length >= added, "encode_for_model: length ", length, " cannot hold the ", added,
              " special tokens the post_processor adds; ask for at least ", added);
  std::vector<int32_t> ids = encode(text);
  // As Hugging Face's truncation: the text's own ids are cut, the added ones kept.
  ids.resize(std::min<size_t>(ids.size(), static_cast<size_t>(length - added)));
  ids.insert(ids.begin(), post_processor_.prefix().begin(), post_processor_.prefix().end());
  ids.insert(ids.end(), post_processor_.suffix().begin(), post_processor_.suffix().end());
  if (static_cast<int64_t>(ids.size()) < length) {
    TITAN_CHECK(pad_.has_value(), "encode_for_model: ", ids.size(), " ids to pad to ", length,
                ", but the tokenizer has no pad token; set pad_token in tokenizer_config.json");
    ids.resize(static_cast<size_t>(length), *pad_);
  }
  return ids;
}

std::vector<std::vector<int32_t>> BpeTokenizer::encode_batch(std::span<const std::string_view> texts,
                                                             bool add_special) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  const int64_t n = static_cast<int64_t>(texts.size());
  // Dynamic: texts differ in length, and equal shares of them would leave threads idle.
#pragma omp parallel for schedule(dynamic) if (n > 1 && !omp_in_parallel())
  for (int64_t i = 0; i < n; ++i) out[i] = encode(texts[i], add_special);
  return out;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  std::vector<std::string> tokens;
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    TITAN_CHECK(id >= 0 && id < vocab_size() && kinds_[id] != Kind::absent, "decode: id ", id,
                " at position ", i, " is not in the vocabulary (", vocab_size(), " ids)");
    if (skip_special && kinds_[id] == Kind::special) continue;
    // The ByteLevel decoder's translation was done when the file was read.
    if (byte_level()) {
      out += pieces_[id];
    } else {
      tokens.push_back(pieces_[id]);
    }
  }
  return byte_level() ? out : decoder_.decode(std::move(tokens));
}

}  // namespace titan::data
