#include "titan/train/flux/flux_workload.h"

#include <chrono>
#include <filesystem>
#include <ostream>

#include "titan/autograd/grad_mode.h"
#include "titan/core/memory_owner.h"
#include "titan/core/meta.h"
#include "titan/models/flux/model.h"
#include "titan/models/flux/parallelize.h"
#include "titan/models/flux/train_spec.h"
#include "titan/train/flux/conditioning_memory.h"
#include "titan/train/flux/encoding_cache.h"
#include "titan/train/flux/flux_batches.h"
#include "titan/train/flux/flux_step.h"
#include "titan/train/flux/live_encodings.h"
#include "titan/train/flux/rectified_flow.h"

namespace titan::train::flux {

namespace {

using models::flux::FluxModelArgs;
using models::flux::FluxTransformer;

// What a FLUX run does not read, refused by key (each with what to do).
void refuse_keys(const JobConfig& c, bool guidance_embed) {
  const JobConfig d;
  std::vector<std::string> refused;
  const dist::ParallelismConfig& p = c.parallelism;
  for (const auto& [key, degree] : {std::pair<std::string, int64_t>{"tensor_parallel_degree", p.tensor_parallel_degree},
                                    {"pipeline_parallel_degree", p.pipeline_parallel_degree},
                                    {"expert_parallel_degree", p.expert_parallel_degree},
                                    {"expert_tensor_parallel_degree", p.expert_tensor_parallel_degree}})
    if (degree > 1)
      refused.push_back("parallelism." + key + " = " + std::to_string(degree) +
                        ": FLUX trains under data and context parallelism (FSDP, HSDP, DDP, cp) only; set it to 1");
  if (c.training.objective != d.training.objective)
    refused.push_back("training.objective = \"" + c.training.objective +
                      "\": FLUX trains by flow matching; remove the key");
  if (c.training.seq_len != d.training.seq_len)
    refused.push_back("training.seq_len: FLUX's sequence is the image's and caption's tokens (flux.image_size, "
                      "flux.t5_length); remove the key");
  if (c.data.dataset_path != d.data.dataset_path || c.data.dataset != d.data.dataset)
    refused.push_back("training.dataset / training.dataset_path: FLUX reads its encoding cache (flux.cache_path) "
                      "or its image-caption data (flux.data_path)");
  const ValidationConfig& v = c.validation;
  if (v.dataset != d.validation.dataset || v.dataset_path != d.validation.dataset_path || v.seq_len != -1 ||
      v.steps != -1)
    refused.push_back("validation.dataset, dataset_path, seq_len and steps: FLUX validates on "
                      "flux.validation_cache_path or the last flux.validation_samples of flux.cache_path or "
                      "flux.data_path");
  if (c.checkpoint.last_save_in_hf)
    refused.push_back("checkpoint.last_save_in_hf: FLUX's export is titan's own checkpoint (diffusers folders are "
                      "written by the flux tools)");
  const FluxConfig& f = c.flux;
  if (!f.cache_path.empty() && !f.data_path.empty())
    refused.push_back("flux.cache_path and flux.data_path: training reads an encoding cache or runs the encoders "
                      "over a data set every step, not both; remove one");
  if (f.data_path.empty() && !f.pipeline_path.empty())
    refused.push_back("flux.pipeline_path is read only with flux.data_path (the encoders that run every step); "
                      "remove it, or set flux.data_path instead of flux.cache_path");
  if (!f.data_path.empty() && f.pipeline_path.empty())
    refused.push_back("flux.data_path needs flux.pipeline_path: the diffusers FLUX folder whose encoders run on it");
  if (f.data_path.empty() && c.data.bad_data != d.data.bad_data)
    refused.push_back("training.bad_data is read only with flux.data_path (a cache's bad images were left out when "
                      "it was encoded: titan flux encode --bad-data); remove it");
  if (f.data_path.empty() && f.crop != d.flux.crop)
    refused.push_back("flux.crop is read only with flux.data_path (a cache's squares were cut when it was "
                      "encoded: titan flux encode --crop); remove it");
  if (!f.data_path.empty() && !f.validation_cache_path.empty())
    refused.push_back("flux.validation_cache_path with flux.data_path: validation reads the last "
                      "flux.validation_samples of flux.data_path; remove it");
  if (f.timestep_sampling != "logit_normal" &&
      (f.logit_mean != d.flux.logit_mean || f.logit_std != d.flux.logit_std || f.time_shift != d.flux.time_shift))
    refused.push_back("flux.logit_mean, logit_std and time_shift are read only under flux.timestep_sampling = "
                      "\"logit_normal\"; remove them or set the sampling");
  if (!guidance_embed && f.guidance != d.flux.guidance)
    refused.push_back("flux.guidance: flux/" + c.model.flavor +
                      " has no guidance_in (only guidance-distilled flavors such as flux-dev read it); remove the key");
  if (!c.validation.enable && (f.validation_cache_path != d.flux.validation_cache_path ||
                               f.validation_samples != d.flux.validation_samples))
    refused.push_back("flux.validation_cache_path and validation_samples are read only with validation.enable = true");
  std::string message;
  for (const std::string& r : refused) message += "\n  " + r;
  config::require(refused.empty(), "model.name = \"flux\":", message);
}

// The encoders' parts in flux.pipeline_path, a diffusers FLUX folder.
ConditioningPaths pipeline_paths(const FluxConfig& f) {
  config::require(std::filesystem::is_directory(f.pipeline_path), "flux.pipeline_path = ", f.pipeline_path,
                  " is not a folder; expected diffusers' FLUX layout (text_encoder/, tokenizer/, text_encoder_2/, "
                  "tokenizer_2/, vae/)");
  return ConditioningPaths::of_pipeline(f.pipeline_path);
}

// The latent pixels of an image side and the packed tokens of a sample.
int64_t latent_side(const JobConfig& c) { return c.flux.image_size / c.flux.latent_downscale; }
int64_t image_tokens(const JobConfig& c, const FluxModelArgs& a) {
  const int64_t side = latent_side(c) / a.patch_size;
  return side * side;
}

class FluxWorkload : public Workload {
 public:
  explicit FluxWorkload(const JobConfig& c) : args_(models::flux::args_from(c.model)) {
    refuse_keys(c, args_.guidance_embed);
    const models::flux::FluxSummary f =
        models::flux::flux_summary(args_, image_tokens(c, args_), c.flux.t5_length);
    summary_.num_params = f.num_params;
    summary_.flops_per_token = f.flops_per_sample / static_cast<double>(image_tokens(c, args_));
    summary_.description = f.description;
    summary_.n_layers = args_.depth + args_.depth_single_blocks;
    summary_.n_heads = summary_.n_kv_heads = args_.num_heads;
  }

