// Image-caption data sets: folders of pairs and webdataset shards, ranks, resuming, bad data; and
// the shapes set's scorer (scripts/make_shapes.py) on its own images.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "support/image_fixtures.h"
#include "titan/data/image/image_dataset.h"
#include "titan/data/image/image_io.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using data::BadData;
using data::ImageCaptionDataset;

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(ImageDataset, FolderOfPairsInNameOrder) {
  const fs::path dir = test::make_shapes("shapes_folder", 12);
  TITAN_NEED_IMAGE_REFERENCE(dir);
  ImageCaptionDataset ds({.path = dir.string()});
  ASSERT_EQ(ds.size(), 12);
  EXPECT_EQ(ds.stats().documents, 12);
  for (int64_t i = 0; i < 12; ++i) {
    const data::ImageSample s = ds.next();
    char stem[16];
    std::snprintf(stem, sizeof(stem), "%06lld", static_cast<long long>(i));
    EXPECT_EQ(s.key, (dir / stem).string());
    EXPECT_EQ(s.index, i);
    EXPECT_EQ(s.caption, test::slurp(dir / (std::string(stem) + ".txt")));
    EXPECT_EQ(s.image, data::read_image(dir / (std::string(stem) + ".png")));
  }
  EXPECT_EQ(ds.get_state(), (data::ImageDatasetState{1, 0}));
}

TEST(ImageDataset, ShardsHoldTheFolderSamplesInOrder) {
  const fs::path folder = test::make_shapes("shapes_pairs", 10),
                 shards = test::make_shapes("shapes_tar", 10, "--shards 3");
  TITAN_NEED_IMAGE_REFERENCE(shards);
  ImageCaptionDataset a({.path = folder.string()}), b({.path = shards.string()});
  ASSERT_EQ(b.size(), 10);
  EXPECT_EQ(b.stats().files, 3);
  for (int64_t i = 0; i < 10; ++i) {
    const data::ImageSample x = a.read(i), y = b.read(i);
    EXPECT_EQ(x.caption, y.caption);
    EXPECT_EQ(x.image, y.image);
    EXPECT_TRUE(y.key.ends_with(x.key.substr(x.key.size() - 6))) << y.key;
  }
}

TEST(ImageDataset, WebdatasetKeysWithGnuAndPaxNames) {
  const fs::path ref = test::image_reference_dir();
  TITAN_NEED_IMAGE_REFERENCE(ref);
  ImageCaptionDataset ds({.path = (ref / "shards").string()});
  ASSERT_EQ(ds.size(), 4);
  const std::string long_dir(120, 'd');
  const std::vector<std::string> captions{"first caption", "second caption", "caf\xc3\xa9 caption", "fourth"};
  const std::vector<std::string> keys{"a-0.tar:s0", "a-0.tar:" + long_dir + "/s1",
                                      "a-1.tar:" + long_dir + "/s2", "a-1.tar:s3"};
  for (int64_t i = 0; i < 4; ++i) {
    const data::ImageSample s = ds.read(i);
    EXPECT_EQ(s.caption, captions[size_t(i)]);
    EXPECT_TRUE(s.key.ends_with(keys[size_t(i)])) << s.key;
    EXPECT_EQ(s.image, data::read_image(ref / (i % 3 == 0 ? "rgb8.png" : "photo.jpg")));
  }
}

TEST(ImageDataset, TwoRanksReadDisjointSamplesCoveringTheSet) {
  const fs::path dir = test::make_shapes("shapes_ranks", 9);
  TITAN_NEED_IMAGE_REFERENCE(dir);
  std::vector<int64_t> seen;
  for (int64_t rank = 0; rank < 2; ++rank) {
    ImageCaptionDataset ds({.path = dir.string(), .dp_rank = rank, .dp_world = 2});
    for (int step = 0; step < 4; ++step) seen.push_back(ds.next().index);
    EXPECT_EQ(ds.get_state(), (data::ImageDatasetState{0, 8}));
  }
  std::set<int64_t> distinct(seen.begin(), seen.end());
  EXPECT_EQ(distinct.size(), 8u) << "ranks must not share a sample within an epoch";
  EXPECT_EQ(*distinct.rbegin(), 7);
  // The ninth sample goes to rank 0 in the next step; rank 1 wraps into the next epoch.
  ImageCaptionDataset r0({.path = dir.string(), .dp_rank = 0, .dp_world = 2}),
      r1({.path = dir.string(), .dp_rank = 1, .dp_world = 2});
  r0.set_state({0, 8});
  r1.set_state({0, 8});
  EXPECT_EQ(r0.next().index, 8);
  EXPECT_EQ(r1.next().index, 0);
  EXPECT_EQ(r0.get_state(), (data::ImageDatasetState{1, 1}));
}

