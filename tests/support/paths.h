#pragma once
// Where the tests find the source tree, the `titan` command, the reference Python, the parity
// references and the stand-in PJRT plugins. The values are compiled into one generated file per
// test binary (tests/CMakeLists.txt), not passed as compile definitions to every test: the other
// test objects then have the same compile line in any clone, so ccache shares them between clones.
namespace titan::test::paths {

const char* source_dir();
const char* titan_cli();
const char* python();
const char* parity_dir();
// Stand-in PJRT plugins (support/fake_pjrt_plugin.cpp) reporting C API 1.81 and 0.50.
const char* fake_pjrt_plugin_major_1();
const char* fake_pjrt_plugin_minor_50();
// A plugin that joins processes through the caller's key-value callbacks, over the CPU plugin
// (support/joining_pjrt_plugin.cpp).
const char* joining_pjrt_plugin();
// A folder laid out as a Python site with NVIDIA's wheels: nvidia/cu13/lib/libnvrtc.so.13, a
// stand-in (support/fake_nvidia_library.cpp).
const char* fake_nvidia_site();

}  // namespace titan::test::paths

#define TITAN_SOURCE_DIR (::titan::test::paths::source_dir())
#define TITAN_CLI (::titan::test::paths::titan_cli())
#define TITAN_PYTHON (::titan::test::paths::python())
#define TITAN_PARITY_DIR (::titan::test::paths::parity_dir())
