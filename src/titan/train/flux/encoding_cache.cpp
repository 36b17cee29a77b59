#include "titan/train/flux/encoding_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "titan/checkpoint/safetensors.h"
#include "titan/core/error.h"
#include "titan/core/file_io.h"

namespace titan::train::flux {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kIndexFile = "index.json";
constexpr const char* kEmptyPromptFile = "empty_prompt.safetensors";
constexpr const char* kFormat = "titan.flux.encoding_cache.v1";

std::string shard_name(int64_t k) {
  char name[64];
  std::snprintf(name, sizeof(name), "shard-%05lld.safetensors", static_cast<long long>(k));
  return name;
}

// Written to a temporary name, fsync'ed, then renamed: a reader (or a resumed run) sees the whole
// file or none.
void write_whole(const fs::path& path, const std::map<std::string, Tensor>& tensors,
                 const std::map<std::string, std::string>& metadata) {
  const fs::path tmp = path.string() + ".tmp";
  checkpoint::write_safetensors(tmp.string(), tensors, metadata, /*durable=*/true);
  fs::rename(tmp, path);
  sync_directory(path.parent_path());
}

// Whether shard `path` was already written by a run of the same description; throws when it is
// there but from another one, so that a cache never mixes encoders or image sizes.
bool shard_is_done(const fs::path& path, const std::string& description) {
  if (!fs::exists(path)) return false;
  const checkpoint::SafetensorsReader reader(path.string());
  const auto it = reader.metadata().find("description");
  const std::string found = it == reader.metadata().end() ? "(none)" : it->second;
  TITAN_CHECK(found == description, "titan flux encode: ", path.string(), " was written for '", found,
              "', not for this run's '", description,
              "'; write the cache to another folder, or delete that one to start over");
  return true;
}

// The batch's rows stacked: each name's tensors are [b, ...] with the same row shape.
std::map<std::string, Tensor> stack_rows(const std::vector<std::map<std::string, Tensor>>& batches) {
  std::map<std::string, Tensor> out;
  if (batches.empty()) return out;
  for (const auto& [name, first] : batches.front()) {
    int64_t rows = 0;
    for (const auto& b : batches) {
      const auto it = b.find(name);
      TITAN_CHECK(it != b.end() && it->second.dim() == first.dim() && it->second.dtype() == first.dtype(),
                  "titan flux encode: the encoder returned '", name, "' as ", first.desc(),
                  " for one batch and differently (or not at all) for another");
      for (int64_t d = 1; d < first.dim(); ++d)
        TITAN_CHECK(it->second.size(d) == first.size(d), "titan flux encode: '", name, "' rows are ",
                    first.desc(), " in one batch and ", it->second.desc(), " in another");
      rows += it->second.size(0);
    }
    Shape shape = first.sizes();
    shape[0] = rows;
    Tensor all = Tensor::empty(shape, {.dtype = first.dtype()});
    int64_t at = 0;
    for (const auto& b : batches) {
      const Tensor& t = b.at(name);
      all.narrow(0, at, t.size(0)).copy_(t);
      at += t.size(0);
    }
    out.emplace(name, std::move(all));
  }
  return out;
}

std::string json_array(const std::vector<std::string>& values) { return json(values).dump(); }

}  // namespace

