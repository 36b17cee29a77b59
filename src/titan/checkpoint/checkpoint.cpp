#include "titan/checkpoint/checkpoint.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include "titan/checkpoint/problems.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/checked.h"
#include "titan/core/crc32c.h"
#include "titan/core/file_io.h"
#include "titan/core/json_fields.h"

namespace titan::checkpoint {

namespace {

using json = nlohmann::json;
using json_fields::JsonPath;

constexpr const char* kFormat = "titan-checkpoint";
constexpr int kVersion = 1;

std::string desc(DType dtype, const Shape& shape) {
  return std::string(dtype_name(dtype)) + shape_str(shape);
}

int64_t overlap_volume(const ShardLocation& a, const ShardLocation& b) {
  int64_t v = 1;
  for (size_t d = 0; d < a.offsets.size(); ++d)
    v *= std::max<int64_t>(0, std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]) -
                                  std::max(a.offsets[d], b.offsets[d]));
  return v;
}

// Structure a loader relies on: names inside the folder, every piece inside its tensor, and
// the pieces of each tensor covering it exactly once.
void check_structure(const Metadata& m, Problems& problems) {
  for (const auto& [file, meta] : m.files)
    if (!is_plain_file_name(file))
      problems.add("file name \"" + file + "\" is not a plain file name inside the checkpoint folder");
  std::set<std::pair<std::string, std::string>> keys;
  for (const auto& [name, t] : m.tensors) {
    const std::string what = "tensor '" + name + "' (" + desc(t.dtype, t.shape) + ")";
    if (std::any_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d < 0; })) {
      problems.add(what + " has a negative size");
      continue;
    }
    if (t.shards.empty()) problems.add(what + " lists no shards");
    int64_t volume = 0;
    bool boxes_ok = true;
    for (const ShardLocation& s : t.shards) {
      if (!is_plain_file_name(s.file)) {
        problems.add(what + ": shard file name \"" + s.file +
                     "\" is not a plain file name inside the checkpoint folder");
        boxes_ok = false;
        continue;
      }
      if (!m.files.count(s.file))
        problems.add(what + ": shard file " + s.file + " is not listed under \"files\"");
      if (!keys.insert({s.file, s.key}).second)
        problems.add(what + ": key '" + s.key + "' of " + s.file + " is used by two shards");
      bool inside = s.offsets.size() == t.shape.size() && s.sizes.size() == t.shape.size();
      for (size_t d = 0; inside && d < t.shape.size(); ++d)
        inside = s.offsets[d] >= 0 && s.sizes[d] >= 0 && s.offsets[d] + s.sizes[d] <= t.shape[d];
      if (!inside) {
        problems.add(what + ": shard at offsets " + shape_str(s.offsets) + " of sizes " + shape_str(s.sizes) +
                     " is not a box inside the tensor");
        boxes_ok = false;
        continue;
      }
      volume += numel_of(s.sizes);
    }
    if (!boxes_ok) continue;
    for (size_t i = 0; i < t.shards.size(); ++i)
      for (size_t j = i + 1; j < t.shards.size(); ++j)
        if (numel_of(t.shards[i].sizes) && numel_of(t.shards[j].sizes) &&
            overlap_volume(t.shards[i], t.shards[j]))
          problems.add(what + ": shards " + std::to_string(i) + " and " + std::to_string(j) + " overlap");
    if (volume != numel_of(t.shape))
      problems.add(what + ": its shards hold " + std::to_string(volume) + " of its " +
                   std::to_string(numel_of(t.shape)) + " elements");
  }
}

json to_json(const Metadata& m) {
  json tensors = json::object();
  for (const auto& [name, t] : m.tensors) {
    json shards = json::array();
    for (const ShardLocation& s : t.shards)
      shards.push_back({{"file", s.file}, {"key", s.key}, {"offsets", s.offsets}, {"sizes", s.sizes}});
    tensors[name] = {{"dtype", dtype_tag(t.dtype)}, {"shape", t.shape}, {"shards", std::move(shards)}};
  }
  json files = json::object();
  for (const auto& [name, f] : m.files) files[name] = {{"bytes", f.bytes}, {"crc32c", f.crc32c}};
  return {{"format", kFormat},
          {"version", kVersion},
          {"tensors", std::move(tensors)},
          {"files", std::move(files)},
          {"state", m.state}};
}

