// Text generation on the CPU: prefill and decode tokens/s of titan's rl::generate, eager (the
// model's kernels over a host KV cache) and graph mode (rl::GraphDecoder: the prefill and one
// decoding step compiled through the CPU PJRT plugin, the cache on its device), in float32 and
// under bf16 autocast, beside Hugging Face transformers 5 on PyTorch 2 generating greedily with its
// DynamicCache (bench/generate_torch.py) from the same config.json that titan's export writes, on
// the same machine and threads, in one run.
//
// Models (random weights; --models picks): the llama3, qwen3 and qwen3_moe debug models at a
// 2048-id vocabulary, and llama3 1B as released (128256 ids). A case is one greedy generation of
// --new-tokens tokens after a prompt of --prompt random ids: prefill tokens/s is the prompt over
// the prefill's time, decode tokens/s the tokens fed back (new tokens - 1) over the rest, which
// includes sampling (an argmax on the host). Each figure is the median of --reps generations after
// a warm-up one that compiles graph mode's programs (their compile times are printed apart).
//
// The torch reference runs eager, in f32 and under torch.autocast bf16; torch.compile of HF's
// generation (a static cache and a compiled decoding step) is not run: it is not what
// model(ids, past_key_values=DynamicCache()) does, and would be a different reference.
#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/torch_reference.h"
#include "titan/core/allocator.h"
#include "titan/core/process_malloc.h"
#include "titan/core/autocast.h"
#include "titan/core/parallel.h"
#include "titan/core/rng.h"
#include "titan/kernels/cpu/onednn_matmul.h"
#include "titan/models/registry.h"
#include "titan/rl/graph_decoder.h"

namespace {

using nlohmann::json;
namespace bench = titan::bench;

struct Model {
  std::string label, family, flavor;
  int64_t vocab = 0;  // 0: the flavor's own
};
const std::vector<Model> kModels = {{"llama3 debug", "llama3", "debugmodel", 2048},
                                    {"qwen3 debug", "qwen3", "debugmodel", 2048},
                                    {"qwen3_moe debug", "qwen3_moe", "debugmodel", 2048},
                                    {"llama3 1B", "llama3", "1B", 0}};

struct Figures {
  double prefill = 0, decode = 0;  // tokens/s
  double compile = 0;              // seconds of the warm-up generation (graph: its compiles)
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Figures measure(titan::rl::Decoder& decoder, const std::vector<int64_t>& prompt, int64_t new_tokens, int reps) {
  const titan::rl::GenerateOptions opts{.max_new_tokens = new_tokens, .sampling = {.temperature = 0}};
  Figures f;
  const auto t0 = std::chrono::steady_clock::now();
  titan::rl::generate(decoder, prompt, opts);
  f.compile = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<double> prefill, decode;
  for (int r = 0; r < reps; ++r) {
    const titan::rl::GenerateResult g = titan::rl::generate(decoder, prompt, opts);
    prefill.push_back(static_cast<double>(g.prompt_tokens) / g.prefill_seconds);
    decode.push_back(static_cast<double>(g.tokens.size() - 1) / g.decode_seconds);
  }
  f.prefill = median(prefill);
  f.decode = median(decode);
  return f;
}

std::string flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--" + name + "=", 0) == 0) return a.substr(name.size() + 3);
  }
  return fallback;
}

int64_t whole(const std::string& name, const std::string& text) {
  try {
    size_t end = 0;
    const int64_t v = std::stoll(text, &end);
    if (end == text.size() && v >= 1) return v;
  } catch (const std::exception&) {
  }
  std::cerr << "bench_generate: --" << name << " expects a whole number >= 1, got '" << text << "'\n";
  std::exit(2);
}

