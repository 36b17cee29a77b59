#include "titan/checkpoint/safetensors.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace titan::checkpoint {

namespace {
using json = nlohmann::json;

DType parse_dtype(const std::string& s, const std::string& path, const std::string& name) {
  if (s == "F32") return kF32;
  if (s == "F64") return kF64;
  if (s == "BF16") return kBF16;
  if (s == "I32") return kI32;
  if (s == "I64") return kI64;
  TITAN_CHECK(false, "safetensors ", path, ": tensor '", name, "' has dtype ", s,
              ", expected one of F32, F64, BF16, I32, I64");
  return kF32;
}

const char* dtype_tag(DType t) {
  switch (t) {
    case kF32: return "F32";
    case kF64: return "F64";
    case kBF16: return "BF16";
    case kI32: return "I32";
    case kI64: return "I64";
  }
  return "?";
}
}  // namespace

SafetensorsFile read_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TITAN_CHECK(f.good(), "safetensors: cannot open ", path);
  f.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(f.tellg());
  f.seekg(0);
  uint64_t header_len = 0;
  TITAN_CHECK(file_size >= 8 && f.read(reinterpret_cast<char*>(&header_len), 8), "safetensors ", path,
              ": file of ", file_size, " bytes is too short for a header");
  TITAN_CHECK(header_len <= file_size - 8, "safetensors ", path, ": header length ", header_len,
              " exceeds the file size ", file_size, " (truncated file?)");
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  json h;
  try {
    h = json::parse(header);
  } catch (const json::exception& e) {
    TITAN_CHECK(false, "safetensors ", path, ": header is not valid JSON: ", e.what());
  }
  TITAN_CHECK(h.is_object(), "safetensors ", path, ": header is not a JSON object");
  const uint64_t data_start = 8 + header_len, data_size = file_size - data_start;
  SafetensorsFile out;
  for (auto& [name, entry] : h.items()) {
    if (name == "__metadata__") {
      for (auto& [k, v] : entry.items())
        out.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    TITAN_CHECK(entry.contains("dtype") && entry.contains("shape") && entry.contains("data_offsets"),
                "safetensors ", path, ": tensor '", name, "' lacks dtype, shape or data_offsets");
    DType dt = parse_dtype(entry["dtype"].get<std::string>(), path, name);
    Shape shape = entry["shape"].get<Shape>();
    auto offs = entry["data_offsets"].get<std::vector<uint64_t>>();
    TITAN_CHECK(offs.size() == 2 && offs[0] <= offs[1] && offs[1] <= data_size, "safetensors ", path,
                ": tensor '", name, "' has data_offsets outside the ", data_size, "-byte data section");
    Tensor t = Tensor::empty(shape, {.dtype = dt});
    TITAN_CHECK(offs[1] - offs[0] == t.nbytes(), "safetensors ", path, ": tensor '", name, "' spans ",
                offs[1] - offs[0], " bytes but ", dtype_tag(dt), shape_str(shape), " needs ", t.nbytes());
    f.seekg(static_cast<std::streamoff>(data_start + offs[0]));
    f.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
    TITAN_CHECK(f.good(), "safetensors ", path, ": could not read tensor '", name, "'");
    out.tensors.emplace(name, t);
  }
  return out;
}

void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  std::vector<Tensor> ordered;
  for (auto& [name, t] : tensors) {
    Tensor c = t.detach().contiguous();
    h[name] = {{"dtype", dtype_tag(c.dtype())}, {"shape", c.sizes()}, {"data_offsets", {off, off + c.nbytes()}}};
    off += c.nbytes();
    ordered.push_back(c);
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  TITAN_CHECK(f.good(), "safetensors: cannot write ", path);
  uint64_t len = header.size();
  f.write(reinterpret_cast<const char*>(&len), 8);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const Tensor& c : ordered) f.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  TITAN_CHECK(f.good(), "safetensors: write to ", path, " failed (disk full?)");
}

}  // namespace titan::checkpoint
