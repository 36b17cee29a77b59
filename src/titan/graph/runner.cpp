#include "titan/graph/runner.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>

#include "titan/core/config_schema.h"

namespace titan::graph {

namespace {

// An option's value typed as an integer, a boolean, a decimal (float for the client's options, as
// the plugins read them, double for XLA's) or else a string; errors name `key` and the option.
template <class Value>
Value typed_value(const std::string& name, const std::string& value, const std::string& key) {
  char* end = nullptr;
  errno = 0;
  const long long i = std::strtoll(value.c_str(), &end, 10);
  if (!value.empty() && *end == '\0') {
    config::require(errno != ERANGE, key, ": option '", name, "' = ", value,
                    " is out of the range of a 64-bit integer");
    return static_cast<int64_t>(i);
  }
  if (value == "true" || value == "false") return value == "true";
  if (const double d = std::strtod(value.c_str(), &end); !value.empty() && *end == '\0') {
    if constexpr (std::is_same_v<Value, decltype(pjrt::ClientOption::value)>) return static_cast<float>(d);
    else return d;
  }
  return value;
}

// The comma-separated items of `text`, trimmed; empty items dropped.
std::vector<std::string> items_of(const std::string& text) {
  std::vector<std::string> items;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t b = item.find_first_not_of(' '), e = item.find_last_not_of(' ');
    if (b != std::string::npos) items.push_back(item.substr(b, e - b + 1));
  }
  return items;
}

}  // namespace

RuntimeOptions parse_runtime_options(const std::string& plugin, const std::string& options, const std::string& key) {
  RuntimeOptions out{.plugin = plugin};
  for (const std::string& item : items_of(options)) {
    const size_t eq = item.find('=');
    config::require(eq != std::string::npos && eq > 0, key, ": item '", item,
                    "' is not name=value; write e.g. \"cpu_device_count=1\"");
    const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    config::require(!value.empty(), key, ": option '", name, "' has no value");
    pjrt::ClientOption option{name, typed_value<decltype(pjrt::ClientOption::value)>(name, value, key)};
    // The CPU plugin makes this many devices; a count below one would reach it as a size.
    const auto* count = std::get_if<int64_t>(&option.value);
    config::require(name != "cpu_device_count" || (count && *count >= 1), key, ": option 'cpu_device_count' = ",
                    value, " is not a whole number >= 1; give the number of CPU devices, e.g. cpu_device_count=4");
    out.client_options.push_back(std::move(option));
  }
  return out;
}

std::vector<pjrt::XlaOption> parse_xla_options(const std::string& text, const std::string& key) {
  std::vector<std::pair<std::string, std::string>> named;
  for (const std::string& item : items_of(text)) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      config::require(!named.empty(), key, ": item '", item,
                      "' is not name=value; write e.g. \"xla_cpu_prefer_vector_width=512\"");
      named.back().second += "," + item;
      continue;
    }
    const std::string name = item.substr(0, eq);
    config::require(name.starts_with("xla_") && name.find(' ') == std::string::npos, key, ": '", name,
                    "' is not one of XLA's options, whose names start with xla_ (e.g. "
                    "xla_cpu_prefer_vector_width, xla_gpu_enable_command_buffer)");
    named.emplace_back(name, item.substr(eq + 1));
  }
  std::vector<pjrt::XlaOption> out;
  for (const auto& [name, value] : named)
    out.push_back({name, typed_value<decltype(pjrt::XlaOption::value)>(name, value, key)});
  return out;
}

Runner::Runner(const RuntimeOptions& options)
    : client_(pjrt::Client::create(pjrt::Plugin::load(options.plugin), options.client_options, options.store)),
      xla_options_(options.xla_options) {}

Tensor shard_of(const Tensor& host, const Sharding& sharding, int64_t device) {
  if (sharding.replicated()) return host;
  TITAN_CHECK(static_cast<int64_t>(sharding.tiles.size()) == host.dim(), "graph: tiles ", shape_str(sharding.tiles),
              " do not fit ", host.desc());
  Tensor piece = host;
  const std::vector<int64_t> at = sharding.tile_of(device);
  for (size_t d = 0; d < at.size(); ++d)
    TITAN_CHECK(host.size(static_cast<int64_t>(d)) % sharding.tiles[d] == 0, "graph: dim ", d, " of ", host.desc(),
                " cannot be split into ", sharding.tiles[d], " equal pieces");
  for (size_t d = 0; d < at.size(); ++d) {
    const int64_t len = host.size(static_cast<int64_t>(d)) / sharding.tiles[d];
    piece = piece.narrow(static_cast<int64_t>(d), at[d] * len, len);
  }
  return piece.contiguous();
}

