#include "titan/models/hf/train_spec.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "titan/core/config_schema.h"
#include "titan/core/meta.h"
#include "titan/models/common/parallelize.h"
#include "titan/models/hf/model.h"
#include "titan/models/hf/state_dict_adapter.h"

namespace titan::models::hf {

namespace fs = std::filesystem;
using json = nlohmann::json;
using common::hf::ConfigLayout;

namespace {

void apply_tp(CausalLM& model, parallel::TpStyles& tp) {
  auto& m = common::as_family<Transformer>(model, "hf::apply_tp", "hf");
  common::apply_decoder_tp(m, tp, [&] {
    for (const auto& block : *m.layers) {
      TITAN_CHECK(block->attention_norm, "tensor parallelism: ", m.family(),
                  " blocks have no norm before attention (post-norm), which titan's plan enters the split "
                  "region at; train it with parallelism.tensor_parallel_degree = 1");
      common::apply_attention_tp(tp, *block->attention_norm, *block->attention);
      if (block->post_attention_norm) tp.norm(*block->post_attention_norm);
      if (block->moe)
        common::apply_replicated_feed_forward_tp(tp, *block->ffn_norm, *block->moe);
      else
        common::apply_feed_forward_tp(tp, *block->ffn_norm, *block->feed_forward);
      if (block->post_ffn_norm) tp.norm(*block->post_ffn_norm);
    }
  });
}

Parallelized parallelize(CausalLM& model, const ParallelizeOptions& options) {
  auto& m = common::as_family<Transformer>(model, "hf::parallelize", "hf");
  return common::parallelize_decoder(m, options,
                                     {.apply_tp = apply_tp, .apply_ep = [&m](parallel::ExpertParallel& ep) {
                                        for (const auto& block : *m.layers)
                                          if (block->moe) ep.apply(*block->moe);
                                      }});
}

// config.json in `layout`: as read when it is in that layout already; else its RoPE keys moved.
json in_layout(const json& config, ConfigLayout layout) {
  if (common::hf::layout_of(config) == layout) return config;
  const json* parameters = config.contains("rope_parameters") ? &config["rope_parameters"] : nullptr;
  config::require(!(parameters && parameters->is_object() && parameters->contains("full_attention")),
                  "config.json holds RoPE per layer type (rope_parameters.full_attention, ...), which "
                  "transformers 4's keys cannot say; export it with the transformers5 layout");
  const common::hf::Rope rope = common::hf::ConfigFields(config, config.value("model_type", "")).rope(10000);
  json out = common::hf::merged_config(config, json::object(), layout);
  common::hf::put_rope(out, layout, rope.theta, rope.type, rope.parameters);
  return out;
}

}  // namespace

json job_hf_config(const ModelConfig& cfg) {
  if (!cfg.hf_json.is_null()) return cfg.hf_json;
  TITAN_CHECK(!cfg.hf_config.empty(),
              "model.name = \"hf\" builds the model a Hugging Face config.json describes: set model.hf_config "
              "to that file (or its folder), or checkpoint.initial_load_path to a Hugging Face folder");
  fs::path path = cfg.hf_config;
  if (fs::is_directory(path)) path /= "config.json";
  std::ifstream in(path, std::ios::binary);
  TITAN_CHECK(in.good(), "model.hf_config: cannot read ", path.string(),
              "; give a Hugging Face config.json or the folder that holds one");
  std::stringstream text;
  text << in.rdbuf();
  json config = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  TITAN_CHECK(!config.is_discarded() && config.is_object(), "model.hf_config: ", path.string(),
              " is not a JSON object; a Hugging Face config.json is one");
  return config;
}

DecoderSpec spec_of(const ModelConfig& cfg) {
  TITAN_CHECK(cfg.attention == "reference" || cfg.attention == "splash", "hf: unknown model.attention '",
              cfg.attention, "'; choose \"splash\" (block-sparse flash attention) or \"reference\"");
  check_no_moe_keys(cfg, "hf");
  DecoderSpec spec;
  try {
    spec = read_config(job_hf_config(cfg));
  } catch (const Error& e) {
    throw Error((cfg.hf_json.is_null() ? cfg.hf_config + ": " : std::string()) + e.what());
  }
  // An import's [model] carries config.json's vocabulary; a job's leaves it at 0.
  TITAN_CHECK((cfg.vocab_size == 0 || cfg.vocab_size == spec.vocab_size) && cfg.n_layers == 0 &&
                  !cfg.weight_tying.has_value(),
              "hf: model.vocab_size, model.n_layers and model.weight_tying are not read by the hf family: "
              "config.json (model.hf_config) gives the sizes; edit vocab_size, num_hidden_layers or "
              "tie_word_embeddings there");
  return spec;
}

TrainSpec train_spec() {
  TrainSpec spec;
  spec.name = "hf";
  spec.flavors = {};
  spec.build = [](const ModelConfig& cfg, int64_t max_seq_len, Generator& gen) -> std::shared_ptr<CausalLM> {
    auto model = std::make_shared<Transformer>(
        spec_of(cfg), max_seq_len, TensorOptions{},
        common::AttentionKernel{cfg.attention == "splash", cfg.attn.block_q, cfg.attn.block_kv});
    if (!MetaScope::active()) model->init_weights(gen);
    return model;
  };
  spec.summarize = [](const ModelConfig& cfg, int64_t seq_len) { return summarize(spec_of(cfg), seq_len); };
  spec.parallelize = parallelize;
  spec.plan_tp = apply_tp;
  spec.state_dict_adapter = StateDictAdapter{
      .hf_model_types = supported_model_types(),
      .hf_config = [](const ModelConfig& cfg, ConfigLayout layout) { return in_layout(job_hf_config(cfg), layout); },
      .from_hf_config =
          [](const json& c) {
            ModelConfig m;
            m.name = "hf";
            m.flavor = c.value("model_type", "");
            m.hf_json = c;
            m.vocab_size = read_config(c).vocab_size;
            return m;
          },
      .hf_shapes = [](const json& c) { return hf_shapes(read_config(c)); },
      .to_hf = [](const nn::StateDict& s, const json& c) { return to_hf(s, read_config(c)); },
      .from_hf = [](const nn::StateDict& s, const json& c) { return from_hf(s, read_config(c)); },
      .imported_hf_config = [](const json& c, ConfigLayout layout) {
        read_config(c);
        return in_layout(c, layout);
      },
  };
  return spec;
}

}  // namespace titan::models::hf
