#include "titan/models/common/hf_config.h"

#include <utility>

#include "titan/core/config_schema.h"
#include "titan/core/error.h"

namespace titan::models::common::hf {

using json = nlohmann::json;

namespace {

bool has(const json& config, const std::string& key) {
  auto it = config.find(key);
  return it != config.end() && !it->is_null();
}

// A RoPE object's scaling fields: all but its theta and kind.
json scaling_fields(const json& object) {
  json out = json::object();
  for (const auto& [key, value] : object.items())
    if (key != "rope_theta" && key != "rope_type" && key != "type") out[key] = value;
  return out;
}

// A value of `object` for an error message; `fallback` tells what an absent one means.
std::string shown(const json* object, const std::string& key, const std::string& fallback) {
  if (object && object->contains(key)) return (*object)[key].dump();
  return fallback.empty() ? "absent" : "absent, so " + fallback;
}

std::string joined(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : separator) + s;
  return out;
}

}  // namespace

const char* layout_name(ConfigLayout layout) {
  return layout == ConfigLayout::transformers4 ? "transformers4" : "transformers5";
}

ConfigLayout parse_layout(const std::string& name, const std::string& option) {
  for (ConfigLayout layout : {ConfigLayout::transformers4, ConfigLayout::transformers5})
    if (name == layout_name(layout)) return layout;
  config::require(
      false, option, " is \"", name,
      "\"; expected \"transformers5\" (config.json as transformers 5 writes it: rope_parameters, dtype, "
      "num_local_experts) or \"transformers4\" (rope_theta, rope_scaling, torch_dtype, num_experts: for "
      "transformers 4.x, which ignores rope_parameters)");
  return ConfigLayout::transformers5;
}

ConfigLayout layout_of(const json& config) {
  if (has(config, "rope_parameters")) return ConfigLayout::transformers5;
  for (const char* key : {"rope_theta", "rope_scaling", kDtypeKey.v4, kNumExpertsKey.v4})
    if (has(config, key)) return ConfigLayout::transformers4;
  return ConfigLayout::transformers5;
}

void put_rope(json& config, ConfigLayout layout, double theta, const std::string& type,
              const json& parameters) {
  json rope = parameters.is_null() ? json::object() : parameters;
  if (layout == ConfigLayout::transformers5) {
    rope["rope_theta"] = theta;
    rope["rope_type"] = type;
    config["rope_parameters"] = std::move(rope);
    return;
  }
  config["rope_theta"] = theta;
  if (type == "default") {
    config["rope_scaling"] = nullptr;
    return;
  }
  rope["rope_type"] = type;
  config["rope_scaling"] = std::move(rope);
}

json merged_config(const json& file, const json& ours, ConfigLayout layout) {
  json out = file;
  const bool v5 = layout == ConfigLayout::transformers5;
  if (v5) {
    out.erase("rope_theta");
    out.erase("rope_scaling");
  } else {
    out.erase("rope_parameters");
  }
  for (const RenamedKey& renamed : {kDtypeKey, kNumExpertsKey}) {
    const char* other = v5 ? renamed.v4 : renamed.v5;
    if (!out.contains(other)) continue;
    out[renamed.in(layout)] = out[other];
    out.erase(other);
  }
  out.update(ours);
  return out;
}

ConfigFields::ConfigFields(const json& config, std::string architecture, std::string prefix)
    : j_(config), architecture_(std::move(architecture)), prefix_(std::move(prefix)) {
  // A prefix names an object ("rope_parameters.").
  config::require(config.is_object(), "config.json: expected a JSON object",
                  prefix_.empty() ? "" : " as \"" + prefix_.substr(0, prefix_.size() - 1) + "\"", ", got ",
                  config.type_name());
}

const json* ConfigFields::find(const std::string& key) const {
  auto it = j_.find(key);
  return it == j_.end() || it->is_null() ? nullptr : &*it;
}

int64_t ConfigFields::integer(const std::string& key, std::optional<int64_t> fallback) const {
  const json* v = find(key);
  config::require(v || fallback, "config.json: \"", name(key), "\" is missing; ", architecture_, " needs it");
  if (!v) return *fallback;
  config::require(v->is_number_integer(), "config.json: \"", name(key), "\" must be an integer, got ",
                  v->dump());
  return v->get<int64_t>();
}

double ConfigFields::number(const std::string& key, std::optional<double> fallback) const {
  const json* v = find(key);
  config::require(v || fallback, "config.json: \"", name(key), "\" is missing; ", architecture_, " needs it");
  if (!v) return *fallback;
  config::require(v->is_number(), "config.json: \"", name(key), "\" must be a number, got ", v->dump());
  return v->get<double>();
}

bool ConfigFields::boolean(const std::string& key, bool fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  config::require(v->is_boolean(), "config.json: \"", name(key), "\" must be true or false, got ", v->dump());
  return v->get<bool>();
}

std::string ConfigFields::string(const std::string& key, const std::string& fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  config::require(v->is_string(), "config.json: \"", name(key), "\" must be a string, got ", v->dump());
  return v->get<std::string>();
}

std::vector<int64_t> ConfigFields::integers(const std::string& key) const {
  const json* v = find(key);
  if (!v) return {};
  bool ok = v->is_array();
  for (size_t i = 0; ok && i < v->size(); ++i) ok = (*v)[i].is_number_integer();
  config::require(ok, "config.json: \"", name(key), "\" must be a list of integers, got ", v->dump());
  return v->get<std::vector<int64_t>>();
}

