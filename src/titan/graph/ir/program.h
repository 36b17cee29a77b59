#pragma once
// The program being captured in graph mode: StableHLO in MLIR's generic form, built op by op as
// tensors on a PJRT device meet ops that have a lowering (graph/lazy.h), then printed as one
// module whose @main takes the parameters and returns the chosen values.
//
// The generic form ("stablehlo.add"(%a, %b) : (...) -> ...) is written instead of the pretty one
// because every StableHLO version's parser reads it, so one printer serves every plugin.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::graph {

// One SSA value of a program. `pred` marks i1 (comparisons) and `bytes` ui8 (the scratch buffer a
// GPU library's custom call returns for XLA to size, which no op reads), types titan's dtypes lack.
struct Value {
  int64_t id = -1;
  Shape shape = {};
  DType dtype = kF32;
  bool pred = false;
  bool bytes = false;
};

// tensor<2x3xf32>; tensor<f32> for a scalar; tensor<...xi1> for a predicate, tensor<...xui8> for bytes.
std::string mlir_type(const Shape& shape, DType dtype, bool pred = false, bool bytes = false);
inline std::string mlir_type(const Value& v) { return mlir_type(v.shape, v.dtype, v.pred, v.bytes); }

// Where a parameter's data comes from each time the program runs.
enum class InputKind : uint8_t {
  state,  // lives on the device between runs (parameters, optimizer moments); donated when aliased
  batch,  // uploaded for each run (tokens, labels, the learning rate)
  host,   // a host tensor that does not change between runs (RoPE tables): uploaded once
};

// How a value of a program run over several devices is split among them (XLA's SPMD
// partitioner reads it as mhlo.sharding): `tiles[d]` pieces along dim d, and each piece held by
// `replicas` devices. The grid [tiles..., replicas] is filled row-major with `devices` (0, 1, ...
// when empty), so that a device mesh's axes can map to any dims. No tiles: every device holds all
// of it.
struct Sharding {
  Shape tiles = {};
  int64_t replicas = 1;
  std::vector<int64_t> devices = {};
  bool replicated() const { return tiles.empty(); }
  int64_t num_devices() const;
  // "{replicated}", "{devices=[2,1]0,1}" or "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}".
  std::string attr() const;
  // The piece device `device` holds: its start in the grid of tiles, one per dim.
  std::vector<int64_t> tile_of(int64_t device) const;
  bool operator==(const Sharding&) const = default;
};

struct Parameter {
  Value value = {};
  std::string name = {};
  InputKind kind = InputKind::batch;
  Tensor host = {};  // for InputKind::host
  Sharding sharding = {};  // over the program's partitions (set_partitions)
};

struct ResultType {
  Shape shape = {};
  DType dtype = kF32;
  bool pred = false;
  bool bytes = false;
  bool operator==(const ResultType&) const = default;
};

// One op as written: what an OpWatcher compares between two writings of the same code.
struct OpSignature {
  std::string_view op;
  const std::vector<ResultType>& results;
  std::string_view attrs;
};

// Sees the ops written directly into one block (not into regions nested in it, not rows recorded
// elsewhere), in order: a layer loop's forward notes what its backward may take instead of
// computing it again, and the backward's second writing of the same block takes it
// (autograd/scan.cpp). Ops the watcher itself writes are not shown to it.
class OpWatcher {
 public:
  virtual ~OpWatcher() = default;
  // Values to stand for the op's results, in which case it is not written; nothing to write it.
  virtual std::optional<std::vector<Value>> before(const OpSignature& op) = 0;
  virtual void after(const OpSignature& op, const std::vector<Value>& results) = 0;
  // Whether a custom call's results go straight into the stacks of the loop being written, each as
  // its row for this iteration, rather than being copied there later (hlo::custom_call asks; the
  // watcher's after() then sees the stacks so written).
  // A watcher that answers true writes nothing instead of the op in before().
  virtual bool keeps_in_place(const OpSignature& op) { return false; }
};

// What a loop over identical blocks keeps from its forward for its backward (autograd/scan.h):
// each block's input only, so that the backward computes the block again (activation
// checkpointing); also the results of its matrix products, custom calls and inner loops (the
// costly ops; the backward recomputes the rest from them); or every result that the backward reads.
enum class ScanSaves : uint8_t { inputs, products, all };

class Program {
 public:
  Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  // A number no other program in this process has: lazy tensors name their program by it.
  uint64_t serial() const { return serial_; }

  Value parameter(const Shape& shape, DType dtype, std::string name, InputKind kind, Tensor host = {});
  const std::vector<Parameter>& parameters() const { return params_; }
  // The parameter made for `host` by an earlier call of this, if any (a host tensor used twice is
  // one input).
  const Value* host_parameter(const TensorImpl* host) const;

