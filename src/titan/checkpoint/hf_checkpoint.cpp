#include "titan/checkpoint/hf_checkpoint.h"

#include <fstream>
#include <set>
#include <sstream>

#include "titan/checkpoint/checkpoint.h"
#include "titan/checkpoint/problems.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/file_io.h"
#include "titan/core/json_fields.h"

namespace titan::checkpoint {

namespace {

using json = nlohmann::json;

std::string desc(DType dtype, const Shape& shape) {
  return std::string(dtype_name(dtype)) + shape_str(shape);
}

json read_json(const fs::path& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  TITAN_CHECK(in.good(), "Hugging Face checkpoint ", path.parent_path().string(), ": cannot read ",
              path.filename().string(), " (", what, ")");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    TITAN_CHECK(false, "Hugging Face checkpoint ", path.string(), ": not valid JSON: ", e.what());
  }
  return {};
}

}  // namespace

bool is_hf_dir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / kHfConfigFile, ec);
}

std::string torch_dtype_name(DType dtype) {
  TITAN_CHECK(dtype == kF32 || dtype == kBF16, "Hugging Face export: dtype ", dtype_name(dtype),
              " is not supported; use float32 or bfloat16");
  return dtype == kF32 ? "float32" : "bfloat16";
}

void save_hf(const fs::path& dir_arg, const json& config, const std::map<std::string, Tensor>& tensors,
             DType dtype, const AlsoWrite& also_write, const std::string& weights_file) {
  torch_dtype_name(dtype);  // refuses the dtypes titan does not export
  std::map<std::string, Tensor> cast;
  for (const auto& [name, t] : tensors) {
    TITAN_CHECK(is_floating(t.dtype()), "Hugging Face export: tensor '", name, "' is ", t.desc(),
                "; only floating tensors are weights");
    cast.emplace(name, t.detach().to(dtype));
  }
  write_directory_atomically(dir_arg, [&](const fs::path& stage) {
    write_safetensors((stage / weights_file).string(), cast, {{"format", "pt"}}, /*durable=*/true);
    const std::string text = config.dump(2) + "\n";
    OutFile f(stage / kHfConfigFile);
    f.write(text.data(), text.size());
    f.sync();
    f.close();
    if (also_write) also_write(stage);
  });
}

HfReader::HfReader(fs::path dir, const std::string& weights_file) : dir_(std::move(dir)) {
  const std::string where = "Hugging Face checkpoint " + dir_.string();
  const std::string index_file = weights_file + ".index.json";
  TITAN_CHECK(is_hf_dir(dir_), where, ": no ", kHfConfigFile,
              "; a Hugging Face model folder holds config.json and ", weights_file);
  config_ = read_json(dir_ / kHfConfigFile, "the model's hyperparameters");
  TITAN_CHECK(config_.is_object(), where, ": ", kHfConfigFile, " is not a JSON object");
  std::error_code ec;
  auto open = [&](const std::string& file) -> const SafetensorsReader& {
    auto it = files_.find(file);
    if (it == files_.end()) {
      TITAN_CHECK(fs::is_regular_file(dir_ / file, ec), where, ": ", file, " is missing",
                  file == weights_file ? "" : " (" + index_file + " lists it)");
      it = files_.emplace(file, std::make_unique<SafetensorsReader>((dir_ / file).string())).first;
    }
    return *it->second;
  };
  if (fs::is_regular_file(dir_ / weights_file, ec)) {
    const SafetensorsReader& f = open(weights_file);
    for (const auto& [name, e] : f.entries()) tensors_.emplace(name, &f);
    return;
  }
  TITAN_CHECK(fs::is_regular_file(dir_ / index_file, ec), where, ": neither ", weights_file, " nor ",
              index_file, " is there; the weights are missing");
  const json index = read_json(dir_ / index_file, "which shard file holds each tensor");
  const std::string index_where = (dir_ / index_file).string();
  const json_fields::JsonPath index_at{index_where, ""};
  const json& weight_map =
      json_fields::object(json_fields::member(index, "weight_map", index_at), index_at / "weight_map");
  Problems problems;
  for (const auto& [name, file] : weight_map.items()) {
    if (!file.is_string() || !is_plain_file_name(file.get<std::string>())) {
      problems.add("tensor '" + name + "' is mapped to " + file.dump() +
                   ", not the name of a file in the folder");
      continue;
    }
    const SafetensorsReader& f = open(file.get<std::string>());
    if (f.entries().count(name))
      tensors_.emplace(name, &f);
    else
      problems.add("tensor '" + name + "' is not in " + file.get<std::string>() +
                   ", where the index puts it");
  }
  for (const auto& [file, f] : files_)
    for (const auto& [name, e] : f->entries()) {
      auto it = tensors_.find(name);
      if (it == tensors_.end())
        problems.add("tensor '" + name + "' is in " + file + " but not in the index");
      else if (it->second != f.get())
        problems.add("tensor '" + name + "' is in " + file + " but the index puts it in another file");
    }
  TITAN_CHECK(problems.empty(), index_where, " does not match its shard files:", problems.str(),
              "\nThe folder is damaged or was copied in part; copy it again");
}

HfReader::~HfReader() = default;

std::map<std::string, Tensor> HfReader::load(const std::map<std::string, Shape>& expected,
                                             std::optional<DType> dtype) const {
  Problems problems;
  for (const auto& [name, shape] : expected) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      problems.add("missing tensor '" + name + "' (expected shape " + shape_str(shape) + ")");
      continue;
    }
    const SafetensorsEntry& e = it->second->entry(name);
    const std::string file = fs::path(it->second->path()).filename().string();
    if (e.shape != shape)
      problems.add("tensor '" + name + "' in " + file + " is " + desc(e.dtype, e.shape) +
                   ", expected shape " + shape_str(shape));
    else if (!is_floating(e.dtype))
      problems.add("tensor '" + name + "' in " + file + " is " + desc(e.dtype, e.shape) +
                   ", not a floating dtype");
  }
  for (const auto& [name, f] : tensors_)
    if (!expected.count(name))
      problems.add("unexpected tensor '" + name + "' in " + fs::path(f->path()).filename().string());
  TITAN_CHECK(problems.empty(), "Hugging Face checkpoint ", dir_.string(),
              " does not hold the model its config.json describes:", problems.str(),
              "\nThe weights and config.json come from different models, or the folder is damaged. Nothing "
              "was loaded.");
  std::map<std::string, Tensor> out;
  for (const auto& [name, shape] : expected) {
    Tensor t = tensors_.at(name)->tensor(name);
    out.emplace(name, dtype ? t.to(*dtype) : t);
  }
  return out;
}

}  // namespace titan::checkpoint
