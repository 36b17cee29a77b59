#include "titan/core/config_schema.h"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "titan/core/error.h"

namespace titan::config {

namespace {

template <class T>
struct Unwrap {
  using type = T;
  static constexpr bool optional = false;
};
template <class T>
struct Unwrap<std::optional<T>> {
  using type = T;
  static constexpr bool optional = true;
};

template <class T>
const char* kind() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean (true or false)";
  if constexpr (std::is_same_v<T, int64_t>) return "an integer";
  if constexpr (std::is_same_v<T, double>) return "a number";
  if constexpr (std::is_same_v<T, std::string>) return "a string";
}

// Shortest text that reads back as the same double, and always as a TOML float.
std::string format_double_text(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, end);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // 'n': inf, nan
  return s;
}

template <class T>
std::string format_value(const T& v) {
  if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
  if constexpr (std::is_same_v<T, int64_t>) return std::to_string(v);
  if constexpr (std::is_same_v<T, double>) return format_double_text(v);
  if constexpr (std::is_same_v<T, std::string>) {
    // Basic strings with escapes: toml++ would otherwise pick 'literal' quoting.
    std::ostringstream os;
    toml::value<std::string> node(v);
    os << toml::toml_formatter{node, toml::format_flags::allow_unicode_strings};
    return os.str();
  }
}

// Problem messages, assembled as TITAN_CHECK assembles its parts.
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream os;
  ((os << parts), ...);
  return os.str();
}

template <class T>
std::string format_any(const T& v) {
  if constexpr (Unwrap<T>::optional)
    return v ? format_value(*v) : "unset";
  else
    return format_value(v);
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? sep : "") + items[i];
  return s;
}

// Optimal string alignment distance: edits, counting a swap of neighbours as one ("stpes").
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::string where(const toml::source_region& r, const std::string& source_name, bool column = false) {
  std::string s = r.path ? *r.path : source_name;
  if (r.begin.line) s += ":" + std::to_string(r.begin.line);
  if (r.begin.line && column) s += ":" + std::to_string(r.begin.column);
  return s;
}

std::string describe_node(const toml::node& n) {
  std::ostringstream os;
  switch (n.type()) {
    case toml::node_type::string: os << "a string"; break;
    case toml::node_type::integer: os << "an integer"; break;
    case toml::node_type::floating_point: os << "a floating-point number"; break;
    case toml::node_type::boolean: os << "a boolean"; break;
    case toml::node_type::table: os << "a table"; break;
    case toml::node_type::array: os << "an array"; break;
    default: os << "a date/time"; break;
  }
  if (auto s = n.as_string()) {
    os << " (" << format_value(s->get()) << ")";
  } else if (n.is_value()) {
    os << " (";
    n.visit([&](const auto& v) { os << v; });
    os << ")";
  }
  return os.str();
}

// Integers are accepted where a float is expected, nothing else converts.
template <class T>
bool read_node(const toml::node& n, T& out) {
  if constexpr (Unwrap<T>::optional) {
    typename T::value_type v{};
    if (!read_node(n, v)) return false;
    out = v;
    return true;
  } else if constexpr (std::is_same_v<T, double>) {
    if (auto f = n.as_floating_point()) {
      out = f->get();
    } else if (auto i = n.as_integer()) {
      out = static_cast<double>(i->get());
    } else {
      return false;
    }
    return true;
  } else {
    std::optional<T> v = n.value_exact<T>();
    if (v) out = *v;
    return v.has_value();
  }
}

// A thrown titan::Error without titan's source location: what a user sees of a config problem.
[[noreturn]] void fail(const std::string& message) {
  throw Error(message);
}

}  // namespace

std::string format_value(const std::string& v) {
  return format_value<std::string>(v);
}
std::string format_value(double v) {
  return format_double_text(v);
}

std::string Rule::describe() const {
  if (!choices.empty()) {
    std::string s = "one of";
    for (size_t i = 0; i < choices.size(); ++i) s += (i ? ", " : " ") + format_value(choices[i]);
    return s;
  }
  if (non_empty) return "a non-empty string";
  std::string s;
  if (min && max) {
    s = cat(min_open ? "in (" : "in [", *min, ", ", *max, max_open ? ")" : "]");
  } else if (min) {
    s = cat(min_open ? "> " : ">= ", *min);
  }
  if (sentinel) s += " or " + std::to_string(*sentinel);
  return s;
}

