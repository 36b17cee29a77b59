#pragma once
// How graph mode runs a model's dropless MoE layers: their group sizes are data of the program,
// which only titan's grouped GEMM takes (a custom call). Without custom kernels every expert
// computes on room for every token: static shapes at experts / top_k times the dropless layer's
// expert products. The trainer and graph mode's generator choose alike.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "titan/nn/moe/moe.h"

namespace titan::train {

// For as long as it lives, gives `model`'s dropless MoE layers the capacity dispatcher when
// `custom_kernels` is off; then gives them their own back, so that the model runs eagerly as
// before (a generator captures under one, then the caller's eager forwards are dropless again).
class GraphMoeLayout {
 public:
  GraphMoeLayout(nn::Module& model, bool custom_kernels);
  ~GraphMoeLayout();
  GraphMoeLayout(const GraphMoeLayout&) = delete;
  GraphMoeLayout& operator=(const GraphMoeLayout&) = delete;
  // The start-up log's line about the layout, or nothing for a model without such layers.
  const std::optional<std::string>& note() const { return note_; }

 private:
  std::vector<std::pair<nn::moe::MoE*, std::shared_ptr<nn::moe::TokenDispatcher>>> swapped_;
  std::optional<std::string> note_;
};

}  // namespace titan::train
