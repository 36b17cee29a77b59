// FLUX training with the frozen encoders run every step (train/flux/live_encodings.h): on the same
// data, encoders and seed its batches are the encoding cache's (`titan flux encode --crop center`),
// and so are a few training steps and a validation; a sample's encodings do not depend on its
// batch; the random crop cuts each draw's own square, the same one again in a resumed run, and
// validation the centre; bad images are skipped and counted or stop training naming the file; and
// the keys that do not go together are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "support/flux_live_pipeline.h"
#include "support/image_fixtures.h"
#include "support/paths.h"
#include "support/test_util.h"
#include "titan/checkpoint/checkpoint.h"
#include "titan/core/error.h"
#include "titan/data/image/png.h"
#include "titan/train/flux/encoding_cache.h"
#include "titan/train/flux/flux_batches.h"
#include "titan/train/flux/live_encodings.h"
#include "titan/train/trainer.h"

namespace titan::train::flux {
namespace {

namespace fs = std::filesystem;

// The data (10 shapes of 64 px, which the 32 px image size resizes) and its cache, encoded by
// `titan flux encode` with the pipeline's encoders as training runs them: centre crop, 8 T5 tokens.
struct Fixture {
  fs::path pipeline, data, cache;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    x.pipeline = test::flux_live_pipeline();
    x.data = test::make_shapes("flux_live_data", 10);
    if (x.pipeline.empty() || x.data.empty()) return Fixture{};
    const fs::path dir = test::fresh_temp_dir("flux_live_cache");
    x.cache = dir / "cache";
    const test::CliRun run = test::run_titan({"flux", "encode", "--pipeline", x.pipeline.string(), "--data",
                                              x.data.string(), "--out", x.cache.string(), "--image-size", "32",
                                              "--crop", "center", "--t5-length", "8", "--batch", "4"},
                                             dir);
    EXPECT_EQ(run.rc, 0) << run.out << run.err;
    return x;
  }();
  return f;
}

#define NEED_FIXTURE(f) \
  if ((f).cache.empty()) TITAN_MISSING_REFERENCE("tests/parity/flux_live_pipeline.py did not run (make deps-test)")

LiveEncodingsOptions live_options(const Fixture& f) {
  return {.data_path = f.data.string(),
          .encoders = ConditioningPaths::of_pipeline(f.pipeline),
          .t5_length = 8,
          .image_size = 32,
          .crop = data::ImageCrop::center};
}

// max |a - b| over max |b|.
double relative(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  const std::vector<float> x = a.contiguous().to_vector<float>(), y = b.contiguous().to_vector<float>();
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(x[i] - y[i])));
    scale = std::max(scale, static_cast<double>(std::abs(y[i])));
  }
  return diff / scale;
}

void expect_same_batch(const FluxBatch& live, const FluxBatch& cached, const std::string& what) {
  std::cout << what << ":";
  for (const auto& [name, a, b] : {std::tuple{"x0", live.x0, cached.x0}, std::tuple{"noise", live.noise, cached.noise},
                                   std::tuple{"t", live.t, cached.t}, std::tuple{"txt", live.txt, cached.txt},
                                   std::tuple{"y", live.y, cached.y}}) {
    EXPECT_LE(relative(a, b), 1e-5) << what << ": " << name;
    std::cout << " " << name << " " << relative(a, b);
  }
  std::cout << "\n";
  EXPECT_EQ(live.height, cached.height);
  EXPECT_EQ(live.width, cached.width);
}

