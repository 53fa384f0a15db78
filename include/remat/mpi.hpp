#pragma once
// SPDX-License-Identifier: MIT
// remat with data-parallel training on MPI: the CPU umbrella plus remat::dist::MpiComm. Link the
// CMake target remat::mpi (MPI found by find_package(MPI); Debian: openmpi-bin libopenmpi-dev).
// Run with `mpirun -np N ./program`; see README "Training on several processes / machines".
//
//   remat::dist::MpiComm comm(&argc, &argv);                      // MPI_COMM_WORLD
//   remat::dist::DataParallel<remat::Cpu> dp(tape, model.named_parameters(), comm);
//   dp.backward(loss);                                            // sums gradients over ranks

#include "remat/remat.hpp"

#include "remat/dist/comm.hpp"
#include "remat/dist/data_parallel.hpp"
#include "remat/dist/mpi.hpp"
#include "remat/dist/sharded_adamw.hpp"