  void check_layout(const JobConfig& c, const dist::ParallelDims& dims) override {
    const int64_t f = c.flux.latent_downscale;
    config::require(c.flux.image_size % (f * args_.patch_size) == 0, "flux.image_size = ", c.flux.image_size,
                    " must be a multiple of ", f * args_.patch_size, " (flux.latent_downscale ", f, " times the ",
                    args_.patch_size, "x", args_.patch_size, " patch)");
    if (const int64_t cp = dims.degree(dist::MeshAxis::cp); cp > 1) {
      // Each rank holds two equal chunks of either stream (parallel/context_parallel.h's layout).
      const std::string key = "parallelism.context_parallel_degree = " + std::to_string(cp);
      config::require(c.flux.t5_length % (2 * cp) == 0, key, " with flux.t5_length = ", c.flux.t5_length,
                      ": each cp rank holds 2 equal chunks of the text tokens, so t5_length must be a multiple of ",
                      2 * cp);
      config::require(image_tokens(c, args_) % (2 * cp) == 0, key, " with flux.image_size = ", c.flux.image_size,
                      ": its ", image_tokens(c, args_), " image tokens do not split into ", 2 * cp,
                      " equal chunks (2 per cp rank); choose an image size or degree that divides them");
    }
  }

  void build_data(const WorkloadContext& ctx) override {
    const JobConfig& c = ctx.cfg;
    config::require(!c.flux.cache_path.empty() || !c.flux.data_path.empty(),
                    "flux.cache_path is empty and so is flux.data_path: FLUX trains on an encoding cache (`titan "
                    "flux encode`) or runs the frozen encoders of flux.pipeline_path over flux.data_path every "
                    "step; set one");
    std::shared_ptr<SampleEncodings> source;
    std::string where, remedy;  // the source as messages name it; how to make one that fits
    if (!c.flux.data_path.empty()) {
      where = "flux.pipeline_path " + c.flux.pipeline_path + " over flux.data_path " + c.flux.data_path;
      remedy = "use encoders of this flavor's widths";
      auto live = std::make_shared<LiveEncodings>(LiveEncodingsOptions{
          .data_path = c.flux.data_path,
          .encoders = pipeline_paths(c.flux),
          .t5_length = c.flux.t5_length,
          .image_size = c.flux.image_size,
          .crop = c.flux.crop == "center" ? data::ImageCrop::center : data::ImageCrop::random,
          .bad_data = c.data.bad_data == "skip" ? data::BadData::skip : data::BadData::error,
          .shard_group = ctx.mesh[dist::MeshAxis::dp_shard],
          .replicate_group = ctx.mesh[dist::MeshAxis::dp_replicate]});
      const int64_t downscale = live->autoencoder().args().downscale();
      config::require(downscale == c.flux.latent_downscale, where, ": its autoencoder downsamples by ", downscale,
                      ", not flux.latent_downscale = ", c.flux.latent_downscale, "; set flux.latent_downscale = ",
                      downscale);
      skipped_ = live->skipped();
      encoders_ = live->sharded() ? "the encoders FSDP-sharded over the " +
                                        std::to_string(ctx.mesh[dist::MeshAxis::dp_shard].size()) + " dp_shard ranks"
                                  : "the encoders whole on every rank";
      source = live;
    } else {
      where = "flux.cache_path " + c.flux.cache_path;
      remedy = "encode one for this flavor";
      source = std::make_shared<EncodingCache>(c.flux.cache_path);
    }
    const int64_t zero = 0;
    const std::map<std::string, Tensor> first = source->samples({&zero, 1}, {}).at(0);
    const Shape latent = first.at("latent_mean").sizes(), t5 = first.at("t5").sizes();
    config::require(latent.size() == 3 && latent[0] == args_.latent_channels && latent[1] == latent_side(c) &&
                        latent[2] == latent_side(c) && t5.size() == 2 && t5[0] == c.flux.t5_length &&
                        t5[1] == args_.context_in_dim && first.at("clip_pooled").numel() == args_.vec_in_dim,
                    where, ": its latents are ", Tensor(first.at("latent_mean")).desc(), ", its T5 encodings ",
                    Tensor(first.at("t5")).desc(), " and its CLIP vectors ", Tensor(first.at("clip_pooled")).desc(),
                    "; flux/", c.model.flavor, " with flux.image_size = ", c.flux.image_size, ", latent_downscale = ",
                    c.flux.latent_downscale, " and t5_length = ", c.flux.t5_length, " needs [", args_.latent_channels,
                    ", ", latent_side(c), ", ", latent_side(c), "], [", c.flux.t5_length, ", ", args_.context_in_dim,
                    "] and [", args_.vec_in_dim, "]; set flux.image_size, latent_downscale and t5_length to the "
                    "data's, or ", remedy);
    source_where_ = where;
    source_description_ = source->description();
    const auto seed = static_cast<uint64_t>(c.training.seed);
    const int64_t held_out = c.validation.enable && c.flux.validation_cache_path.empty() ? c.flux.validation_samples : 0;
    config::require(source->size() > held_out, where, " holds ", source->size(),
                    " samples; holding out flux.validation_samples = ", held_out, " leaves none to train on");
    train_ = std::make_unique<FluxBatches>(source, 0, source->size() - held_out, c.flux, seed, args_.patch_size);
    if (c.validation.enable) {
      if (held_out > 0) {
        validation_ = std::make_unique<FluxBatches>(source, source->size() - held_out, held_out, c.flux, seed,
                                                    args_.patch_size);
      } else {
        auto v = std::make_shared<EncodingCache>(c.flux.validation_cache_path);
        validation_ = std::make_unique<FluxBatches>(v, 0, std::min(v->size(), c.flux.validation_samples), c.flux,
                                                    seed, args_.patch_size);
      }
    }
    // Graph mode: one process draws the rows of every device it feeds, which are the slots its
    // devices' ranks would draw in eager mode (flux_batches.h), so the global batch is the same.
    local_batch_ = c.training.local_batch_size * ctx.devices_fed;
    image_tokens_ = image_tokens(c, args_);
  }

