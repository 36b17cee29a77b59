#include "titan/parallel/fully_shard.h"

#include "titan/parallel/data_parallel_style.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/memory_owner.h"
#include "titan/core/meta.h"
#include "titan/core/stopwatch.h"

namespace titan::parallel {

namespace {

using Clock = std::chrono::steady_clock;

Shape with_rows(Shape shape, int64_t rows) {
  shape[0] = rows;
  return shape;
}

// [p0, .., pk, c0, .., ck] <-> [p0, c0, .., pk, ck]: the ranks' pieces, in rank order (the
// grid's row-major order), against the padded tensor's layout.
Shape interleaved(const Shape& parts, const Shape& chunk) {
  Shape out;
  for (size_t d = 0; d < parts.size(); ++d) out.insert(out.end(), {parts[d], chunk[d]});
  return out;
}
Shape padded_shape(const ShardGrid& g) {
  Shape out;
  for (size_t d = 0; d < g.parts.size(); ++d) out.push_back(g.parts[d] * g.chunk[d]);
  return out;
}

// The pieces [ranks, chunk...] (gathered) as the padded tensor, contiguous.
Tensor pieces_to_padded(const Tensor& pieces, const ShardGrid& g) {
  Shape split = g.parts, order;
  split.insert(split.end(), g.chunk.begin(), g.chunk.end());
  const int64_t k = static_cast<int64_t>(g.parts.size());
  for (int64_t d = 0; d < k; ++d) order.insert(order.end(), {d, k + d});
  return pieces.view(split).permute(order).contiguous().view(padded_shape(g));
}

// The padded tensor as the pieces [ranks * chunk0, chunk1, ...], contiguous (to scatter).
Tensor padded_to_pieces(const Tensor& padded, const ShardGrid& g) {
  Shape order;
  const int64_t k = static_cast<int64_t>(g.parts.size());
  for (int64_t d = 0; d < k; ++d) order.push_back(2 * d);
  for (int64_t d = 0; d < k; ++d) order.push_back(2 * d + 1);
  int64_t ranks = 1;
  for (int64_t p : g.parts) ranks *= p;
  return padded.contiguous().view(interleaved(g.parts, g.chunk)).permute(order).contiguous().view(
      with_rows(g.chunk, ranks * g.chunk[0]));
}

// The leading corner of `t` of `sizes`.
Tensor corner(Tensor t, const Shape& sizes) {
  for (size_t d = 0; d < sizes.size(); ++d) t = t.narrow(static_cast<int64_t>(d), 0, sizes[d]);
  return t;
}

}  // namespace

FullyShard::FullyShard(nn::Module& root, const std::vector<nn::Module*>& blocks, dist::ProcessGroup shard_group,
                       dist::ProcessGroup replicate_group, FullyShardOptions options,
                       std::optional<OwnShardGroup> own)
    : shard_group_(std::move(shard_group)),
      replicate_group_(std::move(replicate_group)),
      own_(std::move(own)),
      options_(options) {
  std::map<const nn::Module*, std::string> block_names;
  for (auto& [name, m] : root.named_modules()) block_names.emplace(m, name);
  for (nn::Module* b : blocks) {
    auto it = block_names.find(b);
    TITAN_CHECK(it != block_names.end() && !it->second.empty(),
                "fully_shard: a block given is not a module inside the root module (nor may it be the root)");
    units_.emplace_back().name = it->second;
    units_.back().module = b;
  }
  units_.emplace_back().module = &root;
  const size_t root_unit = units_.size() - 1;

  autograd::NoGradGuard no_grad;
  MemoryOwnerScope owner(MemoryCategory::parameters);
  std::vector<dist::Work> works;
  for (auto& [name, p] : root.named_parameters()) {
    TITAN_CHECK(p.is_contiguous() && (p.dtype() == kF32 || p.dtype() == kF64) && p.dim() >= 1,
                "fully_shard: parameter ", name, " is ", p.desc(),
                "; FSDP shards contiguous f32 or f64 parameters of at least one dimension on dim 0");
    // Every rank keeps rows of rank 0's values, whatever each initialised. A meta parameter has
    // none yet: its shard is meta too, given memory and values later (param_shards), so nothing
    // proportional to the model is allocated before a memory plan has been checked.
    const bool meta = p.is_meta();
    dist::ProcessGroup& group = own_ && own_->holds(name) ? own_->group : shard_group_;
    if (!meta) {
      replicate_group_.broadcast(p, 0).wait();
      group.broadcast(p, 0).wait();
    }
    const ShardGrid grid = plan_shard_grid(p.sizes(), group.size());
    const MetaScope shard_is_meta(meta);
    Param param{.name = name,
                .full = p,
                .shard = Tensor::zeros(grid.chunk, p.options()),
                .group = &group,
                .grid = grid,
                .box = grid_box(p.sizes(), grid, group.rank())};
    if (!meta) param.box.valid(param.shard).copy_(param.box.of(p));
    param.shard.requires_grad_(true);
    size_t unit = root_unit;
    for (size_t u = 0; u < root_unit; ++u)
      if (name.starts_with(units_[u].name + ".")) unit = u;
    units_[unit].params.push_back(params_.size());
    params_.push_back(std::move(param));
  }
  // Tied parameters appear in the state dict under each name; storage identifies them. The
  // state dict is taken now, as views of a parameter without memory cannot be made later.
  for (auto& [key, t] : root.state_dict()) {
    for (size_t i = 0; i < params_.size(); ++i)
      if (t.storage() == params_[i].full.storage() && t.sizes() == params_[i].full.sizes()) by_name_[key] = i;
    if (!by_name_.contains(key)) buffers_.emplace(key, t);
  }
  for (Unit& u : units_) free_unit(u);

  // A unit's gradients are reduced once all its parameters have theirs.
  for (size_t ui = 0; ui < units_.size(); ++ui)
    for (size_t i : units_[ui].params)
      params_[i].full.register_post_accumulate_grad_hook([this, alive = alive_, ui](Tensor&) {
        if (!*alive) return;
        Unit& u = units_[ui];
        if (sync_ && options_.overlap && ++u.accumulated == u.params.size()) start_reduce(u);
      });

  const size_t num_blocks = root_unit;
  units_[root_unit].hooks.push_back(root.register_forward_pre_hook([this, root_unit, num_blocks](nn::Module&) {
    finish_gather(units_[root_unit]);
    if (num_blocks > 0) prefetch(0);
  }));
  for (size_t i = 0; i < num_blocks; ++i) {
    Unit& u = units_[i];
    u.hooks.push_back(u.module->register_forward_pre_hook([this, i, num_blocks](nn::Module&) {
      finish_gather(units_[i]);
      if (i + 1 < num_blocks) prefetch(i + 1);
    }));
    u.hooks.push_back(u.module->register_forward_hook([this, i](nn::Module&, Tensor& out) {
      if (options_.reshard_after_forward) free_unit(units_[i]);
      if (out.requires_grad())
        out.register_hook([this, i](const Tensor&) {
          before_block_backward(i);
          return Tensor();
        });
    }));
  }
}

FullyShard::~FullyShard() {
  *alive_ = false;
  for (Unit& u : units_)
    for (uint64_t id : u.hooks) u.module->remove_hook(id);
}

void FullyShard::start_gather(Unit& u) {
  if (u.gathered_or_gathering) return;
  u.gathered_or_gathering = true;
  MemoryOwnerScope owner(MemoryCategory::parameters);  // the block's parameters, whole again
  for (size_t i : u.params) {
    const Param& p = params_[i];
    Tensor buf = Tensor::empty(with_rows(p.grid.chunk, p.group->size() * p.grid.chunk[0]), p.shard.options());
    u.pending.push_back(p.group->all_gather(buf, p.shard));
    u.gathered.push_back(buf);
  }
}

void FullyShard::finish_gather(Unit& u) {
  start_gather(u);
  if (u.pending.empty()) return;
  auto t0 = Clock::now();
  for (dist::Work& w : u.pending) w.wait();
  stats_.gather_wait_seconds += seconds_since(t0);
  u.pending.clear();
  // Rows: the padding rows sit after the parameter's own, so the parameter is the buffer's head.
  // A grid's pieces are reordered into the tensor's layout (and its padding cut) first.
  for (size_t k = 0; k < u.params.size(); ++k) {
    const Param& p = params_[u.params[k]];
    if (!p.grid.rows_only()) {
      MemoryOwnerScope owner(MemoryCategory::parameters);
      Tensor whole = pieces_to_padded(u.gathered[k], p.grid);
      if (whole.sizes() != p.full.sizes()) whole = corner(whole, p.full.sizes()).contiguous();
      u.gathered[k] = whole;
    }
    TensorImpl& impl = *p.full.impl();
    impl.storage = u.gathered[k].storage();
    impl.offset = 0;
  }
}

void FullyShard::free_unit(Unit& u) {
  if (!u.pending.empty()) finish_gather(u);
  // An empty storage rather than none keeps the parameter's device for whoever asks.
  for (size_t i : u.params) params_[i].full.impl()->storage = Storage::allocate(0, params_[i].shard.device());
  u.gathered.clear();
  u.gathered_or_gathering = false;
}

void FullyShard::prefetch(size_t unit) {
  if (options_.overlap) start_gather(units_[unit]);
  // MPI advances nonblocking collectives only inside MPI calls: give the ones in flight a turn.
  for (Unit& u : units_)
    for (dist::Work& w : u.pending) w.test();
}

void FullyShard::before_block_backward(size_t i) {
  // Every node of block i + 1 has run (the engine runs nodes newest first): its gradients are
  // on their way to the accumulators, which need no parameter values.
  if (i + 1 < units_.size() - 1) {
    free_unit(units_[i + 1]);
    // Its parameters are used in it alone, so their gradients are complete: accumulated now, they
    // start the unit's reduce-scatter while backward goes on, with activation checkpointing too
    // (whose passes would otherwise accumulate every leaf at their end, holding the whole model's
    // gradients unsharded).
    std::vector<Tensor> leaves;
    for (size_t p : units_[i + 1].params) leaves.push_back(params_[p].full);
    autograd::release_leaves(leaves);
  }
  finish_gather(units_[i]);
  if (i > 0) prefetch(i - 1);
}

void FullyShard::start_reduce(Unit& u) {
  // A reduce-scatter's input (the unit's whole gradients) lives until it completes: the earlier
  // units' are waited for, so that one unit's is in flight at a time, overlapping the backward of
  // the block below it, as FSDP2's reduce-scatter stream does.
  auto t0 = Clock::now();
  for (Unit& other : units_)
    if (&other != &u)
      for (dist::Work& w : other.reducing) w.wait();
  stats_.reduce_seconds += seconds_since(t0);
  MemoryOwnerScope owner(MemoryCategory::gradients);  // the padded input and this rank's shard
  for (size_t i : u.params) {
    Param& p = params_[i];
    Tensor g = p.full.grad();
    const Shape padded = padded_shape(p.grid);
    Tensor in;
    if (g.defined() && p.grid.rows_only() && g.is_contiguous() && g.sizes() == padded) {
      in = g;
    } else {
      Tensor whole = g;
      if (!g.defined() || g.sizes() != padded) {
        whole = Tensor::zeros(padded, p.shard.options());
        if (g.defined()) corner(whole, g.sizes()).copy_(g);
      }
      in = p.grid.rows_only() ? whole.contiguous() : padded_to_pieces(whole, p.grid);
    }
    u.reduced.push_back(Tensor::empty(p.shard.sizes(), p.shard.options()));
    u.reducing.push_back(p.group->reduce_scatter(u.reduced.back(), in, dist::ReduceOp::avg));
    p.full.set_grad(Tensor());
  }
}

void FullyShard::reduce_gradients() {
  auto t0 = Clock::now();
  for (Unit& u : units_)
    if (u.reducing.empty()) start_reduce(u);
  for (Unit& u : units_)
    for (dist::Work& w : u.reducing) w.wait();
  if (replicate_group_.size() > 1) {
    std::vector<dist::Work> works;
    for (Unit& u : units_)
      for (const Tensor& g : u.reduced) works.push_back(replicate_group_.all_reduce(g, dist::ReduceOp::avg));
    for (dist::Work& w : works) w.wait();
  }
  for (Unit& u : units_) {
    for (size_t k = 0; k < u.params.size(); ++k) params_[u.params[k]].shard.set_grad(u.reduced[k]);
    u.reducing.clear();
    u.reduced.clear();
    u.accumulated = 0;
  }
  reshard_all();
  stats_.reduce_seconds += seconds_since(t0);
}

double FullyShard::sum_over_shards(double partial) {
  return shard_group_.all_reduce(partial, dist::ReduceOp::sum);
}

std::vector<std::pair<std::string, Tensor>> FullyShard::named_shards() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Param& p : params_) out.emplace_back(p.name, p.shard);
  return out;
}

