#include "titan/core/json_fields.h"

#include "titan/core/error.h"

namespace titan::json_fields {

using json = nlohmann::json;

namespace {

// What an error adds: these are files a tool wrote, so a wrong value was edited in or damaged.
constexpr const char* kFix = "; correct the file, or make it again with the tool that wrote it";

[[noreturn]] void wrong(const JsonPath& at, const std::string& expected, const json& value) {
  throw Error(at.str() + " must be " + expected + ", found " + found(value) + kFix);
}

}  // namespace

JsonPath JsonPath::operator/(std::string_view key) const {
  std::string p = path;
  if (!p.empty()) p += '.';
  p += key;
  return {file, std::move(p)};
}

JsonPath JsonPath::operator[](size_t index) const {
  std::string p = path;
  p += '[';
  p += std::to_string(index);
  p += ']';
  return {file, std::move(p)};
}

std::string JsonPath::str() const {
  if (path.empty()) return file;
  std::string s = file;
  s += ": \"";
  s += path;
  s += '"';
  return s;
}

std::string found(const json& value) {
  if (value.is_null()) return "null";
  constexpr size_t kShown = 80;
  std::string text = value.dump();
  if (text.size() > kShown) {
    text.resize(kShown);
    text += "...";
  }
  const std::string kind = value.is_number_integer() ? "integer"
                           : value.is_number()       ? "number"
                                                     : value.type_name();
  std::string out = std::string_view("aeiou").find(kind[0]) == std::string_view::npos ? "a " : "an ";
  out += kind;
  out += ' ';
  out += text;
  return out;
}

const json& object(const json& value, const JsonPath& at) {
  if (!value.is_object()) wrong(at, "a JSON object", value);
  return value;
}

const json& array(const json& value, const JsonPath& at) {
  if (!value.is_array()) wrong(at, "a JSON array", value);
  return value;
}

const json& member(const json& obj, const std::string& key, const JsonPath& at) {
  const json& v = optional_member(obj, key, at);
  if (v.is_null() && !obj.contains(key)) throw Error((at / key).str() + " is missing" + kFix);
  return v;
}

const json& optional_member(const json& obj, const std::string& key, const JsonPath& at) {
  static const json null;
  auto it = object(obj, at).find(key);
  return it == obj.end() ? null : *it;
}

std::string as_string(const json& value, const JsonPath& at) {
  if (!value.is_string()) wrong(at, "a string", value);
  return value.get<std::string>();
}

bool as_bool(const json& value, const JsonPath& at) {
  if (!value.is_boolean()) wrong(at, "true or false", value);
  return value.get<bool>();
}

double as_number(const json& value, const JsonPath& at) {
  if (!value.is_number()) wrong(at, "a number", value);
  return value.get<double>();
}

int64_t as_integer(const json& value, const JsonPath& at, int64_t lo, int64_t hi) {
  const std::string expected = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (!value.is_number_integer()) wrong(at, expected, value);
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi)) wrong(at, expected, value);
    return static_cast<int64_t>(u);
  }
  const int64_t v = value.get<int64_t>();
  if (v < lo || v > hi) wrong(at, expected, value);
  return v;
}

uint64_t as_unsigned(const json& value, const JsonPath& at, uint64_t hi) {
  const std::string expected = "an integer in [0, " + std::to_string(hi) + "]";
  if (!value.is_number_integer()) wrong(at, expected, value);
  if (!value.is_number_unsigned() && value.get<int64_t>() < 0) wrong(at, expected, value);
  const uint64_t u = value.get<uint64_t>();
  if (u > hi) wrong(at, expected, value);
  return u;
}

template <>
std::string as<std::string>(const json& value, const JsonPath& at) {
  return as_string(value, at);
}
template <>
bool as<bool>(const json& value, const JsonPath& at) {
  return as_bool(value, at);
}
template <>
double as<double>(const json& value, const JsonPath& at) {
  return as_number(value, at);
}
template <>
int32_t as<int32_t>(const json& value, const JsonPath& at) {
  return static_cast<int32_t>(
      as_integer(value, at, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
}
template <>
int64_t as<int64_t>(const json& value, const JsonPath& at) {
  return as_integer(value, at);
}
template <>
uint32_t as<uint32_t>(const json& value, const JsonPath& at) {
  return static_cast<uint32_t>(as_unsigned(value, at, std::numeric_limits<uint32_t>::max()));
}
template <>
uint64_t as<uint64_t>(const json& value, const JsonPath& at) {
  return as_unsigned(value, at);
}

}  // namespace titan::json_fields