std::string ConfigFields::renamed(RenamedKey key, bool required) const {
  const json* old = find(key.v4);
  const json* now = find(key.v5);
  // config::require evaluates its message: the values are shown only where both are there.
  if (old && now)
    config::require(
        *old == *now, "config.json: \"", name(key.v4), "\" (", old->dump(), ") and \"", name(key.v5), "\" (",
        now->dump(),
        ") disagree; transformers 4 reads the first, transformers 5 the second: keep the one of the "
        "version that wrote the weights and delete the other");
  config::require(old || now || !required, "config.json: \"", name(key.v5), "\" (transformers 5) or \"",
                  name(key.v4), "\" (transformers 4) is missing; ", architecture_, " needs it");
  return now ? key.v5 : old ? key.v4 : "";
}

Rope ConfigFields::rope(double default_theta) const {
  const json* parameters = find("rope_parameters");
  const json* scaling = find("rope_scaling");
  for (const auto& [key, v] : {std::pair{"rope_parameters", parameters}, std::pair{"rope_scaling", scaling}})
    if (v)
      config::require(v->is_object(), "config.json: \"", name(key), "\" must be an object or null, got ",
                      v->dump());
  std::optional<Rope> v5, v4;
  if (parameters) {
    const ConfigFields p(*parameters, architecture_, name("rope_parameters."));
    v5 = Rope{.theta = p.number("rope_theta", default_theta),
              // transformers reads "type" where "rope_type" is absent, in either object.
              .type = p.string("rope_type", p.string("type", "default")),
              .parameters = scaling_fields(*parameters),
              .where = name("rope_parameters"),
              .type_key = name("rope_parameters.rope_type")};
    for (const auto& [key, value] : v5->parameters.items())
      config::require(
          !value.is_object(), "config.json: \"", name("rope_parameters."), key,
          "\" is an object, as for RoPE per layer type; titan's models use one RoPE in every layer");
  }
  if (!parameters || find("rope_theta") || scaling) {
    v4 = Rope{.theta = number("rope_theta", default_theta),
              .type = "default",
              .parameters = json::object(),
              .where = name("rope_scaling"),
              .type_key = name("rope_scaling")};
    if (scaling) {
      const ConfigFields s(*scaling, architecture_, name("rope_scaling."));
      // Before transformers 4.45 the kind was "type".
      const char* kind = !s.find("rope_type") && s.find("type") ? "type" : "rope_type";
      v4->type = s.string(kind, "default");
      v4->type_key = name("rope_scaling.") + kind;
      v4->parameters = scaling_fields(*scaling);
    }
  }
  if (!v5 || !v4) return v5 ? *v5 : *v4;
  // Both layouts: transformers 5 would take 4.x's, and a file that a tool half converted may
  // hold different values in the two; those are refused rather than guessed between.
  std::vector<std::string> differ;
  auto disagree = [&](const std::string& a, const std::string& a_value, const std::string& b,
                      const std::string& b_value) {
    differ.push_back("\"" + a + "\" (" + a_value + ") and \"" + b + "\" (" + b_value + ") disagree");
  };
  const std::string theta = json(default_theta).dump();
  if (v4->theta != v5->theta)
    disagree(name("rope_theta"), shown(&j_, "rope_theta", theta), name("rope_parameters.rope_theta"),
             shown(parameters, "rope_theta", theta));
  if (v4->type != v5->type)
    disagree(v4->type_key, scaling ? json(v4->type).dump() : "null", v5->type_key,
             shown(parameters, "rope_type", "\"default\""));
  json fields = v4->parameters;
  fields.update(v5->parameters);
  for (const auto& [key, value] : fields.items())
    if (v4->parameters.value(key, json()) != v5->parameters.value(key, json()))
      disagree(name("rope_scaling.") + key, shown(&v4->parameters, key, ""), name("rope_parameters.") + key,
               shown(&v5->parameters, key, ""));
  config::require(differ.empty(), "config.json: ", joined(differ, "; "),
                  ". The file holds RoPE both in transformers 4's keys (rope_theta, rope_scaling) and in "
                  "transformers 5's (rope_parameters); keep those of the version that wrote the weights and "
                  "delete the others");
  return *v5;
}

namespace {

// "key (config.json X, <flavor> Y)" for each key of a flavor's config.json that `file` has
// otherwise, leaving out the free keys; an object's fields are compared one by one, named
// "<object>.<field>".
void differences(const json& file, const json& flavor, const std::string& flavor_name,
                 const std::set<std::string>& free, const std::string& prefix,
                 std::vector<std::string>& out) {
  for (const auto& [key, value] : flavor.items()) {
    const std::string name = prefix + key;
    if (free.count(name)) continue;
    const json theirs = file.value(key, json());
    if (theirs.is_object() && value.is_object())
      differences(theirs, value, flavor_name, free, name + ".", out);
    else if (theirs != value)
      out.push_back(name + " (config.json " + theirs.dump() + ", " + flavor_name + " " + value.dump() + ")");
  }
}

}  // namespace

std::string matching_flavor(const std::string& family, const json& file,
                            const std::vector<std::string>& flavors,
                            const std::function<json(const std::string&)>& flavor_config,
                            const std::set<std::string>& free) {
  std::string closest;
  std::vector<std::string> closest_diff;
  for (const std::string& name : flavors) {
    std::vector<std::string> diff;
    differences(file, flavor_config(name), name, free, "", diff);
    if (diff.empty()) return name;
    if (closest.empty() || diff.size() < closest_diff.size()) {
      closest = name;
      closest_diff = std::move(diff);
    }
  }
  config::require(false, "config.json describes no ", family, " flavor (", joined(flavors),
                  "); the closest, ", closest, ", differs in ", joined(closest_diff));
  return {};
}

}  // namespace titan::models::common::hf
