// The encoding cache (train/flux/encoding_cache.h): what it stores is what the encoder made of
// each preprocessed sample; a run stopped part-way and resumed writes the same bytes as one that
// was not; a cache of another description is refused, not mixed; bad images are errors naming
// the file, or skipped and counted.
#include <gtest/gtest.h>

#include <fstream>

#include "support/fake_flux_encoder.h"
#include "support/image_fixtures.h"
#include "titan/core/error.h"
#include "titan/train/flux/encoding_cache.h"

namespace titan::train::flux {
namespace {

namespace fs = std::filesystem;
using test::empty_prompt;
using test::fake_encode;

EncodingCacheOptions options(const fs::path& out) {
  return {.out = out.string(),
          .transform = {.size = 48, .crop = data::ImageCrop::random, .seed = 7},
          .shard_samples = 4,
          .batch = 3,
          .description = "fake encoder, 48 px",
          .scaling_factor = 0.5,
          .shift_factor = -0.25};
}

std::map<std::string, std::string> files_of(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files[e.path().filename().string()] = test::slurp(e.path());
  return files;
}

TEST(EncodingCache, HoldsWhatTheEncoderMadeOfEachPreprocessedSample) {
  const fs::path data_dir = test::make_shapes("cache_shapes", 11);
  TITAN_NEED_IMAGE_REFERENCE(data_dir);
  const fs::path out = test::fresh_temp_dir("cache_out");
  data::ImageCaptionDataset dataset({.path = data_dir.string()});
  dist::ProcessGroup one = dist::ProcessGroup::single();
  int64_t last_done = 0;
  const EncodingCacheReport report = write_encoding_cache(dataset, fake_encode, empty_prompt(), options(out), one,
                                                          [&](int64_t done, int64_t total) {
                                                            EXPECT_GT(done, last_done);
                                                            EXPECT_EQ(total, 11);
                                                            last_done = done;
                                                          });
  EXPECT_EQ(last_done, 11);
  EXPECT_EQ(report.shards, 3);
  EXPECT_EQ(report.samples, 11);
  EXPECT_EQ(report.shards_kept, 0);

  const EncodingCache cache(out.string());
  ASSERT_EQ(cache.size(), 11);
  EXPECT_EQ(cache.description(), "fake encoder, 48 px");
  EXPECT_EQ(cache.scaling_factor(), 0.5);
  EXPECT_EQ(cache.shift_factor(), -0.25);
  EXPECT_TRUE(test::same_bits(cache.empty_prompt().at("text"), empty_prompt().at("text")));
  for (int64_t i = 0; i < 11; ++i) {
    const data::ImageSample sample = dataset.read(i);
    const Tensor image = *data::preprocess_image(sample.image, options(out).transform, static_cast<uint64_t>(i));
    const std::map<std::string, Tensor> want = fake_encode({&image, 1}, {&sample.caption, 1});
    const std::map<std::string, Tensor> got = cache.sample(i);
    EXPECT_EQ(got.at("index").to_vector<int64_t>(), std::vector<int64_t>{i});
    EXPECT_TRUE(test::same_bits(got.at("latents"), want.at("latents").squeeze(0))) << "sample " << i;
    EXPECT_TRUE(test::same_bits(got.at("text"), want.at("text").squeeze(0))) << "sample " << i;
    EXPECT_EQ(cache.caption(i), sample.caption);
  }
  EXPECT_THROW(cache.sample(11), Error);
}

TEST(EncodingCache, AResumedRunWritesTheBytesOfAnUninterruptedOne) {
  const fs::path data_dir = test::make_shapes("cache_resume_shapes", 10);
  TITAN_NEED_IMAGE_REFERENCE(data_dir);
  data::ImageCaptionDataset dataset({.path = data_dir.string()});
  dist::ProcessGroup one = dist::ProcessGroup::single();
  const fs::path whole = test::fresh_temp_dir("cache_whole"), resumed = test::fresh_temp_dir("cache_resumed");
  write_encoding_cache(dataset, fake_encode, empty_prompt(), options(whole), one);

  // Stopped in the third batch, the middle of the second shard: the first shard is whole, nothing
  // of the second is there, and there is no index yet.
  int batches = 0;
  auto stops = [&](std::span<const Tensor> images, std::span<const std::string> captions) {
    TITAN_CHECK(++batches < 3, "stopped");
    return fake_encode(images, captions);
  };
  EXPECT_THROW(write_encoding_cache(dataset, stops, empty_prompt(), options(resumed), one), Error);
  EXPECT_TRUE(fs::exists(resumed / "shard-00000.safetensors"));
  EXPECT_FALSE(fs::exists(resumed / "shard-00001.safetensors"));
  EXPECT_THROW(EncodingCache(resumed.string()), Error);

  int encoded = 0;
  auto counts = [&](std::span<const Tensor> images, std::span<const std::string> captions) {
    encoded += static_cast<int>(images.size());
    return fake_encode(images, captions);
  };
  const EncodingCacheReport report = write_encoding_cache(dataset, counts, empty_prompt(), options(resumed), one);
  EXPECT_EQ(report.shards_kept, 1);
  EXPECT_EQ(encoded, 6) << "only the missing shards are encoded";
  EXPECT_EQ(files_of(resumed), files_of(whole));

  // A cache of other options is not mixed in.
  EncodingCacheOptions other = options(resumed);
  other.description = "fake encoder, 64 px";
  try {
    write_encoding_cache(dataset, fake_encode, empty_prompt(), other, one);
    ADD_FAILURE() << "a shard of another description was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shard-00000.safetensors was written for 'fake encoder, 48 px'"),
              std::string::npos)
        << e.what();
  }
}

