#include "titan/graph/pjrt/signature.h"

#include <cctype>
#include <charconv>

#include "titan/core/error.h"

namespace titan::graph::pjrt {
namespace {

// The parameter list's top-level pieces: commas inside tensor<...>, attribute dictionaries,
// loc(...) and strings do not split.
std::vector<std::string> split_parameters(const std::string& text, size_t open) {
  std::vector<std::string> pieces;
  int depth = 0;
  size_t start = open + 1;
  for (size_t i = open + 1; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) i += text[i] == '\\';
    } else if (c == '(' || c == '<' || c == '{' || c == '[') {
      ++depth;
    } else if ((c == '>' && text[i - 1] != '-') || c == '}' || c == ']') {
      --depth;
    } else if (c == ')') {
      if (depth == 0) {
        if (text.find_first_not_of(" \n\t", start) < i) pieces.push_back(text.substr(start, i - start));
        return pieces;
      }
      --depth;
    } else if (c == ',' && depth == 0) {
      pieces.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  TITAN_CHECK(false, "the StableHLO module's @main parameter list does not close: the text is cut short");
}

std::optional<DType> element_dtype(const std::string& name) {
  if (name == "f32") return kF32;
  if (name == "f64") return kF64;
  if (name == "bf16") return kBF16;
  if (name == "i32" || name == "si32") return kI32;
  if (name == "i64" || name == "si64") return kI64;
  return std::nullopt;
}

// "%arg0: tensor<2x3xf32> {tf.aliasing_output = 0 : i32} loc(...)"
Parameter parse_parameter(const std::string& piece) {
  Parameter p;
  const size_t colon = piece.find(':');
  const size_t type_start = piece.find_first_not_of(" \n\t", colon == std::string::npos ? 0 : colon + 1);
  if (type_start == std::string::npos) return p;
  if (piece.compare(type_start, 7, "tensor<") == 0) {
    const size_t close = piece.find('>', type_start);
    p.type =
        piece.substr(type_start, close == std::string::npos ? std::string::npos : close + 1 - type_start);
    // "2x3xf32" (or "f32" for a scalar); an encoding after a comma is not titan's.
    std::string body = p.type.substr(7, p.type.size() - 8);
    if (body.find(',') != std::string::npos) return p;
    Shape dims;
    size_t at = 0;
    for (size_t x;
         (x = body.find('x', at)) != std::string::npos && std::isdigit(static_cast<unsigned char>(body[at]));
         at = x + 1) {
      dims.push_back(std::stoll(body.substr(at, x - at)));
    }
    p.dtype = element_dtype(body.substr(at));
    if (body.find('?') == std::string::npos && body.find('*') == std::string::npos) p.dims = dims;
  } else {
    p.type = piece.substr(type_start, piece.find_first_of(" \n\t{", type_start) - type_start);
  }
  const std::string key = "tf.aliasing_output";
  if (const size_t k = piece.find(key); k != std::string::npos) {
    const size_t value = piece.find_first_of("0123456789", piece.find('=', k));
    TITAN_CHECK(value != std::string::npos, "cannot read the output index of ", key,
                " in @main's parameter `", piece, "`: write it as {", key, " = 0 : i32}");
    std::from_chars(piece.data() + value, piece.data() + piece.size(), p.aliased_output);
  }
  return p;
}

}  // namespace

std::vector<Parameter> main_parameters(const std::string& text) {
  size_t at = text.find("@main(");
  TITAN_CHECK(at != std::string::npos,
              "the StableHLO module has no `func.func public @main(...)`: PJRT runs ",
              "the function named main");
  std::vector<Parameter> parameters;
  for (const std::string& piece : split_parameters(text, at + 5))
    parameters.push_back(parse_parameter(piece));
  return parameters;
}

}  // namespace titan::graph::pjrt
