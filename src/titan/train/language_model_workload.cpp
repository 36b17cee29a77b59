#include "titan/train/language_model_workload.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <sstream>

#include "titan/core/config_schema.h"
#include "titan/core/memory_owner.h"
#include "titan/core/meta.h"
#include "titan/data/dataset.h"
#include "titan/data/loader.h"
#include "titan/data/tokenizer.h"
#include "titan/data/tokenizer_files.h"
#include "titan/nn/moe/moe.h"
#include "titan/parallel/pipeline_parallel.h"
#include "titan/train/layout_checks.h"
#include "titan/train/objective_data.h"
#include "titan/train/validator.h"

namespace titan::train {

namespace fs = std::filesystem;

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    const size_t b = item.find_first_not_of(' '), e = item.find_last_not_of(' ');
    items.push_back(b == std::string::npos ? "" : item.substr(b, e - b + 1));
  }
  return items;
}

namespace {

// The folder holding the tokenizer.json that model.tokenizer_path names, found where
// data::load_tokenizer finds it (the working directory, else the source tree); empty for the
// byte tokenizer or a tokenizer file of another name, which no model folder can carry.
fs::path find_tokenizer_dir(const std::string& tokenizer_path) {
  if (tokenizer_path.empty()) return {};
  fs::path p(tokenizer_path);
  if (p.is_relative() && !fs::exists(p)) p = fs::path(TITAN_SOURCE_DIR) / p;
  if (fs::is_directory(p)) return p;
  return p.filename() == data::kTokenizerFile ? p.parent_path() : fs::path();
}

class LanguageModelWorkload : public Workload {
 public:
  LanguageModelWorkload(const JobConfig& cfg, MakeEngine objective_engine)
      : spec_(&models::get_train_spec(cfg.model.name)),
        objective_engine_(std::move(objective_engine)),
        tokenizer_path_(cfg.model.tokenizer_path) {
    // [flux] is read by FLUX's workload alone.
    const nlohmann::json ours = to_json(cfg).at("flux"), defaults = to_json(JobConfig{}).at("flux");
    std::string set;
    for (const auto& [key, value] : ours.items())
      if (value != defaults.at(key)) set += (set.empty() ? "flux." : ", flux.") + key;
    config::require(set.empty(), set, ": [flux] is read only when model.name = \"flux\", and it is \"",
                    cfg.model.name, "\"; remove the keys");
  }

  void check_layout(const JobConfig& cfg, const dist::ParallelDims& dims) override {
    summary_ = spec_->summarize(cfg.model, cfg.training.seq_len);
    TITAN_CHECK(summary_.num_params > 0, "model ", cfg.model.name, "/", cfg.model.flavor, " has no parameters");
    check_model_layout(cfg, dims, *spec_, summary_);
  }

  void build_data(const WorkloadContext& ctx) override {
    const JobConfig& c = ctx.cfg;
    tokenizer_ = data::load_tokenizer(c.model.tokenizer_path);
    // GRPO's engine reads its prompts itself.
    if (c.training.objective == "grpo") return;
    options_ = c.data.options("training");
    ObjectiveData od = load_objective_data(c, options_, *tokenizer_, c.training.seq_len);
    dataset_ = std::move(od.dataset);
    sft_ = od.sft;
    eos_id_ = c.model.attn.document_masking ? tokenizer_->eos_id().value_or(-1) : -1;
    // Every data-parallel rank (expert-parallel ones are among them) reads batches of its own; a
    // process that feeds several of the layout's devices (graph mode) loads the rows of each.
    dist::ProcessGroup& batch = ctx.mesh[dist::MeshAxis::dp];
    loader_ = std::make_unique<data::DataLoader>(
        dataset_.stream, data::LoaderOptions{.seq_len = c.training.seq_len,
                                             .local_batch_size = c.training.local_batch_size * ctx.devices_fed,
                                             .seed = static_cast<uint64_t>(c.training.seed),
                                             .dp_rank = batch.rank(),
                                             .dp_world = batch.size(),
                                             .eos_id = eos_id_},
        dataset_.loss_mask);
  }

