// PNG and JPEG decoding against Pillow, Pillow's bicubic resize, TorchTitan's FLUX preprocessing,
// the tar reader, and the errors bad files give.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "support/image_fixtures.h"
#include "titan/core/file_io.h"
#include "titan/data/image/image_io.h"
#include "titan/data/image/jpeg.h"
#include "titan/data/image/png.h"
#include "titan/data/image/preprocess.h"
#include "titan/data/image/resize.h"
#include "titan/data/image/tar_reader.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using data::Image;

// The expected pixels `name`.rgb with the manifest's size.
Image expected(const fs::path& dir, const std::string& name) {
  const nlohmann::json manifest = nlohmann::json::parse(test::slurp(dir / "manifest.json"));
  const std::string bytes = test::slurp(dir / (name + ".rgb"));
  Image out(manifest.at(name)[0].get<int64_t>(), manifest.at(name)[1].get<int64_t>());
  EXPECT_EQ(bytes.size(), out.pixels.size()) << name;
  std::copy(bytes.begin(), bytes.end(), out.pixels.begin());
  return out;
}

// How many bytes differ, and by at most how much.
::testing::AssertionResult same_pixels(const Image& got, const Image& want, int tolerance = 0) {
  if (got.width != want.width || got.height != want.height)
    return ::testing::AssertionFailure()
           << got.width << "x" << got.height << " vs " << want.width << "x" << want.height;
  int worst = 0;
  size_t differ = 0;
  for (size_t i = 0; i < got.pixels.size(); ++i) {
    const int d = std::abs(int(got.pixels[i]) - int(want.pixels[i]));
    worst = std::max(worst, d);
    differ += d != 0;
  }
  if (worst > tolerance)
    return ::testing::AssertionFailure()
           << differ << " of " << got.pixels.size() << " bytes differ, by up to " << worst;
  return ::testing::AssertionSuccess();
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(ImageIo, PngDecodesAsPillowForEveryColourTypeAndDepth) {
  const fs::path dir = test::image_reference_dir();
  TITAN_NEED_IMAGE_REFERENCE(dir);
  for (const char* name : {"rgb8", "grey8", "rgba8", "grey_alpha8", "palette", "palette_trns", "grey1",
                           "grey2", "grey4", "grey16", "rgb16", "rgba16"}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(same_pixels(data::read_image(dir / (std::string(name) + ".png")), expected(dir, name)));
  }
}

TEST(ImageIo, JpegDecodesAsPillowExactly) {
  const fs::path dir = test::image_reference_dir();
  TITAN_NEED_IMAGE_REFERENCE(dir);
  for (const char* name : {"photo", "photo_444", "photo_progressive", "grey_jpeg", "odd_size"}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(same_pixels(data::read_image(dir / (std::string(name) + ".jpg")), expected(dir, name)));
  }
}

TEST(ImageIo, CmykJpegIsRefusedNamingTheFile) {
  const fs::path dir = test::image_reference_dir();
  TITAN_NEED_IMAGE_REFERENCE(dir);
  EXPECT_TITAN_ERROR(data::read_image(dir / "cmyk.jpg"), "cmyk.jpg", "CMYK");
}

TEST(ImageIo, EncodedImagesDecodeBack) {
  Image img(23, 9);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>((i * 7) % 256);
  const std::string png = data::encode_png(img);
  EXPECT_EQ(data::decode_png({reinterpret_cast<const uint8_t*>(png.data()), png.size()}, "x"), img);
  // A smooth image, which JPEG keeps within a few levels at quality 95.
  for (int64_t y = 0; y < img.height; ++y)
    for (int64_t x = 0; x < img.width * 3; ++x) img.row(y)[x] = static_cast<uint8_t>(100 + 3 * y + x);
  const fs::path dir = test::fresh_temp_dir("image_encode");
  data::write_image(dir / "a.jpg", img, 95);
  data::write_image(dir / "a.png", img);
  EXPECT_TRUE(same_pixels(data::read_image(dir / "a.jpg"), img, 8));
  EXPECT_EQ(data::read_image(dir / "a.png"), img);
  const std::string low = data::encode_jpeg(img, 10), high = data::encode_jpeg(img, 95);
  EXPECT_LT(low.size(), high.size());
  EXPECT_TITAN_ERROR(data::write_image(dir / "a.bmp", img), "a.bmp", ".png, .jpg or .jpeg");
  EXPECT_TITAN_ERROR(data::encode_jpeg(img, 0), "quality");
}

TEST(ImageIo, BadFilesAreErrorsNamingTheFile) {
  const fs::path ref = test::image_reference_dir();
  TITAN_NEED_IMAGE_REFERENCE(ref);
  const fs::path dir = test::fresh_temp_dir("image_bad");
  const std::string png = test::slurp(ref / "rgb8.png"), jpg = test::slurp(ref / "photo.jpg");
  write_bytes(dir / "cut.png", png.substr(0, png.size() / 2));
  write_bytes(dir / "cut.jpg", jpg.substr(0, jpg.size() / 2));
  write_bytes(dir / "text.png", "this is not an image\n");
  write_bytes(dir / "empty.png", "");
  std::string bad_crc = png;
  bad_crc[40] ^= 0x55;  // inside the first IDAT chunk
  write_bytes(dir / "crc.png", bad_crc);
  write_bytes(dir / "header_only.jpg", jpg.substr(0, 300));
  EXPECT_TITAN_ERROR(data::read_image(dir / "cut.png"), "cut.png", "truncated");
  EXPECT_TITAN_ERROR(data::read_image(dir / "cut.jpg"), "cut.jpg", "Premature end");
  EXPECT_TITAN_ERROR(data::read_image(dir / "text.png"), "text.png", "neither a PNG nor a JPEG");
  EXPECT_TITAN_ERROR(data::read_image(dir / "empty.png"), "empty.png", "empty file");
  EXPECT_TITAN_ERROR(data::read_image(dir / "crc.png"), "crc.png", "corrupt");
  EXPECT_TITAN_ERROR(data::read_image(dir / "header_only.jpg"), "header_only.jpg", "JPEG");
  EXPECT_TITAN_ERROR(data::read_image(dir / "missing.png"), "missing.png");
  EXPECT_TITAN_ERROR(data::decode_png({reinterpret_cast<const uint8_t*>(jpg.data()), jpg.size()}, "member x"),
                     "member x", "not a PNG");
}

TEST(ImageIo, BicubicResizeEqualsPillow) {
  const fs::path dir = test::image_reference_dir();
  TITAN_NEED_IMAGE_REFERENCE(dir);
  const Image src = data::read_image(dir / "resize_source.png");
  // Exact where Pillow 13 keeps its published pass order (horizontal first); 80x7 shrinks the
  // height and grows the width, which Pillow 13 does vertical first (resize.h).
  struct Case {
    int w, h, tolerance;
  };
  for (const Case c : std::vector<Case>{
           {16, 10, 0}, {5, 3, 0}, {37, 12, 0}, {20, 23, 0}, {50, 31, 0}, {80, 7, 2}, {1, 1, 0}}) {
    const std::string name = "resize_" + std::to_string(c.w) + "x" + std::to_string(c.h);
    SCOPED_TRACE(name);
    EXPECT_TRUE(same_pixels(data::resize_bicubic(src, c.w, c.h), expected(dir, name), c.tolerance));
  }
}

TEST(ImageIo, CenterCropEqualsTorchTitansFluxPreprocessing) {
  const fs::path dir = test::image_reference_dir();
  TITAN_NEED_IMAGE_REFERENCE(dir);
  const data::ImageTransform center{.size = 16, .crop = data::ImageCrop::center};
  // Pillow 13 resizes tall.png (19x50 to 16x43) vertical pass first (resize.h): within 2 levels.
  for (const auto& [name, tolerance] :
       std::vector<std::pair<std::string, int>>{{"resize_source", 0}, {"tall", 2}}) {
    SCOPED_TRACE(name);
    const Image src = data::read_image(dir / (name + ".png"));
    const Image want = expected(dir, "crop_" + name);
    const std::optional<Image> got = data::resize_and_crop(src, center, 0);
    ASSERT_TRUE(got.has_value());
    EXPECT_TRUE(same_pixels(*got, want, tolerance));
    const std::optional<Tensor> t = data::preprocess_image(src, center, 0);
    ASSERT_TRUE(t.has_value());
    ASSERT_EQ(t->sizes(), Shape({3, 16, 16}));
    const float* v = t->data<float>();
    // torch: tensor(uint8).float() / 255.0 * 2.0 - 1.0, channels first.
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 16; ++y)
        for (int64_t x = 0; x < 16; ++x)
          ASSERT_EQ(v[(c * 16 + y) * 16 + x],
                    static_cast<float>(got->row(y)[x * 3 + c]) / 255.0f * 2.0f - 1.0f);
  }
}