TEST(EncodingCache, BadImagesAreErrorsNamingTheFileOrSkippedAndCounted) {
  const fs::path data_dir = test::make_shapes("cache_bad_shapes", 6);
  TITAN_NEED_IMAGE_REFERENCE(data_dir);
  std::ofstream(data_dir / "000002.png", std::ios::binary) << "not a png";
  dist::ProcessGroup one = dist::ProcessGroup::single();
  {
    data::ImageCaptionDataset dataset({.path = data_dir.string()});
    try {
      write_encoding_cache(dataset, fake_encode, empty_prompt(), options(test::fresh_temp_dir("cache_bad")), one);
      ADD_FAILURE() << "a bad image was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("000002.png"), std::string::npos) << e.what();
    }
  }
  data::ImageCaptionDataset dataset({.path = data_dir.string(), .bad_data = data::BadData::skip});
  EncodingCacheOptions o = options(test::fresh_temp_dir("cache_skip"));
  o.bad_data = data::BadData::skip;
  const EncodingCacheReport report = write_encoding_cache(dataset, fake_encode, empty_prompt(), o, one);
  EXPECT_EQ(report.samples, 5);
  EXPECT_EQ(report.skipped, (std::map<std::string, int64_t>{{"image does not decode", 1}}));
  const EncodingCache cache(o.out);
  ASSERT_EQ(cache.size(), 5);
  EXPECT_EQ(cache.sample(2).at("index").to_vector<int64_t>(), std::vector<int64_t>{3});

  // An image smaller than the size asked for.
  EncodingCacheOptions big = options(test::fresh_temp_dir("cache_small"));
  big.transform.size = 4096;
  EXPECT_THROW(write_encoding_cache(dataset, fake_encode, empty_prompt(), big, one), Error);
  big.bad_data = data::BadData::skip;
  big.out = test::fresh_temp_dir("cache_small_skip").string();
  EXPECT_EQ(write_encoding_cache(dataset, fake_encode, empty_prompt(), big, one).skipped.at("image smaller than the image size"),
            5);
}

}  // namespace
}  // namespace titan::train::flux
