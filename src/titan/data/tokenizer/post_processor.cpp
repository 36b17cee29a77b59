#include "titan/data/tokenizer/post_processor.h"

#include "titan/core/error.h"
#include "titan/core/json_fields.h"

namespace titan::data {

using json_fields::JsonPath;

namespace {

// A [text, id] pair, as RobertaProcessing and BertProcessing spell cls and sep.
int32_t token_pair_id(const nlohmann::json& config, const char* key, const JsonPath& at, int32_t max_id) {
  const nlohmann::json& pair = json_fields::member(config, key, at);
  TITAN_CHECK(pair.is_array() && pair.size() == 2 && pair[0].is_string(), (at / key).str(),
              ": expected [token text, id]; found ", json_fields::found(pair));
  return static_cast<int32_t>(json_fields::as_integer(pair[1], (at / key)[1], 0, max_id));
}

}  // namespace

PostProcessor::PostProcessor(const nlohmann::json& config, const std::string& source, int32_t max_id) {
  if (!config.is_null()) add(config, source, "post_processor", max_id);
}

void PostProcessor::add(const nlohmann::json& config, const std::string& source, const std::string& path,
                        int32_t max_id) {
  const JsonPath at{source, path};
  const std::string type = json_fields::field<std::string>(json_fields::object(config, at), "type", at);
  // Each step wraps what the steps before it made.
  std::vector<int32_t> before, after;
  if (type == "Sequence") {
    const nlohmann::json& list =
        json_fields::array(json_fields::member(config, "processors", at), at / "processors");
    for (size_t i = 0; i < list.size(); ++i) add(list[i], source, (at / "processors")[i].path, max_id);
    return;
  } else if (type == "ByteLevel") {
    return;
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    before = {token_pair_id(config, "cls", at, max_id)};
    after = {token_pair_id(config, "sep", at, max_id)};
  } else if (type == "TemplateProcessing") {
    const nlohmann::json& single = json_fields::array(json_fields::member(config, "single", at), at / "single");
    const nlohmann::json& specials = json_fields::optional_member(config, "special_tokens", at);
    bool seen_text = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const JsonPath item_at = (at / "single")[i];
      const nlohmann::json& item = json_fields::object(single[i], item_at);
      if (item.contains("Sequence")) {
        const std::string id = json_fields::field<std::string>(item["Sequence"], "id", item_at / "Sequence");
        TITAN_CHECK(id == "A" && !seen_text, (item_at / "Sequence").str(),
                    ": a single-text template holds sequence A once; found \"", id, "\"",
                    seen_text ? " after it" : "");
        seen_text = true;
        continue;
      }
      TITAN_CHECK(item.contains("SpecialToken"), item_at.str(),
                  ": a template item is {\"Sequence\": ...} or {\"SpecialToken\": ...}; found ",
                  json_fields::found(item));
      const std::string name = json_fields::field<std::string>(item["SpecialToken"], "id", item_at / "SpecialToken");
      const JsonPath special_at = at / "special_tokens" / name;
      TITAN_CHECK(specials.is_object() && specials.contains(name), special_at.str(), ": the template names \"", name,
                  "\", which special_tokens does not define");
      const nlohmann::json& ids =
          json_fields::array(json_fields::member(specials[name], "ids", special_at), special_at / "ids");
      for (size_t k = 0; k < ids.size(); ++k)
        (seen_text ? after : before)
            .push_back(static_cast<int32_t>(json_fields::as_integer(ids[k], (special_at / "ids")[k], 0, max_id)));
    }
    TITAN_CHECK(seen_text, (at / "single").str(), ": the template has no {\"Sequence\": {\"id\": \"A\"}}");
  } else {
    TITAN_CHECK(false, (at / "type").str(), ": post_processor \"", type,
                "\" is not supported; titan reads TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel "
                "and Sequences of them");
  }
  prefix_.insert(prefix_.begin(), before.begin(), before.end());
  suffix_.insert(suffix_.end(), after.begin(), after.end());
}

}  // namespace titan::data
