#include "titan/parallel/activation_checkpoint_config.h"

#include <charconv>

#include "titan/core/error.h"

namespace titan::parallel {

int64_t ActivationCheckpointConfig::every_k() const {
  if (mode != "selective") return 1;
  const std::string& opt = selective_ac_option;
  TITAN_CHECK(!per_op(), "activation_checkpoint.selective_ac_option = \"op\" keeps results op by op, which only ",
              "graph mode's layer loop does (compile.enable = true, compile.scan_layers = true); here use a layer ",
              "interval such as \"2\" (every 2nd layer) or mode = \"full\"");
  int64_t k = 0;
  auto [end, ec] = std::from_chars(opt.data(), opt.data() + opt.size(), k);
  TITAN_CHECK(ec == std::errc() && end == opt.data() + opt.size() && k >= 1,
              "activation_checkpoint.selective_ac_option = ", config::format_value(opt),
              ": must be a positive integer k, as a string (\"2\": checkpoint every 2nd layer)");
  return k;
}

void declare_keys(config::Keys<ActivationCheckpointConfig>& keys) {
  using C = ActivationCheckpointConfig;
  keys.add("mode", &C::mode, config::one_of({"none", "selective", "full"}),
           "none, every layer (full), or every k-th layer (selective)")
      .add("selective_ac_option", &C::selective_ac_option, config::non_empty(),
           "with mode = \"selective\": k as a string, e.g. \"2\" checkpoints every 2nd layer; \"op\" (graph mode's "
           "layer loop only) keeps matrix products and attention, recomputing the rest")
      .check([](const C& ac, config::Problems& problems) {
        if (!ac.per_op()) problems.capture("", [&] { ac.every_k(); });
        if (ac.mode != "selective" && ac.selective_ac_option != C{}.selective_ac_option)
          problems.add("activation_checkpoint.selective_ac_option = " + config::format_value(ac.selective_ac_option) +
                       " applies to mode = \"selective\", and mode is " + config::format_value(ac.mode) +
                       "; set mode = \"selective\", or drop selective_ac_option");
      });
}

}  // namespace titan::parallel
