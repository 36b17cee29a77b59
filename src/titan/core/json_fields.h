#pragma once
// Typed reads of the JSON files a user hands titan (tokenizer.json, tokenizer_config.json, a
// checkpoint's metadata.json, config.json, model.safetensors.index.json). nlohmann's own accessors
// throw type errors that name neither the file nor the field, and convert numbers silently (2e9
// read as an int32 wraps); these check presence, type and range, and their errors name the file,
// the field, what was expected and what was found.
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace titan::json_fields {

// Where a value lies: its file and its path in it ("model.vocab", "added_tokens[3].id"; empty for
// the whole document).
struct JsonPath {
  std::string file;
  std::string path;

  JsonPath operator/(std::string_view key) const;
  JsonPath operator[](size_t index) const;
  // "FILE: \"PATH\"", or "FILE" for the whole document.
  std::string str() const;
};

// "an array [1,2,3]", "the string \"x\"": a value as an error shows it, cut short when long.
std::string found(const nlohmann::json& value);

// `value` itself when it is an object (array); throws naming `at` otherwise.
const nlohmann::json& object(const nlohmann::json& value, const JsonPath& at);
const nlohmann::json& array(const nlohmann::json& value, const JsonPath& at);

// The value of object `obj` (which lies at `at`) at `key`: throws when absent. `optional_member`
// returns null when absent, and throws when `obj` is not an object.
const nlohmann::json& member(const nlohmann::json& obj, const std::string& key, const JsonPath& at);
const nlohmann::json& optional_member(const nlohmann::json& obj, const std::string& key, const JsonPath& at);

std::string as_string(const nlohmann::json& value, const JsonPath& at);
bool as_bool(const nlohmann::json& value, const JsonPath& at);
double as_number(const nlohmann::json& value, const JsonPath& at);
// An integer (not 2.0, not 2e9) in [lo, hi].
int64_t as_integer(const nlohmann::json& value, const JsonPath& at,
                   int64_t lo = std::numeric_limits<int64_t>::min(),
                   int64_t hi = std::numeric_limits<int64_t>::max());
uint64_t as_unsigned(const nlohmann::json& value, const JsonPath& at,
                     uint64_t hi = std::numeric_limits<uint64_t>::max());

// Field `key` of object `obj` at `at`, as T (std::string, bool, double, int32_t, int64_t,
// uint32_t, uint64_t; integers range-checked for T): `field` requires it, `field_or` gives
// `fallback` when it is absent or null.
template <typename T>
T as(const nlohmann::json& value, const JsonPath& at);
template <>
std::string as<std::string>(const nlohmann::json& value, const JsonPath& at);
template <>
bool as<bool>(const nlohmann::json& value, const JsonPath& at);
template <>
double as<double>(const nlohmann::json& value, const JsonPath& at);
template <>
int32_t as<int32_t>(const nlohmann::json& value, const JsonPath& at);
template <>
int64_t as<int64_t>(const nlohmann::json& value, const JsonPath& at);
template <>
uint32_t as<uint32_t>(const nlohmann::json& value, const JsonPath& at);
template <>
uint64_t as<uint64_t>(const nlohmann::json& value, const JsonPath& at);
template <typename T>
T field(const nlohmann::json& obj, const std::string& key, const JsonPath& at) {
  return as<T>(member(obj, key, at), at / key);
}
template <typename T>
T field_or(const nlohmann::json& obj, const std::string& key, const T& fallback, const JsonPath& at) {
  const nlohmann::json& v = optional_member(obj, key, at);
  return v.is_null() ? fallback : as<T>(v, at / key);
}

}  // namespace titan::json_fields
