#include "titan/checkpoint/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "titan/core/checked.h"
#include "titan/core/file_io.h"
#include "titan/core/json_fields.h"

namespace titan::checkpoint {

namespace {

using json = nlohmann::json;
using json_fields::JsonPath;

// The safetensors format's own bound on its header, which a damaged length is checked against
// before it is read.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

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
  const std::string file_where = "safetensors " + path;
  const uint64_t file_size = file_.size();
  TITAN_CHECK(file_size >= 8, file_where, ": file of ", file_size,
              " bytes is too short for the 8-byte header length (truncated file?)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file_.bytes().data(), 8);
  TITAN_CHECK(header_len <= file_size - 8 && header_len <= kMaxHeaderBytes, file_where, ": header length ",
              header_len, " exceeds the file size ", file_size, " or the format's limit of ", kMaxHeaderBytes,
              " bytes (truncated or damaged file?)");
  json h;
  try {
    h = json::parse(bytes().substr(8, header_len));
  } catch (const json::exception& e) {
    TITAN_CHECK(false, file_where, ": header is not valid JSON: ", e.what());
  }
  TITAN_CHECK(h.is_object(), file_where, ": header is not a JSON object");
  const JsonPath header_at{file_where, ""};
  const uint64_t data_start = 8 + header_len, data_size = file_size - data_start;
  // (begin, end, name) of every tensor, to check that they tile the data section.
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> ranges;
  for (auto& [name, e] : h.items()) {
    const JsonPath at = header_at / name;
    if (name == "__metadata__") {
      for (auto& [k, v] : json_fields::object(e, at).items())
        metadata_[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    const std::string where = file_where + ": tensor '" + name + "'";
    SafetensorsEntry entry;
    entry.dtype = parse_dtype_tag(json_fields::field<std::string>(e, "dtype", at), where);
    const json& shape = json_fields::array(json_fields::member(e, "shape", at), at / "shape");
    for (size_t d = 0; d < shape.size(); ++d)
      entry.shape.push_back(json_fields::as_integer(shape[d], (at / "shape")[d], 0));
    const json& offs = json_fields::array(json_fields::member(e, "data_offsets", at), at / "data_offsets");
    TITAN_CHECK(offs.size() == 2, where, ": data_offsets must be [begin, end], found ",
                json_fields::found(offs));
    const uint64_t begin = json_fields::as_unsigned(offs[0], (at / "data_offsets")[0]),
                   end = json_fields::as_unsigned(offs[1], (at / "data_offsets")[1]);
    TITAN_CHECK(begin <= end && end <= data_size, where, " has data_offsets [", begin, ", ", end, "]: ",
                begin > end ? "its end comes before its begin" : "they end outside the data section of ",
                begin > end ? "" : std::to_string(data_size) + " bytes (truncated file?)");
    entry.offset = data_start + begin;
    entry.nbytes = end - begin;
    uint64_t need = dtype_size(entry.dtype);
    for (int64_t d : entry.shape)
      need = checked_mul<uint64_t>(need, static_cast<uint64_t>(d), where + " byte size");
    TITAN_CHECK(entry.nbytes == need, where, " spans ", entry.nbytes, " bytes but ", dtype_tag(entry.dtype),
                shape_str(entry.shape), " needs ", need);
    ranges.emplace_back(begin, end, name);
    entries_.emplace(name, std::move(entry));
  }
  // The format has the tensors tile the data section: in order, without overlap, without holes.
  // Overlapping tensors would read one another's bytes as weights.
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (const auto& [begin, end, name] : ranges) {
    TITAN_CHECK(begin == covered, file_where, ": tensor '", name, "' has data_offsets [", begin, ", ", end,
                "], ",
                begin < covered ? "overlapping the tensor before it, which ends at byte "
                                : "leaving a gap after the tensor before it, which ends at byte ",
                covered,
                "; safetensors tensors must cover the data section in order, without overlap or gaps "
                "(a damaged file, or one not written by a safetensors library)");
    covered = end;
  }
  TITAN_CHECK(covered == data_size, file_where, ": the tensors cover ", covered, " bytes of the ", data_size,
              "-byte data section; the rest belongs to no tensor (a damaged file?)");
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
