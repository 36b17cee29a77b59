#pragma once
// The distributed benchmarks start themselves under mpirun: run without it, a binary prints the
// machine and runs itself under mpirun with each rank count; under it, every rank measures.
#include <functional>
#include <optional>
#include <string>

#include "titan/dist/process_group.h"

namespace titan::bench {

// Under mpirun: `body` on the world, its status returned; an error on any rank is printed with
// the rank and `name` and ends every rank. Not under mpirun: nullopt.
std::optional<int> run_if_launched(const char* name, const std::function<int(dist::ProcessGroup&)>& body);

// The whole main() of a benchmark that measures over MPI ranks: under mpirun, `body` on the world
// (as run_if_launched); otherwise prints the machine and runs this binary under mpirun with 2 and
// then 4 ranks, the ranks inheriting the BLAS kernels chosen here. 0 when every run succeeded.
int distributed_main(const char* name, char** argv, const std::function<int(dist::ProcessGroup&)>& body);

// The command that runs this binary (argv0) under mpirun with `ranks` ranks of one OpenMP thread
// each (root's flag added when needed).
std::string mpirun_self(const std::string& argv0, int ranks);

}  // namespace titan::bench
