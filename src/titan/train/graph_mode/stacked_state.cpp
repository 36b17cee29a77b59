#include "titan/train/graph_mode/stacked_state.h"

#include <map>
#include <optional>

#include "titan/graph/lazy.h"

namespace titan::train {

namespace {

struct LayerName {
  size_t layer = 0;
  std::string rest;  // the kind: "<list>.*.<rest of the name>"
};

// "layers.12.attention.wq.weight" -> {12, "layers.*.attention.wq.weight"}, for a name in one of
// the lists.
std::optional<LayerName> layer_name(const std::string& name, const std::vector<std::string>& lists) {
  for (const std::string& list : lists) {
    const std::string prefix = list + ".";
    if (name.rfind(prefix, 0) != 0) continue;
    const size_t dot = name.find('.', prefix.size());
    if (dot == std::string::npos || dot == prefix.size()) return std::nullopt;
    size_t layer = 0;
    for (size_t c = prefix.size(); c < dot; ++c) {
      if (name[c] < '0' || name[c] > '9') return std::nullopt;
      layer = layer * 10 + static_cast<size_t>(name[c] - '0');
    }
    return LayerName{layer, list + ".*." + name.substr(dot + 1)};
  }
  return std::nullopt;
}

}  // namespace

std::vector<StateSlot> plan_state(const std::vector<std::pair<std::string, Tensor>>& params,
                                  const optim::AdamW& optimizer, bool stack_layers,
                                  const std::vector<std::string>& layer_lists) {
  // Each kind's members by layer; a kind that cannot stack is marked by an empty map.
  std::map<std::string, std::map<size_t, size_t>> kinds;
  if (stack_layers)
    for (size_t m = 0; m < params.size(); ++m)
      if (const std::optional<LayerName> n = layer_name(params[m].first, layer_lists)) kinds[n->rest][n->layer] = m;
  const auto stacks = [&](const std::map<size_t, size_t>& layers) {
    if (layers.size() < 2 || layers.rbegin()->first != layers.size() - 1) return false;
    const auto& [name0, p0] = params[layers.begin()->second];
    for (const auto& [layer, m] : layers) {
      const auto& [name, p] = params[m];
      if (p.sizes() != p0.sizes() || p.dtype() != p0.dtype() ||
          optimizer.decays(name) != optimizer.decays(name0))
        return false;
    }
    return true;
  };
  std::vector<StateSlot> out;
  std::map<std::string, bool> placed;
  for (size_t m = 0; m < params.size(); ++m) {
    const std::optional<LayerName> n = stack_layers ? layer_name(params[m].first, layer_lists) : std::nullopt;
    if (!n || !stacks(kinds[n->rest])) {
      out.push_back(
          {.name = params[m].first, .members = {m}, .stacked = false, .shape = params[m].second.sizes()});
      continue;
    }
    if (placed[n->rest]) continue;
    placed[n->rest] = true;
    StateSlot slot{.name = n->rest, .members = {}, .stacked = true, .shape = {}};
    for (const auto& [layer, member] : kinds[n->rest]) slot.members.push_back(member);
    slot.shape = params[m].second.sizes();
    slot.shape.insert(slot.shape.begin(), static_cast<int64_t>(slot.members.size()));
    out.push_back(std::move(slot));
  }
  return out;
}

Tensor member_of(const StateSlot& slot, const Tensor& buffer, size_t i) {
  if (!slot.stacked) return buffer;
  const Shape row(slot.shape.begin() + 1, slot.shape.end());
  return buffer.narrow(0, static_cast<int64_t>(i), 1).view(row);
}

graph::Value slot_gradient(const StateSlot& slot, const std::vector<std::pair<std::string, Tensor>>& params) {
  std::vector<Tensor> grads;
  for (const size_t m : slot.members) {
    const auto& [name, p] = params[m];
    grads.push_back(p.grad());
    TITAN_CHECK(grads.back().defined() && grads.back().is_lazy(), "graph mode: parameter '", name,
                "' got no gradient in the captured step; graph mode needs every parameter used");
  }
  return slot.stacked ? graph::stack_rows(grads, "AdamW") : graph::value_of(grads[0], "AdamW");
}

}  // namespace titan::train