std::optional<std::string> Rule::violation(const Ref& ref) const {
  return std::visit(
      [&](const auto* p) -> std::optional<std::string> {
        using V = std::remove_cvref_t<decltype(*p)>;
        if constexpr (Unwrap<V>::optional) {
          if (!*p) return std::nullopt;
        }
        const auto& v = [&]() -> const typename Unwrap<V>::type& {
          if constexpr (Unwrap<V>::optional)
            return **p;
          else
            return *p;
        }();
        using T = typename Unwrap<V>::type;
        if constexpr (std::is_same_v<T, std::string>) {
          bool ok = (!non_empty || !v.empty()) &&
                    (choices.empty() || std::find(choices.begin(), choices.end(), v) != choices.end());
          if (!ok) return "must be " + describe();
        } else if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
          if (sentinel && v == *sentinel) return std::nullopt;
          if constexpr (std::is_floating_point_v<T>) {
            if (!std::isfinite(v)) return std::string("must be a finite number") + (min ? " " + describe() : "");
          }
          auto x = static_cast<double>(v);
          bool ok =
              (!min || (min_open ? x > *min : x >= *min)) && (!max || (max_open ? x < *max : x <= *max));
          if (!ok) return "must be " + describe();
        }
        return std::nullopt;
      },
      ref);
}

Rule positive() {
  return {.min = 0, .min_open = true};
}
Rule non_negative() {
  return {.min = 0};
}
Rule at_least_one() {
  return {.min = 1};
}
Rule fraction() {
  return {.min = 0, .max = 1};
}
Rule non_empty() {
  return {.non_empty = true};
}
Rule one_of(std::vector<std::string> choices) {
  return {.choices = std::move(choices)};
}
Rule or_minus_one(Rule r) {
  r.sentinel = -1;
  return r;
}

void Problems::capture(const std::string& context, const std::function<void()>& check) {
  try {
    check();
  } catch (const Error& e) {
    add(context + e.message());
  }
}

void Problems::raise_if_any(const std::string& headline) const {
  if (list_.empty()) return;
  std::string body = list_.size() == 1
                         ? ": " + list_[0]
                         : ": " + std::to_string(list_.size()) + " problems:\n  " + join(list_, "\n  ");
  fail(headline + body);
}

Engine::Section& Engine::add_section(std::string name, std::string help) {
  for (const Section& s : sections_)
    TITAN_CHECK(s.name != name, what_, ": section [", name, "] is declared twice");
  sections_.push_back({std::move(name), std::move(help), {}});
  return sections_.back();
}

// The operations over the declared sections, with `root` the config being read or written.
struct Engine::Impl {
  const Engine& e;

  struct Found {
    const KeyDef* key = nullptr;
    const Part* part = nullptr;
    const Section* section = nullptr;
    Ref ref(void* root) const { return key->ref(part->locate(root)); }
    Ref ref(const void* root) const { return ref(const_cast<void*>(root)); }
    std::string name() const { return section->name + "." + key->key; }
  };

  template <class Fn>
  void for_each_key(Fn&& fn) const {
    for (const Section& s : e.sections_)
      for (const Part& p : s.parts)
        for (const KeyDef& k : p.keys) fn(Found{&k, &p, &s});
  }

  std::optional<Found> find(const std::string& name) const {
    std::optional<Found> found;
    for_each_key([&](const Found& f) {
      if (!found && f.name() == name) found = f;
    });
    return found;
  }

  bool is_section(const std::string& name) const {
    return std::any_of(e.sections_.begin(), e.sections_.end(), [&](const Section& s) { return s.name == name; });
  }

