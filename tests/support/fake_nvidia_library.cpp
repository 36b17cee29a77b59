// A stand-in for one of NVIDIA's libraries (built as libnvrtc.so.13 by tests/CMakeLists.txt): the
// preloader must open it by path so that a later dlopen by its soname finds it
// (test_nvidia_libraries.cpp).
extern "C" __attribute__((visibility("default"))) int titan_fake_nvidia_library() { return 13; }