EncodingCacheReport write_encoding_cache(const data::ImageCaptionDataset& dataset, const EncodeSamples& encode,
                                         const std::map<std::string, Tensor>& empty_prompt,
                                         const EncodingCacheOptions& options, dist::ProcessGroup& group,
                                         const CacheProgress& progress) {
  TITAN_CHECK(!options.out.empty(), "titan flux encode: no output folder given");
  TITAN_CHECK(options.shard_samples > 0 && options.batch > 0, "titan flux encode: samples per shard and batch must be "
              "positive, got ", options.shard_samples, " and ", options.batch);
  const fs::path out(options.out);
  fs::create_directories(out);
  EncodingCacheReport report;
  const int64_t n = dataset.size();
  report.shards = (n + options.shard_samples - 1) / options.shard_samples;
  const int rank = group.rank(), world = group.size();

  std::vector<int64_t> mine;
  int64_t total = 0;
  for (int64_t k = rank; k < report.shards; k += world) {
    if (shard_is_done(out / shard_name(k), options.description)) {
      ++report.shards_kept;
      continue;
    }
    mine.push_back(k);
    total += std::min(options.shard_samples, n - k * options.shard_samples);
  }

  int64_t done = 0;
  for (int64_t k : mine) {
    const int64_t first = k * options.shard_samples, last = std::min(n, first + options.shard_samples);
    std::vector<std::map<std::string, Tensor>> batches;
    std::vector<int64_t> kept;
    std::vector<std::string> keys, captions;
    std::vector<Tensor> images;
    std::vector<std::string> batch_captions;
    auto flush = [&] {
      if (images.empty()) return;
      std::map<std::string, Tensor> encoded = encode(images, batch_captions);
      for (const auto& [name, t] : encoded)
        TITAN_CHECK(t.dim() >= 1 && t.size(0) == static_cast<int64_t>(images.size()), "titan flux encode: the "
                    "encoder returned '", name, "' as ", t.desc(), " for a batch of ", images.size());
      TITAN_CHECK(!encoded.contains("index"), "titan flux encode: 'index' is the cache's own tensor");
      batches.push_back(std::move(encoded));
      done += static_cast<int64_t>(images.size());
      images.clear();
      batch_captions.clear();
      if (progress) progress(done, total);
    };
    for (int64_t i = first; i < last; ++i) {
      data::ImageSample sample;
      std::string skip;
      try {
        sample = dataset.read(i);
      } catch (const Error&) {
        if (options.bad_data == data::BadData::error) throw;
        skip = "image does not decode";
      }
      std::optional<Tensor> image;
      if (skip.empty()) {
        image = data::preprocess_image(sample.image, options.transform, static_cast<uint64_t>(i));
        TITAN_CHECK(image.has_value() || options.bad_data == data::BadData::skip, "titan flux encode: sample ", i,
                    " ('", sample.key, "') is ", sample.image.width, "x", sample.image.height,
                    ", smaller than the image size ", options.transform.size,
                    " on a side; with --bad-data skip such images are left out and counted");
        if (!image) skip = "image smaller than the image size";
      }
      if (!skip.empty()) {
        ++report.skipped[skip];
        ++done;
        continue;
      }
      kept.push_back(i);
      keys.push_back(sample.key);
      captions.push_back(sample.caption);
      images.push_back(std::move(*image));
      batch_captions.push_back(sample.caption);
      if (static_cast<int64_t>(images.size()) == options.batch) flush();
    }
    flush();
    std::map<std::string, Tensor> tensors = stack_rows(batches);
    tensors["index"] = Tensor::from_vector<int64_t>(kept, {static_cast<int64_t>(kept.size())});
    write_whole(out / shard_name(k), tensors,
                {{"format", kFormat},
                 {"description", options.description},
                 {"keys", json_array(keys)},
                 {"captions", json_array(captions)}});
    report.samples += static_cast<int64_t>(kept.size());
  }

  group.barrier().wait();
  if (rank == 0) {
    write_whole(out / kEmptyPromptFile, empty_prompt, {{"format", kFormat}, {"description", options.description}});
    json index = {{"format", kFormat}, {"description", options.description}, {"data_set_samples", n},
                  {"shard_samples", options.shard_samples}, {"image_size", options.transform.size},
                  {"scaling_factor", options.scaling_factor}, {"shift_factor", options.shift_factor}};
    int64_t samples = 0;
    json shards = json::array();
    for (int64_t k = 0; k < report.shards; ++k) {
      const checkpoint::SafetensorsReader reader((out / shard_name(k)).string());
      const int64_t rows = reader.entry("index").shape.empty() ? 0 : reader.entry("index").shape[0];
      shards.push_back({{"file", shard_name(k)}, {"samples", rows}});
      samples += rows;
    }
    index["shards"] = shards;
    index["samples"] = samples;
    const fs::path tmp = out / (std::string(kIndexFile) + ".tmp");
    {
      std::ofstream f(tmp);
      f << index.dump(1) << "\n";
      TITAN_CHECK(f.good(), "titan flux encode: could not write ", tmp.string());
    }
    fs::rename(tmp, out / kIndexFile);
    sync_directory(out);
  }
  group.barrier().wait();
  return report;
}

struct EncodingCache::State {
  std::string dir, description;
  double scaling_factor = 0, shift_factor = 0;
  std::vector<std::unique_ptr<checkpoint::SafetensorsReader>> shards;
  std::vector<std::vector<std::string>> captions;
  std::vector<int64_t> starts;  // first cache position of each shard, then the total
  std::map<std::string, Tensor> empty_prompt;
};