  // "; did you mean 'x'?" for an unknown "section.key" (or a bare key at the top level), else the
  // valid keys of its section, else the valid sections.
  std::string suggest_key(const std::string& name) const {
    for (const auto& [noted, note] : e.notes_)
      if (name == noted) return "; " + note;
    size_t dot = name.find('.');
    std::string sec = dot == std::string::npos ? "" : name.substr(0, dot);
    std::string key = dot == std::string::npos ? name : name.substr(dot + 1);
    // A misspelt section or key, or a key filed under the wrong section ("job.seed").
    std::optional<Found> best;
    size_t best_score = SIZE_MAX;
    for_each_key([&](const Found& f) {
      size_t score = std::min(edit_distance(name, f.name()),
                              edit_distance(key, f.key->key) + (sec == f.section->name ? 0 : 1));
      if (score < best_score) best = f, best_score = score;
    });
    if (best && best_score <= std::max<size_t>(2, key.size() / 3)) return "; did you mean '" + best->name() + "'?";
    if (is_section(sec)) {
      std::vector<std::string> keys;
      for_each_key([&](const Found& f) {
        if (f.section->name == sec) keys.push_back(f.key->key);
      });
      return "; valid keys in [" + sec + "]: " + join(keys, ", ");
    }
    return "; valid sections: " + join(section_names(), ", ");
  }

  std::vector<std::string> section_names() const {
    std::vector<std::string> names;
    for (const Section& s : e.sections_) names.push_back(s.name);
    return names;
  }

  std::string suggest_section(const std::string& name) const {
    std::string best;
    size_t best_score = SIZE_MAX;
    for (const Section& s : e.sections_) {
      size_t score = edit_distance(name, s.name);
      if (score < best_score) best = s.name, best_score = score;
    }
    if (!best.empty() && best_score <= std::max<size_t>(2, name.size() / 3)) return "; did you mean [" + best + "]?";
    return "; valid sections: " + join(section_names(), ", ");
  }

  // Sets the key from a TOML node; the error text (without the key) when the type is wrong.
  static std::optional<std::string> assign(const Ref& ref, const toml::node& n) {
    return std::visit(
        [&](auto* p) -> std::optional<std::string> {
          using T = typename Unwrap<std::remove_pointer_t<decltype(p)>>::type;
          if (read_node(n, *p)) return std::nullopt;
          return std::string("expected ") + kind<T>() + ", found " + describe_node(n);
        },
        ref);
  }