// A shape, or a piece's offsets or sizes: sizes of dimensions, each at most 2^62 so that an offset
// plus a size cannot overflow, and together at most 2^63 - 1 elements.
Shape read_dims(const json& value, const JsonPath& at) {
  constexpr int64_t kMaxDim = int64_t{1} << 62;
  Shape dims;
  int64_t numel = 1;
  for (size_t d = 0; d < json_fields::array(value, at).size(); ++d) {
    dims.push_back(json_fields::as_integer(value[d], at[d], 0, kMaxDim));
    std::optional<int64_t> n = product(numel, dims.back());
    TITAN_CHECK(n.has_value(), at.str(), " ", shape_str(dims),
                " holds more than 2^63 elements; the file is damaged or was edited");
    numel = *n;
  }
  return dims;
}

// The fields of "state" that the trainer writes and every reader of a checkpoint relies on, so
// that a damaged or hand-edited value is refused here, naming it, rather than used.
void check_state(const json& state, const JsonPath& at) {
  // A bound far past any run (10^12 optimizer steps take 30 years at 1000 steps a second) that
  // keeps products of a step with a batch's tokens or a schedule's length well inside int64.
  constexpr int64_t kMaxStep = 1'000'000'000'000;
  json_fields::object(state, at);
  json_fields::field_or<bool>(state, "model_only", false, at);
  if (state.contains("step")) json_fields::as_integer(state["step"], at / "step", 0, kMaxStep);
  for (const char* key : {"lr_scheduler", "data", "rng"})
    if (state.contains(key)) json_fields::object(state[key], at / key);
  if (state.contains("lr_scheduler") && state["lr_scheduler"].contains("step"))
    json_fields::as_integer(state["lr_scheduler"]["step"], at / "lr_scheduler" / "step", 0, kMaxStep);
  if (state.contains("data"))
    for (const char* key : {"epoch", "index", "windows"})
      if (state["data"].contains(key)) json_fields::as_integer(state["data"][key], at / "data" / key, 0);
  if (state.contains("rng"))
    for (const char* key : {"seed", "offset"})
      if (state["rng"].contains(key)) json_fields::as_unsigned(state["rng"][key], at / "rng" / key);
}

Metadata from_json(const json& j, const std::string& where) {
  Metadata m;
  const JsonPath root{where, ""};
  TITAN_CHECK(j.is_object() && j.value("format", json()) == kFormat, where,
              ": not a titan checkpoint (\"format\" is not \"", kFormat, "\")");
  const int64_t version = json_fields::field<int64_t>(j, "version", root);
  TITAN_CHECK(version == kVersion, where, ": format version ", version, ", this build reads version ",
              kVersion);
  const JsonPath files_at = root / "files";
  for (const auto& [name, f] : json_fields::object(json_fields::member(j, "files", root), files_at).items())
    m.files[name] = {json_fields::field<uint64_t>(f, "bytes", files_at / name),
                     json_fields::field<uint32_t>(f, "crc32c", files_at / name)};
  const JsonPath tensors_at = root / "tensors";
  for (const auto& [name, t] :
       json_fields::object(json_fields::member(j, "tensors", root), tensors_at).items()) {
    const JsonPath at = tensors_at / name;
    TensorMeta tm;
    tm.dtype =
        parse_dtype_tag(json_fields::field<std::string>(t, "dtype", at), where + ": tensor '" + name + "'");
    tm.shape = read_dims(json_fields::member(t, "shape", at), at / "shape");
    const json& shards = json_fields::array(json_fields::member(t, "shards", at), at / "shards");
    for (size_t i = 0; i < shards.size(); ++i) {
      const JsonPath s = (at / "shards")[i];
      tm.shards.push_back({json_fields::field<std::string>(shards[i], "file", s),
                           json_fields::field<std::string>(shards[i], "key", s),
                           read_dims(json_fields::member(shards[i], "offsets", s), s / "offsets"),
                           read_dims(json_fields::member(shards[i], "sizes", s), s / "sizes")});
    }
    m.tensors.emplace(name, std::move(tm));
  }
  const json& state = json_fields::optional_member(j, "state", root);
  if (!state.is_null()) {
    check_state(state, root / "state");
    m.state = state;
  }
  return m;
}

