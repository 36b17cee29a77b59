#include "titan/train/memory_plan.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <ostream>
#include <sstream>

#include "titan/core/config_schema.h"
#include "titan/core/error.h"
#include "titan/models/common/decoder.h"
#include "titan/nn/moe/moe.h"
#include "titan/optim/adamw.h"

namespace titan::train {

namespace {

constexpr double kGiB = 1.0 / (1 << 30);
constexpr int64_t kActivationBytes = 4;  // activations, norms and losses stay float32 (core/autocast.h)

// The experts a token goes through in `block`: its MoE router's k; 1 without experts.
int64_t top_k_of(nn::Module& block) {
  for (const auto& [name, m] : block.named_modules())
    if (const auto* moe = dynamic_cast<const nn::moe::MoE*>(m)) return moe->router->top_k();
  return 1;
}

// What a block keeps for backward per token, read off its parameters' local shapes (tensor
// parallelism's slices; a block outside this rank's pipeline stages has none):
//   a matrix [out, in]            a product: keeps its input (in x the operand's bytes: 2 for bf16
//                                 products, which keep bf16 copies, else 4) for the weight
//                                 gradient, and its output (out x 4), which the op after it
//                                 (attention, SwiGLU, RoPE) keeps
//   stacked experts [E, out, in]  the same for each of the top_k experts a token goes through
//   a vector [n]                  a norm: keeps its input (n x 4)
// `products_only` (selective per-op checkpointing) keeps the products' outputs alone.
struct BlockSaves {
  int64_t per_token = 0;
  int64_t param_bytes = 0;
};
BlockSaves block_saves(nn::Module& block, int64_t operand_bytes, bool products_only) {
  const int64_t top_k = top_k_of(block);
  BlockSaves s;
  for (const auto& [name, p] : block.named_parameters()) {
    s.param_bytes += static_cast<int64_t>(p.nbytes());
    if (p.numel() == 0) continue;
    const int64_t in = p.size(p.dim() - 1);
    if (p.dim() == 1) {
      if (!products_only) s.per_token += in * kActivationBytes;
      continue;
    }
    const int64_t out = p.size(p.dim() - 2);
    const int64_t saved = out * kActivationBytes + (products_only ? 0 : in * operand_bytes);
    s.per_token += (p.dim() == 3 ? top_k : 1) * saved;
  }
  return s;
}

// The output projection (or the tied embedding) on this rank: [vocab slice, dim]; empty where
// another pipeline stage holds it.
Tensor head_weight(models::common::DecoderBase& decoder) {
  return decoder.output ? decoder.output->weight : decoder.tok_embeddings->weight;
}

// The step's activations. Per micro-batch forward of T tokens (sequences x tokens per sequence):
//   every block of this rank        T x block_saves(block)
//   a checkpointed block instead    T x hidden x 4 (its input), plus, once, T x block_saves of the
//                                   largest block while backward recomputes it
//   the head (last stage)           T x (dim x 4 + dim x operand bytes + 2 x vocab slice x 4): the
//                                   final norm's input, the product's, the logits the loss keeps
//                                   and their gradient
// Checkpointed blocks: all under "full", every k-th under "selective" k; under "selective" "op"
// (graph mode's layer loop) every block keeps its products' outputs only. A pipeline rank holds
// peak_in_flight (micro-batch, stage) units at once, a unit being its layers over the stages it
// runs. Gradients of activations in flight and the kernels' scratch are left out; the test
// (tests/unit/test_memory_plan.cpp) holds the whole plan within 30% of a measured step's peak.
int64_t activation_bytes(const MemoryPlanInputs& in) {
  if (in.activation_bytes) return *in.activation_bytes;
  auto* decoder = dynamic_cast<models::common::DecoderBase*>(&in.model);
  TITAN_CHECK(decoder != nullptr, "memory plan: the model is not a decoder (models/common/decoder.h); its ",
              "activations cannot be estimated");
  const int64_t operand_bytes = in.matmul_dtype == kBF16 ? 2 : 4;
  const int64_t hidden = decoder->hidden_size();
  const parallel::ActivationCheckpointConfig& ac = in.checkpointing;
  const int64_t every_k = ac.mode == "none" || ac.per_op() ? 0 : ac.every_k();
  int64_t per_token = 0, largest_checkpointed = 0, local = 0;
  for (const auto& [name, block] : decoder->blocks().named_children()) {
    const BlockSaves s = block_saves(*block, operand_bytes, ac.per_op());
    if (s.param_bytes == 0) continue;             // another pipeline stage's
    if (every_k > 0 && ++local % every_k == 0) {  // the k-th, 2k-th, ... as apply_activation_checkpointing
      per_token += hidden * kActivationBytes;
      largest_checkpointed = std::max(largest_checkpointed, s.per_token);
    } else {
      per_token += s.per_token;
    }
  }
  per_token += largest_checkpointed;
  const Tensor head = head_weight(*decoder);
  if (head.numel() > 0)
    per_token += hidden * operand_bytes + 2 * head.size(0) * kActivationBytes + hidden * kActivationBytes;
  int64_t bytes = per_token * in.sequences_per_forward * in.tokens_per_sequence;
  if (in.pp) {
    const parallel::PipelineSchedule& s = in.pp->schedule();
    bytes = bytes * parallel::peak_in_flight(s).at(static_cast<size_t>(in.pp_rank)) / s.stages_per_rank;
  }
  return bytes;
}

// "1.25 GiB", "312.4 MiB": three significant figures or so.
std::string gib(int64_t bytes) {
  const bool small = bytes < (int64_t{1} << 30);
  const double value = small ? static_cast<double>(bytes) / (1 << 20) : static_cast<double>(bytes) * kGiB;
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(value < 10 ? 2 : 1);
  os << value << (small ? " MiB" : " GiB");
  return os.str();
}

// A number from a file holding one (a cgroup limit); nullopt for "max", no file or no number.
std::optional<int64_t> read_limit(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return std::nullopt;
  try {
    return std::stoll(word);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// This process's cgroup memory limit: v2's memory.max, else v1's memory.limit_in_bytes (whose
// "no limit" is a number near 2^63), looked for at the process's cgroup path and at the root.
std::optional<int64_t> cgroup_limit() {
  std::ifstream groups("/proc/self/cgroup");
  std::string line, v2_path, v1_path;
  while (std::getline(groups, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) v2_path = path;
    if (("," + controllers + ",").find(",memory,") != std::string::npos) v1_path = path;
  }
  std::optional<int64_t> limit;
  auto take = [&](const std::string& file) {
    const std::optional<int64_t> l = read_limit(file);
    if (l && *l > 0 && *l < (int64_t{1} << 60)) limit = limit ? std::min(*limit, *l) : *l;
  };
  for (const std::string& dir : {"/sys/fs/cgroup" + v2_path, std::string("/sys/fs/cgroup")})
    take(dir + "/memory.max");
  for (const std::string& dir : {"/sys/fs/cgroup/memory" + v1_path, std::string("/sys/fs/cgroup/memory")})
    take(dir + "/memory.limit_in_bytes");
  return limit;
}

}  // namespace

int64_t bytes_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  int64_t bytes = 0;
  for (const auto& [name, t] : named) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

int64_t fsdp_gathered_at_most(int64_t whole, std::vector<int64_t> blocks) {
  std::sort(blocks.rbegin(), blocks.rend());
  int64_t most = whole;
  for (int64_t b : blocks) most -= b;
  for (size_t i = 0; i < std::min<size_t>(2, blocks.size()); ++i) most += blocks[i];
  return most;
}

MemoryPlan plan_memory(const MemoryPlanInputs& in) {
  MemoryPlan plan;
  plan.scope = in.scope;
  // What the plans left this rank's handles (tp/ep/pp slices), before FSDP shards them.
  const int64_t local = bytes_of(in.model.named_parameters());
  plan.param_bytes = bytes_of(in.optimized);
  plan.optimizer_bytes = optim::AdamW::state_bytes(in.optimized);
  // The parameters a step computes with at once: the root (everything outside the blocks: FSDP's
  // root unit, gathered all step), the block computing and the next (FSDP's prefetch).
  std::vector<int64_t> blocks;
  if (auto* decoder = dynamic_cast<models::common::DecoderBase*>(&in.model))
    for (const auto& [name, block] : decoder->blocks().named_children())
      blocks.push_back(bytes_of(block->named_parameters()));
  for (const nn::Module* block : in.blocks) blocks.push_back(bytes_of(block->named_parameters()));
  const int64_t two_units = fsdp_gathered_at_most(local, blocks);
  const bool checkpointed = in.checkpointing.mode != "none";
  if (in.fsdp) {
    plan.gathered_bytes = in.reshard_after_forward ? two_units : local;
    // Whole gradients wait for their reduce-scatter across the micro-batches of gradient
    // accumulation and across a pipeline's; otherwise each unit's go as soon as they are complete
    // (under activation checkpointing too: fully_shard.h), two units at most at once.
    const bool held = in.micro_batches > 1 || in.pp;
    plan.grad_bytes = plan.param_bytes + (held ? local : two_units);
  } else {
    plan.grad_bytes = local;
  }
  if (in.ddp) plan.bucket_bytes = local;
  // Without FSDP too, gradients accumulate whole across the micro-batches.
  if (in.micro_batches > 1) plan.held_grad_bytes = local;
  // bf16 products keep a bf16 copy of each weight they read for backward: of every weight, or,
  // with checkpointed blocks, of those computing.
  if (in.matmul_dtype == kBF16) plan.gathered_bytes += (checkpointed ? two_units : local) / 2;
  plan.activation_bytes = activation_bytes(in);
  plan.frozen = in.frozen;
  return plan;
}

void log_memory_plan(const MemoryPlan& p, std::ostream& log) {
  log << "titan: memory plan (" << p.scope << "): step peak " << gib(p.peak_bytes()) << " = parameters "
      << gib(p.param_bytes) << " + gathered for compute " << gib(p.gathered_bytes) << " + AdamW moments "
      << gib(p.optimizer_bytes);
  if (p.bucket_bytes > 0) log << " + DDP's gradient buckets " << gib(p.bucket_bytes);
  log << " + the larger of gradients " << gib(p.grad_bytes) << " and activations " << gib(p.activation_bytes)
      << " (estimate)";
  if (p.held_grad_bytes > 0) log << " with earlier micro-batches' gradients " << gib(p.held_grad_bytes);
  if (p.frozen.kept > 0) log << " + frozen models " << gib(p.frozen.kept);
  if (p.frozen.kept > 0) log << " (running: gathered " << gib(p.frozen.gathered) << ", activations " << gib(p.frozen.activations) << ")";
  log << "; start-up " << gib(p.startup_bytes()) << "\n" << std::flush;
}

AvailableMemory available_memory() {
  AvailableMemory a;
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") {
      a.bytes = kib * 1024;
      a.source = "MemAvailable of /proc/meminfo";
    }
  if (const std::optional<int64_t> limit = cgroup_limit(); limit && (a.bytes == 0 || *limit < a.bytes)) {
    a.bytes = *limit;
    a.source = "this process's cgroup memory limit";
  }
  // The ranks a launcher started on this node share its memory (Open MPI's and MPICH's counts).
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const char* value = std::getenv(name)) {
      const int64_t ranks = std::atoll(value);
      if (ranks > 1) {
        a.bytes /= ranks;
        a.source += ", shared by the " + std::to_string(ranks) + " ranks of this node";
      }
      break;
    }
  return a;
}

void check_memory_plan(const MemoryPlan& plan, const AvailableMemory& available,
                       const std::string& memory_check, std::ostream& log,
                       const std::function<void(const std::string&)>& warn) {
  // "mem <figure>": how every log names a figure that varies from run to run.
  log << "titan: memory check (training.memory_check = \"" << memory_check << "\"): peak "
      << gib(plan.peak_bytes()) << " of mem " << (available.bytes > 0 ? gib(available.bytes) : "unknown")
      << " available (" << (available.bytes > 0 ? available.source : "no /proc/meminfo: not checked") << ")\n"
      << std::flush;
  if (available.bytes == 0 || plan.peak_bytes() <= available.bytes) return;
  const std::string what =
      "this rank needs about " + gib(plan.peak_bytes()) + " (" + plan.scope + ": parameters " +
      gib(plan.param_bytes) + ", gathered " + gib(plan.gathered_bytes) + ", gradients " +
      gib(plan.grad_bytes) + ", AdamW moments " + gib(plan.optimizer_bytes) +
      (plan.bucket_bytes > 0 ? ", DDP's buckets " + gib(plan.bucket_bytes) : "") +
      (plan.frozen.kept > 0 ? ", frozen models " + gib(plan.frozen.kept) + " (running: gathered " +
                                  gib(plan.frozen.gathered) + ", activations " + gib(plan.frozen.activations) + ")"
                             : "") +
      ", activations " +
      gib(plan.activation_bytes) + " estimated) but " + gib(available.bytes) + " are available (" +
      available.source +
      "); spread the model over more ranks with FSDP (parallelism.data_parallel_shard_degree), turn on "
      "activation checkpointing (activation_checkpoint.mode = \"full\"), or lower training.local_batch_size "
      "or "
      "training.seq_len";
  config::require(memory_check != "refuse", "training.memory_check = \"refuse\": ", what,
                  "; training.memory_check = \"warn\" goes ahead anyway");
  warn("training.memory_check = \"warn\": " + what + "; going ahead");
}

}  // namespace titan::train