TEST(FluxLive, BatchesAreTheCachesOfTheSameDataEncodersAndSeed) {
  const Fixture& f = fixture();
  NEED_FIXTURE(f);
  auto cache = std::make_shared<EncodingCache>(f.cache.string());
  auto live = std::make_shared<LiveEncodings>(live_options(f));
  ASSERT_EQ(live->size(), cache->size());
  EXPECT_EQ(live->scaling_factor(), 0.5);
  EXPECT_EQ(live->shift_factor(), 0.25);
  FluxConfig cfg;
  cfg.prompt_dropout = 0.4;  // some rows read the empty prompt
  FluxBatches from_cache(cache, 0, 8, cfg, 7, 2), from_live(live, 0, 8, cfg, 7, 2);
  // Slots 0-5, then 6-11 across the first epoch's end.
  expect_same_batch(from_live.training(0, 6), from_cache.training(0, 6), "training slots 0-5");
  expect_same_batch(from_live.training(6, 6), from_cache.training(6, 6), "training slots 6-11");
  FluxBatches held_cache(cache, 8, 2, cfg, 7, 2), held_live(live, 8, 2, cfg, 7, 2);
  expect_same_batch(held_live.validation({0, 1}, 0.3), held_cache.validation({0, 1}, 0.3), "validation");

  // Sample 3 alone and inside a batch of three: the same encodings.
  const std::vector<int64_t> one = {3}, three = {1, 3, 5};
  const auto alone = live->samples(one, {}), among = live->samples(three, {});
  for (const char* name : {"t5", "clip_pooled", "latent_mean", "latent_logvar"})
    EXPECT_LE(relative(alone[0].at(name), among[1].at(name)), 1e-5) << name;
  EXPECT_EQ(among[1].at("index").to_vector<int64_t>(), std::vector<int64_t>{3});
}

// An image that does not decode: skipped and counted under BadData::skip, an error naming its
// file under BadData::error when it is drawn.
TEST(FluxLive, ABadImageIsSkippedAndCountedOrStopsTrainingNamingTheFile) {
  const Fixture& f = fixture();
  NEED_FIXTURE(f);
  const fs::path data = test::fresh_temp_dir("flux_live_bad_data");
  fs::copy(f.data, data, fs::copy_options::recursive);
  std::ofstream(data / "zz_broken.png") << "not a png";
  std::ofstream(data / "zz_broken.txt") << "a broken image";
  LiveEncodingsOptions o = live_options(f);
  o.data_path = data.string();
  o.bad_data = data::BadData::skip;
  const LiveEncodings skipping(o);
  EXPECT_EQ(skipping.size(), 10);
  EXPECT_EQ(skipping.skipped(), (std::map<std::string, int64_t>{{"image does not decode", 1}}));
  o.bad_data = data::BadData::error;
  LiveEncodings strict(o);
  ASSERT_EQ(strict.size(), 11);
  const std::vector<int64_t> last = {10};
  EXPECT_TITAN_ERROR(strict.samples(last, {}), "zz_broken.png");
}

// Wide pictures (96 x 32, a gradient along x, so that every offset of a 32 px square shows
// something else) and their captions, in a fresh folder.
fs::path wide_pictures(int count) {
  const fs::path dir = test::fresh_temp_dir("flux_live_wide");
  for (int i = 0; i < count; ++i) {
    data::Image image(96, 32);
    for (int64_t y = 0; y < image.height; ++y)
      for (int64_t x = 0; x < image.width; ++x) {
        uint8_t* p = image.row(y) + x * 3;
        p[0] = static_cast<uint8_t>(x * 255 / 95);
        p[1] = static_cast<uint8_t>(255 - x * 255 / 95);
        p[2] = static_cast<uint8_t>(40 * i + y);
      }
    const std::string stem = "wide_" + std::to_string(i);
    std::ofstream(dir / (stem + ".png"), std::ios::binary) << data::encode_png(image);
    std::ofstream(dir / (stem + ".txt")) << "a gradient, number " << i;
  }
  return dir;
}

TEST(FluxLive, RandomCropCutsAfreshAtEachDrawAndTheCenterForValidation) {
  const Fixture& f = fixture();
  NEED_FIXTURE(f);
  LiveEncodingsOptions o = live_options(f);
  o.data_path = wide_pictures(3).string();
  const auto centered = std::make_shared<LiveEncodings>(o);
  o.crop = data::ImageCrop::random;
  const auto random = std::make_shared<LiveEncodings>(o);
  EXPECT_NE(random->description().find("a random crop at each draw"), std::string::npos) << random->description();
  auto mean = [](const std::shared_ptr<LiveEncodings>& source, std::vector<uint64_t> draws) {
    const std::vector<int64_t> sample = {1};
    return source->samples(sample, draws).at(0).at("latent_mean");
  };
  // A draw fixes the square: the same draw, the same latents; other draws, other squares; no draw,
  // the centre. The centre crop takes no draw.
  const Tensor center = mean(centered, {});
  EXPECT_EQ(relative(mean(random, {}), center), 0.0);
  EXPECT_EQ(relative(mean(centered, {12345}), center), 0.0);
  EXPECT_EQ(relative(mean(random, {12345}), mean(random, {12345})), 0.0);
  int differ = 0;
  for (uint64_t draw = 1; draw <= 4; ++draw) differ += relative(mean(random, {draw}), mean(random, {draw + 100})) > 1e-3;
  EXPECT_GE(differ, 3) << "four pairs of draws, 65 offsets each: at most one pair may cut the same square";

  // In training the batches cut random squares, and validation the centre.
  FluxConfig cfg;
  cfg.prompt_dropout = 0;
  FluxBatches batches(random, 0, 3, cfg, 7, 2), fixed(centered, 0, 3, cfg, 7, 2);
  EXPECT_GT(relative(batches.training(3, 3).x0, fixed.training(3, 3).x0), 1e-3) << "the random crop cut the centre";
  EXPECT_EQ(relative(batches.validation({0, 2}, 0.5).x0, fixed.validation({0, 2}, 0.5).x0), 0.0);
}

