// A stand-in PJRT plugin for the loader's version checks: GetPjrtApi returns a table that holds
// nothing but its size and the version FAKE_PJRT_MAJOR.FAKE_PJRT_MINOR (tests/CMakeLists.txt builds
// one per version). The loader must refuse it before calling anything in it.
#include <pjrt_c_api.h>

namespace {

PJRT_Api make_api() {
  PJRT_Api api{};
  api.struct_size = PJRT_Api_STRUCT_SIZE;
  api.pjrt_api_version.struct_size = PJRT_Api_Version_STRUCT_SIZE;
  api.pjrt_api_version.major_version = FAKE_PJRT_MAJOR;
  api.pjrt_api_version.minor_version = FAKE_PJRT_MINOR;
  return api;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi() {
  static const PJRT_Api api = make_api();
  return &api;
}
