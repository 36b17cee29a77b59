// The encoding cache written by every rank (each its own shards) holds the bytes one process
// writes alone.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "support/fake_flux_encoder.h"
#include "support/paths.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/dist/process_group.h"
#include "titan/train/flux/encoding_cache.h"
#include "trainer_fixture.h"

namespace titan::train::flux {
namespace {

namespace fs = std::filesystem;

TEST(EncodingCache, RanksWriteTheCacheOneProcessWrites) {
  dist::ProcessGroup& world = dist::world();
  const fs::path dir = testing::job_dir(0) / "encoding_cache";
  if (world.rank() == 0) {
    fs::remove_all(dir);
    const std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + TITAN_SOURCE_DIR +
                            "/scripts/make_shapes.py' make --count 9 --out '" + (dir / "data").string() + "' > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << ": the reference Python (numpy, Pillow) did not run";
  }
  world.barrier().wait();
  const data::ImageCaptionDataset dataset({.path = (dir / "data").string()});
  EncodingCacheOptions options{.out = (dir / "ranks").string(),
                               .transform = {.size = 48, .seed = 3},
                               .shard_samples = 2,
                               .batch = 2,
                               .description = "fake encoder"};
  const EncodingCacheReport report = write_encoding_cache(dataset, test::fake_encode, test::empty_prompt(), options, world);
  EXPECT_EQ(report.shards, 5);
  int64_t mine = 0;
  for (int64_t k = world.rank(); k < 5; k += world.size()) mine += k == 4 ? 1 : 2;
  EXPECT_EQ(report.samples, mine);
  if (world.rank() == 0) {
    dist::ProcessGroup one = dist::ProcessGroup::single();
    options.out = (dir / "one").string();
    write_encoding_cache(dataset, test::fake_encode, test::empty_prompt(), options, one);
    for (const auto& entry : fs::directory_iterator(dir / "one")) {
      const fs::path theirs = dir / "ranks" / entry.path().filename();
      ASSERT_TRUE(fs::exists(theirs)) << theirs;
      EXPECT_EQ(MappedFile(entry.path()).bytes(), MappedFile(theirs).bytes()) << entry.path().filename();
    }
    EXPECT_EQ(EncodingCache((dir / "ranks").string()).size(), 9);
  }
  world.barrier().wait();
}

}  // namespace
}  // namespace titan::train::flux