std::string fixed(double v, int digits = 1) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  bench::use_this_cpus_blas_kernels(argv);
  const int64_t prompt_len = whole("prompt", flag(argc, argv, "prompt", "128"));
  const int64_t new_tokens = std::max<int64_t>(2, whole("new-tokens", flag(argc, argv, "new-tokens", "32")));
  const int reps = static_cast<int>(whole("reps", flag(argc, argv, "reps", "3")));
  const std::string which = flag(argc, argv, "models", "llama3 debug,qwen3 debug,qwen3_moe debug,llama3 1B");
  const std::string plugin = flag(argc, argv, "plugin", "cpu");
  const bool torch = flag(argc, argv, "torch", "on") != "off";
  const bool custom_kernels = flag(argc, argv, "custom-kernels", "on") != "off";
  const bool eager_bf16 = !titan::kernels::cpu::onednn_bf16_isa().empty();
  bench::mark_start();

  struct Row {
    Model model;
    std::map<std::string, Figures> titan;  // by "eager", "graph", "eager bf16", "graph bf16"
  };
  std::vector<Row> rows;
  json cases = json::array();
  for (const Model& m : kModels) {
    if (which.find(m.label) == std::string::npos) continue;
    titan::models::ModelConfig cfg;
    cfg.name = m.family;
    cfg.flavor = m.flavor;
    cfg.vocab_size = m.vocab;
    const int64_t context = prompt_len + new_tokens;
    titan::Generator gen(7);
    std::cerr << "building " << m.label << " ...\n";
    auto model = titan::models::get_train_spec(m.family).build(cfg, context, gen);
    std::mt19937_64 rng(3);
    std::uniform_int_distribution<int64_t> id(0, model->vocab_size() - 1);
    std::vector<int64_t> prompt(static_cast<size_t>(prompt_len));
    for (int64_t& t : prompt) t = id(rng);
    Row row{m, {}};
    titan::rl::GraphDecoder graph(*model, {.runtime = {.plugin = plugin}, .custom_kernels = custom_kernels}, &std::cerr);
    titan::rl::EagerDecoder eager(*model);
    for (bool bf16 : {false, true}) {
      const titan::AutocastGuard precision(bf16 ? titan::kBF16 : titan::kF32);
      const std::string suffix = bf16 ? " bf16" : "";
      if (!bf16 || eager_bf16) row.titan["eager" + suffix] = measure(eager, prompt, new_tokens, reps);
      row.titan["graph" + suffix] = measure(graph, prompt, new_tokens, reps);
      std::cerr << m.label << suffix << ": eager " << (row.titan.count("eager" + suffix) ? fixed(row.titan["eager" + suffix].decode) : "-")
                << ", graph " << fixed(row.titan["graph" + suffix].decode) << " decode tokens/s\n";
    }
    const titan::models::StateDictAdapter& adapter = titan::models::hf_adapter(m.family);
    json config = adapter.hf_config(cfg, titan::models::common::hf::ConfigLayout::transformers5);
    config["max_position_embeddings"] = context;
    cases.push_back({{"name", m.label}, {"config", config}, {"prompt", prompt_len}, {"new_tokens", new_tokens},
                     {"reps", reps}});
    rows.push_back(std::move(row));
  }
  // The models are gone; their memory goes back to the system before the reference runs (a 1B
  // model and its device and bf16 copies would otherwise stay held by the allocators).
  titan::CpuAllocator::instance().empty_cache();
  titan::release_free_memory();
  const std::string machine = bench::machine_summary();

  json reply;
  if (torch && !cases.empty())
    reply = bench::run_torch_script("generate_torch.py", {{"threads", titan::num_threads()},
                                                          {"variants", {"eager", "eager bf16"}},
                                                          {"cases", cases}});
  const bool have_torch = reply.contains("results");

  std::cout << "\n# Generation, tokens/s (higher is better): prompt " << prompt_len << ", " << new_tokens
            << " new tokens, greedy, batch 1, median of " << reps << "\n"
            << "# " << machine << "\n# titan graph mode: " << plugin << " PJRT plugin, titan's kernels as custom calls "
            << (custom_kernels ? "where it can run them" : "off (--custom-kernels=off)") << "\n"
            << "# " << (have_torch ? bench::describe_torch(reply) + ", transformers " + reply.value("transformers", "?")
                                   : "torch reference: " + (torch ? reply.value("error", std::string("not run")) : "off (--torch=off)"))
            << "\n";
  if (!eager_bf16) std::cout << "# titan eager bf16: not run (no AMX-BF16 / AVX512-BF16 for oneDNN here)\n";
  for (const char* phase : {"prefill", "decode"}) {
    std::cout << "\n| " << phase << " | precision | titan eager | titan graph | torch eager (HF) | graph / eager | "
                 "graph / torch | eager / torch | graph warm-up s |\n|---|---|---|---|---|---|---|---|---|\n";
    for (const Row& r : rows)
      for (const std::string suffix : {"", " bf16"}) {
        const auto figure = [&](const Figures& f) { return std::string(phase) == "prefill" ? f.prefill : f.decode; };
        const auto e = r.titan.find("eager" + suffix);
        const double g = figure(r.titan.at("graph" + suffix));
        double t = 0;
        if (have_torch && reply["results"].contains(r.model.label))
          t = reply["results"][r.model.label]["eager" + suffix].value(std::string(phase) + "_tokens_per_second", 0.0);
        const double ev = e != r.titan.end() ? figure(e->second) : 0;
        const auto ratio = [](double a, double b) { return a > 0 && b > 0 ? fixed(a / b, 2) + "x" : std::string("-"); };
        std::cout << "| " << r.model.label << " | " << (suffix.empty() ? "f32" : "bf16") << " | "
                  << (ev > 0 ? fixed(ev) : "-") << " | " << fixed(g) << " | " << (t > 0 ? fixed(t) : "-") << " | "
                  << ratio(g, ev) << " | " << ratio(g, t) << " | " << ratio(ev, t) << " | "
                  << fixed(r.titan.at("graph" + suffix).compile, 2) << " |\n";
      }
  }
  std::cout << "\n# graph warm-up s: the first generation, with the prefill's and the decoding step's compiles.\n";
  return 0;
}