  std::shared_ptr<nn::Module> build_model(const WorkloadContext& ctx, Generator&, models::Parallelized& plans) override {
    const JobConfig& c = ctx.cfg;
    {
      MemoryOwnerScope owner(MemoryCategory::parameters);
      const MetaScope meta;
      model_ = std::make_shared<FluxTransformer>(args_);
    }
    const ExecutionMode::Checkpointing ac = ctx.mode.checkpointing(c);
    plans = models::flux::parallelize(
        *model_, {.activation_checkpoint_mode = ac.mode,
                  .activation_checkpoint_every_k = ac.every_k,
                  .mesh = &ctx.mesh,
                  .fsdp = {.reshard_after_forward = c.parallelism.fsdp_reshard_after_forward != "never"},
                  .seq_len = c.flux.t5_length + image_tokens(c, args_)});
    dp_ = std::make_unique<dist::ProcessGroup>(ctx.mesh[dist::MeshAxis::dp]);
    mode_ = &ctx.mode;
    return model_;
  }

  const models::ModelSummary& summary() const override { return summary_; }

  std::vector<const nn::Module*> blocks() const override {
    std::vector<const nn::Module*> out;
    for (nn::Module* b : models::flux::blocks(*model_)) out.push_back(b);
    return out;
  }

  // Per sample: each block keeps about 12 hidden-wide values per token of [txt; img] for backward
  // (its modulated inputs, Q, K, V, attention output, and the MLP's 4x-wide hidden activations);
  // a checkpointed block its input alone. A rough figure: FLUX's blocks are not decoder blocks.
  std::optional<int64_t> activation_bytes(const JobConfig& c) const override {
    const int64_t tokens = (image_tokens(c, args_) + c.flux.t5_length) / c.parallelism.context_parallel_degree;
    const int64_t blocks = args_.depth + args_.depth_single_blocks;
    const bool checkpointed = c.activation_checkpoint.mode != "none";
    const int64_t per_block = args_.hidden_size * (checkpointed ? 1 : 12) * 4;
    return per_block * blocks * tokens * c.training.local_batch_size;
  }

