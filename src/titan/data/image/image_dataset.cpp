#include "titan/data/image/image_dataset.h"

#include <map>
#include <utility>

#include "titan/core/error.h"
#include "titan/data/image/image_io.h"
#include "titan/data/image/tar_reader.h"

namespace titan::data {

namespace fs = std::filesystem;

namespace {
// webdataset's split of a member path: the key is the directory and the file name up to its first
// dot; the extension is the rest, lower-cased.
std::pair<std::string, std::string> split_key(const std::string& path) {
  const size_t slash = path.rfind('/');
  const size_t dot = path.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos) return {path, ""};
  std::string ext = path.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return {path.substr(0, dot), ext};
}

enum class Role { image, caption, other };

Role role_of(const std::string& ext) {
  const std::string last = ext.substr(ext.rfind('.') == std::string::npos ? 0 : ext.rfind('.') + 1);
  if (last == "png" || last == "jpg" || last == "jpeg") return Role::image;
  if (last == "txt") return Role::caption;
  return Role::other;
}

bool is_tar(const fs::path& path) {
  return path.extension() == ".tar";
}
}  // namespace

ImageCaptionDataset::ImageCaptionDataset(ImageDatasetOptions options) : options_(std::move(options)) {
  const ImageDatasetOptions& o = options_;
  TITAN_CHECK(o.dp_world >= 1 && o.dp_rank >= 0 && o.dp_rank < o.dp_world,
              "ImageCaptionDataset: dp_rank must lie in [0, dp_world) with dp_world >= 1, got dp_rank ",
              o.dp_rank, " and dp_world ", o.dp_world);
  const std::vector<fs::path> files = resolve_dataset_files(o.path, o.path_key);
  size_t tars = 0;
  for (const fs::path& f : files) tars += is_tar(f);
  TITAN_CHECK(tars == 0 || tars == files.size(), o.path_key, ": '", o.path, "' holds both .tar shards (",
              tars, ") and other files (", files.size() - tars,
              "); give either webdataset shards or image and caption "
              "files, not both");
  if (tars) {
    for (const fs::path& f : files) index_shard(f);
  } else {
    std::map<std::string, std::pair<std::vector<Part>, std::vector<Part>>>
        groups;  // key -> (images, captions)
    for (const fs::path& f : files) {
      const auto [key, ext] = split_key(f.string());
      const Role role = role_of(ext);
      if (role == Role::other) continue;
      Part part{.path = f.string()};
      (role == Role::image ? groups[key].first : groups[key].second).push_back(std::move(part));
      ++stats_.files;
    }
    for (auto& [key, parts] : groups) {
      const bool one_each = parts.first.size() == 1 && parts.second.size() == 1;
      add_sample(key, one_each || parts.first.size() == 1 ? parts.first.data() : nullptr,
                 one_each || parts.second.size() == 1 ? parts.second.data() : nullptr);
    }
  }
  TITAN_CHECK(!entries_.empty(), o.path_key, ": '", o.path, "' holds no image-caption sample",
              stats_.skipped.empty() ? "" : " (" + stats_.skipped_summary() + ")",
              "; give x.png or x.jpg with x.txt beside it, or webdataset .tar shards");
  stats_.documents = size();
}

ImageCaptionDataset::~ImageCaptionDataset() = default;

void ImageCaptionDataset::add_sample(std::string key, const Part* image, const Part* caption) {
  if (!image || !caption) {
    const std::string what = !image ? "no image (or more than one)" : "no caption (or more than one)";
    TITAN_CHECK(options_.bad_data == BadData::skip, options_.path_key, ": sample '", key, "' has ", what,
                "; each key needs exactly one .png/.jpg/.jpeg and one .txt (or set bad_data = \"skip\")");
    ++stats_.skipped["samples with " + what];
    return;
  }
  entries_.push_back({std::move(key), *image, *caption});
}

void ImageCaptionDataset::index_shard(const fs::path& path) {
  shards_.push_back(std::make_unique<MappedFile>(path));
  ++stats_.files;
  const int64_t source = static_cast<int64_t>(shards_.size()) - 1;
  std::string damage;
  const std::vector<TarMember> members = list_tar_members(
      shards_.back()->bytes(), path.string(), options_.bad_data == BadData::skip ? &damage : nullptr);
  // The members before the damage are kept: a sample the damage cut short lacks its image or
  // caption and is counted as such.
  if (!damage.empty()) ++stats_.skipped["damaged tar members"];
  std::string key;
  std::vector<Part> images, captions;
  auto flush = [&] {
    if (!key.empty() || !images.empty() || !captions.empty())
      add_sample(path.string() + ":" + key, images.size() == 1 ? images.data() : nullptr,
                 captions.size() == 1 ? captions.data() : nullptr);
    images.clear();
    captions.clear();
  };
  bool started = false;
  for (const TarMember& m : members) {
    auto [member_key, ext] = split_key(m.name);
    const Role role = role_of(ext);
    if (role == Role::other) continue;
    if (!started || member_key != key) {
      if (started) flush();
      key = member_key;
      started = true;
    }
    (role == Role::image ? images : captions).push_back({source, m.name, m.offset, m.size});
  }
  if (started) flush();
}

std::string_view ImageCaptionDataset::bytes_of(const Part& part, std::unique_ptr<MappedFile>& holder) const {
  if (part.source >= 0) return shards_[size_t(part.source)]->bytes().substr(part.offset, part.size);
  holder = std::make_unique<MappedFile>(part.path);
  return holder->bytes();
}

std::string ImageCaptionDataset::name_of(const Part& part) const {
  return part.source >= 0 ? shards_[size_t(part.source)]->path().string() + ": member " + part.path
                          : part.path;
}

ImageSample ImageCaptionDataset::read(int64_t index) const {
  TITAN_CHECK(index >= 0 && index < size(), "ImageCaptionDataset::read: index ", index, " outside [0, ",
              size(), ")");
  const Entry& e = entries_[size_t(index)];
  std::unique_ptr<MappedFile> image_file, caption_file;
  const std::string_view image = bytes_of(e.image, image_file);
  ImageSample s;
  s.image = decode_image({reinterpret_cast<const uint8_t*>(image.data()), image.size()}, name_of(e.image));
  s.caption = std::string(bytes_of(e.caption, caption_file));
  s.caption.erase(s.caption.find_last_not_of(" \t\r\n") + 1);
  s.key = e.key;
  s.index = index;
  return s;
}

ImageSample ImageCaptionDataset::next() {
  const int64_t n = size(), world = options_.dp_world;
  ImageSample sample;
  for (int64_t row = 0;; ++row) {
    const int64_t index = (state_.index + options_.dp_rank + row * world) % n;
    try {
      sample = read(index);
      break;
    } catch (const Error& e) {
      if (options_.bad_data == BadData::error) throw;
      ++stats_.skipped["images that do not decode"];
      TITAN_CHECK(row < n, options_.path_key, ": rank ", options_.dp_rank, " of ", world,
                  " found no image that decodes among its samples of '", options_.path,
                  "'; the last: ", e.message());
    }
  }
  state_.index += world;
  state_.epoch += state_.index / n;
  state_.index %= n;
  return sample;
}

void ImageCaptionDataset::set_state(ImageDatasetState state) {
  TITAN_CHECK(state.epoch >= 0 && state.index >= 0 && state.index < size(),
              "ImageCaptionDataset: the saved "
              "position (epoch ",
              state.epoch, ", index ", state.index, ") is not one of '", options_.path, "', which holds ",
              size(), " samples; was the checkpoint made with another data set?");
  state_ = state;
}

}  // namespace titan::data