  std::shared_ptr<nn::Module> build_model(const WorkloadContext& ctx, Generator& rng,
                                          models::Parallelized& plans) override {
    const JobConfig& c = ctx.cfg;
    mode_ = &ctx.mode;
    plans_ = &plans;
    // A dry run reads no data: the model's vocabulary is the config's, checked against the byte
    // tokenizer.
    if (!tokenizer_) tokenizer_ = data::load_tokenizer("");
    {
      MemoryOwnerScope owner(MemoryCategory::parameters);
      const MetaScope meta;
      model_ = spec_->build(c.model, c.training.seq_len, rng);
    }
    config::require(model_->vocab_size() >= tokenizer_->vocab_size(), "model.vocab_size ", model_->vocab_size(),
                    " is smaller than the ", tokenizer_->vocab_size(), " ids of the ", tokenizer_->description(),
                    "; raise model.vocab_size");
    if (spec_->parallelize) {
      const ExecutionMode::Checkpointing ac = ctx.mode.checkpointing(c);
      plans = spec_->parallelize(
          *model_, {.activation_checkpoint_mode = ac.mode,
                    .activation_checkpoint_every_k = ac.every_k,
                    .mesh = &ctx.mesh,
                    .fsdp = {.reshard_after_forward = c.parallelism.fsdp_reshard_after_forward != "never"},
                    .tp = {.sequence_parallel = c.parallelism.enable_sequence_parallel,
                           .loss_parallel = !c.parallelism.disable_loss_parallel},
                    .seq_len = c.training.seq_len,
                    .block_q = c.model.attn.block_q,
                    .block_kv = c.model.attn.block_kv,
                    .pipeline = {.schedule = c.parallelism.pipeline_parallel_schedule,
                                 .micro_batches =
                                     c.training.local_batch_size / c.parallelism.pipeline_parallel_microbatch_size,
                                 .split_points = split_list(c.parallelism.pipeline_parallel_split_points)}});
    }
    return model_;
  }

  const models::ModelSummary& summary() const override { return summary_; }

  void after_initialise(dist::DeviceMesh& mesh) override {
    // Every rank that routes tokens of its own (data and context parallel ranks) counts
    // them; the expert bias and the expert-load figures need the step's global counts, the same on
    // every rank. Tensor-parallel ranks route the same tokens.
    std::vector<dist::ProcessGroup> groups;
    for (const dist::MeshAxis axis : {dist::MeshAxis::dp, dist::MeshAxis::cp})
      if (mesh[axis].size() > 1) groups.push_back(mesh[axis]);
    if (groups.empty()) return;
    for (const auto& [name, m] : model_->named_modules())
      if (auto* moe = dynamic_cast<nn::moe::MoE*>(m))
        moe->count_reducer = [groups](std::vector<int64_t>& counts) mutable {
          Tensor t = Tensor::from_vector(counts, {static_cast<int64_t>(counts.size())});
          for (dist::ProcessGroup& g : groups) g.all_reduce(t, dist::ReduceOp::sum).wait();
          counts = t.to_vector<int64_t>();
        };
  }

  void log_model(std::ostream& log, const JobConfig& c, const std::string& checkpointing) const override {
    log << "titan: " << summary_.num_params << " parameters, " << summary_.flops_per_token / 1e9
        << " GFLOP per token (training, seq " << c.training.seq_len << ")\n"
        << "titan: attention " << c.model.attention;
    if (c.model.attention == "splash")
      log << ", tiles of " << c.model.attn.block_q << " queries x " << c.model.attn.block_kv << " keys";
    log << (c.model.attn.document_masking ? ", documents masked from each other" : "")
        << "; activation checkpointing " << checkpointing << "\n";
  }

  void log_data(std::ostream& log, const JobConfig& c) const override {
    log << "titan: ";
    if (loader_)
      log << "data " << c.data.dataset << " (" << options_.path << "): " << dataset_.stats.files << " files, "
          << dataset_.stats.documents << " documents, " << loader_->num_tokens() << " tokens, "
          << loader_->num_windows() << " windows of " << c.training.seq_len << "; " << tokenizer_->description()
          << "\n"
          << "titan: " << describe_objective(c.training.objective, sft_, dataset_.stats, c.training.seq_len);
    else
      log << tokenizer_->description();
    log << "\n";
  }

