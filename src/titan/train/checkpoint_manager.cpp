#include "titan/train/checkpoint_manager.h"

#include <charconv>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>

#include "titan/checkpoint/checkpoint.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/core/stopwatch.h"
#include "titan/core/trace.h"
#include "titan/parallel/comm_ops.h"
#include "titan/train/hf_interop.h"

namespace titan::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kModel = "model.";
constexpr const char* kOptimizer = "optimizer.";

std::string step_name(int64_t step) {
  return "step-" + std::to_string(step);
}

// N of a folder named step-<N>.
std::optional<int64_t> step_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (!name.starts_with("step-") || name.size() == 5) return std::nullopt;
  int64_t step = 0;
  const char* end = name.data() + name.size();
  auto [p, ec] = std::from_chars(name.data() + 5, end, step);
  if (ec != std::errc() || p != end) return std::nullopt;
  return step;
}

// Zeros shaped like `state`'s tensors, for a checkpoint to fill (padding rows of shards stay 0).
std::map<std::string, Tensor> zeros_like(const std::map<std::string, Tensor>& state) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : state) out.emplace(name, Tensor::zeros(t.sizes(), {.dtype = t.dtype()}));
  return out;
}

std::map<std::string, Tensor> strip(const checkpoint::Pieces& pieces, const std::string& prefix) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, p] : pieces)
    if (name.starts_with(prefix)) out.emplace(name.substr(prefix.size()), p.data);
  return out;
}

// "section.key (saved -> now)" for every key whose value differs.
std::string config_changes(const json& saved, const json& now) {
  std::string out;
  for (const auto& [section, keys] : now.items()) {
    for (const auto& [key, value] : keys.items()) {
      const json* old =
          saved.contains(section) && saved[section].contains(key) ? &saved[section][key] : nullptr;
      if (old && *old == value) continue;
      out += (out.empty() ? "" : ", ") + section + "." + key + " (" + (old ? old->dump() : "absent") +
             " -> " + value.dump() + ")";
    }
  }
  return out;
}

}  // namespace

CheckpointManager::CheckpointManager(const JobConfig& cfg, Checkpointed parts, std::ostream& log,
                                     dist::ProcessGroup world)
    : cfg_(cfg),
      parts_(parts),
      log_(log),
      folder_(fs::path(cfg.job.dump_folder) / cfg.checkpoint.folder),
      world_(std::move(world)),
      writer_(world_.rank() == 0) {
  // float16 is refused with the config ([checkpoint]'s checks).
  export_dtype_ = cfg.checkpoint.export_dtype == "bfloat16" ? kBF16 : kF32;
  if (cfg.checkpoint.enable && cfg.checkpoint.last_save_in_hf) {
    hf_adapter_ = &models::hf_adapter(cfg.model.name);
    hf_config_ = hf_adapter_->hf_config(
        cfg.model,
        models::common::hf::parse_layout(cfg.checkpoint.hf_config_format, "checkpoint.hf_config_format"));
  }
  if (!cfg.checkpoint.enable) return;
  // Found now rather than at the first save, checkpoint.interval steps in.
  if (writer_ || sharded()) check_writable(folder_, "checkpoint folder (job.dump_folder/checkpoint.folder)");
  if (!writer_) return;
  std::string holder;
  lock_ = FolderLock::try_lock(folder_, kRunLockFile, &holder);
  TITAN_CHECK(lock_, "checkpoint folder ", folder_.string(), " is in use by another titan train run (",
              holder, ", per ", (folder_ / kRunLockFile).string(),
              "): two runs saving into one folder would interleave their checkpoints; wait for that run to "
              "end or stop it, or give this run another job.dump_folder or checkpoint.folder");
}

CheckpointManager::~CheckpointManager() {
  try {
    wait();
  } catch (const std::exception& e) {
    log_ << "titan: error: checkpoint save failed: " << e.what() << "\n";
  }
}

std::map<int64_t, fs::path> CheckpointManager::list(const fs::path& folder) {
  std::map<int64_t, fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    const std::optional<int64_t> step = step_of(e.path());
    if (step && (fs::exists(e.path() / checkpoint::kMetadataFile) || checkpoint::is_hf_dir(e.path())))
      out.emplace(*step, e.path());
  }
  return out;
}