std::vector<Tensor> FullyShard::shards() const {
  std::vector<Tensor> out;
  for (const Param& p : params_) out.push_back(p.shard);
  return out;
}

std::vector<FullyShard::ParamShard> FullyShard::param_shards() const {
  std::vector<ParamShard> out;
  for (const Param& p : params_) {
    out.push_back({.name = p.name, .param = p.full, .shard = p.shard.detach(), .where = p.box});
  }
  return out;
}

std::optional<ShardBox> FullyShard::shard_box(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return params_[it->second].box;
}

nn::StateDict FullyShard::state_dict() const {
  nn::StateDict out = buffers_;
  for (const auto& [name, i] : by_name_) out.emplace(name, params_[i].shard.detach());
  return out;
}

void FullyShard::load_state_dict(const nn::StateDict& state) {
  const nn::StateDict mine = state_dict();
  std::string problems;
  for (const auto& [name, t] : mine) {
    auto it = state.find(name);
    if (it == state.end())
      problems += "; " + name + " is missing";
    else if (it->second.sizes() != t.sizes() || it->second.dtype() != t.dtype())
      problems += "; " + name + " is " + it->second.desc() + ", this rank's shard is " + t.desc();
  }
  for (const auto& [name, t] : state)
    if (!mine.contains(name)) problems += "; " + name + " is not a tensor of this model";
  TITAN_CHECK(problems.empty(), "fully_shard: cannot load the state dict", problems);
  autograd::NoGradGuard no_grad;
  for (auto [name, t] : mine) t.copy_(state.at(name));
}