  void log_layout(std::ostream& log, const JobConfig& c, const dist::DeviceMesh& mesh,
                  const models::Parallelized& plans) const override {
    if (plans.ep)
      log << "titan: expert parallel over " << mesh.degree(dist::MeshAxis::ep) << " of the dp_shard ranks ("
          << summary_.num_experts / mesh.degree(dist::MeshAxis::ep) << " of the " << summary_.num_experts
          << " experts of every MoE layer on each, FSDP-sharded over the " << mesh.degree(dist::MeshAxis::efsdp)
          << " ranks that hold the same experts; tokens dispatched by all-to-all)\n";
    if (plans.cp)
      log << "titan: context parallel over " << mesh.degree(dist::MeshAxis::cp)
          << " ranks (ring attention; each holds " << c.training.seq_len / mesh.degree(dist::MeshAxis::cp)
          << " tokens of every sequence, in two chunks that balance the causal mask)\n";
    if (const parallel::TensorParallel* tp = plans.tp.get())
      log << "titan: tensor parallel over " << mesh.degree(dist::MeshAxis::tp) << " ranks (Megatron plan"
          << (tp->options().sequence_parallel ? ", sequence parallel" : "")
          << (tp->options().loss_parallel ? ", loss over the split vocabulary" : ", logits gathered for the loss")
          << "); mesh dp_replicate " << mesh.degree(dist::MeshAxis::dp_replicate) << " x dp_shard "
          << mesh.degree(dist::MeshAxis::dp_shard) << " x tp " << mesh.degree(dist::MeshAxis::tp) << "\n";
    if (parallel::PipelineParallel* pp = plans.pp.get()) {
      std::string spans;
      for (const parallel::StageSpan& span : pp->spans())
        spans += (spans.empty() ? "" : ", ") + std::to_string(span.first) + "-" + std::to_string(span.last - 1);
      log << "titan: pipeline parallel over " << mesh.degree(dist::MeshAxis::pp) << " ranks, layers " << spans
          << " by stage; " << parallel::describe_schedule(pp->schedule()) << "\n";
    }
    if (!dataset_.stats.skipped.empty())
      log << "titan: data: " << dataset_.stats.skipped_summary()
          << (sft_ ? " (training.bad_data = skip, sft.over_length)\n" : " (training.bad_data = skip)\n");
  }

  data::DataLoader* loader() override { return loader_.get(); }

  fs::path tokenizer_dir() const override { return find_tokenizer_dir(tokenizer_path_); }

  void make_validator(const WorkloadContext& ctx) override {
    validator_ =
        train::make_validator(ctx.cfg, options_, dataset_, *tokenizer_, eos_id_, ctx.mesh[dist::MeshAxis::dp], ctx.log);
  }

  std::unique_ptr<StepEngine> make_engine(const EngineParts& p) override {
    const StepParts parts{.cfg = p.cfg,
                          .spec = *spec_,
                          .model = *model_,
                          .optimizer = p.optimizer,
                          .named_params = p.named_params,
                          .plans = p.plans,
                          .ddp = p.ddp,
                          .mesh = p.mesh,
                          .world = p.world,
                          .log = p.log,
                          .tokenizer = *tokenizer_,
                          .start_step = p.start_step};
    return objective_engine_ ? objective_engine_(parts) : mode_->make_engine(parts);
  }

  bool should_validate(int64_t step, int64_t last_step) const override {
    return validator_ && validator_->should_validate(step, last_step);
  }

  ValidationMetrics validate(int64_t step, models::Parallelized& plans) override {
    return validator_->validate(step, *model_, plans.fsdp.get(), plans.tp.get());
  }

  int64_t tokens_per_step(const JobConfig& c, const dist::ParallelDims& dims, int64_t micro_batches) const override {
    // Per device, as TorchTitan counts them: the ranks or devices that split one model (its pipeline
    // stages, tensor slices and sequence chunks) share its tokens, so that tps and MFU stay per device.
    return c.training.local_batch_size * c.training.seq_len * micro_batches / dims.model_parallel();
  }

  NextBatch next_batch() override {
    return [this] {
      data::Batch b = loader_->next();
      parallel::ContextParallel* cp = plans_->cp.get();
      if (!cp) return b;
      cp->begin_batch(b.inputs.size(0), b.document_ids);
      b.inputs = cp->shard(b.inputs);
      b.labels = cp->shard(b.labels);
      if (b.document_ids.defined()) b.document_ids = cp->shard(b.document_ids);
      return b;
    };
  }

 private:
  const models::TrainSpec* spec_;
  MakeEngine objective_engine_;
  models::ModelSummary summary_;
  std::string tokenizer_path_;
  ExecutionMode* mode_ = nullptr;
  models::Parallelized* plans_ = nullptr;
  std::shared_ptr<models::CausalLM> model_;
  // The run's (an objective's engine keeps reading it).
  std::shared_ptr<const data::Tokenizer> tokenizer_;
  data::DatasetOptions options_;
  data::Dataset dataset_;
  std::optional<data::SftStats> sft_;  // training.objective = "sft"
  int32_t eos_id_ = -1;  // where documents end, for document masking; -1: not masked
  std::unique_ptr<data::DataLoader> loader_;
  std::unique_ptr<Validator> validator_;  // null unless validation.enable
};

}  // namespace

std::unique_ptr<Workload> make_language_model_workload(const JobConfig& cfg, MakeEngine objective_engine) {
  return std::make_unique<LanguageModelWorkload>(cfg, std::move(objective_engine));
}

}  // namespace titan::train
