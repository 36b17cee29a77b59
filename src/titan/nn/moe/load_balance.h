#pragma once
// The auxiliary load-balancing loss of token-choice routing, Switch Transformer's
// E * sum_e f_e * P_e (f_e: the share of the choices that went to expert e, a count that carries
// no gradient; P_e: expert e's mean score), in one of two scopes:
//  - per_layer: each layer's own loss, f_e over its k choices per token (1 when balanced); the
//    model adds their mean.
//  - global: one loss over the tokens of all layers pooled, as transformers'
//    load_balancing_loss_func (Qwen3MoeForCausalLM, Mixtral): f_e is the choices of expert e
//    over all layers divided by all layers' tokens (so k when balanced), P_e its mean score over
//    the same rows.
// Each layer attaches its part to its output (nn::AuxiliaryLosses), so activation
// checkpointing rebuilds its graph; the global loss's weights, which need every layer's choices,
// are read only after the whole forward.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "titan/nn/auxiliary_loss.h"
#include "titan/nn/moe/router.h"

namespace titan::nn::moe {

enum class LoadBalanceLoss { per_layer, global };

// "per_layer" or "global" ([moe] load_balance_loss); anything else is an error naming both.
LoadBalanceLoss load_balance_loss_from_name(const std::string& name);

// The choices of every MoE layer of one forward pass, by layer; a layer re-run by activation
// checkpointing (or by a layer loop's backward) keeps its first report.
struct PooledChoices {
  std::map<int64_t, Tensor> tokens_per_expert;  // [experts] i64
  std::map<int64_t, int64_t> tokens;
  // Every layer's choices summed, by the first weighing (total(), once every layer has reported)
  // for all the layers' terms: one sum rather than one per layer (a captured step's ops).
  Tensor summed = {};
};

// Layer `layer`'s per-layer loss, counted with `weight`.
Tensor attach_per_layer_loss(const Tensor& out, const Routing& routing, int64_t layer, double weight,
                             nn::AuxiliaryLosses& losses);

// Layer `layer`'s share of the global loss, counted with `weight`: its choices go into `pooled`,
// and its scores summed over its tokens are weighted by weight * E * C_e / N^2 (C_e: expert e's
// choices, N: the tokens, both over all layers in `pooled`), which the global loss is linear in.
Tensor attach_global_loss(const Tensor& out, const Routing& routing, int64_t layer, double weight,
                          const std::shared_ptr<PooledChoices>& pooled, nn::AuxiliaryLosses& losses);

// For a layer loop (autograd/scan.h), which runs one layer's code inside its body for every layer:
// take_loss removes what attach_*_loss reported for `layer` (values of the body: its term and, for
// the global loss, its choices and a host scalar of its tokens); count_loss counts layer `layer`'s
// (rows of the loop's stacks, in the same order) as attach_*_loss would have, without sending a
// gradient, which reaches the term through attach in the backward's writing of the layer.
std::vector<Tensor> take_loss(LoadBalanceLoss scope, int64_t layer,
                              const std::shared_ptr<PooledChoices>& pooled, nn::AuxiliaryLosses& losses);
void count_loss(LoadBalanceLoss scope, const std::vector<Tensor>& taken, int64_t layer, double weight,
                const std::shared_ptr<PooledChoices>& pooled, nn::AuxiliaryLosses& losses);

}  // namespace titan::nn::moe
