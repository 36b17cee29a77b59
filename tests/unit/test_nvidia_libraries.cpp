// The NVIDIA libraries of the wheels beside XLA's CUDA plugin are opened before the plugin, so that
// cuDNN's later dlopen of NVRTC by soname finds them (graph/pjrt/nvidia_libraries.h).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/paths.h"
#include "titan/graph/pjrt/nvidia_libraries.h"

namespace titan {
namespace {

namespace fs = std::filesystem;

TEST(NvidiaLibraries, TheWheelsBesideThePluginAreOpenedBySoname) {
  // Not loaded before: a dlopen by soname alone finds no such library on this machine.
  ASSERT_EQ(dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_NOLOAD), nullptr);
  const fs::path site = test::paths::fake_nvidia_site();
  // The plugin need not exist: its folder places the wheels.
  const std::string plugin = (site / "jax_plugins" / "xla_cuda13" / "xla_cuda_plugin.so").string();
  const std::vector<std::string> opened = graph::pjrt::preload_nvidia_libraries(plugin);
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_EQ(fs::path(opened[0]).filename(), "libnvrtc.so.13");
  void* by_soname = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(by_soname, nullptr);
  using Fn = int (*)();
  auto fn = reinterpret_cast<Fn>(dlsym(by_soname, "titan_fake_nvidia_library"));
  ASSERT_NE(fn, nullptr);
  EXPECT_EQ(fn(), 13);
}

TEST(NvidiaLibraries, NoWheelsBesideAPluginOpenNothing) {
  EXPECT_TRUE(graph::pjrt::preload_nvidia_libraries("/nonexistent/jax_plugins/x/plugin.so").empty());
  // The CPU plugin's folder holds no nvidia/ beside it.
  EXPECT_TRUE(graph::pjrt::preload_nvidia_libraries(test::paths::fake_pjrt_plugin_minor_50()).empty());
}

}  // namespace
}  // namespace titan