// "shard-00002-of-00004.safetensors": rank 2 of 4.
std::string shard_file(int rank, int ranks) {
  char name[64];
  std::snprintf(name, sizeof name, "shard-%05d-of-%05d.safetensors", rank, ranks);
  return name;
}

std::string share_file(int rank) {
  return "share-" + std::to_string(rank) + ".json";
}

// The whole of `in` as JSON; `what` names it in the error.
json parse_json(std::istream& in, const std::string& what) {
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    TITAN_CHECK(false, what, ": not valid JSON: ", e.what());
  }
  return {};
}

void pause_for_tests() {
  if (const char* ms = std::getenv("TITAN_CHECKPOINT_TEST_DELAY_MS"))
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoll(ms)));
}

void remove_tree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  TITAN_CHECK(!ec, "checkpoint: cannot remove ", p.string(), ": ", ec.message());
}

// Copies a box of elements of `es` bytes between two strided layouts (strides in elements).
void copy_box(const char* src, char* dst, Shape sizes, Shape src_strides, Shape dst_strides, size_t es) {
  // Dims that are contiguous together on both sides merge, so a whole tensor is one memcpy.
  for (size_t d = sizes.size(); d-- > 1;) {
    if (src_strides[d - 1] == src_strides[d] * sizes[d] && dst_strides[d - 1] == dst_strides[d] * sizes[d]) {
      sizes[d - 1] *= sizes[d];
      src_strides[d - 1] = src_strides[d];
      dst_strides[d - 1] = dst_strides[d];
      sizes.erase(sizes.begin() + static_cast<int64_t>(d));
      src_strides.erase(src_strides.begin() + static_cast<int64_t>(d));
      dst_strides.erase(dst_strides.begin() + static_cast<int64_t>(d));
    }
  }
  const size_t n = sizes.size();
  if (n == 0) {
    std::memcpy(dst, src, es);
    return;
  }
  const bool rows = src_strides[n - 1] == 1 && dst_strides[n - 1] == 1;
  const int64_t outer = numel_of(sizes) / std::max<int64_t>(1, sizes[n - 1]);
  Shape index(n, 0);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t s = 0, t = 0;
    for (size_t d = 0; d + 1 < n; ++d) {
      s += index[d] * src_strides[d];
      t += index[d] * dst_strides[d];
    }
    if (rows) {
      std::memcpy(dst + t * static_cast<int64_t>(es), src + s * static_cast<int64_t>(es),
                  static_cast<size_t>(sizes[n - 1]) * es);
    } else {
      for (int64_t i = 0; i < sizes[n - 1]; ++i)
        std::memcpy(dst + (t + i * dst_strides[n - 1]) * static_cast<int64_t>(es),
                    src + (s + i * src_strides[n - 1]) * static_cast<int64_t>(es), es);
    }
    for (size_t d = n - 1; d-- > 0;) {
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace

Piece whole(const Tensor& t) {
  return {t, Shape(t.sizes().size(), 0), t.sizes()};
}

Metadata write_shard_file(const fs::path& dir, const std::string& file, const Pieces& pieces) {
  TITAN_CHECK(is_plain_file_name(file), "checkpoint: shard file name \"", file,
              "\" must be a plain file name");
  Metadata share;
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, p] : pieces) {
    tensors.emplace(name, p.data);
    share.tensors[name] = {p.data.dtype(), p.global_shape, {{file, name, p.offsets, p.data.sizes()}}};
  }
  WrittenFile w = write_safetensors((dir / file).string(), tensors, {}, /*durable=*/true);
  share.files[file] = {w.bytes, w.crc32c};
  return share;
}

