#pragma once
// FLUX's workload (train/workload.h): rectified-flow training of models::flux::FluxTransformer on
// an encoding cache ([flux], flux_batches.h), FSDP/HSDP and activation checkpointing per block
// (models/flux/parallelize.h), validation as the mean loss at the 8 timesteps (i + 0.5) / 8 with
// fixed noise, MFU from models::flux::flux_summary; the step eager or in graph mode on one device
// (flux_step.h). Refused by key: graph mode over several devices, tensor, context, pipeline and
// expert parallelism, the token data keys, and running the encoders every step (a cache is
// required).
#include <memory>

#include "titan/train/workload.h"

namespace titan::train::flux {

std::unique_ptr<Workload> make_flux_workload(const JobConfig& cfg);

}  // namespace titan::train::flux
