#pragma once
// The post_processor of a tokenizer.json: the special tokens put around one encoded text when the
// caller asks for them (encode_for_model). Supported, for a single text:
//   TemplateProcessing  its "single" template: special tokens around "$A" (T5's "$A </s>")
//   RobertaProcessing,  cls before, sep after (CLIP's <|startoftext|> ... <|endoftext|>)
//   BertProcessing
//   ByteLevel           offsets only: no tokens
// and Sequences of them; null adds nothing. Anything else is refused when the file is read.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace titan::data {

class PostProcessor {
 public:
  // `config` is tokenizer.json's "post_processor"; `source` names the file in errors; ids above
  // `max_id` are refused.
  PostProcessor(const nlohmann::json& config, const std::string& source, int32_t max_id);

  // The ids that go before and after a text's own.
  const std::vector<int32_t>& prefix() const { return prefix_; }
  const std::vector<int32_t>& suffix() const { return suffix_; }
  size_t added() const { return prefix_.size() + suffix_.size(); }

 private:
  void add(const nlohmann::json& config, const std::string& source, const std::string& path, int32_t max_id);

  std::vector<int32_t> prefix_, suffix_;
};

}  // namespace titan::data
