#pragma once
// Every check of a job's config against what titan can run and against the model it builds, in
// one place that both execution modes and --dry-run share. Each reports what it refuses all at
// once, naming the keys and what to change, before anything is allocated.
#include "titan/dist/parallel_dims.h"
#include "titan/models/registry.h"
#include "titan/train/config/job_config.h"

namespace titan::train {

// What titan does not have yet, or this machine cannot run: bf16 products without the CPU's
// instructions, the parallelisms graph mode does not split (context, pipeline, expert), and the
// activation checkpointing the chosen mode cannot do.
void refuse_unsupported(const JobConfig& cfg, const dist::MeshDegrees& degrees);

// The layout against the model: tensor parallelism must split its heads, key/value heads,
// feed-forward width and vocabulary evenly; expert parallelism its experts; context parallelism
// needs splash attention; the family must have a plan for every degree above 1; and the
// combinations titan does not run yet are named.
void check_model_layout(const JobConfig& cfg, const dist::ParallelDims& dims, const models::TrainSpec& spec,
                        const models::ModelSummary& summary);

}  // namespace titan::train