void CheckpointManager::load_model(checkpoint::Reader& reader, nn::Module& model) {
  checkpoint::Pieces targets;
  for (const auto& [name, t] : zeros_like(model.state_dict()))
    targets.emplace(kModel + name, checkpoint::whole(t));
  reader.load(targets, {.scope = kModel, .allow_cast = true});
  model.load_state_dict(strip(targets, kModel));
}

std::optional<CheckpointManager::Box> CheckpointManager::box_of(const std::string& param,
                                                                const Tensor& t) const {
  parallel::FullyShard* fsdp = parts_.fsdp;
  std::optional<parallel::ShardBox> piece = fsdp && t.dim() > 0 ? fsdp->shard_box(param) : std::nullopt;
  std::optional<parallel::GlobalSlice> slice;
  // A plan's slices are saved by every rank of its group, what it leaves whole (and the same on
  // all of them) by its rank 0.
  bool saves = parts_.replica_writer;
  for (const parallel::ParameterSlices* plan : parts_.slices) {
    std::optional<parallel::GlobalSlice> mine = t.dim() > 0 ? plan->slice_of(param) : std::nullopt;
    TITAN_CHECK(!(mine && slice), "checkpoint: parameter ", param, " is sliced by two parallel plans");
    if (mine)
      slice = std::move(mine);
    else if (plan->replicates_the_rest())
      saves = saves && plan->slice_group().rank() == 0;
  }
  // Under pipeline parallelism only the rank of the tensor's stage holds it (the others' are
  // empty, or stale buffers), so that rank saves it and only it loads it.
  const bool held = !parts_.pp || parts_.pp->holds(param);
  if (!piece && !slice && !parts_.pp) return std::nullopt;
  if (!held && t.dim() > 0) {
    const std::optional<parallel::GlobalSlice> before = parts_.pp->slice_of(param);
    return Box{.data = t.narrow(0, 0, 0),
               .offsets = Shape(t.sizes().size(), 0),
               .global_shape = slice ? slice->global_shape : before ? before->global_shape : t.sizes()};
  }
  Box b{.data = piece ? piece->valid(t) : t,
        .offsets = slice ? slice->offsets : Shape(t.sizes().size(), 0),
        .global_shape = slice ? slice->global_shape : piece ? piece->global_shape : t.sizes(),
        // A tensor FSDP did not shard is the same on every rank of its shard group.
        .saves = held && saves && (piece || !fsdp || fsdp->shard_rank() == 0)};
  if (piece)
    for (size_t d = 0; d < piece->offsets.size(); ++d) b.offsets[d] += piece->offsets[d];
  return b;
}

void CheckpointManager::add_pieces(checkpoint::Pieces& out, const std::string& prefix,
                                   const std::map<std::string, Tensor>& state, bool optimizer,
                                   bool saving) const {
  for (const auto& [name, t] : state) {
    const std::string param = optimizer ? name.substr(0, name.rfind('.')) : name;
    std::optional<Box> box = box_of(param, t);
    if (!box) {
      if (!saving || writer_) out.emplace(prefix + name, checkpoint::whole(t));
      continue;
    }
    // An empty box (rows FSDP left this rank none of, a parameter of another pipeline stage) is
    // still asked for on load, so that the checkpoint is checked whole against the model.
    if (saving && (box->data.numel() == 0 || !box->saves)) continue;
    out.emplace(prefix + name, checkpoint::Piece{box->data, box->offsets, box->global_shape});
  }
}