  // The encoders run every step (flux.data_path): FSDP-sharded over the dp_shard processes as
  // build_data shards them, else whole on every rank.
  FrozenBytes frozen_bytes(const JobConfig& c, dist::DeviceMesh& mesh) const override {
    if (c.flux.data_path.empty()) return {};
    // A call encodes a micro-batch's rows, or a validation batch's.
    const int64_t rows = std::max(c.training.local_batch_size,
                                  c.validation.enable ? c.validation.local_batch_size : int64_t{0});
    return conditioning_memory(pipeline_paths(c.flux), mesh[dist::MeshAxis::dp_shard].size(),
                               c.training.mixed_precision_param == "bfloat16",
                               {.rows = rows, .image_size = c.flux.image_size, .t5_length = c.flux.t5_length});
  }

  void log_model(std::ostream& log, const JobConfig& c, const std::string& checkpointing) const override {
    log << "titan: " << summary_.num_params << " parameters, "
        << summary_.flops_per_token * static_cast<double>(image_tokens(c, args_)) / 1e9 << " GFLOP per sample (training, "
        << c.flux.image_size << "px: " << image_tokens(c, args_) << " image tokens, " << c.flux.t5_length
        << " T5 tokens)\n"
        << "titan: attention splash over [text; image]";
    if (const int64_t cp = c.parallelism.context_parallel_degree; cp > 1)
      log << ", context parallel over " << cp << " ranks (ring attention; each holds " << c.flux.t5_length / cp
          << " text and " << image_tokens(c, args_) / cp << " image tokens of a sample)";
    log << "; activation checkpointing " << checkpointing << "\n";
  }

  void log_data(std::ostream& log, const JobConfig& c) const override {
    if (c.flux.data_path.empty()) {
      log << "titan: data: encoding cache " << c.flux.cache_path << " (" << source_description_ << "), ";
    } else {
      log << "titan: data: encoders every step: " << c.flux.pipeline_path << " over " << c.flux.data_path << " ("
          << train_->size() + (validation_ && c.flux.validation_cache_path.empty() ? validation_->size() : 0)
          << " samples; " << source_description_ << "), " << encoders_ << ", ";
      for (const auto& [reason, count] : skipped_)
        log << count << " left out (" << reason << ", training.bad_data = skip), ";
    }
    log << train_->size() << " training samples; flow matching, t " << c.flux.timestep_sampling;
    if (c.flux.timestep_sampling == "logit_normal")
      log << " (mean " << c.flux.logit_mean << ", std " << c.flux.logit_std << ", shift " << c.flux.time_shift << ")";
    log << ", prompt dropout " << c.flux.prompt_dropout << " (T5 and CLIP independently)\n";
  }