TEST(ImageDataset, ResumesAtTheSameSample) {
  const fs::path dir = test::make_shapes("shapes_resume", 7, "--shards 2");
  TITAN_NEED_IMAGE_REFERENCE(dir);
  ImageCaptionDataset a({.path = dir.string(), .dp_rank = 1, .dp_world = 2});
  for (int i = 0; i < 5; ++i) a.next();
  const data::ImageDatasetState saved = a.get_state();
  ImageCaptionDataset b({.path = dir.string(), .dp_rank = 1, .dp_world = 2});
  b.set_state(saved);
  for (int i = 0; i < 6; ++i) {
    const data::ImageSample x = a.next(), y = b.next();
    EXPECT_EQ(x.key, y.key);
    EXPECT_EQ(x.caption, y.caption);
    EXPECT_EQ(x.image, y.image);
  }
  EXPECT_TITAN_ERROR(b.set_state({0, 7}), "index 7", "holds 7 samples");
}

TEST(ImageDataset, BadImagesAreErrorsOrSkippedAndCounted) {
  const fs::path dir = test::make_shapes("shapes_bad", 6);
  TITAN_NEED_IMAGE_REFERENCE(dir);
  const std::string png = test::slurp(dir / "000001.png");
  write_bytes(dir / "000001.png", png.substr(0, png.size() / 2));
  write_bytes(dir / "000003.png", "not an image");
  write_bytes(dir / "000004.png", "");
  write_bytes(dir / "000009.png", png);  // no caption
  EXPECT_TITAN_ERROR(ImageCaptionDataset({.path = dir.string()}), "000009", "no caption");
  fs::remove(dir / "000009.png");
  {
    ImageCaptionDataset strict({.path = dir.string()});
    strict.next();
    EXPECT_TITAN_ERROR(strict.next(), "000001.png", "truncated");
  }
  write_bytes(dir / "000009.png", png);
  ImageCaptionDataset lax({.path = dir.string(), .bad_data = BadData::skip});
  EXPECT_EQ(lax.size(), 6);
  EXPECT_EQ(lax.stats().skipped.at("samples with no caption (or more than one)"), 1);
  std::vector<int64_t> got;
  for (int i = 0; i < 6; ++i) got.push_back(lax.next().index);
  // Samples 1, 3 and 4 do not decode: each is replaced by the next good one.
  EXPECT_EQ(got, (std::vector<int64_t>{0, 2, 2, 5, 5, 5}));
  EXPECT_EQ(lax.stats().skipped.at("images that do not decode"), 1 + 2 + 1);
  EXPECT_EQ(lax.get_state(), (data::ImageDatasetState{1, 0}));
}

TEST(ImageDataset, TruncatedShardIsAnErrorOrKeepsItsWholeSamples) {
  const fs::path ref = test::image_reference_dir();
  TITAN_NEED_IMAGE_REFERENCE(ref);
  const fs::path dir = test::fresh_temp_dir("shard_truncated");
  fs::copy_file(ref / "truncated.tar", dir / "x.tar");
  EXPECT_TITAN_ERROR(ImageCaptionDataset({.path = dir.string()}), "x.tar", "t1.png", "truncated");
  ImageCaptionDataset lax({.path = dir.string(), .bad_data = BadData::skip});
  ASSERT_EQ(lax.size(), 1);
  EXPECT_EQ(lax.next().caption, "kept");
  EXPECT_EQ(lax.stats().skipped.at("damaged tar members"), 1);
}

TEST(ImageDataset, EmptyOrMixedFoldersAreRefused) {
  const fs::path dir = test::fresh_temp_dir("image_mixed");
  write_bytes(dir / "notes.json", "{}");
  EXPECT_TITAN_ERROR(ImageCaptionDataset({.path = dir.string()}), "holds no image-caption sample");
  write_bytes(dir / "a.tar", std::string(1024, '\0'));
  write_bytes(dir / "b.txt", "x");
  EXPECT_TITAN_ERROR(ImageCaptionDataset({.path = dir.string()}), "both .tar shards");
}

// The scorer must pass the generator's own images and fail them under shuffled captions.
TEST(ShapesScorer, GeneratorImagesScoreFullAndShuffledCaptionsScoreNearChance) {
  for (const std::string format : {"png", "jpg"}) {
    SCOPED_TRACE(format);
    const fs::path dir =
        test::make_shapes("shapes_score_" + format, 200, "--format " + format + " --size 96");
    TITAN_NEED_IMAGE_REFERENCE(dir);
    auto score = [&](const std::string& extra) {
      const fs::path out = dir.parent_path() / ("score_" + format + ".json");
      const std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + TITAN_SOURCE_DIR +
                              "/scripts/make_shapes.py' score '" + dir.string() + "' --json " + extra +
                              " > '" + out.string() + "'";
      EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
      return nlohmann::json::parse(test::slurp(out));
    };
    const nlohmann::json own = score(""), shuffled = score("--shuffle-captions 3");
    EXPECT_GE(own["all"].get<double>(), 0.99) << own.dump();
    // Chance is 1/224 for all three at once, 1/4 for the kind: shuffled captions stay close to it.
    EXPECT_LT(shuffled["all"].get<double>(), 0.03) << shuffled.dump();
    EXPECT_LT(shuffled["shape"].get<double>(), 0.35) << shuffled.dump();
  }
}

}  // namespace
}  // namespace titan