void CheckpointManager::load_whole_model_state(const nn::StateDict& state) {
  parallel::FullyShard* fsdp = parts_.fsdp;
  if (!sharded()) {
    parts_.model.load_state_dict(state);
    return;
  }
  nn::StateDict mine = zeros_like(fsdp ? fsdp->state_dict() : parts_.model.state_dict());
  for (auto& [name, t] : mine) {
    auto it = state.find(name);
    TITAN_CHECK(it != state.end(), "checkpoint: the weights loaded have no tensor ", name);
    std::optional<Box> box = box_of(name, t);
    TITAN_CHECK(it->second.sizes() == (box ? box->global_shape : t.sizes()), "checkpoint: tensor ", name,
                " is ", it->second.desc(), ", the model's is ",
                shape_str(box ? box->global_shape : t.sizes()));
    if (!box) {
      t.copy_(it->second);
      continue;
    }
    Tensor region = it->second;
    for (int64_t d = 0; d < region.dim(); ++d) region = region.narrow(d, box->offsets[d], box->data.size(d));
    box->data.copy_(region);
  }
  if (fsdp)
    fsdp->load_state_dict(mine);
  else
    parts_.model.load_state_dict(mine);
}

int64_t CheckpointManager::load() {
  const auto& c = cfg_.checkpoint;
  // Where the run starts when the folder holds nothing to resume: checkpoint.initial_load_path,
  // read whether or not this run saves checkpoints of its own.
  const auto initial = [&]() -> int64_t {
    if (c.initial_load_path.empty()) return 0;
    if (!checkpoint::is_hf_dir(c.initial_load_path)) return restore(c.initial_load_path, c.initial_load_model_only);
    TITAN_CHECK(c.initial_load_model_only, "checkpoint.initial_load_path = ", c.initial_load_path,
                " is a Hugging Face model folder: weights only, no optimizer or data state; set "
                "checkpoint.initial_load_model_only = true");
    restore_hf(c.initial_load_path);
    return 0;
  };
  if (!c.enable) return initial();
  std::error_code ec;
  std::vector<fs::path> leftovers;
  for (const auto& e : fs::directory_iterator(folder_, ec))
    if (writer_ && checkpoint::is_staging_dir(e.path())) leftovers.push_back(e.path());
  for (const fs::path& p : leftovers) {
    log_ << "titan: removing " << p.string() << ", left by an interrupted save or deletion\n";
    fs::remove_all(p, ec);
  }
  std::map<int64_t, fs::path> found = list(folder_);
  // A step folder that list() passes over is one a reader would otherwise skip without a word.
  for (const auto& e : fs::directory_iterator(folder_, ec)) {
    const std::optional<int64_t> step = step_of(e.path());
    if (!step || found.count(*step) || !writer_) continue;
    log_ << "titan: skipping " << e.path().string() << ": it holds no " << checkpoint::kMetadataFile
         << " (nor a Hugging Face " << checkpoint::kHfConfigFile
         << "), so it is no complete checkpoint; it was copied in part or edited. Resuming from an earlier "
            "one. Nothing in it is deleted: should this run save step "
         << *step << ", it first moves the folder aside to " << e.path().filename().string()
         << ".incomplete-<UTC time>. To use it, stop the run and restore its " << checkpoint::kMetadataFile
         << "\n";
  }
  if (c.load_step >= 0) {
    auto it = found.find(c.load_step);
    std::string have;
    for (const auto& [step, dir] : found) have += (have.empty() ? "" : ", ") + std::to_string(step);
    TITAN_CHECK(it != found.end(), "checkpoint.load_step = ", c.load_step, ": ",
                (folder_ / step_name(c.load_step)).string(), " is not a complete checkpoint; ",
                folder_.string(), " holds steps [", have, "]; pick one of them, or -1 for the latest");
    TITAN_CHECK(
        !checkpoint::is_hf_dir(it->second), "checkpoint.load_step = ", c.load_step, ": ", it->second.string(),
        " is a Hugging Face export (last_save_in_hf): weights only, nothing to resume from; pick "
        "another step, or start from its weights with checkpoint.initial_load_path in a fresh folder");
    return last_saved_ = restore(it->second, false);
  }
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    const bool hf = checkpoint::is_hf_dir(it->second);
    if (!hf && !checkpoint::read_metadata(it->second).state.value("model_only", false))
      return last_saved_ = restore(it->second, false);
    if (it->first >= cfg_.training.steps) {
      // The final export of a finished run: the weights are all there is left to restore.
      log_ << "titan: " << it->second.string()
           << " is the final export of a finished run (training.steps = " << cfg_.training.steps
           << "); nothing is left to run\n";
      if (hf)
        restore_hf(it->second);
      else
        restore(it->second, true);
      return last_saved_ = it->first;
    }
    log_ << "titan: skipping " << it->second.string() << ": a " << (hf ? "Hugging Face" : "model-only")
         << " export holds no optimizer or data state to resume from\n";
  }
  return initial();
}

