#include "titan/train/graph_mode/graph_moe.h"

namespace titan::train {

GraphMoeLayout::GraphMoeLayout(nn::Module& model, bool custom_kernels) {
  bool dropless = false;
  for (const auto& [name, m] : model.named_modules())
    if (auto* moe = dynamic_cast<nn::moe::MoE*>(m);
        moe && dynamic_cast<nn::moe::LocalTokenDispatcher*>(moe->dispatcher.get())) {
      dropless = true;
      if (custom_kernels) continue;
      swapped_.emplace_back(moe, moe->dispatcher);
      moe->dispatcher = std::make_shared<nn::moe::CapacityTokenDispatcher>(0.0);
    }
  if (dropless)
    note_ = std::string("graph mode's MoE layers: ") +
            (custom_kernels ? "dropless, tokens sorted by expert into titan's grouped GEMM (custom calls)"
                            : "room for every token in every expert, without custom kernels (experts / top_k times "
                              "the dropless layer's expert products)");
}

GraphMoeLayout::~GraphMoeLayout() {
  for (auto& [moe, dispatcher] : swapped_) moe->dispatcher = std::move(dispatcher);
}

}  // namespace titan::train