// A source that records the (sample, crop draw) pairs each call asks `inner` for.
class RecordedDraws : public SampleEncodings {
 public:
  explicit RecordedDraws(std::shared_ptr<SampleEncodings> inner) : inner_(std::move(inner)) {}
  int64_t size() const override { return inner_->size(); }
  std::vector<std::map<std::string, Tensor>> samples(std::span<const int64_t> indices,
                                                     std::span<const uint64_t> crop_draws) override {
    EXPECT_EQ(crop_draws.size(), indices.size()) << "a training batch without a draw per sample";
    for (size_t k = 0; k < indices.size() && k < crop_draws.size(); ++k) draws.emplace_back(indices[k], crop_draws[k]);
    return inner_->samples(indices, crop_draws);
  }
  const std::map<std::string, Tensor>& empty_prompt() const override { return inner_->empty_prompt(); }
  double scaling_factor() const override { return inner_->scaling_factor(); }
  double shift_factor() const override { return inner_->shift_factor(); }
  std::string description() const override { return inner_->description(); }

  std::vector<std::pair<int64_t, uint64_t>> draws;

 private:
  std::shared_ptr<SampleEncodings> inner_;
};

// The crop draw is the slot's: a sample read again in the next epoch gets another draw, and the
// draws of slots [0, 12) are the same whether one process asks for them in 2 calls, ranks in 4 or
// a run resumed at slot 6 asks for the rest.
TEST(FluxLive, CropDrawsAreTheSlotsWhateverTheCallsAndAfterAResume) {
  const Fixture& f = fixture();
  NEED_FIXTURE(f);
  const auto cache = std::make_shared<EncodingCache>(f.cache.string());
  const FluxConfig cfg;
  auto draws = [&](const std::vector<std::pair<int64_t, int64_t>>& calls) {
    const auto recorded = std::make_shared<RecordedDraws>(cache);
    FluxBatches batches(recorded, 0, 6, cfg, 7, 2);
    for (const auto& [first, rows] : calls) (void)batches.training(first, rows);
    return recorded->draws;
  };
  const auto whole = draws({{0, 6}, {6, 6}});
  ASSERT_EQ(whole.size(), 12u);
  EXPECT_EQ(draws({{0, 3}, {3, 3}, {6, 3}, {9, 3}}), whole);
  using Draws = std::vector<std::pair<int64_t, uint64_t>>;
  EXPECT_EQ(draws({{6, 6}}), Draws(whole.begin() + 6, whole.end()));
  // Epochs 0 and 1 read each of the 6 samples once: with other draws.
  std::map<int64_t, std::set<uint64_t>> per_sample;
  for (const auto& [sample, draw] : whole) per_sample[sample].insert(draw);
  ASSERT_EQ(per_sample.size(), 6u);
  for (const auto& [sample, seen] : per_sample) EXPECT_EQ(seen.size(), 2u) << "sample " << sample;
}

const std::string kTiny = std::string(TITAN_SOURCE_DIR) + "/configs/flux/flux_tiny.toml";