int64_t CheckpointManager::restore(const fs::path& dir, bool model_only) {
  auto t0 = std::chrono::steady_clock::now();
  checkpoint::Reader reader(dir);
  const json& state = reader.metadata().state;
  TITAN_CHECK(model_only || !state.value("model_only", false), "checkpoint ", dir.string(),
              " is a model-only export (last_save_model_only): it holds no optimizer, data or step state to "
              "resume from; resume from a full checkpoint, or start from its weights with "
              "checkpoint.initial_load_path and initial_load_model_only = true in a fresh folder");
  // Everything is read and checked before any part changes.
  int64_t step = 0, windows = 0, lr_step = 0;
  data::LoaderState position;
  uint64_t seed = parts_.rng.seed(), offset = 0;
  if (!model_only) {
    try {
      step = state.at("step").get<int64_t>();
      position = {state.at("data").at("epoch").get<int64_t>(), state.at("data").at("index").get<int64_t>()};
      windows = state.at("data").at("windows").get<int64_t>();
      seed = state.at("rng").at("seed").get<uint64_t>();
      offset = state.at("rng").at("offset").get<uint64_t>();
      lr_step = state.at("lr_scheduler").at("step").get<int64_t>();
    } catch (const json::exception& e) {
      TITAN_CHECK(false, "checkpoint ", dir.string(), ": the training state in ", checkpoint::kMetadataFile,
                  " is incomplete (", e.what(), "); it was not written by this trainer, or edited");
    }
  }
  TITAN_CHECK(seed == parts_.rng.seed(), "checkpoint ", dir.string(),
              " was saved with training.seed = ", seed, " but this run has ", parts_.rng.seed(),
              ": its data order and random streams would not continue; set --training.seed=", seed,
              " or start a new run in another checkpoint.folder");
  // This rank's tensors, whole or its rows of them under FSDP, filled from the pieces of
  // whatever layout saved them.
  const std::map<std::string, Tensor> model_state =
      zeros_like(parts_.fsdp ? parts_.fsdp->state_dict() : parts_.model.state_dict());
  const std::map<std::string, Tensor> optimizer_state =
      model_only ? std::map<std::string, Tensor>{} : zeros_like(parts_.optimizer.state_dict());
  checkpoint::Pieces targets;
  add_pieces(targets, kModel, model_state, false, false);
  add_pieces(targets, kOptimizer, optimizer_state, true, false);
  // A model-only load takes weights from any export: cast from its dtype, ignoring optimizer state.
  reader.load(targets, {.scope = model_only ? kModel : "", .allow_cast = model_only});
  // First, since it is the one part that still checks its value (against this run's corpus).
  if (!model_only && parts_.loader) parts_.loader->set_state(position);
  if (parts_.fsdp)
    parts_.fsdp->load_state_dict(model_state);
  else
    parts_.model.load_state_dict(model_state);
  log_ << "titan: loaded " << (model_only ? "the weights of " : "") << dir.string();
  if (!model_only) {
    parts_.optimizer.load_state_dict(optimizer_state);
    parts_.scheduler.set_step(lr_step);
    parts_.rng.set_offset(offset);
    log_ << " (step " << step << ")";
  }
  log_ << " in " << seconds_since(t0) << " s\n";
  if (!model_only && parts_.loader && windows != parts_.loader->num_windows())
    log_ << "titan: warning: that checkpoint was saved reading a stream of " << windows
         << " windows, this run's has " << parts_.loader->num_windows()
         << " (another dataset or seq_len): the data position is kept, but it points elsewhere now\n";
  if (state.contains("config")) {
    std::string changes = config_changes(state["config"], to_json(cfg_));
    if (!changes.empty()) log_ << "titan: config changed since that save: " << changes << "\n";
  }
  return step;
}