TEST(ImageIo, RandomCropIsSeededPerSampleAndSmallImagesAreLeftOut) {
  Image wide(64, 16);
  for (int64_t x = 0; x < 64; ++x)
    for (int64_t y = 0; y < 16; ++y) wide.row(y)[x * 3] = static_cast<uint8_t>(x * 4);
  const data::ImageTransform random{.size = 16, .crop = data::ImageCrop::random, .seed = 5};
  std::set<uint8_t> offsets;
  for (uint64_t i = 0; i < 40; ++i) {
    const std::optional<Image> a = data::resize_and_crop(wide, random, i),
                               b = data::resize_and_crop(wide, random, i);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(*a, *b) << "sample " << i;
    offsets.insert(a->row(0)[0]);
  }
  EXPECT_GT(offsets.size(), 10u) << "the crop should move along the long side from sample to sample";
  EXPECT_FALSE(data::resize_and_crop(wide, {.size = 17}, 0).has_value());
  EXPECT_FALSE(data::preprocess_image(Image(300, 255), {.size = 256}, 0).has_value());
}

TEST(TarReader, ListsGnuLongNamesAndPaxPaths) {
  const fs::path dir = test::image_reference_dir();
  TITAN_NEED_IMAGE_REFERENCE(dir);
  const std::string long_dir(120, 'd');
  MappedFile gnu(dir / "shards/a-0.tar"), pax(dir / "shards/a-1.tar");
  std::vector<std::string> names;
  for (const auto& m : data::list_tar_members(gnu.bytes(), "a-0.tar")) names.push_back(m.name);
  EXPECT_EQ(names, (std::vector<std::string>{"s0.png", "s0.txt", "s0.json", long_dir + "/s1.jpg",
                                             long_dir + "/s1.txt"}));
  const auto members = data::list_tar_members(pax.bytes(), "a-1.tar");
  ASSERT_EQ(members.size(), 4u);
  EXPECT_EQ(members[0].name, long_dir + "/s2.jpg");
  EXPECT_EQ(pax.bytes().substr(members[1].offset, members[1].size), "caf\xc3\xa9 caption");
  EXPECT_EQ(pax.bytes().substr(members[3].offset, members[3].size), "fourth");
}

TEST(TarReader, DamageIsAnErrorNamingArchiveAndMember) {
  const fs::path dir = test::image_reference_dir();
  TITAN_NEED_IMAGE_REFERENCE(dir);
  MappedFile cut(dir / "truncated.tar");
  EXPECT_TITAN_ERROR(data::list_tar_members(cut.bytes(), "truncated.tar"), "truncated.tar", "member 't1.png'",
                     "truncated");
  std::string damage;
  const auto kept = data::list_tar_members(cut.bytes(), "truncated.tar", &damage);
  EXPECT_EQ(kept.size(), 2u);
  EXPECT_NE(damage.find("t1.png"), std::string::npos) << damage;
  std::string bad(cut.bytes());
  bad[3] ^= 1;  // the first header's name: its checksum no longer matches
  EXPECT_TITAN_ERROR(data::list_tar_members(bad, "bad.tar"), "bad.tar", "checksum");
}

}  // namespace
}  // namespace titan
