#include "support/mpi_launch.h"

#include <unistd.h>

#include <exception>
#include <iostream>

namespace titan::bench {

std::optional<int> run_if_launched(const char* name, const std::function<int(dist::ProcessGroup&)>& body) {
  if (!dist::launched_by_mpi()) return std::nullopt;
  try {
    return body(dist::world());
  } catch (const std::exception& e) {
    std::cerr << name << ": rank " << dist::launch_rank() << ": " << e.what() << "\n";
    dist::abort_job(1);
    return 1;
  }
}

std::string mpirun_self(const std::string& argv0, int ranks) {
  const std::string root = getuid() == 0 ? " --allow-run-as-root" : "";
  return "OMP_NUM_THREADS=1 mpirun --oversubscribe" + root + " -np " + std::to_string(ranks) + " " + argv0;
}

}  // namespace titan::bench