void CheckpointManager::restore_hf(const fs::path& dir) {
  auto t0 = std::chrono::steady_clock::now();
  checkpoint::HfReader reader(dir);
  const models::TrainSpec& family = hf_family(reader, cfg_.model.name);
  TITAN_CHECK(family.name == cfg_.model.name, "Hugging Face checkpoint ", dir.string(), ": its model_type \"",
              reader.config().value("model_type", ""), "\" is read by model '", family.name,
              "', this run trains model.name = \"", cfg_.model.name, "\"; set --model.name=", family.name);
  // Both sides as the family's flavor and vocabulary, so that what differs can be named. The
  // flavor is checked rather than taken from config.json: the rest of the job (learning rate,
  // batch, parallelism) was written for the flavor the config names.
  const models::ModelConfig theirs = hf_model_config(reader, cfg_.model.name);
  const models::StateDictAdapter& adapter = *family.state_dict_adapter;
  // The expert bias of moe.load_balance_bias is ours alone: no config.json has a key for it, and
  // it starts at zero below, where routing is exactly the checkpoint's.
  models::ModelConfig ours_as_hf = cfg_.model;
  ours_as_hf.moe.load_balance_bias = false;
  const models::ModelConfig ours =
      adapter.from_hf_config(adapter.hf_config(ours_as_hf, models::common::hf::layout_of(reader.config())));
  TITAN_CHECK(theirs.flavor == ours.flavor && theirs.vocab_size == ours.vocab_size,
              "Hugging Face checkpoint ", dir.string(), " holds ", family.name, " flavor ", theirs.flavor,
              " with vocab_size ", theirs.vocab_size, ", but this run builds flavor ", ours.flavor,
              " with vocab_size ", ours.vocab_size, "; to train it, set --model.flavor=", theirs.flavor,
              " --model.vocab_size=", theirs.vocab_size,
              " (and check the rest of the job config suits that size)");
  // A family that ties (qwen3) says so in from_hf_config; llama3 unties on import and says nothing.
  TITAN_CHECK(theirs.weight_tying.value_or(false) == ours.weight_tying.value_or(false),
              "Hugging Face checkpoint ", dir.string(),
              (theirs.weight_tying.value_or(false) ? " ties" : " does not tie"),
              " its output projection to the embedding (tie_word_embeddings), this run ",
              (ours.weight_tying.value_or(false) ? "does" : "does not"),
              "; set --model.weight_tying=", theirs.weight_tying.value_or(false) ? "true" : "false");
  nn::StateDict state = load_hf_state(reader, std::nullopt, cfg_.model.name);
  // Stored in bf16 or f32; the model's parameters have their own dtype.
  for (const auto& [name, t] : parts_.fsdp ? parts_.fsdp->state_dict() : parts_.model.state_dict()) {
    auto it = state.find(name);
    if (it != state.end()) it->second = it->second.to(t.dtype());
  }
  // Buffers that HF holds no tensor for keep this run's initial values; a missing parameter is
  // still an error of the load.
  // (The buffers alone: under FSDP the parameters' handles hold no memory to look at.)
  std::vector<std::string> kept;
  for (const auto& [name, t] : parts_.model.named_buffers(/*persistent_only=*/true)) {
    if (state.count(name)) continue;
    state[name] = t.detach().clone();
    kept.push_back(name);
  }
  if (!kept.empty())
    log_ << "titan: " << kept.size() << " buffers have no tensor in Hugging Face checkpoint " << dir.string()
         << " and keep their initial values (" << kept.front() << (kept.size() > 1 ? ", ..." : "") << ")\n";
  load_whole_model_state(state);
  log_ << "titan: loaded the weights of Hugging Face checkpoint " << dir.string() << " (" << family.name
       << " " << theirs.flavor << ") in " << seconds_since(t0) << " s\n";
}

bool CheckpointManager::due_after(int64_t step, bool stopping) const {
  const auto& c = cfg_.checkpoint;
  if (!c.enable || step == last_saved_) return false;
  return step == cfg_.training.steps || stopping || step % c.interval == 0;
}