std::vector<std::string> tiny(const fs::path& dir, std::vector<std::string> extra) {
  std::vector<std::string> o = {"--flux.image_size=32", "--flux.t5_length=8", "--job.dump_folder=" + (dir / "out").string(),
                                "--checkpoint.folder=" + (dir / "ckpt").string(), "--metrics.log_freq=100",
                                "--metrics.enable_jsonl=false", "--metrics.peak_flops=1e11",
                                "--training.local_batch_size=4", "--lr_scheduler.warmup_steps=2",
                                "--training.steps=3", "--validation.enable=true", "--validation.freq=3",
                                "--flux.validation_samples=2", "--validation.local_batch_size=2",
                                "--optimizer.lr=3e-3"};
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

TrainResult run(const std::vector<std::string>& overrides, std::string* log_out) {
  std::ostringstream log;
  TrainResult r = Trainer(load_job_config(kTiny, overrides), log).train();
  *log_out = log.str();
  return r;
}

TEST(FluxLive, TrainingStepsEqualThoseOnTheCache) {
  const Fixture& f = fixture();
  NEED_FIXTURE(f);
  const fs::path a = test::fresh_temp_dir("flux_live_on_cache"), b = test::fresh_temp_dir("flux_live_live");
  std::string cached_log, live_log;
  const TrainResult cached =
      run(tiny(a, {"--flux.cache_path=" + f.cache.string(), "--checkpoint.enable=false"}), &cached_log);
  const TrainResult live = run(tiny(b, {"--flux.cache_path=", "--flux.data_path=" + f.data.string(), "--flux.crop=center",
                                        "--flux.pipeline_path=" + f.pipeline.string(), "--checkpoint.enable=true",
                                        "--checkpoint.interval=3", "--checkpoint.last_save_model_only=false"}),
                               &live_log);
  ASSERT_EQ(cached.losses.size(), 3u) << cached_log;
  ASSERT_EQ(live.losses.size(), 3u) << live_log;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_LE(std::abs(live.losses[i] - cached.losses[i]), 1e-5 * std::abs(cached.losses[i])) << "step " << i + 1;
    std::cout << "step " << i + 1 << ": loss " << live.losses[i] << " live, " << cached.losses[i] << " cached\n";
  }
  ASSERT_EQ(live.validations.size(), 1u);
  ASSERT_EQ(cached.validations.size(), 1u);
  EXPECT_LE(std::abs(live.validations[0].loss - cached.validations[0].loss), 1e-5 * cached.validations[0].loss);
  EXPECT_NE(live_log.find("data: encoders every step: " + f.pipeline.string() + " over " + f.data.string() +
                          " (10 samples"),
            std::string::npos)
      << live_log;
  EXPECT_NE(live_log.find("8 training samples"), std::string::npos) << live_log;
  // The frozen encoders are neither trained nor saved: the checkpoint holds the transformer and
  // its optimizer state alone.
  const checkpoint::Reader reader(b / "ckpt" / "step-3");
  ASSERT_FALSE(reader.metadata().tensors.empty());
  for (const auto& [name, meta] : reader.metadata().tensors)
    for (const char* encoder : {"t5", "clip", "encoder", "autoencoder", "vae"})
      EXPECT_EQ(name.find(encoder), std::string::npos) << name;
}

TEST(FluxLive, RefusesByKeyWhatDoesNotGoTogether) {
  const fs::path dir = test::fresh_temp_dir("flux_live_refusals");
  std::ostringstream log;
  auto refused = [&](const std::vector<std::string>& extra) {
    return [&, extra] { Trainer(load_job_config(kTiny, tiny(dir, extra)), log); };
  };
  EXPECT_TITAN_ERROR(refused({"--flux.cache_path=/c", "--flux.data_path=/d", "--flux.pipeline_path=/p"})(),
                     "flux.cache_path and flux.data_path", "not both");
  EXPECT_TITAN_ERROR(refused({"--flux.cache_path=/c", "--flux.pipeline_path=/p"})(),
                     "flux.pipeline_path is read only with flux.data_path");
  EXPECT_TITAN_ERROR(refused({"--flux.cache_path=", "--flux.data_path=/d"})(), "flux.data_path needs flux.pipeline_path");
  EXPECT_TITAN_ERROR(refused({"--flux.cache_path=", "--flux.data_path=/d", "--flux.pipeline_path=/p",
                              "--flux.validation_cache_path=/v"})(),
                     "flux.validation_cache_path with flux.data_path");
  EXPECT_TITAN_ERROR(refused({"--flux.cache_path=/c", "--training.bad_data=skip"})(),
                     "training.bad_data is read only with flux.data_path");
  EXPECT_TITAN_ERROR(refused({"--flux.cache_path=/c", "--flux.crop=center"})(),
                     "flux.crop is read only with flux.data_path", "titan flux encode --crop");
}

}  // namespace
}  // namespace titan::train::flux
