#pragma once
// FLUX's workload (train/workload.h): rectified-flow training of models::flux::FluxTransformer on
// an encoding cache or with the frozen encoders run every step ([flux], flux_batches.h,
// live_encodings.h), FSDP/HSDP, context parallelism and activation checkpointing per block
// (models/flux/parallelize.h), validation as the mean loss at the 8 timesteps (i + 0.5) / 8 with
// fixed noise, MFU from models::flux::flux_summary; the step eager or in graph mode (flux_step.h).
// Refused by key: tensor, pipeline and expert parallelism, context parallelism in graph mode, the
// token data keys, and the keys that do not go together (refuse_keys).
#include <memory>

#include "titan/train/workload.h"

namespace titan::train::flux {

std::unique_ptr<Workload> make_flux_workload(const JobConfig& cfg);

}  // namespace titan::train::flux