bool CheckpointManager::saves_after(int64_t step, bool stopping) const {
  // Under FSDP every rank writes its shards.
  return (writer_ || sharded()) && due_after(step, stopping);
}

void CheckpointManager::after_step(int64_t step, bool stopping) {
  if (saves_after(step, stopping)) save(step, step == cfg_.training.steps && cfg_.checkpoint.last_save_model_only);
}

void CheckpointManager::save(int64_t step, bool model_only) {
  wait();
  auto t0 = std::chrono::steady_clock::now();
  trace::Span span("checkpoint save", "checkpoint");
  span.arg("step", step).arg("model_only", model_only);
  // Only the final save goes to HF's format (the config requires it to be model-only).
  const bool hf = model_only && hf_adapter_;
  // A collective save writes in the foreground: a background thread's collectives would race
  // the training loop's.
  // A Hugging Face export is gathered first and written by rank 0 alone.
  const bool collective = sharded() && world_.size() > 1 && !hf;
  const bool async = cfg_.checkpoint.async_mode != "disabled" && !collective;
  checkpoint::Pieces pieces;
  if (hf && sharded()) {
    // HF's files hold whole tensors: gather them, and rank 0 writes them alone.
    if (parts_.fsdp) parts_.fsdp->unshard_all();
    for (const auto& [name, t] : parts_.model.state_dict()) {
      const bool held = !parts_.pp || parts_.pp->holds(name);
      Tensor whole = t;
      std::optional<parallel::GlobalSlice> sliced;
      for (const parallel::ParameterSlices* plan : parts_.slices)
        if (std::optional<parallel::GlobalSlice> slice = plan->slice_of(name)) {
          sliced = slice;
          dist::ProcessGroup group = plan->slice_group();
          if (held) whole = parallel::all_gather_dim(t, parallel::sliced_dim(t, slice->global_shape), group);
        }
      if (parts_.pp) {
        // From the rank of its stage to the others of the pp group, rank 0 among them.
        if (!held) {
          const std::optional<parallel::GlobalSlice> before = parts_.pp->slice_of(name);
          whole = Tensor::empty(sliced ? sliced->global_shape : before ? before->global_shape : t.sizes(),
                                t.options());
        }
        const int owner = static_cast<int>(parts_.pp->schedule().rank_of_stage(parts_.pp->stage_of(name)));
        parts_.pp->group().broadcast(whole, owner).wait();
      }
      if (writer_)
        pieces.emplace(
            kModel + name,
            checkpoint::whole(Tensor::empty(whole.sizes(), {.dtype = export_dtype_}).copy_(whole)));
    }
    if (parts_.fsdp) parts_.fsdp->reshard_all();
    if (!writer_) {
      last_saved_ = step;
      return;
    }
  } else {
    add_pieces(pieces, kModel, parts_.fsdp ? parts_.fsdp->state_dict() : parts_.model.state_dict(), false,
               true);
    if (!model_only) add_pieces(pieces, kOptimizer, parts_.optimizer.state_dict(), true, true);
    // In the background the tensors must not change under the writer: the next step updates
    // weights and moments in place, so they are copied here. So is a cast to the export dtype.
    for (auto& [name, p] : pieces) {
      const DType dtype = model_only && name.starts_with(kModel) ? export_dtype_ : p.data.dtype();
      if (async || dtype != p.data.dtype() || !p.data.is_contiguous())
        p.data = Tensor::empty(p.data.sizes(), {.dtype = dtype}).copy_(p.data);
    }
  }
  // GRPO draws no batches from a loader: its prompts' order is a function of the step.
  const data::LoaderState position = parts_.loader ? parts_.loader->get_state() : data::LoaderState{};
  json state = {
      {"step", step},
      {"model_only", model_only},
      {"rng", {{"seed", parts_.rng.seed()}, {"offset", parts_.rng.offset()}}},
      {"data",
       {{"epoch", position.epoch}, {"index", position.index}, {"windows", parts_.loader ? parts_.loader->num_windows() : 0}}},
      {"lr_scheduler", {{"step", parts_.scheduler.current_step()}}},
      {"config", to_json(cfg_)}};
  if (collective) state["ranks"] = world_.size();
  double bytes = 0;
  for (const auto& [name, p] : pieces) bytes += static_cast<double>(p.data.nbytes());
  if (collective) bytes = world_.all_reduce(bytes, dist::ReduceOp::sum);
  const fs::path dir = folder_ / step_name(step);
  if (writer_) set_aside_incomplete(dir);
  last_saved_ = step;
  span.arg("bytes", bytes).arg("async", async);
  auto write = [this, dir, step, hf, collective, bytes, pieces = std::move(pieces),
                state = std::move(state)] {
    trace::Span write_span("checkpoint write", "checkpoint");
    write_span.arg("step", step).arg("bytes", bytes).arg("folder", dir.string());
    if (hf) {
      save_hf_model(dir, *hf_adapter_, hf_config_, strip(pieces, kModel), export_dtype_,
                    parts_.tokenizer_dir);
    } else if (collective)
      checkpoint::save_collective(dir, pieces, state, world_);
    else
      checkpoint::save(dir, pieces, state);
    if (writer_) purge(step);
  };
  // The line is written whole once the save is done (or handed to the writer): a write that fails
  // leaves no half line for its error to follow.
  std::ostringstream line;
  line << "titan: checkpoint " << dir.string()
       << (hf           ? " (Hugging Face, "
           : model_only ? " (model only, "
                        : " (")
       << bytes / (1 << 20) << " MiB"
       << (collective ? ", sharded over " + std::to_string(world_.size()) + " ranks)" : ")");
  if (async) {
    pending_ = std::async(std::launch::async, [write = std::move(write)] {
      trace::set_thread_name("checkpoint writer");
      write();
    });
    log_ << line.str() << " copied in " << seconds_since(t0) << " s, writing in the background\n";
  } else {
    write();
    log_ << line.str() << " saved in " << seconds_since(t0) << " s\n";
  }
}