  void read_table(const toml::table& table, const std::string& source, void* root, Origins& origins,
                  Problems& problems) const {
    // toml++ iterates keys in sorted order; problems are reported in file order.
    std::vector<std::pair<toml::source_index, std::string>> found;
    auto report = [&](const toml::key& key, std::string problem) {
      found.emplace_back(key.source().begin.line, std::move(problem));
    };
    for (auto&& [sec_key, sec_node] : table) {
      std::string sec(sec_key.str());
      std::string at = where(sec_key.source(), source);
      const toml::table* keys = sec_node.as_table();
      if (!keys) {
        if (is_section(sec)) {
          report(sec_key, cat("[", sec, "] at ", at, " must be a table of keys, found ", describe_node(sec_node)));
        } else {
          report(sec_key, cat("unknown key '", sec, "' at ", at, " (keys belong in a [section])", suggest_key(sec)));
        }
        continue;
      }
      if (!is_section(sec) && keys->empty()) {
        report(sec_key, cat("unknown section [", sec, "] at ", at, suggest_section(sec)));
        continue;
      }
      for (auto&& [key, node] : *keys) {
        std::string name = sec + "." + std::string(key.str());
        std::string key_at = where(key.source(), source);
        std::optional<Found> f = find(name);
        if (!f) {
          report(key, cat("unknown key '", name, "' at ", key_at, suggest_key(name)));
        } else if (auto err = assign(f->ref(root), node)) {
          report(key, cat(name, " at ", key_at, ": ", *err));
        } else {
          origins[name] = key_at;
        }
      }
    }
    std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [line, problem] : found) problems.add(std::move(problem));
  }

  // Sets a key from an override's text: strings as written, "none" unsets an optional, anything
  // else is read as a TOML value so numbers and bools follow the same rules as in a file.
  static std::optional<std::string> assign_text(const Ref& ref, const std::string& text) {
    if (auto* s = std::get_if<std::string*>(&ref)) {
      **s = text;
      return std::nullopt;
    }
    bool unset = text == "none" && std::visit(
                                       [](auto* p) {
                                         using V = std::remove_pointer_t<decltype(p)>;
                                         if constexpr (Unwrap<V>::optional) *p = std::nullopt;
                                         return Unwrap<V>::optional;
                                       },
                                       ref);
    if (unset) return std::nullopt;
    toml::table parsed;
    try {
      parsed = toml::parse("v = " + text, std::string_view("override"));
    } catch (const toml::parse_error&) {
      // Not a TOML value: reported below as the wrong type, with the text as typed.
    }
    const toml::node* node = parsed.size() == 1 ? parsed.get("v") : nullptr;
    if (node) return assign(ref, *node);
    return std::visit(
        [&](auto* p) {
          using T = typename Unwrap<std::remove_pointer_t<decltype(p)>>::type;
          return std::string("expected ") + kind<T>() + ", found '" + text + "'";
        },
        ref);
  }

  void apply_overrides(const std::vector<std::string>& args, void* root, Origins& origins,
                       Problems& problems) const {
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& arg = args[i];
      if (!arg.starts_with("--") || arg.size() == 2) {
        problems.add("override '" + arg + "': expected --section.key=value or --section.key value");
        continue;
      }
      size_t eq = arg.find('=');
      std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      std::optional<std::string> value;
      if (eq != std::string::npos) value = arg.substr(eq + 1);
      bool next_is_value = i + 1 < args.size() && !args[i + 1].starts_with("--");
      std::optional<Found> f = find(name);
      if (!f) {
        if (!value && next_is_value) ++i;  // its value goes with it
        problems.add(cat("unknown key '", name, "' in override '", arg, "'", suggest_key(name)));
        continue;
      }
      const Ref ref = f->ref(root);
      if (!value) {
        if (next_is_value) {
          value = args[++i];
        } else if (std::holds_alternative<bool*>(ref) || std::holds_alternative<std::optional<bool>*>(ref)) {
          value = "true";  // a bare flag
        } else {
          problems.add(cat("override '", arg, "' has no value; write --", name, "=VALUE"));
          continue;
        }
      }
      std::string spelled = "--" + name + "=" + *value;
      if (auto err = assign_text(ref, *value)) {
        problems.add("override '" + spelled + "': " + *err);
      } else {
        origins[name] = "override '" + spelled + "'";
      }
    }
  }

  void check(const void* root, const Origins& origins, Problems& problems) const {
    for_each_key([&](const Found& f) {
      const Ref ref = f.ref(root);
      if (auto why = f.key->rule.violation(ref)) {
        auto origin = origins.find(f.name());
        std::string from = origin == origins.end() ? "" : " (" + origin->second + ")";
        std::string value = std::visit([](const auto* p) { return format_any(*p); }, ref);
        problems.add(f.name() + " = " + value + from + ": " + *why);
      }
    });
    // The checks across keys assume each key is in its own range.
    if (!problems.empty()) return;
    for (const Section& s : e.sections_)
      for (const Part& p : s.parts)
        for (const PartCheck& c : p.checks) c(p.locate(const_cast<void*>(root)), problems);
    if (!problems.empty()) return;
    for (const RootCheck& c : e.checks_) c(root, origins, problems);
  }

  Origins read(const toml::table& table, const std::string& source_name, const std::vector<std::string>& overrides,
               void* root) const {
    Origins origins;
    Problems problems;
    read_table(table, source_name, root, origins, problems);
    apply_overrides(overrides, root, origins, problems);
    problems.raise_if_any(e.what_ + " " + source_name);
    check(root, origins, problems);
    problems.raise_if_any(e.what_ + " " + source_name + " is invalid");
    return origins;
  }

  toml::table parse_toml(const std::string& text, const std::string& source_name) const {
    try {
      return toml::parse(text, std::string_view(source_name));
    } catch (const toml::parse_error& err) {
      fail(cat(e.what_, " ", where(err.source(), source_name, true), ": invalid TOML: ", err.description()));
    }
  }
};

Origins Engine::parse(const std::string& toml_text, const std::string& source_name,
                      const std::vector<std::string>& overrides, void* root) const {
  Impl impl{*this};
  return impl.read(impl.parse_toml(toml_text, source_name), source_name, overrides, root);
}