void merge(Metadata& into, const Metadata& share) {
  for (const auto& [file, meta] : share.files)
    TITAN_CHECK(into.files.emplace(file, meta).second, "checkpoint: two ranks wrote shard file ", file);
  for (const auto& [name, t] : share.tensors) {
    auto [it, fresh] = into.tensors.emplace(name, t);
    if (fresh) continue;
    TITAN_CHECK(it->second.dtype == t.dtype && it->second.shape == t.shape, "checkpoint: tensor '", name,
                "' is ", desc(it->second.dtype, it->second.shape), " on one rank and ",
                desc(t.dtype, t.shape), " on another");
    it->second.shards.insert(it->second.shards.end(), t.shards.begin(), t.shards.end());
  }
}

void write_metadata(const fs::path& dir, const Metadata& m) {
  Problems problems;
  check_structure(m, problems);
  TITAN_CHECK(problems.empty(), "checkpoint: refusing to write ", (dir / kMetadataFile).string(), ":",
              problems.str());
  std::string text = to_json(m).dump(1);
  OutFile f(dir / kMetadataFile);
  f.write(text.data(), text.size());
  f.sync();
  f.close();
}

Metadata read_metadata(const fs::path& dir) {
  const fs::path path = dir / kMetadataFile;
  std::ifstream in(path, std::ios::binary);
  TITAN_CHECK(in.good(), "checkpoint ", dir.string(), ": no ", kMetadataFile,
              "; an incomplete or foreign folder (a complete checkpoint always has one)");
  Metadata m = from_json(parse_json(in, "checkpoint " + path.string()), path.string());
  Problems problems;
  check_structure(m, problems);
  TITAN_CHECK(problems.empty(), "checkpoint ", path.string(), " is inconsistent:", problems.str(),
              "\nThe file was edited or damaged; load another checkpoint");
  return m;
}

fs::path staging_dir(const fs::path& dir) {
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "." + name + ".partial".
  std::string name = ".";
  name += dir.filename().string();
  name += ".partial";
  return dir.parent_path() / name;
}

bool is_staging_dir(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.size() > 9 && name.starts_with(".") && name.ends_with(".partial");
}

void write_directory_atomically(const fs::path& dir_arg, const std::function<void(const fs::path&)>& fill) {
  const fs::path dir = fs::absolute(dir_arg);
  const fs::path stage = staging_dir(dir);
  remove_tree(stage);
  std::error_code ec;
  fs::create_directories(stage, ec);
  TITAN_CHECK(!ec, "checkpoint: cannot create ", stage.string(), ": ", ec.message());
  try {
    fill(stage);
    sync_directory(stage);
    rename_directory(stage, dir);
    sync_directory(dir.parent_path());
  } catch (...) {
    fs::remove_all(stage, ec);
    throw;
  }
  // After replacing an existing folder the staging name holds the old one.
  remove_tree(stage);
}

void save(const fs::path& dir, const Pieces& pieces, const json& state, const AlsoWrite& also_write) {
  write_directory_atomically(dir, [&](const fs::path& stage) {
    pause_for_tests();
    Metadata m = write_shard_file(stage, shard_file(0, 1), pieces);
    m.state = state;
    write_metadata(stage, m);
    if (also_write) also_write(stage);
  });
}