  // How an op is written where that differs from what an OpWatcher sees: a custom call taking rows
  // of stacks in place, or writing its results into stacks, differs only in how its operands and
  // results are passed, in which two writings of the same op may differ.
  struct WrittenAs {
    std::string attrs;
    std::vector<ResultType> results;
  };
  // Appends one op; returns its results (of `written`'s types, if given). `attrs` is the text
  // inside {...}; `regions` each a region's text from region().
  std::vector<Value> emit(std::string_view op, const std::vector<Value>& operands,
                          const std::vector<ResultType>& results, std::string_view attrs = {},
                          const std::vector<std::string>& regions = {}, const WrittenAs* written = nullptr);
  // The watcher's keeps_in_place for an op written now; false where no watcher sees it.
  bool keeps_in_place(const OpSignature& op);
  // Blocks open: 1 at the top level, one more in each region being written.
  size_t depth() const { return blocks_.size(); }
  Value emit1(std::string_view op, const std::vector<Value>& operands, const ResultType& result,
              std::string_view attrs = {}, const std::vector<std::string>& regions = {});
  // A region with one block: `body` gets the block's arguments and returns what it yields
  // (through stablehlo.return).
  std::string region(const std::vector<ResultType>& args,
                     const std::function<std::vector<Value>(const std::vector<Value>&)>& body);
  // One more argument of the innermost region, for a body that learns only as it is written what
  // it must carry (hlo::scan's stacked outputs).
  Value add_region_arg(const ResultType& type);
  // Shows the ops written from now on into the innermost block to `watcher`, until the scope ends.
  class WatchScope {
   public:
    WatchScope(Program& program, OpWatcher& watcher);
    ~WatchScope();
    WatchScope(const WatchScope&) = delete;
    WatchScope& operator=(const WatchScope&) = delete;

   private:
    Program& program_;
    OpWatcher* previous_;
    size_t previous_depth_;
  };

  // The module: @main(parameters) -> results. `aliases` pairs (parameter index, result index): the
  // parameter's buffer is donated and the result written into it. With partitions (set_partitions),
  // each parameter carries its sharding and result i `result_shardings[i]` (replicated where none
  // is given), for XLA's SPMD partitioner to split the program by.
  std::string module_text(const std::vector<Value>& results, const std::vector<std::pair<int, int>>& aliases = {},
                          const std::vector<Sharding>& result_shardings = {});
  // The devices one run of the program spans (1: no sharding is written), and a parameter's
  // sharding over them, checked against its shape.
  void set_partitions(int64_t n);
  int64_t partitions() const { return partitions_; }
  void shard(const Value& parameter, const Sharding& sharding);
  std::string name(const Value& v) const;
  int64_t num_ops() const { return num_ops_; }