Origins Engine::load(const std::string& path, const std::vector<std::string>& overrides, void* root,
                     const std::string& example_path) const {
  // A folder, /dev/null or a pipe would read as an empty file: the all-defaults config.
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  const char* found = !std::filesystem::exists(st)        ? "does not exist"
                      : std::filesystem::is_directory(st) ? "is a folder"
                                                          : "is no regular file (a device, pipe or socket)";
  if (!std::filesystem::is_regular_file(st))
    fail(cat(what_, ": cannot read '", path, "': it ", found, "; pass the path of a TOML file, e.g. --config ",
             example_path));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail(cat(what_, ": cannot read '", path, "' (check its permissions); pass the path of a TOML file, e.g. --config ",
             example_path));
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str(), path, overrides, root);
}

void Engine::from_json(const nlohmann::json& j, const std::string& source_name, void* root) const {
  // Through TOML, so that one reader checks types, ranges and names, whichever form a config has.
  auto to_toml_value = [](const nlohmann::json& v, toml::table& into, const std::string& key,
                          const auto& self) -> void {
    switch (v.type()) {
      case nlohmann::json::value_t::null: break;  // an unset optional key
      case nlohmann::json::value_t::boolean: into.insert(key, v.get<bool>()); break;
      case nlohmann::json::value_t::number_integer:
      case nlohmann::json::value_t::number_unsigned: into.insert(key, v.get<int64_t>()); break;
      case nlohmann::json::value_t::number_float: into.insert(key, v.get<double>()); break;
      case nlohmann::json::value_t::string: into.insert(key, v.get<std::string>()); break;
      case nlohmann::json::value_t::object: {
        toml::table sub;
        for (const auto& [k, x] : v.items()) self(x, sub, k, self);
        into.insert(key, std::move(sub));
        break;
      }
      default: into.insert(key, toml::array{}); break;  // no key takes an array: reported as such
    }
  };
  if (!j.is_object()) fail(cat(what_, " ", source_name, ": expected a JSON object of sections, got ", j.dump().substr(0, 80)));
  toml::table table;
  for (const auto& [section, keys] : j.items()) to_toml_value(keys, table, section, to_toml_value);
  Impl{*this}.read(table, source_name, {}, root);
}

void Engine::validate(const void* root) const {
  Problems problems;
  Impl{*this}.check(root, {}, problems);
  problems.raise_if_any(what_ + " is invalid");
}

std::string Engine::to_toml(const void* root) const {
  std::ostringstream os;
  os << "# titan " << what_ << ". Any key can be overridden on the command line: --section.key=value\n";
  for (const Section& sec : sections_) {
    os << "\n[" << sec.name << "]  # " << sec.help << "\n";
    for (const Part& part : sec.parts) {
      for (const KeyDef& k : part.keys) {
        std::string allowed = k.rule.describe();
        std::string comment = k.help + (allowed.empty() ? "" : "; " + allowed);
        std::visit(
            [&](const auto* p) {
              using V = std::remove_cvref_t<decltype(*p)>;
              if constexpr (Unwrap<V>::optional) {
                if (!*p) {
                  os << "# " << k.key << " is unset  # " << comment << "\n";
                  return;
                }
              }
              os << k.key << " = " << format_any(*p) << "  # " << comment << "\n";
            },
            k.ref(part.locate(const_cast<void*>(root))));
      }
    }
  }
  return os.str();
}

nlohmann::json Engine::to_json(const void* root) const {
  nlohmann::json j = nlohmann::json::object();
  Impl{*this}.for_each_key([&](const Impl::Found& f) {
    std::visit(
        [&](const auto* p) {
          using V = std::remove_cvref_t<decltype(*p)>;
          if constexpr (Unwrap<V>::optional) {
            j[f.section->name][f.key->key] = *p ? nlohmann::json(**p) : nlohmann::json(nullptr);
          } else {
            j[f.section->name][f.key->key] = *p;
          }
        },
        f.ref(root));
  });
  return j;
}

std::vector<std::string> Engine::keys() const {
  std::vector<std::string> names;
  Impl{*this}.for_each_key([&](const Impl::Found& f) { names.push_back(f.name()); });
  return names;
}

}  // namespace titan::config
