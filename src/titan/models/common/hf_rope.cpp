#include "titan/models/common/hf_rope.h"

#include <iterator>
#include <set>
#include <vector>

#include "titan/core/config_schema.h"

namespace titan::models::common::hf {

using json = nlohmann::json;

namespace {

// The keys each rope_type reads besides partial_rotary_factor (transformers' _validate_*_rope_parameters).
const std::set<std::string>& keys_of(const std::string& type) {
  static const std::set<std::string> none, factor{"factor"},
      yarn{"factor",           "original_max_position_embeddings",
           "attention_factor", "beta_fast",
           "beta_slow",        "mscale",
           "mscale_all_dim",   "truncate"},
      longrope{"short_factor", "long_factor", "original_max_position_embeddings", "attention_factor",
               "factor"},
      llama3{"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
  if (type == "linear" || type == "dynamic") return factor;
  if (type == "yarn") return yarn;
  if (type == "longrope") return longrope;
  if (type == "llama3") return llama3;
  return none;
}

class Reader {
 public:
  Reader(const Rope& rope, const RopeModelFields& model)
      : rope_(rope), model_(model), f_(rope.parameters, model.architecture, rope.where + ".") {}

  std::string key(const std::string& k) const { return rope_.where + "." + k; }

  double positive(const std::string& k, std::optional<double> fallback = std::nullopt) const {
    const double v = f_.number(k, fallback);
    config::require(v > 0, "config.json: \"", key(k), "\" must be positive, got ", v);
    return v;
  }

  // standardize_rope_params: the top-level value first, then the RoPE object's, then
  // max_position_embeddings.
  int64_t original_max_position() const {
    if (model_.original_max_position_embeddings) {
      config::require(*model_.original_max_position_embeddings > 0,
                      "config.json: \"original_max_position_embeddings\" must be positive, got ",
                      *model_.original_max_position_embeddings);
      return *model_.original_max_position_embeddings;
    }
    const int64_t v = f_.integer("original_max_position_embeddings", model_.max_position_embeddings);
    config::require(v > 0, "config.json: \"", key("original_max_position_embeddings"),
                    "\" must be positive, got ", v);
    return v;
  }

  // One positive number per rotated pair.
  std::vector<double> factors(const std::string& k, int64_t pairs) const {
    const json* v = f_.find(k);
    config::require(v != nullptr, "config.json: \"", key(k), "\" is missing; rope_type \"", rope_.type,
                    "\" needs it");
    bool ok = v->is_array() && std::ssize(*v) == pairs;
    for (size_t i = 0; ok && i < v->size(); ++i) ok = (*v)[i].is_number() && (*v)[i].get<double>() > 0;
    config::require(ok, "config.json: \"", key(k), "\" must be a list of ", pairs,
                    " positive numbers (one per rotated pair of dims), got ", v->dump());
    return v->get<std::vector<double>>();
  }

  const ConfigFields& fields() const { return f_; }

 private:
  const Rope& rope_;
  const RopeModelFields& model_;
  ConfigFields f_;
};

int64_t rotary_dim(const RopeModelFields& model, const Reader& r) {
  const bool own = r.fields().find("partial_rotary_factor") != nullptr;
  const std::string name = own ? r.key("partial_rotary_factor") : "partial_rotary_factor";
  const double f =
      own ? r.fields().number("partial_rotary_factor") : model.partial_rotary_factor.value_or(1.0);
  config::require(f > 0 && f <= 1, "config.json: \"", name, "\" must be in (0, 1], got ", f);
  // Python's int(): truncated, as transformers computes the width.
  const auto dim = static_cast<int64_t>(static_cast<double>(model.head_dim) * f);
  config::require(dim > 0 && dim % 2 == 0, "config.json: \"", name, "\" ", f, " of head_dim ", model.head_dim,
                  " rotates ", dim, " dims; titan rotates a positive, even number of dims (pairs)");
  return dim;
}

}  // namespace

ops::RopeSpec rope_spec(const Rope& rope, const RopeModelFields& model) {
  config::require(model.head_dim > 0 && model.max_position_embeddings > 0,
                  "config.json: RoPE needs a positive head_dim and max_position_embeddings, got head_dim ",
                  model.head_dim, " and max_position_embeddings ", model.max_position_embeddings);
  config::require(rope.theta > 0, "config.json: \"rope_theta\" must be positive, got ", rope.theta);
  static const std::set<std::string> kTypes{"default", "linear", "dynamic", "yarn", "longrope", "llama3"};
  config::require(kTypes.contains(rope.type), "config.json: \"", rope.type_key, "\" is \"", rope.type,
                  "\"; titan reads the rope types default, linear, dynamic, yarn, longrope and llama3");
  const std::set<std::string>& known = keys_of(rope.type);
  for (const auto& [k, v] : rope.parameters.items())
    config::require(k == "partial_rotary_factor" || known.contains(k), "config.json: \"", rope.where, ".", k,
                    "\" (", v.dump(), ") is not read for rope_type \"", rope.type, "\", which reads ",
                    known.empty() ? std::string("only partial_rotary_factor")
                                  : json(known).dump() + " and partial_rotary_factor",
                    "; titan refuses keys it would ignore");

  const Reader r(rope, model);
  ops::RopeSpec spec{.head_dim = model.head_dim, .rotary_dim = rotary_dim(model, r), .theta = rope.theta};
  const double mpe = static_cast<double>(model.max_position_embeddings);
  if (rope.type == "linear") {
    spec.scaling = ops::RopeLinear{.factor = r.positive("factor")};
  } else if (rope.type == "dynamic") {
    spec.scaling = ops::RopeDynamic{.factor = r.positive("factor"),
                                    .max_position_embeddings = model.max_position_embeddings};
  } else if (rope.type == "yarn") {
    ops::RopeYarn s;
    s.original_max_position = r.original_max_position();
    // A key transformers requires, whose null means max_position_embeddings over the original.
    config::require(rope.parameters.contains("factor"), "config.json: \"", r.key("factor"),
                    "\" is missing; rope_type \"yarn\" needs it (null: max_position_embeddings / "
                    "original_max_position_embeddings)");
    s.factor = r.positive("factor", mpe / static_cast<double>(s.original_max_position));
    // transformers takes `beta_fast or 32`: a 0 means the default too.
    s.beta_fast = r.fields().number("beta_fast", 32.0);
    s.beta_slow = r.fields().number("beta_slow", 1.0);
    if (s.beta_fast == 0) s.beta_fast = 32.0;
    if (s.beta_slow == 0) s.beta_slow = 1.0;
    config::require(s.beta_fast > 0 && s.beta_slow > 0, "config.json: \"", r.key("beta_fast"), "\" (",
                    s.beta_fast, ") and \"", r.key("beta_slow"), "\" (", s.beta_slow, ") must be positive");
    s.truncate = r.fields().boolean("truncate", true);
    if (r.fields().find("attention_factor")) s.attention_factor = r.positive("attention_factor");
    s.mscale = r.fields().number("mscale", 0.0);
    s.mscale_all_dim = r.fields().number("mscale_all_dim", 0.0);
    spec.scaling = s;
  } else if (rope.type == "longrope") {
    ops::RopeLongrope s;
    s.original_max_position = r.original_max_position();
    s.short_factor = r.factors("short_factor", spec.rotary_dim / 2);
    s.long_factor = r.factors("long_factor", spec.rotary_dim / 2);
    s.factor = r.positive("factor", mpe / static_cast<double>(s.original_max_position));
    if (r.fields().find("attention_factor")) s.attention_factor = r.positive("attention_factor");
    spec.scaling = s;
  } else if (rope.type == "llama3") {
    ops::RopeScaling s{.factor = r.positive("factor"),
                       .low_freq_factor = r.positive("low_freq_factor"),
                       .high_freq_factor = r.positive("high_freq_factor"),
                       .original_max_position = r.original_max_position()};
    config::require(s.high_freq_factor > s.low_freq_factor, "config.json: \"", r.key("high_freq_factor"),
                    "\" (", s.high_freq_factor, ") must be greater than \"", r.key("low_freq_factor"), "\" (",
                    s.low_freq_factor, ")");
    spec.scaling = s;
  }
  return spec;
}

}  // namespace titan::models::common::hf