  void make_validator(const WorkloadContext& ctx) override {
    if (!validation_) return;
    // Every rank runs as many forwards (FSDP's all-gathers are collective).
    config::require(validation_->size() % dp_->size() == 0, "flux: the ", validation_->size(),
                    " validation samples do not split evenly over the ", dp_->size(),
                    " data-parallel ranks; set flux.validation_samples to a multiple of ", dp_->size());
    freq_ = ctx.cfg.validation.freq;
    validation_batch_ = ctx.cfg.validation.local_batch_size;
    guidance_ = ctx.cfg.flux.guidance;
    ctx.log << "titan: validation every " << freq_ << " steps and after the last: the mean loss of "
            << validation_->size() << " samples ("
            << (ctx.cfg.flux.validation_cache_path.empty() ? "the last of " + source_where_ + ", held out of training"
                                                           : ctx.cfg.flux.validation_cache_path)
            << ") at t = (i + 0.5) / 8, i < 8, with fixed noise\n";
  }

  std::unique_ptr<StepEngine> make_engine(const EngineParts& parts) override {
    if (parts.cfg.compile.enable) return make_graph_flux_step(parts, *mode_, *model_, *train_, local_batch_);
    return make_eager_flux_step(parts, *model_, *train_, local_batch_);
  }

  bool should_validate(int64_t step, int64_t last_step) const override {
    return validation_ && (step % freq_ == 0 || step == last_step);
  }

  ValidationMetrics validate(int64_t step, models::Parallelized& plans) override {
    const auto t0 = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t counted = 0;
    {
      autograd::NoGradGuard no_grad;
      // Data-parallel rank r reads samples r, r + dp, ...
      std::vector<int64_t> mine;
      for (int64_t s = dp_->rank(); s < validation_->size(); s += dp_->size()) mine.push_back(s);
      for (size_t first = 0; first < mine.size(); first += static_cast<size_t>(validation_batch_)) {
        const std::vector<int64_t> rows(mine.begin() + static_cast<std::ptrdiff_t>(first),
                                        mine.begin() + static_cast<std::ptrdiff_t>(std::min(mine.size(), first + static_cast<size_t>(validation_batch_))));
        for (int i = 0; i < 8; ++i) {
          const FluxBatch b = local_tokens(validation_->validation(rows, (i + 0.5) / 8.0), plans.cp.get());
          const Tensor loss = flow_matching_loss(velocity(*model_, b, guidance_, plans.cp.get()), b.x0, b.noise);
          loss_sum += loss.item() * static_cast<double>(rows.size());
          counted += static_cast<int64_t>(rows.size());
        }
      }
    }
    if (plans.fsdp) plans.fsdp->reshard_all();
    // Each cp rank's losses are the means over its share of the tokens, equal in size.
    if (plans.cp) loss_sum = plans.cp->group().all_reduce(loss_sum, dist::ReduceOp::avg);
    if (dp_->size() > 1) {
      loss_sum = dp_->all_reduce(loss_sum, dist::ReduceOp::sum);
      counted = static_cast<int64_t>(dp_->all_reduce(static_cast<double>(counted), dist::ReduceOp::sum));
    }
    return {.step = step,
            .loss = loss_sum / static_cast<double>(counted),
            .per_token = false,
            .tokens = counted / 8 * image_tokens_,
            .seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  }

  int64_t tokens_per_step(const JobConfig& c, const dist::ParallelDims& dims, int64_t micro_batches) const override {
    // Per device, as the language models count them: cp ranks share a sample's tokens.
    return c.training.local_batch_size * micro_batches * image_tokens(c, args_) / dims.degree(dist::MeshAxis::cp);
  }

 private:
  FluxModelArgs args_;
  models::ModelSummary summary_;
  std::shared_ptr<FluxTransformer> model_;
  std::unique_ptr<FluxBatches> train_, validation_;
  std::string source_where_, source_description_, encoders_;
  std::map<std::string, int64_t> skipped_;  // what training.bad_data = skip left out of flux.data_path
  std::unique_ptr<dist::ProcessGroup> dp_;
  ExecutionMode* mode_ = nullptr;  // the trainer's, which outlives the workload's engine
  int64_t local_batch_ = 1, freq_ = 1, validation_batch_ = 1, image_tokens_ = 0;
  double guidance_ = 1.0;
};

}  // namespace

std::unique_ptr<Workload> make_flux_workload(const JobConfig& cfg) { return std::make_unique<FluxWorkload>(cfg); }

}  // namespace titan::train::flux
