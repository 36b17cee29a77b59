#include "titan/graph/ir/program.h"

#include <algorithm>
#include <atomic>
#include <sstream>

#include "titan/graph/ir/hlo.h"

namespace titan::graph {

namespace {

thread_local Program* g_current = nullptr;
std::atomic<uint64_t> g_next_serial{1};

std::string element_type(DType dtype, bool pred, bool bytes) {
  if (pred) return "i1";
  if (bytes) return "ui8";
  switch (dtype) {
    case kF32: return "f32";
    case kF64: return "f64";
    case kBF16: return "bf16";
    case kI32: return "i32";
    case kI64: return "i64";
  }
  throw Error("graph: no MLIR element type for dtype " + std::string(dtype_name(dtype)));
}

std::string types_of(const std::vector<Value>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + mlir_type(values[i]);
  return out;
}

// "%12": built by appending, which GCC 12's -Wrestrict does not misread as operator+ is.
std::string ssa_name(const char* prefix, size_t n) {
  std::string out(prefix);
  out += std::to_string(n);
  return out;
}

}  // namespace

std::string mlir_type(const Shape& shape, DType dtype, bool pred, bool bytes) {
  std::string out = "tensor<";
  for (int64_t d : shape) out += std::to_string(d) + "x";
  return out + element_type(dtype, pred, bytes) + ">";
}

Program::Program() : serial_(g_next_serial++) { blocks_.emplace_back(); }

void Program::note(const std::string& line) {
  if (std::find(notes_.begin(), notes_.end(), line) == notes_.end()) notes_.push_back(line);
}

Value Program::add_value(std::string name, const ResultType& type) {
  names_.push_back(std::move(name));
  return {.id = static_cast<int64_t>(names_.size()) - 1, .shape = type.shape, .dtype = type.dtype, .pred = type.pred,
          .bytes = type.bytes};
}

std::string Program::name(const Value& v) const {
  TITAN_CHECK(v.id >= 0 && v.id < static_cast<int64_t>(names_.size()), "graph: value ", v.id,
              " does not belong to this program (", names_.size(), " values)");
  return names_[static_cast<size_t>(v.id)];
}

Value Program::parameter(const Shape& shape, DType dtype, std::string name, InputKind kind, Tensor host) {
  // Parameters are @main's arguments, visible inside every region: one may be added from within one.
  Value v = add_value(ssa_name("%arg", params_.size()), {shape, dtype, false});
  if (kind == InputKind::host) host_params_.emplace_back(host.impl(), v);
  params_.push_back({.value = v, .name = std::move(name), .kind = kind, .host = std::move(host)});
  return v;
}

const Value* Program::host_parameter(const TensorImpl* host) const {
  for (const auto& [impl, v] : host_params_)
    if (impl == host) return &v;
  return nullptr;
}

std::vector<Value> Program::emit(std::string_view op, const std::vector<Value>& operands,
                                 const std::vector<ResultType>& results, std::string_view attrs,
                                 const std::vector<std::string>& regions, const WrittenAs* written) {
  for (const Value& v : operands) record_row(v);
  OpWatcher* const watcher = active_watcher();
  TITAN_CHECK(written == nullptr || written->results.size() == results.size(), "graph: op ", op, " is written with ",
              written ? written->results.size() : 0, " results and seen with ", results.size());
  const OpSignature signature{.op = op, .results = results, .attrs = attrs};
  if (watcher != nullptr) {
    watcher_ = nullptr;  // what the watcher writes is its own
    std::optional<std::vector<Value>> instead;
    try {
      instead = watcher->before(signature);
    } catch (...) {
      watcher_ = watcher;
      throw;
    }
    watcher_ = watcher;
    if (instead) return *instead;
  }
  ++num_ops_;
  const std::string base = ssa_name("%", next_name_++);
  std::vector<Value> out;
  const std::vector<ResultType>& types = written ? written->results : results;
  for (size_t i = 0; i < types.size(); ++i)
    out.push_back(add_value(types.size() == 1 ? base : base + "#" + std::to_string(i), types[i]));
  std::ostringstream line;
  line << "    ";
  if (results.size() == 1) line << base << " = ";
  if (results.size() > 1) line << base << ":" << results.size() << " = ";
  line << '"' << op << "\"(";
  for (size_t i = 0; i < operands.size(); ++i) line << (i ? ", " : "") << name(operands[i]);
  line << ")";
  if (!regions.empty()) {
    line << " (";
    for (size_t i = 0; i < regions.size(); ++i) line << (i ? ", " : "") << regions[i];
    line << ")";
  }
  if (const std::string_view text = written ? std::string_view(written->attrs) : attrs; !text.empty())
    line << " {" << text << "}";
  line << " : (" << types_of(operands) << ") -> ";
  if (results.size() == 1) line << types_of(out);
  else line << "(" << types_of(out) << ")";
  (into_ > 0 ? blocks_[into_ - 1] : blocks_.back()) += line.str() + "\n";
  if (watcher != nullptr) watcher->after(signature, out);
  return out;
}

OpWatcher* Program::active_watcher() const {
  return into_ == 0 && blocks_.size() == watched_depth_ ? watcher_ : nullptr;
}

bool Program::keeps_in_place(const OpSignature& op) {
  OpWatcher* const watcher = active_watcher();
  return watcher != nullptr && watcher->keeps_in_place(op);
}

Value Program::row(const Value& stacked, int64_t i) {
  TITAN_CHECK(!stacked.shape.empty() && 0 <= i && i < stacked.shape[0], "graph: row ", i, " of ",
              mlir_type(stacked), " does not exist");
  const Value v = add_value("", {Shape(stacked.shape.begin() + 1, stacked.shape.end()), stacked.dtype, stacked.pred});
  rows_[v.id] = {.row = {.stacked = stacked, .index = i}, .block = blocks_.size(), .recorded = false};
  return v;
}

std::optional<Program::Row> Program::row_of(const Value& v) const {
  const auto it = rows_.find(v.id);
  if (it == rows_.end() || it->second.dynamic_index) return std::nullopt;
  return it->second.row;
}

Value Program::dynamic_row(const Value& stacked, const Value& index) {
  TITAN_CHECK(!stacked.shape.empty() && index.shape.empty() && index.dtype == kI64 && !index.pred,
              "graph: a dynamic row needs a stacked value and a scalar i64 index, got ", mlir_type(stacked), " and ",
              mlir_type(index));
  const Value v = add_value("", {Shape(stacked.shape.begin() + 1, stacked.shape.end()), stacked.dtype, stacked.pred});
  PendingRow& pending = rows_[v.id];
  pending.row.stacked = stacked;
  pending.dynamic_index = index;
  pending.block = blocks_.size();
  return v;
}

std::optional<Value> Program::reshaped_dynamic_row(const Value& v, const Shape& shape) {
  const auto it = rows_.find(v.id);
  if (it == rows_.end() || !it->second.dynamic_index) return std::nullopt;
  const PendingRow pending = it->second;
  check_visible(pending);
  Shape stacked_shape{pending.row.stacked.shape[0]};
  stacked_shape.insert(stacked_shape.end(), shape.begin(), shape.end());
  // Written where the row was made, unseen by a watcher: the row's own reshape is the op it sees.
  const Value stacked = written_into(pending.block, [&] { return hlo::reshape(pending.row.stacked, stacked_shape); });
  const Value row = dynamic_row(stacked, *pending.dynamic_index);
  rows_[row.id].block = pending.block;
  return row;
}

std::optional<Program::DynamicRow> Program::dynamic_row_of(const Value& v) const {
  const auto it = rows_.find(v.id);
  if (it == rows_.end() || !it->second.dynamic_index) return std::nullopt;
  check_visible(it->second);
  return DynamicRow{.stacked = it->second.row.stacked, .index = *it->second.dynamic_index};
}

std::optional<Value> Program::stack_sum(const Value& a, const Value& b) {
  if (blocks_.size() != 1 || into_ != 0 || a.shape != b.shape || a.dtype != b.dtype || a.pred || b.pred)
    return std::nullopt;
  const auto key = std::pair{a.id, b.id};
  if (const auto it = stack_sums_.find(key); it != stack_sums_.end()) return it->second;
  const CaptureScope recording(*this);
  const Value sum = hlo::add(a, b);
  stack_sums_.emplace(key, sum);
  return sum;
}

void Program::record_row(const Value& v) {
  const auto it = rows_.find(v.id);
  if (it == rows_.end() || it->second.recorded) return;
  PendingRow& pending = it->second;
  // Written where the stack is visible, before the op being written, which may be in a loop's body.
  check_visible(pending);
  const CaptureScope recording(*this);  // the module may be asked for after its capture
  const Value recorded = written_into(pending.block, [&] {
    if (!pending.dynamic_index) return hlo::reshape(hlo::narrow(pending.row.stacked, 0, pending.row.index, 1), v.shape);
    std::vector<Value> starts{*pending.dynamic_index};
    starts.resize(pending.row.stacked.shape.size(), hlo::scalar(0.0, kI64));
    Shape sizes = pending.row.stacked.shape;
    sizes[0] = 1;
    return hlo::reshape(hlo::dynamic_slice(pending.row.stacked, starts, sizes), v.shape);
  });
  names_[static_cast<size_t>(v.id)] = names_[static_cast<size_t>(recorded.id)];
  pending.recorded = true;
}

Value Program::written_into(size_t block, const std::function<Value()>& write) {
  const size_t saved = into_;
  into_ = block;
  try {
    const Value v = write();
    into_ = saved;
    return v;
  } catch (...) {
    into_ = saved;
    throw;
  }
}

void Program::check_visible(const PendingRow& pending) const {
  TITAN_CHECK(pending.block <= blocks_.size(), "graph: a row of ", mlir_type(pending.row.stacked),
              " is used outside the region it was made in, where its stack or its index is not visible");
}

Value Program::emit1(std::string_view op, const std::vector<Value>& operands, const ResultType& result,
                     std::string_view attrs, const std::vector<std::string>& regions) {
  return emit(op, operands, {result}, attrs, regions)[0];
}

Value Program::add_region_arg(const ResultType& type) {
  TITAN_CHECK(!region_args_.empty(), "graph: a region argument was asked for outside a region");
  region_args_.back().push_back(add_value(ssa_name("%", next_name_++), type));
  return region_args_.back().back();
}

std::string Program::region(const std::vector<ResultType>& args,
                            const std::function<std::vector<Value>(const std::vector<Value>&)>& body) {
  region_args_.emplace_back();
  for (const ResultType& type : args) add_region_arg(type);
  blocks_.emplace_back();
  std::vector<Value> yielded;
  try {
    // A copy: the body may add arguments to the region, moving the vector's elements.
    yielded = body(std::vector<Value>(region_args_.back()));
    for (const Value& v : yielded) record_row(v);
  } catch (...) {
    blocks_.pop_back();
    region_args_.pop_back();
    throw;
  }
  std::string text = "{\n  ^bb0(";
  for (size_t i = 0; i < region_args_.back().size(); ++i)
    text += (i ? ", " : "") + name(region_args_.back()[i]) + ": " + mlir_type(region_args_.back()[i]);
  text += "):\n";
  text += blocks_.back();
  blocks_.pop_back();
  region_args_.pop_back();
  text += "    \"stablehlo.return\"(";
  for (size_t i = 0; i < yielded.size(); ++i) text += (i ? ", " : "") + name(yielded[i]);
  return text + ") : (" + types_of(yielded) + ") -> ()\n  }";
}

int64_t Sharding::num_devices() const { return numel_of(tiles) * replicas; }

std::string Sharding::attr() const {
  if (replicated()) return "{replicated}";
  std::ostringstream os;
  os << "{devices=[";
  for (size_t d = 0; d < tiles.size(); ++d) os << (d ? "," : "") << tiles[d];
  if (replicas > 1) os << "," << replicas;
  os << "]";
  for (int64_t k = 0; k < num_devices(); ++k) os << (k ? "," : "") << (devices.empty() ? k : devices[k]);
  if (replicas > 1) os << " last_tile_dim_replicate";
  os << "}";
  return os.str();
}

std::vector<int64_t> Sharding::tile_of(int64_t device) const {
  int64_t slot = device;
  if (!devices.empty()) {
    const auto it = std::find(devices.begin(), devices.end(), device);
    TITAN_CHECK(it != devices.end(), "graph: device ", device, " holds no piece of sharding ", attr());
    slot = it - devices.begin();
  }
  slot /= replicas;
  std::vector<int64_t> at(tiles.size());
  for (size_t d = tiles.size(); d-- > 0;) {
    at[d] = slot % tiles[d];
    slot /= tiles[d];
  }
  return at;
}

void Program::set_partitions(int64_t n) {
  TITAN_CHECK(n >= 1, "graph: a program spans at least one device, got ", n);
  partitions_ = n;
}

void Program::shard(const Value& parameter, const Sharding& sharding) {
  Parameter* p = nullptr;
  for (Parameter& q : params_)
    if (q.value.id == parameter.id) p = &q;
  TITAN_CHECK(p != nullptr, "graph: shard: value ", name(parameter), " is not a parameter of the program");
  if (!sharding.replicated()) {
    TITAN_CHECK(sharding.tiles.size() == p->value.shape.size(), "graph: parameter '", p->name, "' ",
                mlir_type(p->value), " cannot be split into tiles ", shape_str(sharding.tiles),
                ": give one count per dim");
    int64_t devices = 1;
    for (size_t d = 0; d < sharding.tiles.size(); ++d) {
      TITAN_CHECK(sharding.tiles[d] >= 1 && p->value.shape[d] % sharding.tiles[d] == 0, "graph: parameter '",
                  p->name, "' ", mlir_type(p->value), ": dim ", d, " of size ", p->value.shape[d],
                  " cannot be split into ", sharding.tiles[d], " equal pieces");
      devices *= sharding.tiles[d];
    }
    devices *= sharding.replicas;
    TITAN_CHECK(sharding.devices.empty() || static_cast<int64_t>(sharding.devices.size()) == devices,
                "graph: parameter '", p->name, "': the sharding lists ", sharding.devices.size(), " devices for ",
                devices, " places");
    TITAN_CHECK(devices == partitions_, "graph: parameter '", p->name, "' is split into ", devices,
                " pieces, but the program spans ", partitions_, " devices");
  }
  p->sharding = sharding;
}

std::string Program::module_text(const std::vector<Value>& results, const std::vector<std::pair<int, int>>& aliases,
                                 const std::vector<Sharding>& result_shardings) {
  TITAN_CHECK(blocks_.size() == 1, "graph: the module was asked for inside a region");
  TITAN_CHECK(result_shardings.empty() || (partitions_ > 1 && result_shardings.size() == results.size()),
              "graph: ", result_shardings.size(), " result shardings for ", results.size(), " results of a program over ",
              partitions_, " devices; give one per result, and only with partitions");
  for (const Value& v : results) record_row(v);
  const bool sharded = partitions_ > 1;
  std::ostringstream os;
  os << "module @titan_step";
  if (sharded) os << " attributes {mhlo.num_partitions = " << partitions_ << " : i32, mhlo.num_replicas = 1 : i32}";
  os << " {\n  func.func public @main(";
  for (size_t i = 0; i < params_.size(); ++i) {
    os << (i ? ", " : "") << name(params_[i].value) << ": " << mlir_type(params_[i].value);
    std::vector<std::string> attrs;
    if (sharded) attrs.push_back("mhlo.sharding = \"" + params_[i].sharding.attr() + "\"");
    for (const auto& [param, result] : aliases)
      if (param == static_cast<int>(i)) attrs.push_back("tf.aliasing_output = " + std::to_string(result) + " : i32");
    for (size_t a = 0; a < attrs.size(); ++a) os << (a ? ", " : " {") << attrs[a];
    if (!attrs.empty()) os << "}";
  }
  os << ") -> (";
  for (size_t i = 0; i < results.size(); ++i) {
    os << (i ? ", " : "") << mlir_type(results[i]);
    if (sharded)
      os << " {mhlo.sharding = \"" << (result_shardings.empty() ? Sharding{} : result_shardings[i]).attr() << "\"}";
  }
  os << ") {\n" << blocks_.front();
  os << "    \"func.return\"(";
  for (size_t i = 0; i < results.size(); ++i) os << (i ? ", " : "") << name(results[i]);
  os << ") : (" << types_of(results) << ") -> ()\n  }\n}\n";
  return os.str();
}

Program::WatchScope::WatchScope(Program& program, OpWatcher& watcher)
    : program_(program), previous_(program.watcher_), previous_depth_(program.watched_depth_) {
  program.watcher_ = &watcher;
  program.watched_depth_ = program.blocks_.size();
}

Program::WatchScope::~WatchScope() {
  program_.watcher_ = previous_;
  program_.watched_depth_ = previous_depth_;
}

Program& current_program() {
  TITAN_CHECK(g_current != nullptr,
              "graph: a tensor on a PJRT device met an op outside a capture (no graph::CaptureScope is "
              "active); such tensors exist only while a step is being captured");
  return *g_current;
}

Program* current_program_or_null() { return g_current; }

CaptureScope::CaptureScope(Program& program) : previous_(g_current) { g_current = &program; }
CaptureScope::~CaptureScope() { g_current = previous_; }

}  // namespace titan::graph