EncodingCache::EncodingCache(const std::string& dir) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.dir = dir;
  const fs::path root(dir), index_path = root / kIndexFile;
  TITAN_CHECK(fs::exists(index_path), "encoding cache: ", index_path.string(),
              " is missing: the cache was not finished (run titan flux encode again to complete it)");
  json index;
  try {
    std::ifstream f(index_path);
    index = json::parse(f);
    TITAN_CHECK(index.value("format", "") == kFormat, "encoding cache: ", index_path.string(), " is not a ", kFormat,
                " index");
    s.description = index.at("description").get<std::string>();
    TITAN_CHECK(index.contains("scaling_factor") && index.contains("shift_factor"), "encoding cache: ",
                index_path.string(),
                " records no autoencoder scaling_factor and shift_factor (a cache from before titan recorded them): "
                "run titan flux encode again into a new folder");
    s.scaling_factor = index.at("scaling_factor").get<double>();
    s.shift_factor = index.at("shift_factor").get<double>();
    s.starts.push_back(0);
    for (const json& shard : index.at("shards")) {
      const std::string file = shard.at("file").get<std::string>();
      TITAN_CHECK(is_plain_file_name(file), "encoding cache: ", index_path.string(), " names shard '", file,
                  "', which is not a file in that folder");
      auto reader = std::make_unique<checkpoint::SafetensorsReader>((root / file).string());
      const auto desc = reader->metadata().find("description");
      TITAN_CHECK(desc != reader->metadata().end() && desc->second == s.description, "encoding cache: ",
                  reader->path(), " is not of the cache its index describes ('", s.description, "')");
      const int64_t rows = reader->entry("index").shape.at(0);
      TITAN_CHECK(rows == shard.at("samples").get<int64_t>(), "encoding cache: ", reader->path(), " holds ", rows,
                  " samples; its index says ", shard.at("samples").get<int64_t>());
      for (const auto& [name, entry] : reader->entries())
        TITAN_CHECK(!entry.shape.empty() && entry.shape[0] == rows, "encoding cache: ", reader->path(), " tensor '",
                    name, "' does not have one row per sample (", rows, ")");
      s.captions.push_back(json::parse(reader->metadata().at("captions")).get<std::vector<std::string>>());
      s.starts.push_back(s.starts.back() + rows);
      s.shards.push_back(std::move(reader));
    }
  } catch (const json::exception& e) {
    TITAN_CHECK(false, "encoding cache: ", index_path.string(), " or a shard's metadata is malformed: ", e.what());
  }
  s.empty_prompt = checkpoint::read_safetensors((root / kEmptyPromptFile).string()).tensors;
}

EncodingCache::~EncodingCache() = default;
EncodingCache::EncodingCache(EncodingCache&&) noexcept = default;

int64_t EncodingCache::size() const { return state_->starts.back(); }
std::string EncodingCache::description() const { return state_->description; }
const std::map<std::string, Tensor>& EncodingCache::empty_prompt() const { return state_->empty_prompt; }
double EncodingCache::scaling_factor() const { return state_->scaling_factor; }
double EncodingCache::shift_factor() const { return state_->shift_factor; }

namespace {
// (shard, row) of cache position i.
std::pair<size_t, int64_t> locate(const std::vector<int64_t>& starts, int64_t i, const std::string& dir) {
  TITAN_CHECK(i >= 0 && i < starts.back(), "encoding cache ", dir, ": sample ", i, " is outside [0, ", starts.back(),
              ")");
  const size_t shard = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), i) - starts.begin() - 1);
  return {shard, i - starts[shard]};
}
}  // namespace

std::map<std::string, Tensor> EncodingCache::sample(int64_t i) const {
  const auto [shard, row] = locate(state_->starts, i, state_->dir);
  const checkpoint::SafetensorsReader& reader = *state_->shards[shard];
  std::map<std::string, Tensor> out;
  for (const auto& [name, entry] : reader.entries()) {
    Shape shape(entry.shape.begin() + 1, entry.shape.end());
    const uint64_t row_bytes = entry.nbytes / static_cast<uint64_t>(entry.shape[0]);
    Tensor t = Tensor::empty(name == "index" ? Shape{1} : shape, {.dtype = entry.dtype});
    std::memcpy(t.data_ptr(), reader.bytes().data() + entry.offset + row_bytes * static_cast<uint64_t>(row),
                row_bytes);
    out.emplace(name, std::move(t));
  }
  return out;
}

std::vector<std::map<std::string, Tensor>> EncodingCache::samples(std::span<const int64_t> indices,
                                                                std::span<const uint64_t>) {
  std::vector<std::map<std::string, Tensor>> out;
  for (int64_t i : indices) out.push_back(sample(i));
  return out;
}

std::string EncodingCache::caption(int64_t i) const {
  const auto [shard, row] = locate(state_->starts, i, state_->dir);
  return state_->captions[shard][static_cast<size_t>(row)];
}

}  // namespace titan::train::flux
