#pragma once
// A typed schema for TOML configs, generic over what it configures. Each component declares the
// keys of its own section beside its code, as a struct with defaults plus
//
//   void declare_keys(config::Keys<MyConfig>& keys);   // found by argument-dependent lookup
//
// naming each key's member, allowed values and help, and the checks across its keys. A config
// (the job config, train/config/job_config.h) composes such structs into sections; parsing, overrides,
// validation, printing, JSON and the list of valid keys all derive from that one declaration.
// Problems are gathered and reported together, each naming the key, where it was set (file:line
// or the override) and what is allowed; an unknown key comes with the closest valid one.
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "titan/core/error.h"

namespace titan::config {

// Where a key's value lives; one alternative per value type a key can have.
using Ref = std::variant<bool*, int64_t*, double*, std::string*, std::optional<bool>*, std::optional<int64_t>*,
                         std::optional<double>*>;

// What values a key allows besides its type. Numbers are compared as doubles, exact for every
// bound used here.
struct Rule {
  std::optional<double> min = std::nullopt, max = std::nullopt;
  bool min_open = false, max_open = false;
  std::optional<int64_t> sentinel = std::nullopt;  // allowed outside [min, max], meaning "derive it"
  std::vector<std::string> choices = {};
  bool non_empty = false;

  // "one of ...", "in [0, 1]", ... ; empty when any value of the type is allowed.
  std::string describe() const;
  // Why the value `ref` points at is not allowed ("must be ..."), or nothing.
  std::optional<std::string> violation(const Ref& ref) const;
};
Rule positive();
Rule non_negative();
Rule at_least_one();
Rule fraction();
Rule non_empty();
Rule one_of(std::vector<std::string> choices);
Rule or_minus_one(Rule r);

// A problem with a config a user wrote (a key, a layout): thrown as titan::Error whose text is
// `parts` alone, without titan's source location, which says nothing to a user.
template <class... Parts>
void require(bool ok, const Parts&... parts) {
  if (ok) [[likely]]
    return;
  std::ostringstream message;
  ((message << parts), ...);
  throw Error(message.str());
}

// Problems gathered over a whole file or validation, raised as one titan::Error so that a user
// fixes all at once. The messages are for users: they carry no source locations of titan's own.
class Problems {
 public:
  void add(std::string problem) { list_.push_back(std::move(problem)); }
  bool empty() const { return list_.empty(); }
  // Runs a check that throws titan::Error, keeping its message (without the location).
  void capture(const std::string& context, const std::function<void()>& check);
  void raise_if_any(const std::string& headline) const;

 private:
  std::vector<std::string> list_;
};

// "Section.key" -> where it was set: "file.toml:12" or "override '--a.b=1'".
using Origins = std::map<std::string, std::string>;

// One key as the engine sees it: the struct it lives in is passed as void*, the typed Keys<S>
// having made the accessor.
struct KeyDef {
  std::string key;
  std::function<Ref(void*)> ref;
  Rule rule;
  std::string help;
};
using PartCheck = std::function<void(const void* part, Problems& problems)>;

// The keys a struct S contributes to a section.
template <class S>
class Keys {
 public:
  // `Owner` is S or a base of it.
  template <class T, class Owner>
  Keys& add(std::string key, T Owner::*member, Rule rule, std::string help) {
    static_assert(std::is_base_of_v<Owner, S>);
    keys_.push_back({std::move(key), [member](void* s) -> Ref { return &(static_cast<S*>(s)->*member); },
                     std::move(rule), std::move(help)});
    return *this;
  }
  // A check across this struct's keys, run once every key is within its own rule.
  Keys& check(std::function<void(const S&, Problems&)> fn) {
    checks_.push_back([fn = std::move(fn)](const void* s, Problems& p) { fn(*static_cast<const S*>(s), p); });
    return *this;
  }
  std::vector<KeyDef> take_keys() { return std::move(keys_); }
  std::vector<PartCheck> take_checks() { return std::move(checks_); }

 private:
  std::vector<KeyDef> keys_;
  std::vector<PartCheck> checks_;
};

// The untyped engine; Schema<Root> below is how code uses it.
class Engine {
 public:
  struct Part {
    std::function<void*(void* root)> locate;
    std::vector<KeyDef> keys;
    std::vector<PartCheck> checks;
  };
  struct Section {
    std::string name, help;
    std::vector<Part> parts;
  };
  using RootCheck = std::function<void(const void* root, const Origins& origins, Problems& problems)>;