void save_collective(const fs::path& dir, const Pieces& pieces, const json& state,
                     dist::ProcessGroup& group) {
  const int rank = group.rank(), ranks = group.size();
  if (ranks == 1) return save(dir, pieces, state);
  // Each step ends in an all-reduce of "did it fail anywhere", so that a rank that fails makes
  // the others fail with it instead of leaving them waiting.
  int agreements = 0;
  bool shared_failure = false;
  auto agree = [&](const std::string& error, const char* step) {
    ++agreements;
    const double failed = group.all_reduce(error.empty() ? 0.0 : 1.0, dist::ReduceOp::sum);
    shared_failure = failed > 0;
    TITAN_CHECK(error.empty(), error);
    TITAN_CHECK(failed == 0, "checkpoint ", dir.string(), ": ", failed, " other rank(s) failed to ", step,
                "; see their errors. Nothing was saved under this name");
  };
  auto attempt = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  auto write_mine = [&](const fs::path& stage) {
    pause_for_tests();
    Metadata share = write_shard_file(stage, shard_file(rank, ranks), pieces);
    if (rank == 0) return share;
    const std::string text = to_json(share).dump();
    OutFile f(stage / share_file(rank));
    f.write(text.data(), text.size());
    f.sync();
    f.close();
    return share;
  };
  if (rank != 0) {
    agree("", "create the staging folder");
    agree(attempt([&] { write_mine(staging_dir(fs::absolute(dir))); }), "write their shard files");
    agree("", "commit the checkpoint");
    return;
  }
  std::string error = attempt([&] {
    write_directory_atomically(dir, [&](const fs::path& stage) {
      agree("", "create the staging folder");
      Metadata m;
      agree(attempt([&] { m = write_mine(stage); }), "write their shard files");
      for (int r = 1; r < ranks; ++r) {
        const fs::path path = stage / share_file(r);
        std::ifstream in(path, std::ios::binary);
        merge(m, from_json(parse_json(in, "checkpoint: rank " + std::to_string(r) +
                                              "'s share of the metadata, " + path.string() + ","),
                           path.string()));
        fs::remove(path);
      }
      m.state = state;
      write_metadata(stage, m);
    });
  });
  // Unless every rank already knows of the failure, the others wait in the agreement after the
  // step that failed here (the first, when the staging folder could not be made).
  TITAN_CHECK(!shared_failure, error);
  agree(error, agreements == 0 ? "create the staging folder" : "commit the checkpoint");
}

Reader::Reader(fs::path dir) : dir_(std::move(dir)), meta_(read_metadata(dir_)) {}

Reader::~Reader() = default;

const SafetensorsReader& Reader::file(const std::string& name) {
  auto it = files_.find(name);
  if (it != files_.end()) return *it->second;
  const fs::path path = dir_ / name;
  const FileMeta& want = meta_.files.at(name);
  std::error_code ec;
  fs::file_status status = fs::symlink_status(path, ec);
  TITAN_CHECK(status.type() == fs::file_type::regular, "checkpoint ", dir_.string(), ": shard file ", name,
              status.type() == fs::file_type::not_found ? " is missing" : " is not a regular file",
              "; the checkpoint is incomplete: copy it again or load another one");
  const uint64_t size = fs::file_size(path, ec);
  TITAN_CHECK(!ec && size == want.bytes, "checkpoint ", dir_.string(), ": shard file ", name, " is ", size,
              " bytes, but ", kMetadataFile, " says ", want.bytes,
              (size < want.bytes ? " (truncated: an interrupted copy or a full disk?)" : ""),
              "; copy the checkpoint again or load another one");
  auto open = std::make_unique<SafetensorsReader>(path.string());
  const uint32_t crc = crc32c(open->bytes());
  TITAN_CHECK(crc == want.crc32c, "checkpoint ", dir_.string(), ": shard file ", name, " has CRC-32C ", crc,
              " but ", kMetadataFile, " says ", want.crc32c,
              ": its contents changed after saving (disk or copy error); load another checkpoint");
  Problems problems;
  std::set<std::string> listed;
  for (const auto& [tensor, t] : meta_.tensors) {
    for (const ShardLocation& s : t.shards) {
      if (s.file != name) continue;
      listed.insert(s.key);
      auto e = open->entries().find(s.key);
      if (e == open->entries().end())
        problems.add("tensor '" + tensor + "': key '" + s.key + "' is not in the file");
      else if (e->second.dtype != t.dtype || e->second.shape != s.sizes)
        problems.add("tensor '" + tensor + "': key '" + s.key + "' is " +
                     desc(e->second.dtype, e->second.shape) + " in the file, " + kMetadataFile + " says " +
                     desc(t.dtype, s.sizes));
    }
  }
  for (const auto& [key, e] : open->entries())
    if (!listed.count(key)) problems.add("key '" + key + "' is in the file but not in " + kMetadataFile);
  TITAN_CHECK(problems.empty(), "checkpoint ", dir_.string(), ": shard file ", name, " does not match ",
              kMetadataFile, ":", problems.str());
  return *files_.emplace(name, std::move(open)).first->second;
}

