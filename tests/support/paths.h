#pragma once
// Where the tests find the source tree, the `titan` command, the reference Python and the
// parity references. The values are compiled into one generated file per test binary
// (tests/CMakeLists.txt), not passed as compile definitions to every test: the other test
// objects then have the same compile line in any clone, so ccache shares them between clones.
namespace titan::test::paths {

const char* source_dir();
const char* titan_cli();
const char* python();
const char* parity_dir();

}  // namespace titan::test::paths

#define TITAN_SOURCE_DIR (::titan::test::paths::source_dir())
#define TITAN_CLI (::titan::test::paths::titan_cli())
#define TITAN_PYTHON (::titan::test::paths::python())
#define TITAN_PARITY_DIR (::titan::test::paths::parity_dir())