  // `what` names the config in messages ("job config").
  explicit Engine(std::string what) : what_(std::move(what)) {}

  Section& add_section(std::string name, std::string help);
  void add_check(RootCheck check) { checks_.push_back(std::move(check)); }
  // What to tell a user who writes `name`, a key that is not (or no longer) one.
  void add_note(std::string name, std::string note) { notes_.emplace_back(std::move(name), std::move(note)); }

  // TOML text, then overrides (command-line words: "--section.key=value", or "--section.key"
  // "value"; a bool key alone means true; "none" unsets an optional key), then the checks.
  Origins parse(const std::string& toml_text, const std::string& source_name,
                const std::vector<std::string>& overrides, void* root) const;
  // The same from a file, refusing folders, devices and unreadable files by name.
  Origins load(const std::string& path, const std::vector<std::string>& overrides, void* root,
               const std::string& example_path) const;
  // {"section": {"key": value}} as to_json writes it, checked as a file is: unknown keys are
  // errors, absent keys keep their defaults, null leaves an optional key unset.
  void from_json(const nlohmann::json& j, const std::string& source_name, void* root) const;
  void validate(const void* root) const;
  // Every key with its help as a comment (unset optional keys as comments).
  std::string to_toml(const void* root) const;
  nlohmann::json to_json(const void* root) const;
  // "section.key" for every key, in declaration order.
  std::vector<std::string> keys() const;
  const std::vector<Section>& sections() const { return sections_; }

  struct Impl;

 private:
  std::string what_;
  std::vector<Section> sections_;
  std::vector<RootCheck> checks_;
  std::vector<std::pair<std::string, std::string>> notes_;
};

// A config type Root composed of sections, each made of one or more component structs.
template <class Root>
class Schema {
 public:
  explicit Schema(std::string what) : engine_(std::move(what)) {}

  class SectionBuilder {
   public:
    explicit SectionBuilder(Engine::Section& section) : section_(section) {}
    // The keys of the struct `get` finds in a Root (a member pointer, or a callable returning a
    // reference), declared by that struct's declare_keys.
    template <class Get>
    SectionBuilder& part(Get get) {
      using S = std::remove_cvref_t<std::invoke_result_t<Get, Root&>>;
      Keys<S> keys;
      declare_keys(keys);
      section_.parts.push_back(
          {[get](void* root) -> void* { return &std::invoke(get, *static_cast<Root*>(root)); }, keys.take_keys(),
           keys.take_checks()});
      return *this;
    }

   private:
    Engine::Section& section_;
  };

  SectionBuilder section(std::string name, std::string help) {
    return SectionBuilder(engine_.add_section(std::move(name), std::move(help)));
  }
  // A check across sections, run once every key is within its own rule; `origins` says which
  // keys were set and where.
  void check(std::function<void(const Root&, const Origins&, Problems&)> fn) {
    engine_.add_check([fn = std::move(fn)](const void* root, const Origins& origins, Problems& problems) {
      fn(*static_cast<const Root*>(root), origins, problems);
    });
  }
  // A key TorchTitan once spelt `old_name`: its misuse is answered with the new name.
  void renamed(const std::string& old_name, const std::string& new_name) {
    engine_.add_note(old_name, "did you mean '" + new_name + "'? (its name in newer TorchTitan)");
  }
  // A key TorchTitan has and titan refuses, with the reason and what to do.
  void retired(const std::string& name, const std::string& why) { engine_.add_note(name, why); }

  Root parse(const std::string& toml_text, const std::string& source_name,
             const std::vector<std::string>& overrides) const {
    Root root;
    engine_.parse(toml_text, source_name, overrides, &root);
    return root;
  }
  Root load(const std::string& path, const std::vector<std::string>& overrides, const std::string& example_path,
            Origins* origins = nullptr) const {
    Root root;
    Origins o = engine_.load(path, overrides, &root, example_path);
    if (origins) *origins = std::move(o);
    return root;
  }
  void validate(const Root& root) const { engine_.validate(&root); }
  std::string to_toml(const Root& root) const { return engine_.to_toml(&root); }
  std::vector<std::string> keys() const { return engine_.keys(); }
  // JSON forms (Engine::to_json, from_json) go through the engine: this header leaves json.hpp out.
  const Engine& engine() const { return engine_; }

 private:
  Engine engine_;
};

// Shortest text that reads back as the same value in TOML: strings quoted and escaped, doubles
// always as floats.
std::string format_value(const std::string& v);
std::string format_value(double v);

}  // namespace titan::config