void Reader::load(const Pieces& targets, const LoadOptions& options) {
  Problems problems;
  for (const auto& [name, p] : targets) {
    auto it = meta_.tensors.find(name);
    const std::string want = desc(p.data.dtype(), p.global_shape);
    if (it == meta_.tensors.end()) {
      problems.add("missing tensor '" + name + "': expected " + want + ", the checkpoint has none");
      continue;
    }
    const TensorMeta& t = it->second;
    const bool cast_ok = options.allow_cast && is_floating(t.dtype) && is_floating(p.data.dtype());
    if (t.shape != p.global_shape || (t.dtype != p.data.dtype() && !cast_ok)) {
      problems.add("tensor '" + name + "': expected " + want + ", the checkpoint has " +
                   desc(t.dtype, t.shape));
      continue;
    }
    bool inside = p.offsets.size() == t.shape.size() && p.data.dim() == static_cast<int64_t>(t.shape.size());
    for (size_t d = 0; inside && d < t.shape.size(); ++d)
      inside = p.offsets[d] >= 0 && p.offsets[d] + p.data.size(static_cast<int64_t>(d)) <= t.shape[d];
    TITAN_CHECK(inside, "checkpoint load: the piece of '", name, "' at offsets ", shape_str(p.offsets),
                " of sizes ", shape_str(p.data.sizes()), " is not inside its global shape ",
                shape_str(t.shape));
  }
  for (const auto& [name, t] : meta_.tensors)
    if (name.starts_with(options.scope) && !targets.count(name))
      problems.add("unexpected tensor '" + name + "' (" + desc(t.dtype, t.shape) +
                   "): nothing here has that name");
  TITAN_CHECK(
      problems.empty(), "checkpoint ", dir_.string(), " does not fit:", problems.str(),
      "\nIt was saved for another model or config (its ", kMetadataFile,
      " holds that config under \"state\"); load a matching checkpoint or change the config to match. "
      "Nothing was loaded.");
  // Every file is verified before the first byte is copied, so a bad file leaves targets alone.
  for (const auto& [name, p] : targets)
    for (const ShardLocation& s : meta_.tensors.at(name).shards) file(s.file);
  for (const auto& [name, p] : targets) read_into(name, p);
}

void Reader::read_into(const std::string& name, const Piece& target) {
  const TensorMeta& t = meta_.tensors.at(name);
  Tensor dest = target.data.detach();
  Tensor out = dest.dtype() == t.dtype ? dest : Tensor::empty(dest.sizes(), {.dtype = t.dtype});
  const size_t es = dtype_size(t.dtype);
  const size_t rank = t.shape.size();
  for (const ShardLocation& s : t.shards) {
    Shape lo(rank), sizes(rank);
    bool overlaps = true;
    for (size_t d = 0; d < rank; ++d) {
      lo[d] = std::max(s.offsets[d], target.offsets[d]);
      int64_t hi =
          std::min(s.offsets[d] + s.sizes[d], target.offsets[d] + dest.size(static_cast<int64_t>(d)));
      sizes[d] = hi - lo[d];
      overlaps = overlaps && sizes[d] > 0;
    }
    if (!overlaps) continue;
    const SafetensorsReader& f = file(s.file);
    const SafetensorsEntry& e = f.entry(s.key);
    const Shape src_strides = contiguous_strides(s.sizes);
    int64_t src_at = 0, dst_at = 0;
    for (size_t d = 0; d < rank; ++d) {
      src_at += (lo[d] - s.offsets[d]) * src_strides[d];
      dst_at += (lo[d] - target.offsets[d]) * out.stride(static_cast<int64_t>(d));
    }
    const char* src = f.bytes().data() + e.offset + src_at * static_cast<int64_t>(es);
    char* dst = static_cast<char*>(out.data_ptr()) + dst_at * static_cast<int64_t>(es);
    copy_box(src, dst, sizes, src_strides, out.strides(), es);
  }
  if (!out.is_same(dest)) dest.copy_(out);
}

}  // namespace titan::checkpoint