void FullyShard::unshard_all() {
  for (Unit& u : units_) start_gather(u);
  for (Unit& u : units_) finish_gather(u);
}

void FullyShard::reshard_all() {
  for (Unit& u : units_) free_unit(u);
}

int64_t FullyShard::shard_bytes() const {
  int64_t bytes = 0;
  for (const Param& p : params_) bytes += static_cast<int64_t>(p.shard.nbytes());
  return bytes;
}

std::unique_ptr<FullyShard> apply_fsdp(nn::Module& root, nn::Module& layers, dist::DeviceMesh& mesh,
                                       FullyShardOptions options,
                                       const std::function<bool(const nn::Module& block)>& runs_here,
                                       const std::function<bool(const std::string& name)>& experts) {
  const DataParallelStyle style = data_parallel_style(mesh);
  if (style != DataParallelStyle::fsdp && style != DataParallelStyle::hsdp) return nullptr;
  std::vector<nn::Module*> blocks;
  for (const auto& [name, block] : layers.named_children())
    if (!runs_here || runs_here(*block)) blocks.push_back(block.get());
  std::optional<OwnShardGroup> own;
  if (experts) own = OwnShardGroup{.holds = experts, .group = mesh[dist::MeshAxis::efsdp]};
  return std::make_unique<FullyShard>(root, blocks, mesh[dist::MeshAxis::dp_shard], mesh[dist::MeshAxis::dp_replicate],
                                      options, std::move(own));
}

}  // namespace titan::parallel
