#include "titan/parallel/data_parallel_style.h"

namespace titan::parallel {

DataParallelStyle data_parallel_style(const dist::DeviceMesh& mesh) {
  const bool shard = mesh.degree(dist::MeshAxis::dp_shard) > 1, replicate = mesh.degree(dist::MeshAxis::dp_replicate) > 1;
  if (shard) return replicate ? DataParallelStyle::hsdp : DataParallelStyle::fsdp;
  return replicate ? DataParallelStyle::ddp : DataParallelStyle::none;
}

const char* style_name(DataParallelStyle style) {
  switch (style) {
    case DataParallelStyle::ddp: return "DDP";
    case DataParallelStyle::fsdp: return "FSDP";
    case DataParallelStyle::hsdp: return "HSDP";
    case DataParallelStyle::none: break;
  }
  return "none";
}

}  // namespace titan::parallel
