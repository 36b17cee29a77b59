# Third-party libraries, all from Debian packages installed by scripts/setup.sh.
find_package(OpenMP REQUIRED)
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)
# Images for text-to-image data sets (data/image/): libpng and libjpeg-turbo.
find_package(PNG REQUIRED)
find_package(JPEG REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(TOMLPP REQUIRED IMPORTED_TARGET tomlplusplus)
# Tokenizers: PCRE2 (with its JIT) runs the pre-tokenizer regexes; ICU's NFC normalizes text
# for the tokenizers that ask for it (Qwen).
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(ICU REQUIRED IMPORTED_TARGET icu-uc)
# Distributed training: OpenMPI's C API (dist/ is the only layer that includes mpi.h). Also gives
# MPIEXEC_EXECUTABLE and MPIEXEC_NUMPROC_FLAG, which the multi-rank tests are launched with.
# We call MPI's C API from C++: no C++ bindings (deprecated, and a library more to link).
set(MPI_CXX_SKIP_MPICXX ON)
find_package(MPI REQUIRED COMPONENTS CXX)

# OpenBLAS's OpenMP build, so BLAS and our kernels share one OpenMP thread pool
# instead of two pools fighting over the cores.
set(TITAN_OPENBLAS_DIR "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp" CACHE PATH
    "Folder holding the OpenMP build of OpenBLAS")
find_library(TITAN_OPENBLAS openblas PATHS ${TITAN_OPENBLAS_DIR} NO_DEFAULT_PATH)
find_path(TITAN_CBLAS_INCLUDE cblas.h PATHS "/usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp"
          NO_DEFAULT_PATH)
if(NOT TITAN_OPENBLAS OR NOT TITAN_CBLAS_INCLUDE)
  message(FATAL_ERROR "OpenBLAS (OpenMP build) not found in ${TITAN_OPENBLAS_DIR}: "
                      "install libopenblas-openmp-dev (make deps does it)")
endif()

# oneDNN 3.2 runs the bf16 GEMMs of mixed-precision training and the convolutions: Intel's PyPI
# build for GNU OpenMP (OpenBLAS's runtime: one thread pool for both), which scripts/setup.sh
# unpacks into .onednn (it says why not Debian's 2.6). Only that copy is looked for, so a machine
# that still has Debian's libdnnl-dev does not link the older one. Only the sources that call
# oneDNN (kernels/cpu/onednn_*.cpp) see its headers, so no other object's compile line, and so no
# other ccache entry, depends on where they are.
set(TITAN_ONEDNN_ROOT ${CMAKE_SOURCE_DIR}/.onednn)
find_library(TITAN_ONEDNN_LIB NAMES libdnnl.so.3 PATHS ${TITAN_ONEDNN_ROOT}/lib NO_DEFAULT_PATH)
find_path(TITAN_ONEDNN_INCLUDE oneapi/dnnl/dnnl.hpp PATHS ${TITAN_ONEDNN_ROOT}/include NO_DEFAULT_PATH)
if(NOT TITAN_ONEDNN_LIB OR NOT TITAN_ONEDNN_INCLUDE)
  message(FATAL_ERROR "oneDNN 3.2 not found in ${TITAN_ONEDNN_ROOT}: run scripts/setup.sh (make deps does it)")
endif()

add_library(titan_deps INTERFACE)
target_include_directories(titan_deps SYSTEM INTERFACE ${TITAN_CBLAS_INCLUDE})
target_link_libraries(titan_deps INTERFACE ${TITAN_OPENBLAS} OpenMP::OpenMP_CXX Threads::Threads
                      nlohmann_json::nlohmann_json PkgConfig::TOMLPP PkgConfig::PCRE2 PkgConfig::ICU)
target_link_libraries(titan_deps INTERFACE ZLIB::ZLIB PNG::PNG JPEG::JPEG ${TITAN_ONEDNN_LIB})
# tcmalloc (gperftools' minimal build) serves every allocation of titan's programs. In graph mode
# XLA's CPU runtime mallocs each run's scratch buffer (the saved activations: 0.8 GiB for the
# bench's M step, more for L) and frees it when the run ends. glibc serves any block over 32 MiB
# from a fresh mmap and returns it with munmap, so the kernel zeroes those pages again on every
# step (6% of an L step's CPU time); tcmalloc keeps the freed span and hands it back on the next
# run (L steps 7% faster, M 4%, at the same RSS). Eager steps allocate through titan's caching
# allocator and do not change. The sanitizers bring their own malloc, so those builds go without.
if(NOT TITAN_SANITIZE AND NOT TITAN_FUZZ)
  find_library(TITAN_TCMALLOC NAMES tcmalloc_minimal libtcmalloc_minimal.so.4)
  if(NOT TITAN_TCMALLOC)
    message(FATAL_ERROR "tcmalloc not found: install libtcmalloc-minimal4 (make deps does it)")
  endif()
  target_link_libraries(titan_deps INTERFACE ${TITAN_TCMALLOC})
endif()
# Pin the OpenMP build at run time too, whatever the system BLAS alternative points at.
set(CMAKE_BUILD_RPATH ${TITAN_OPENBLAS_DIR})
set(CMAKE_INSTALL_RPATH ${TITAN_OPENBLAS_DIR})

include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  message(STATUS "CUDA toolkit found (${CMAKE_CUDA_COMPILER}); no CUDA kernels are built yet")
  set(TITAN_HAVE_CUDA_TOOLKIT ON)
endif()

# TensorBoard event files: our .proto (TensorFlow's field numbers) compiled by protoc at build
# time, into a library of its own: generated code is not ours to keep warning-free (-w), and
# titan reaches it through titan_deps.
find_package(Protobuf REQUIRED)
add_library(titan_proto STATIC ${CMAKE_SOURCE_DIR}/src/titan/train/proto/tensorboard_event.proto)
protobuf_generate(TARGET titan_proto APPEND_PATH PROTOC_OUT_DIR ${CMAKE_BINARY_DIR}/generated/titan/train/proto)
target_include_directories(titan_proto SYSTEM PUBLIC ${CMAKE_BINARY_DIR}/generated)
target_compile_options(titan_proto PRIVATE -w)
target_link_libraries(titan_proto PUBLIC protobuf::libprotobuf-lite)
target_link_libraries(titan_deps INTERFACE titan_proto)