  // Row i of `stacked` [n, ...], as a value of the row's shape that is recorded only when an op
  // first takes it: a layer's weights named as rows of the stacked state cost nothing where only
  // the stack is read (a loop over the layers), so the program does not grow with depth.
  Value row(const Value& stacked, int64_t i);
  struct Row {
    Value stacked = {};
    int64_t index = 0;
  };
  // What `v` is row of, if it was made by row().
  std::optional<Row> row_of(const Value& v) const;
  // Row `index` (a scalar i64 value of the program: a loop's counter) of `stacked` [n, ...], written
  // as a dynamic_slice only when an op other than a custom call first takes it. A custom call takes
  // the stack and the index instead (hlo::custom_call), so that a loop over layers hands titan's
  // kernels its weights and saved results in place rather than as copies of the rows.
  Value dynamic_row(const Value& stacked, const Value& index);
  struct DynamicRow {
    Value stacked = {};
    Value index = {};
  };
  std::optional<DynamicRow> dynamic_row_of(const Value& v) const;
  // `v`, a dynamic row, reshaped to `shape` as the same row of its stack reshaped: still taken in
  // place by custom calls. Nothing if `v` is not a dynamic row.
  std::optional<Value> reshaped_dynamic_row(const Value& v, const Shape& shape);
  // a + b for two stacked values of one type, written once however many of their rows are added
  // (graph::add of two rows of one index: a layer's gradients from two micro-batches' loops).
  // Only at the top level of the program, where every row can see the sum; nothing elsewhere.
  std::optional<Value> stack_sum(const Value& a, const Value& b);
  // Whether identical blocks are recorded once, as a loop (autograd/scan.h), rather than each.
  bool scan_layers() const { return scan_layers_; }
  void set_scan_layers(bool on) { scan_layers_ = on; }
  ScanSaves scan_saves() const { return scan_saves_; }
  void set_scan_saves(ScanSaves saves) { scan_saves_ = saves; }
  // Whether lowerings may call titan's CPU kernels as custom calls (graph/pjrt/ffi.h) instead of
  // writing them in StableHLO: only for a program that a CPU ("Host") plugin with the FFI extension
  // compiles, after their targets were registered with it (train/graph_mode/custom_kernels.h). Other plugins
  // must not see these targets in the program's text.
  bool custom_kernels() const { return custom_kernels_; }
  void set_custom_kernels(bool on) { custom_kernels_ = on; }
  // The kind of device the program is compiled for, for lowerings whose best form differs by
  // device (attention/attention_choice.h): a program compiled by the CUDA plugin may call cuDNN's
  // fused attention, and keeps larger score tiles whole.
  enum class Platform : uint8_t { cpu, cuda, other };
  Platform platform() const { return platform_; }
  void set_platform(Platform platform) { platform_ = platform; }
  // Whether attention on a CUDA program calls cuDNN's flash attention where it can (compile.cudnn_attention).
  bool cudnn_attention() const { return cudnn_attention_; }
  void set_cudnn_attention(bool on) { cudnn_attention_ = on; }
  // The most packed documents one row of the captured batches may hold (GraphStep counts them on
  // the host and recaptures when a batch holds more): the static size of cuDNN's per-document
  // lengths and offsets. 0: no bound, and document-masked attention stays with XLA's lowering.
  int64_t max_documents() const { return max_documents_; }
  void set_max_documents(int64_t n) { max_documents_ = n; }
  // Lines for the start-up log from the lowerings (which attention each kind of layer got, and
  // why), in the order first noted, each once.
  void note(const std::string& line);
  const std::vector<std::string>& notes() const { return notes_; }
  // Over several devices: the layout a layer loop keeps its carried activations in between blocks
  // (and their gradients in backward), as a sharding constraint on them (hlo::constrain). Without
  // it XLA's propagation chooses, and may follow the weights' FSDP split into the features.
  void set_carry_sharding(const Sharding& sharding) { carry_sharding_ = sharding; }
  const std::optional<Sharding>& carry_sharding() const { return carry_sharding_; }
  // Over several devices: the layout of an activation of `shape` that a tensor-parallel plan
  // splits along `split_dim` (nullopt: whole on every tp device), as the mesh lays it out
  // (ops::keep_layout asks). Unset: activations are left to XLA's propagation.
  using ActivationLayout = std::function<Sharding(const Shape& shape, std::optional<int64_t> split_dim)>;
  void set_activation_layout(ActivationLayout layout) { activation_layout_ = std::move(layout); }
  const ActivationLayout& activation_layout() const { return activation_layout_; }

 private:
  uint64_t serial_;
  int64_t num_ops_ = 0;
  int64_t partitions_ = 1;
  bool scan_layers_ = false;
  ScanSaves scan_saves_ = ScanSaves::all;
  bool custom_kernels_ = false;
  Platform platform_ = Platform::cpu;
  bool cudnn_attention_ = true;
  int64_t max_documents_ = 0;
  std::vector<std::string> notes_;
  std::optional<Sharding> carry_sharding_ = std::nullopt;
  ActivationLayout activation_layout_ = nullptr;
  std::vector<std::string> names_;  // by value id
  size_t next_name_ = 0;            // SSA names count the values written, not rows never taken
  std::vector<Parameter> params_;
  std::vector<std::pair<const TensorImpl*, Value>> host_params_;
  std::vector<std::string> blocks_;  // the innermost block being written is last
  std::vector<std::vector<Value>> region_args_;  // the arguments of each open region, innermost last
  OpWatcher* watcher_ = nullptr;
  size_t watched_depth_ = 0;  // blocks_.size() when the watcher was set
  struct PendingRow {
    Row row = {};
    std::optional<Value> dynamic_index = {};  // for dynamic_row(); row.index is then unused
    size_t block = 0;  // the block row() was asked in: where the row is written when first taken
    bool recorded = false;
  };
  std::map<int64_t, PendingRow> rows_;  // by the row's value id
  std::map<std::pair<int64_t, int64_t>, Value> stack_sums_;  // by the two stacks' value ids
  size_t into_ = 0;  // the block emit() writes into, while a row is recorded; else the innermost
  Value add_value(std::string name, const ResultType& type);
  void record_row(const Value& v);
  void check_visible(const PendingRow& pending) const;
  // What `write` writes, written into `block` (where a row's stack is visible), not the innermost.
  Value written_into(size_t block, const std::function<Value()>& write);
  // The watcher that sees an op written now, if any.
  OpWatcher* active_watcher() const;
};

// The program that tensors on a PJRT device record into: the one of the innermost CaptureScope.
Program& current_program();
Program* current_program_or_null();

class CaptureScope {
 public:
  explicit CaptureScope(Program& program);
  ~CaptureScope();
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

 private:
  Program* previous_;
};

}  // namespace titan::graph