Tensor unshard(const std::vector<Tensor>& pieces, const Sharding& sharding) {
  TITAN_CHECK(!pieces.empty(), "graph: unshard of no pieces");
  if (sharding.replicated()) return pieces.front();
  TITAN_CHECK(static_cast<int64_t>(sharding.tiles.size()) == pieces.front().dim() &&
                  static_cast<int64_t>(pieces.size()) == sharding.num_devices(),
              "graph: unshard: sharding ", sharding.attr(), " wants one piece of rank ", sharding.tiles.size(),
              " from each of its ", sharding.num_devices(), " devices, got ", pieces.size(), " like ",
              pieces.front().desc());
  Shape whole = pieces.front().sizes();
  for (size_t d = 0; d < whole.size(); ++d) whole[d] *= sharding.tiles[d];
  Tensor out = Tensor::empty(whole, pieces.front().options());
  std::set<std::vector<int64_t>> written;  // replicas hold the same piece: the first one is read
  for (size_t k = 0; k < pieces.size(); ++k) {
    Tensor view = out;
    const std::vector<int64_t> at = sharding.tile_of(static_cast<int64_t>(k));
    if (!written.insert(at).second) continue;
    for (size_t d = 0; d < at.size(); ++d) {
      const int64_t len = pieces[k].size(static_cast<int64_t>(d));
      view = view.narrow(static_cast<int64_t>(d), at[d] * len, len);
    }
    view.copy_(pieces[k]);
  }
  return out;
}

namespace {

// XLA's dump of one compile in a folder of its own, read back and removed.
struct OptimizedDump {
  std::filesystem::path dir;
  OptimizedDump() {
    static std::atomic<int64_t> next{0};
    dir = std::filesystem::temp_directory_path() /
          ("titan_xla_dump_" + std::to_string(::getpid()) + "_" + std::to_string(next++));
    std::filesystem::remove_all(dir);
  }
  ~OptimizedDump() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  // The module after XLA's passes: "module_<n>.<name>.<backend>_after_optimizations.txt".
  std::string text() const {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.size() > 28 && name.ends_with("after_optimizations.txt")) {
        std::ifstream in(entry.path());
        std::ostringstream out;
        out << in.rdbuf();
        return out.str();
      }
    }
    return {};
  }
};

}  // namespace

Runner::Compiled Runner::compile(const std::string& module_text, int64_t partitions, bool keep_optimized_text) {
  const std::string key = std::to_string(partitions) + " partitions\n" + module_text;
  if (auto it = cache_.find(key); it != cache_.end())
    return {.executable = it->second.get(), .fresh = false, .seconds = 0.0};
  std::optional<OptimizedDump> dump;
  pjrt::CompileSpec spec{.num_partitions = static_cast<int>(partitions),
                         .spmd_partitioning = partitions > 1,
                         // Casts round as eager's do: by default XLA may drop a round trip through a
                         // narrower type (f32 -> bf16 -> f32), and its GPU backend does
                         // (GraphCore.CastsRoundTrip was 1.4e-3 off on an H200).
                         .options = {{"xla_allow_excess_precision", false}}};
  spec.options.insert(spec.options.end(), xla_options_.begin(), xla_options_.end());
  if (keep_optimized_text) {
    dump.emplace();
    spec.options.push_back({"xla_dump_hlo_as_text", true});
    spec.options.push_back({"xla_dump_to", dump->dir.string()});
  }
  // Compiled before it is cached: a program that fails to compile leaves no entry.
  auto executable = std::make_unique<pjrt::Executable>(client_.compile(module_text, spec));
  ++compiles_;
  pjrt::Executable* raw = cache_.emplace(key, std::move(executable)).first->second.get();
  return {.executable = raw,
          .fresh = true,
          .seconds = raw->compile_seconds(),
          .optimized_text = dump ? dump->text() : std::string()};
}

pjrt::Buffer Runner::upload(const Tensor& host, int device) const {
  TITAN_CHECK(host.defined() && !host.is_lazy() && host.device().is_cpu(), "graph: upload needs a CPU tensor, got ",
              host.defined() ? host.desc() : std::string("undefined"));
  const Tensor c = host.contiguous();
  return client_.to_device(c.data_ptr(), c.dtype(), c.sizes(), device);
}

Tensor Runner::download(const pjrt::Buffer& buffer) const {
  Tensor out = Tensor::empty(buffer.dims(), {.dtype = buffer.dtype()});
  download_into(buffer, out);
  return out;
}

void Runner::download_into(const pjrt::Buffer& buffer, const Tensor& host) const {
  TITAN_CHECK(host.is_contiguous() && host.sizes() == buffer.dims() && host.dtype() == buffer.dtype(),
              "graph: a device array of ", dtype_name(buffer.dtype()), shape_str(buffer.dims()),
              " cannot be copied into ", host.desc());
  buffer.to_host(host.data_ptr());
}

Program::Platform Runner::platform() const {
  const std::string& name = client_.platform_name();
  if (name == "cpu") return Program::Platform::cpu;
  if (name == "cuda") return Program::Platform::cuda;
  return Program::Platform::other;
}

std::string Runner::describe() const {
  const std::vector<std::string>& nvidia = client_.plugin().preloaded_libraries();
  return client_.platform_name() + " (PJRT plugin " + client_.plugin().api_version() + ", " +
         client_.plugin().path() +
         (nvidia.empty() ? std::string()
                         : "; " + std::to_string(nvidia.size()) + " NVIDIA libraries preloaded from " +
                               std::filesystem::path(nvidia.front()).parent_path().parent_path().parent_path().string()) +
         ")";
}

}  // namespace titan::graph
