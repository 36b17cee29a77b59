#pragma once
// Image-caption data sets for text-to-image training, in either layout:
//   - a folder of pairs: x.png (or .jpg / .jpeg) beside x.txt, samples in name order;
//   - webdataset shards (*.tar): members grouped into samples by key, the member's path up to the
//     first dot of its file name (a/b.c.jpg has key a/b and extension c.jpg), consecutive members
//     of one key forming one sample, as webdataset groups them; jpg/jpeg/png is the image, txt the
//     caption, anything else (json, ...) is ignored.
// `path` is a folder, a file or a glob, resolved as the text data sets' (dataset.h); shards are
// memory-mapped and read member by member. A caption loses its trailing whitespace (editors add a
// newline), nothing else.
//
// Ranks: the data set is one sequence of samples; each call to next() on every rank reads the next
// dp_world of them, rank r taking the r-th, so ranks read disjoint samples that together cover the
// set. The position (epoch and index, image_dataset's ImageDatasetState) is the same on every rank.
//
// Bad data: an image that does not decode, a key with no image or no caption, a damaged shard.
// Under BadData::error it is an error naming the file (and the tar member). Under BadData::skip, a
// damaged shard keeps the members before the damage, keys without an image or caption are left
// out of the sequence when it is built, and a rank whose
// image does not decode takes instead its sample of the next global row (the position stays the
// same on every rank, at the cost of that sample being read twice in the epoch); both are counted
// in stats().skipped, each time they are met.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "titan/core/file_io.h"
#include "titan/data/dataset.h"
#include "titan/data/image/image.h"

namespace titan::data {

struct ImageDatasetOptions {
  std::string path = {};
  BadData bad_data = BadData::error;
  int64_t dp_rank = 0;
  int64_t dp_world = 1;
  std::string path_key = "training.dataset_path";  // what messages call `path`
};

struct ImageSample {
  Image image;
  std::string caption;
  std::string key;
  int64_t index = 0;  // position in the data set: seeds the sample's random crop (preprocess.h)
};

// Samples handed out so far in epoch `epoch`, over all ranks (as LoaderState).
struct ImageDatasetState {
  int64_t epoch = 0;
  int64_t index = 0;
  bool operator==(const ImageDatasetState&) const = default;
};

class ImageCaptionDataset {
 public:
  // Throws when `path` names nothing, holds no sample, or (BadData::error) a key lacks its image or
  // caption.
  explicit ImageCaptionDataset(ImageDatasetOptions options);
  ~ImageCaptionDataset();

  // This rank's next sample; after the last one of an epoch the next epoch starts over.
  ImageSample next();
  // Sample `index` of the data set, decoded; errors name its file or member whatever the policy.
  ImageSample read(int64_t index) const;

  int64_t size() const { return static_cast<int64_t>(entries_.size()); }
  ImageDatasetState get_state() const { return state_; }
  // Throws on a state that is not a position of this data set (index outside [0, size())).
  void set_state(ImageDatasetState state);
  // documents: the samples indexed; files: the files read; skipped: what BadData::skip left out.
  const DatasetStats& stats() const { return stats_; }

 private:
  struct Part {
    int64_t source = -1;  // index into shards_, or -1 for a file of its own
    std::string path;     // the file, or the member's name
    uint64_t offset = 0, size = 0;  // of a tar member
  };
  struct Entry {
    std::string key;
    Part image, caption;
  };
  std::string_view bytes_of(const Part& part, std::unique_ptr<MappedFile>& holder) const;
  std::string name_of(const Part& part) const;
  void add_sample(std::string key, const Part* image, const Part* caption);
  void index_shard(const std::filesystem::path& path);

  ImageDatasetOptions options_;
  std::vector<std::unique_ptr<MappedFile>> shards_;
  std::vector<Entry> entries_;
  ImageDatasetState state_;
  DatasetStats stats_;
};

}  // namespace titan::data