void CheckpointManager::wait() {
  if (!pending_.valid()) return;
  trace::Span span("checkpoint wait", "checkpoint");
  pending_.get();
}

void CheckpointManager::set_aside_incomplete(const fs::path& dir) const {
  std::error_code ec;
  if (!fs::exists(dir, ec) || fs::exists(dir / checkpoint::kMetadataFile, ec) || checkpoint::is_hf_dir(dir))
    return;
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
  fs::path aside = dir;
  aside += std::string(".incomplete-") + stamp;
  fs::rename(dir, aside, ec);
  TITAN_CHECK(!ec, "checkpoint: cannot move ", dir.string(), ", which is no complete checkpoint, aside to ",
              aside.string(), " before saving its step there: ", ec.message(),
              "; move or delete it yourself, then run again");
  log_ << "titan: moved " << dir.string() << " (no complete checkpoint) aside to " << aside.string()
       << " before saving its step there\n";
}

void CheckpointManager::purge(int64_t saved) const {
  const int64_t k = cfg_.checkpoint.keep_latest_k;
  if (k <= 0) return;
  std::map<int64_t, fs::path> found = list(folder_);
  // The one just saved stays even when a resume from an earlier step left newer ones behind.
  int64_t excess = static_cast<int64_t>(found.size()) - k;
  for (auto it = found.begin(); excess > 0 && it != found.end(); ++it) {
    if (it->first == saved) continue;
    // Renamed out of the way first, so that a kill halfway through the deletion leaves no
    // step-<N> that looks complete but lacks files; load() removes the remains.
    const fs::path doomed = checkpoint::staging_dir(it->second);
    std::error_code ec;
    fs::remove_all(doomed, ec);
    if (!ec) fs::rename(it->second, doomed, ec);
    if (!ec) fs::remove_all(doomed, ec);
    TITAN_CHECK(!ec, "checkpoint.keep_latest_k = ", k, ": cannot remove ", it->second.string(), ": ",
                ec.message());
    --excess;
  }
}

}  // namespace titan::train
