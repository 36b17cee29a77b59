#pragma once
// Which data parallelism a mesh means: the one place that decides between FSDP, HSDP, DDP and
// none, for the trainer and for apply_fsdp alike.
#include "titan/dist/device_mesh.h"

namespace titan::parallel {

enum class DataParallelStyle { none, ddp, fsdp, hsdp };

// dp_shard > 1 shards the parameters (FSDP; HSDP when dp_replicate > 1 as well); else
// dp_replicate > 1 replicates them (DDP); else there is one replica.
DataParallelStyle data_parallel_style(const dist::DeviceMesh& mesh);
// "none", "DDP", "FSDP", "HSDP".
const char* style_name(DataParallelStyle style);

}  // namespace titan::parallel
