#pragma once
// Deferred initialisation: a model built under a MetaScope (core/meta.h) holds shapes and no
// memory; it is sharded (FSDP gives each rank meta shards), and then each rank writes only the
// values it owns, equal bit for bit to that part of the same model built and initialised whole on
// one rank with the same generator. No rank ever holds the whole model.
//
//   std::shared_ptr<Transformer> model;
//   {
//     const MetaScope meta;                     // parameters and persistent buffers: meta
//     model = std::make_shared<Transformer>(args);
//   }
//   auto fsdp = parallel::apply_fsdp(*model, *model->layers, mesh);   // meta shards, no collective
//   Generator gen(seed);
//   parallel::deferred_init(*model, gen, fsdp.get());                  // model->init_weights(gen)
//
// Tensor parallelism composes through `slice_of`: a TP plan narrows a parameter's handle to its
// local slice (a meta handle of the local shape) and says, by parameter name, which box of the
// logical tensor that slice is. FSDP then shards the local tensor (its rows, or a grid of its
// leading dims: parallel/shard_grid.h), so a rank's values are the box `where` of the slice:
//   offsets = slice.offsets + where.offsets,  sizes = where.sizes
// of slice.global_shape, written into the shard's leading corner. Without FSDP the box is the whole
// local slice, written into the (materialised) handle itself. shard_targets() builds exactly these
// nn::init::ShardTargets, for a caller that wants to add targets of its own before initialising.
#include <functional>
#include <optional>
#include <string>

#include "titan/core/rng.h"
#include "titan/nn/module.h"
#include "titan/nn/sharded_init.h"
#include "titan/parallel/fully_shard.h"
#include "titan/parallel/parameter_slices.h"

namespace titan::parallel {

// The slice a parameter (named as in Module::named_parameters) holds; nullopt when its handle is
// the whole logical tensor.
using SliceOf = std::function<std::optional<GlobalSlice>(const std::string& name, const Tensor& param)>;

// Gives every meta tensor of `model` zeroed memory, in place (so every alias sees it): persistent
// buffers (their values come from init_weights, or stay zero, as an eager build's), parameters
// outside `fsdp` (whole local tensors) and the shards `fsdp` made of meta parameters. A meta
// non-persistent buffer is refused: it is computed at construction (build it under
// MetaScope(false)).
void materialize_meta_tensors(nn::Module& model, const FullyShard* fsdp = nullptr);

// Where init must write each parameter on this rank: FSDP's parameters into their shards'
// leading corners, sliced parameters (slice_of) as their box of the logical tensor; parameters neither sharded
// nor sliced get no target (init fills their handles as usual). Handles must hold memory or
// belong to `fsdp` (call materialize_meta_tensors first).
nn::init::ShardTargets shard_targets(nn::Module& model, const FullyShard* fsdp = nullptr,
                                     const SliceOf& slice_of = {});

// materialize_meta_tensors, then model.init_weights(gen) with shard_targets installed. Collective
// over nothing: every rank computes its own part from the same seed. Works on an eagerly built
// model too (it re-initialises it).
void deferred_init(nn::Module& model, Generator& gen, const FullyShard* fsdp = nullptr,
                   const SliceOf& slice_of = {});

}  // namespace titan::parallel
