#include "titan/data/tokenizer/decoder.h"

#include <optional>

#include "titan/core/error.h"
#include "titan/core/json_fields.h"
#include "titan/data/utf8.h"

namespace titan::data {

using json_fields::JsonPath;

namespace {

// The character a field names: a string of exactly one character.
std::string one_character(const nlohmann::json& config, const char* key, const JsonPath& at) {
  std::string c = json_fields::field<std::string>(config, key, at);
  TITAN_CHECK(!c.empty() && utf8_char_length(c, 0) == c.size(), (at / key).str(),
              ": must be one character; got \"", c, "\"");
  return c;
}

void replace_all(std::string& token, std::string_view pattern, std::string_view content) {
  for (size_t at = token.find(pattern); at != std::string::npos;
       at = token.find(pattern, at + content.size()))
    token.replace(at, pattern.size(), content);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The byte a <0xNN> token stands for, as ByteFallback reads it (either case of hex digit).
std::optional<char> fallback_byte(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return std::nullopt;
  const int hi = hex_digit(token[3]), lo = hex_digit(token[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<char>(hi * 16 + lo);
}

}  // namespace

Decoder::Decoder(const nlohmann::json& config, const std::string& source) {
  const JsonPath at{source, "decoder"};
  if (config.is_object() && json_fields::field_or<std::string>(config, "type", "", at) == "ByteLevel") {
    byte_level_ = true;
    return;
  }
  add(config, source, "decoder");
}

void Decoder::add(const nlohmann::json& config, const std::string& source, const std::string& path) {
  const JsonPath at{source, path};
  const std::string type =
      config.is_object() ? json_fields::field_or<std::string>(config, "type", "", at) : "";
  Step step{};
  if (type == "Sequence") {
    const nlohmann::json& list =
        json_fields::array(json_fields::member(config, "decoders", at), at / "decoders");
    for (size_t i = 0; i < list.size(); ++i) add(list[i], source, (at / "decoders")[i].path);
    return;
  } else if (type == "Replace") {
    const nlohmann::json& p = json_fields::member(config, "pattern", at);
    TITAN_CHECK(
        p.is_object() && p.contains("String") && p["String"].is_string() && p["String"] != "",
        (at / "pattern").str(), ": Replace pattern ", p.dump().substr(0, 200),
        " is not supported; titan reads a non-empty {\"String\": ...} (a Regex pattern it cannot honour)");
    step = {Step::Kind::replace, p["String"].get<std::string>(),
            json_fields::field<std::string>(config, "content", at)};
  } else if (type == "ByteFallback") {
    step.kind = Step::Kind::byte_fallback;
  } else if (type == "Fuse") {
    step.kind = Step::Kind::fuse;
  } else if (type == "Strip") {
    step.kind = Step::Kind::strip;
    step.pattern = one_character(config, "content", at);
    step.start = static_cast<size_t>(
        json_fields::as_integer(json_fields::member(config, "start", at), at / "start", 0));
    step.stop =
        static_cast<size_t>(json_fields::as_integer(json_fields::member(config, "stop", at), at / "stop", 0));
  } else if (type == "Metaspace") {
    step.kind = Step::Kind::metaspace;
    step.pattern = one_character(config, "replacement", at);
    // Files from before prepend_scheme said add_prefix_space, which meant "always".
    const std::string scheme = json_fields::field_or<std::string>(
        config, "prepend_scheme",
        json_fields::field_or(config, "add_prefix_space", true, at) ? "always" : "never", at);
    TITAN_CHECK(scheme == "always" || scheme == "first" || scheme == "never", (at / "prepend_scheme").str(),
                ": \"", scheme, "\" is not a prepend scheme; Hugging Face knows always, first and never");
    step.drop_first = scheme != "never";
  } else {
    TITAN_CHECK(
        false, at.str(), ": decoder ", config.dump().substr(0, 300),
        " is not supported; titan reads ByteLevel (byte-level BPE), or Replace with a String pattern, "
        "ByteFallback, Fuse, Strip, Metaspace and Sequences of them (SentencePiece-style BPE)");
  }
  steps_.push_back(std::move(step));
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::replace:
        for (std::string& t : tokens) replace_all(t, step.pattern, step.content);
        break;
      case Step::Kind::byte_fallback: {
        std::vector<std::string> out;
        std::string run;
        // A run that is not UTF-8 stays one token per byte, as many as Hugging Face's U+FFFDs.
        auto flush = [&] {
          if (run.empty()) return;
          if (find_invalid_utf8(run) == std::string::npos) {
            out.push_back(run);
          } else {
            for (char b : run) out.emplace_back(1, b);
          }
          run.clear();
        };
        for (std::string& t : tokens) {
          if (std::optional<char> b = fallback_byte(t)) {
            run.push_back(*b);
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case Step::Kind::fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Step::Kind::strip:
        for (std::string& t : tokens) {
          const std::string_view c = step.pattern;
          size_t begin = 0, end = t.size();
          for (size_t i = 0; i < step.start && std::string_view(t).substr(begin).starts_with(c); ++i)
            begin += c.size();
          for (size_t i = 0;
               i < step.stop && end >= begin + c.size() && std::string_view(t).substr(0, end).ends_with(c);
               ++i)
            end -= c.size();
          t = t.substr(begin, end - begin);
        }
        break;
      case Step::Kind::metaspace:
        for (size_t i = 0; i < tokens.size(); ++i)
          replace_all(tokens[i], step.pattern, i == 0 && step.drop_first ? "" : " ");
        break;
    }
  }
  std::string text;
  for (const std::string& t : tokens) text += t;
  return text;
}

}  // namespace titan::data
