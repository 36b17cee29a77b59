#include "titan/train/layout_checks.h"

#include <string>
#include <utility>
#include <vector>

#include "titan/core/error.h"
#include "titan/kernels/cpu/onednn_matmul.h"
#include "titan/train/graph_mode/graph_step.h"
#include "titan/train/metrics/peak_flops.h"

namespace titan::train {

using dist::MeshAxis;

void refuse_unsupported(const JobConfig& c, const dist::MeshDegrees& degrees) {
  std::vector<std::string> refused;
  // Graph mode's bf16 products are XLA's, which it runs on any CPU.
  if (c.training.mixed_precision_param == "bfloat16" && !c.compile.graph() && kernels::cpu::onednn_bf16_isa().empty())
    refused.push_back("training.mixed_precision_param = \"bfloat16\": this CPU (" + cpu_model_name() +
                      ") has neither AMX-BF16 nor AVX512-BF16, or ONEDNN_MAX_CPU_ISA keeps oneDNN from them, "
                      "and titan does not emulate bf16 products on float32 instructions (slower than float32 "
                      "itself); set it to \"float32\", or run on a CPU with them (Intel Sapphire Rapids or "
                      "later, AMD Zen 4 or later)");
  if (c.compile.graph())
    for (const auto& [key, degree] : std::vector<std::pair<std::string, int64_t>>{
             {"context_parallel_degree", degrees.cp}, {"pipeline_parallel_degree", degrees.pp},
             {"expert_parallel_degree", degrees.ep}})
      if (degree > 1)
        refused.push_back("parallelism." + key + " = " + std::to_string(degree) +
                          " with compile.enable = true: graph mode splits its step over data-parallel (replicate, "
                          "shard) and tensor-parallel degrees only; set the degree to 1 or compile.enable = false");
  // What graph mode's layer loop (scan_saves_for) or the eager wrappers (every_k) cannot do, in
  // their own words.
  const auto& ac = c.activation_checkpoint;
  try {
    if (c.compile.graph() && c.compile.scan_layers) scan_saves_for(ac);
    else ac.every_k();
  } catch (const Error& e) {
    refused.push_back(e.what());
  }
  std::string message = "this job config asks for what titan cannot do yet:";
  for (const std::string& r : refused) message += "\n  " + r;
  if (!refused.empty()) throw Error(message);
}

void check_model_layout(const JobConfig& c, const dist::ParallelDims& dims, const models::TrainSpec& spec,
                        const models::ModelSummary& summary) {
  const std::string model = c.model.name + "/" + c.model.flavor;
  if (const int64_t cp = dims.degree(MeshAxis::cp); cp > 1) {
    config::require(
        c.model.attention == "splash", "model.attention = \"", c.model.attention,
        "\" with parallelism.context_parallel_degree = ", cp,
        ": context parallelism runs ring attention over splash attention's tiles; set it to \"splash\"");
    config::require(
        !c.validation.enable, "validation.enable = true with parallelism.context_parallel_degree = ", cp,
        ": validation does not split its sequences over cp ranks yet; set it to false, or validate in a "
        "run without context parallelism");
  }
  if (const int64_t tp = dims.degree(MeshAxis::tp); tp > 1) {
    // Every split that fails, in either mode, before anything is built.
    std::string uneven;
    if (summary.n_heads % tp != 0 || summary.n_kv_heads % tp != 0)
      uneven += "\n  its " + std::to_string(summary.n_heads) + " query and " + std::to_string(summary.n_kv_heads) +
                " key/value heads do not split into " + std::to_string(tp) +
                " equal parts (titan does not replicate key/value heads across tp ranks)";
    if (summary.ffn_hidden_dim % tp != 0)
      uneven += "\n  its feed-forward hidden size " + std::to_string(summary.ffn_hidden_dim) +
                " does not split into " + std::to_string(tp) + " equal parts";
    if (summary.vocab_size % tp != 0)
      uneven += "\n  its vocabulary of " + std::to_string(summary.vocab_size) + " (tok_embeddings.weight: dim 0 of size " +
                std::to_string(summary.vocab_size) + " does not split into " + std::to_string(tp) +
                " equal parts; model.vocab_size can round it up to a multiple)";
    config::require(uneven.empty(), "parallelism.tensor_parallel_degree = ", tp, ": model ", model,
                    " cannot be split evenly:", uneven, "\nchoose a degree that divides them");
    config::require(!c.compile.graph() || static_cast<bool>(spec.plan_tp), "parallelism.tensor_parallel_degree = ",
                    tp, " with compile.enable = true: model ", c.model.name,
                    " has no tensor-parallel plan; set it to 1");
  }
  if (const int64_t ep = dims.degree(MeshAxis::ep); ep > 1) {
    config::require(summary.num_experts > 0, "parallelism.expert_parallel_degree = ", ep, ": model ", model,
                    " has no MoE layers whose experts could be split; set it to 1");
    config::require(summary.num_experts % ep == 0, "parallelism.expert_parallel_degree = ", ep, ": model ", model,
                    " has ", summary.num_experts, " experts per MoE layer (moe.num_experts), which do not split into ",
                    ep, " equal parts; choose a degree that divides it");
    for (const auto& [axis, key] : {std::pair<MeshAxis, const char*>{MeshAxis::tp, "tensor_parallel_degree"},
                                    {MeshAxis::cp, "context_parallel_degree"}})
      config::require(dims.degree(axis) == 1, "parallelism.expert_parallel_degree = ", ep, " with parallelism.", key,
                      " = ", dims.degree(axis), " is not supported yet; set one of them to 1");
    config::require(c.model.moe.capacity_factor == 0, "moe.capacity_factor = ", c.model.moe.capacity_factor,
                    " with parallelism.expert_parallel_degree = ", ep,
                    ": the all-to-all dispatcher has no capacity yet; set capacity_factor = 0");
  }
  if (const int64_t pp = dims.degree(MeshAxis::pp); pp > 1) {
    const std::string key = "parallelism.pipeline_parallel_degree = " + std::to_string(pp);
    config::require(dims.degree(MeshAxis::cp) == 1, key, " with parallelism.context_parallel_degree = ",
                    dims.degree(MeshAxis::cp), " is not supported yet; use one of them");
    config::require(!c.validation.enable, key, " with validation.enable = true is not supported yet: ",
                    "validation runs the whole model on every rank; set it to false");
    const bool zero_bubble = c.parallelism.pipeline_parallel_schedule.starts_with("ZB");
    config::require(!zero_bubble || dims.degree(MeshAxis::dp_shard) == 1, key, " with schedule \"",
                    c.parallelism.pipeline_parallel_schedule, "\" and parallelism.data_parallel_shard_degree = ",
                    dims.degree(MeshAxis::dp_shard),
                    ": FSDP frees a block's gathered weights after its backward, before the weight gradients a "
                    "zero-bubble schedule defers; use 1F1B or Interleaved1F1B with FSDP, or data_parallel_replicate_degree");
  }
  // Eager mode applies these plans through the family's parallelize(); graph mode shards by
  // annotations, which need no plan but tensor parallelism's (above).
  if (!c.compile.graph())
    for (const auto& [axis, key] : {std::pair<MeshAxis, const char*>{MeshAxis::tp, "tensor_parallel_degree"},
                                    {MeshAxis::cp, "context_parallel_degree"},
                                    {MeshAxis::pp, "pipeline_parallel_degree"},
                                    {MeshAxis::dp_shard, "data_parallel_shard_degree"}})
      config::require(spec.parallelize || dims.degree(axis) == 1, "parallelism.", key, " = ", dims.degree(axis),
                      ": model ", c.model.name, " has no ", axis == MeshAxis::dp_shard ? "FSDP plan" : "plan for it",
                      "; set it to 1");
}

}  // namespace titan::train
