#include "support/mpi_launch.h"

#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <iostream>

#include "support/torch_reference.h"

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

int distributed_main(const char* name, char** argv, const std::function<int(dist::ProcessGroup&)>& body) {
  if (std::optional<int> status = run_if_launched(name, body)) return *status;
  use_this_cpus_blas_kernels(argv);
  std::cout << machine_summary() << "\n";
  int status = 0;
  for (int ranks : {2, 4}) {
    const std::string cmd = mpirun_self(argv[0], ranks);
    std::cout << "$ " << cmd << std::endl;
    if (std::system(cmd.c_str()) != 0) status = 1;
  }
  return status;
}

std::string mpirun_self(const std::string& argv0, int ranks) {
  const std::string root = getuid() == 0 ? " --allow-run-as-root" : "";
  return "OMP_NUM_THREADS=1 mpirun --oversubscribe" + root + " -np " + std::to_string(ranks) + " " + argv0;
}

}  // namespace titan::bench
