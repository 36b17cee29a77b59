#include "titan/checkpoint/safetensors.h"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "titan/core/file_io.h"

namespace titan::checkpoint {

namespace {
using json = nlohmann::json;
}  // namespace

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

DType parse_dtype_tag(const std::string& tag, const std::string& where) {
  for (DType t : {kF32, kF64, kBF16, kI32, kI64})
    if (tag == dtype_tag(t)) return t;
  TITAN_CHECK(false, where, ": dtype \"", tag, "\" is not one of F32, F64, BF16, I32, I64");
  return kF32;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path), file_(path) {
  const uint64_t file_size = file_.size();
  TITAN_CHECK(file_size >= 8, "safetensors ", path, ": file of ", file_size,
              " bytes is too short for the 8-byte header length (truncated file?)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file_.bytes().data(), 8);
  TITAN_CHECK(header_len <= file_size - 8, "safetensors ", path, ": header length ", header_len,
              " exceeds the file size ", file_size, " (truncated file?)");
  json h;
  try {
    h = json::parse(bytes().substr(8, header_len));
  } catch (const json::exception& e) {
    TITAN_CHECK(false, "safetensors ", path, ": header is not valid JSON: ", e.what());
  }
  TITAN_CHECK(h.is_object(), "safetensors ", path, ": header is not a JSON object");
  const uint64_t data_start = 8 + header_len, data_size = file_size - data_start;
  for (auto& [name, e] : h.items()) {
    if (name == "__metadata__") {
      for (auto& [k, v] : e.items()) metadata_[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    const std::string where = "safetensors " + path + ": tensor '" + name + "'";
    TITAN_CHECK(e.is_object() && e.contains("dtype") && e.contains("shape") && e.contains("data_offsets"),
                where, " lacks dtype, shape or data_offsets");
    SafetensorsEntry entry;
    std::vector<uint64_t> offs;
    try {
      entry.dtype = parse_dtype_tag(e["dtype"].get<std::string>(), where);
      entry.shape = e["shape"].get<Shape>();
      offs = e["data_offsets"].get<std::vector<uint64_t>>();
    } catch (const json::exception& err) {
      TITAN_CHECK(false, where, ": malformed entry ", e.dump(), ": ", err.what());
    }
    for (int64_t d : entry.shape)
      TITAN_CHECK(d >= 0, where, " has a negative size in ", shape_str(entry.shape));
    TITAN_CHECK(offs.size() == 2 && offs[0] <= offs[1] && offs[1] <= data_size, where,
                " has data_offsets outside the ", data_size, "-byte data section (truncated file?)");
    entry.offset = data_start + offs[0];
    entry.nbytes = offs[1] - offs[0];
    const uint64_t need = static_cast<uint64_t>(numel_of(entry.shape)) * dtype_size(entry.dtype);
    TITAN_CHECK(entry.nbytes == need, where, " spans ", entry.nbytes, " bytes but ", dtype_tag(entry.dtype),
                shape_str(entry.shape), " needs ", need);
    entries_.emplace(name, std::move(entry));
  }
}

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  auto it = entries_.find(name);
  TITAN_CHECK(it != entries_.end(), "safetensors ", path_, ": no tensor named '", name, "'");
  return it->second;
}

Tensor SafetensorsReader::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  Tensor t = Tensor::empty(e.shape, {.dtype = e.dtype});
  std::memcpy(t.data_ptr(), file_.bytes().data() + e.offset, e.nbytes);
  return t;
}

SafetensorsFile read_safetensors(const std::string& path) {
  SafetensorsReader reader(path);
  SafetensorsFile out;
  out.metadata = reader.metadata();
  for (const auto& [name, entry] : reader.entries()) out.tensors.emplace(name, reader.tensor(name));
  return out;
}

WrittenFile write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata, bool durable) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  std::vector<Tensor> ordered;
  for (auto& [name, t] : tensors) {
    Tensor c = t.detach();
    if (!c.is_contiguous()) c = Tensor::empty(t.sizes(), {.dtype = t.dtype()}).copy_(c);
    h[name] = {
        {"dtype", dtype_tag(c.dtype())}, {"shape", c.sizes()}, {"data_offsets", {off, off + c.nbytes()}}};
    off += c.nbytes();
    ordered.push_back(c);
  }
  std::string header = h.dump();
  // The format pads the header, not the tensors (the data section has no holes), so that the
  // data section, and a mapping of a file holding one dtype, starts 8-byte aligned.
  header.append((8 - header.size() % 8) % 8, ' ');
  OutFile f(path);
  uint64_t len = header.size();
  f.write(&len, 8);
  f.write(header.data(), header.size());
  for (const Tensor& c : ordered) f.write(c.data_ptr(), c.nbytes());
  if (durable) f.sync();
  f.close();
  return {f.bytes(), f.crc32c()};
}

}  // namespace titan::checkpoint
