// Images and webdataset shards from memory: the PNG and JPEG decoders (libpng and libjpeg-turbo
// behind titan's error handling) and the tar reader. An input whose first byte is even is an image;
// odd, a tar archive, whose image members are then decoded as the image data sets would.
#include "fuzz_input.h"
#include "titan/data/image/image_io.h"
#include "titan/data/image/tar_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace titan;
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const auto bytes = [](std::string_view s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  if ((data[0] & 1) == 0)
    return fuzz::accepting_titan_errors([&] { data::decode_image(bytes(rest), "fuzz"); });
  return fuzz::accepting_titan_errors([&] {
    std::string damage;
    for (const data::TarMember& m : data::list_tar_members(rest, "fuzz.tar", &damage)) {
      const std::string_view member = rest.substr(m.offset, m.size);
      fuzz::accepting_titan_errors([&] { data::decode_image(bytes(member), m.name); });
    }
  });
}
