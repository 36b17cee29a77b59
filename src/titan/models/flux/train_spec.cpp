#include "titan/models/flux/train_spec.h"

namespace titan::models::flux {

FluxModelArgs args_from(const ModelConfig& cfg) {
  std::vector<std::string> refused;
  if (cfg.vocab_size != 0) refused.push_back("model.vocab_size (a FLUX transformer has no vocabulary)");
  if (cfg.n_layers != 0) refused.push_back("model.n_layers (the flavor fixes its double and single blocks)");
  if (cfg.weight_tying) refused.push_back("model.weight_tying (a FLUX transformer has no embedding to tie)");
  if (!cfg.tokenizer_path.empty())
    refused.push_back("model.tokenizer_path (FLUX trains on the encoding cache's encodings: flux.cache_path)");
  if (cfg.attention != "splash") refused.push_back("model.attention = \"" + cfg.attention + "\" (FLUX runs splash attention)");
  if (cfg.attn.document_masking) refused.push_back("attention.document_masking (FLUX's tokens are one image and its caption)");
  if (cfg.attn.block_q != attention::kDefaultBlockQ || cfg.attn.block_kv != attention::kDefaultBlockKv)
    refused.push_back("attention.block_q / block_kv (FLUX's attention, and its ring under context parallelism, runs "
                      "splash attention's default tiles)");
  std::string message;
  for (const std::string& r : refused) message += "\n  " + r;
  config::require(refused.empty(), "model flux/", cfg.flavor, " does not read these keys; remove them:", message);
  check_no_moe_keys(cfg, "flux/" + cfg.flavor);
  return flux_flavor(cfg.flavor);
}

TrainSpec train_spec() {
  TrainSpec spec;
  spec.name = "flux";
  spec.flavors = flux_flavors();
  spec.workload = "flux";
  // The registry's figures are those of a 256 x 256 image (16 x 16 packed tokens) under 256 T5
  // tokens; the trainer counts [flux]'s sizes.
  spec.summarize = [](const ModelConfig& cfg, int64_t) {
    const FluxModelArgs args = args_from(cfg);
    const FluxSummary f = flux_summary(args, 256, 256);
    ModelSummary s;
    s.num_params = f.num_params;
    s.flops_per_token = f.flops_per_sample / 256;
    s.description = "flux " + cfg.flavor + ": " + f.description;
    s.n_layers = args.depth + args.depth_single_blocks;
    s.n_heads = s.n_kv_heads = args.num_heads;
    s.ffn_hidden_dim = args.mlp_hidden_dim();
    return s;
  };
  return spec;
}

}  // namespace titan::models::flux
