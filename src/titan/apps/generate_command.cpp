#include "titan/apps/generate_command.h"

#include <charconv>
#include <cstdint>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "titan/apps/flux_generate.h"
#include "titan/core/autocast.h"
#include "titan/core/config_schema.h"
#include "titan/core/error.h"
#include "titan/data/tokenizer.h"
#include "titan/kernels/cpu/onednn_matmul.h"
#include "titan/rl/generate.h"
#include "titan/rl/graph_decoder.h"
#include "titan/rl/saved_model.h"
#include "titan/train/metrics/peak_flops.h"

namespace titan::apps {

namespace {

constexpr const char* kGenerateUsage =
    "usage: titan generate --checkpoint PATH (--prompt TEXT | --prompt-ids IDS) [options]\n"
    "  --checkpoint PATH     a checkpoint of titan train (.../step-N) or of titan convert --to\n"
    "                        titan; a checkpoint folder, of which the latest complete step is read;\n"
    "                        or a Hugging Face folder (config.json and model.safetensors)\n"
    "  --prompt TEXT         the text to continue; bos goes before it, as before every training\n"
    "                        document\n"
    "  --prompt-ids IDS      the token ids to continue instead, comma-separated (e.g. 1,2,3):\n"
    "                        exactly these, nothing prepended\n"
    "  --tokenizer PATH      a Hugging Face tokenizer.json, or a folder holding one (empty: the\n"
    "                        byte tokenizer); default: the training run's, else the checkpoint\n"
    "                        folder's tokenizer.json (which titan convert copies from the HF folder)\n"
    "  --output text|json    text (default): the prompt and its continuation, or without a\n"
    "                        tokenizer the new ids; json: one object with prompt_ids,\n"
    "                        generated_ids, text (the continuation, when there is a tokenizer),\n"
    "                        stop_reason, and prefill and decode {tokens, seconds, tokens_per_second}\n"
    "  --max-new-tokens N    generate at most N tokens (default 64); eos and the end of the\n"
    "                        model's context (training.seq_len, or config.json's\n"
    "                        max_position_embeddings) stop it earlier\n"
    "  --temperature T       divides the logits; 0: greedy (default 0.8)\n"
    "  --top-k K             draw among the K most likely tokens; 0: all (default 40)\n"
    "  --top-p P             then among the fewest most likely whose probability reaches P,\n"
    "                        in (0, 1]; 1: all (default 0.95)\n"
    "  --seed S              seed of the draws (default 0): the same seed gives the same text\n"
    "  --mode eager|graph    eager (default) runs titan's kernels op by op; graph compiles the\n"
    "                        prefill and one decoding step as programs through a PJRT plugin\n"
    "                        (the KV cache stays on its device) and gives the same tokens\n"
    "  --plugin NAME         graph mode's plugin: cpu (default), cuda, tpu or a path to one\n"
    "  --plugin-options TEXT its client options, \"a=1,b=true\" (as compile.plugin_options)\n"
    "  --xla-options TEXT    XLA's options, \"xla_a=1,xla_b=true\" (as compile.xla_options)\n"
    "  --precision P         float32 (default) or bfloat16: the products' operands (autocast,\n"
    "                        as training.mixed_precision_param); the weights stay as loaded\n"
    "Generation stops at an eos: the tokenizer's, and for a Hugging Face model (or its\n"
    "conversion) those of config.json's eos_token_id. With a tokenizer only its ids are drawn.\n"
    "Prints the result on stdout; what was loaded and the speed (tokens/s) on stderr.\n"
    "FLUX images: titan generate --pipeline DIR --prompt TEXT --out IMAGE.png (titan generate --pipeline --help)\n";

struct Options {
  std::string checkpoint, prompt, output = "text";
  bool has_prompt = false;
  std::optional<std::vector<int64_t>> prompt_ids;
  std::optional<std::string> tokenizer;
  std::string mode = "eager", plugin = "cpu", plugin_options, xla_options, precision = "float32";
  bool has_plugin = false;
  bool has_max_new_tokens = false;  // the default may exceed a small model's context; it stops there
  rl::GenerateOptions generate = {.max_new_tokens = 64,
                                  .sampling = {.temperature = 0.8, .top_k = 40, .top_p = 0.95, .seed = 0}};
};

template <typename T>
T number(const std::string& flag, const std::string& text) {
  T v{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  TITAN_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(),
              "titan generate: ", flag, " wants ", std::is_integral_v<T> ? "a whole number" : "a number",
              ", got '", text, "'");
  return v;
}

// "1, 2,3" -> {1, 2, 3}. The model's vocabulary bounds them too, checked once it is loaded.
std::vector<int64_t> token_ids(const std::string& flag, const std::string& text) {
  std::vector<int64_t> ids;
  for (size_t begin = 0; begin <= text.size();) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    std::string item = text.substr(begin, comma - begin);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    const int64_t id = number<int64_t>(flag + " (comma-separated token ids)", item);
    TITAN_CHECK(id >= 0, "titan generate: ", flag, ": token id ", id, " is negative; ids start at 0");
    ids.push_back(id);
    begin = comma + 1;
  }
  return ids;
}

Options parse(const std::vector<std::string>& args) {
  Options o;
  auto value = [&](size_t& i) -> const std::string& {
    TITAN_CHECK(i + 1 < args.size(), "titan generate: ", args[i], " needs a value\n", kGenerateUsage);
    return args[++i];
  };
  rl::SamplingOptions& s = o.generate.sampling;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--checkpoint") {
      o.checkpoint = value(i);
    } else if (a == "--prompt") {
      o.prompt = value(i);
      o.has_prompt = true;
    } else if (a == "--prompt-ids") {
      o.prompt_ids = token_ids(a, value(i));
    } else if (a == "--tokenizer") {
      o.tokenizer = value(i);
    } else if (a == "--output") {
      o.output = value(i);
    } else if (a == "--max-new-tokens") {
      o.generate.max_new_tokens = number<int64_t>(a, value(i));
      o.has_max_new_tokens = true;
    } else if (a == "--temperature") {
      s.temperature = number<double>(a, value(i));
    } else if (a == "--top-k") {
      s.top_k = number<int64_t>(a, value(i));
    } else if (a == "--top-p") {
      s.top_p = number<double>(a, value(i));
    } else if (a == "--seed") {
      s.seed = number<uint64_t>(a, value(i));
    } else if (a == "--mode") {
      o.mode = value(i);
    } else if (a == "--plugin") {
      o.plugin = value(i);
      o.has_plugin = true;
    } else if (a == "--plugin-options") {
      o.plugin_options = value(i);
      o.has_plugin = true;
    } else if (a == "--xla-options") {
      o.xla_options = value(i);
      o.has_plugin = true;
    } else if (a == "--precision") {
      o.precision = value(i);
    } else {
      TITAN_CHECK(false, "titan generate: unknown argument '", a, "'\n", kGenerateUsage);
    }
  }
  TITAN_CHECK(!o.checkpoint.empty() && (o.has_prompt || o.prompt_ids),
              "titan generate: needs --checkpoint and --prompt (or --prompt-ids)\n", kGenerateUsage);
  TITAN_CHECK(!(o.has_prompt && o.prompt_ids),
              "titan generate: --prompt and --prompt-ids exclude each other; give the text or its token "
              "ids, not both");
  TITAN_CHECK(o.output == "text" || o.output == "json",
              "titan generate: --output must be text or json, got '", o.output, "'");
  TITAN_CHECK(o.mode == "eager" || o.mode == "graph", "titan generate: --mode must be eager or graph, got '", o.mode,
              "'");
  TITAN_CHECK(o.mode == "graph" || !o.has_plugin,
              "titan generate: --plugin, --plugin-options and --xla-options are read only in graph mode; add --mode graph");
  TITAN_CHECK(o.precision == "float32" || o.precision == "bfloat16",
              "titan generate: --precision must be float32 or bfloat16, got '", o.precision, "'");
  TITAN_CHECK(o.mode == "graph" || o.precision == "float32" || !kernels::cpu::onednn_bf16_isa().empty(),
              "titan generate: --precision bfloat16 in eager mode needs a CPU with AMX-BF16 or AVX512-BF16 (this one, ",
              train::cpu_model_name(), ", has neither, or ONEDNN_MAX_CPU_ISA keeps oneDNN from them); use --mode graph, "
              "whose bf16 products are XLA's, or --precision float32");
  return o;
}

// The new tokens as text: without the eos that ended them.
std::vector<int32_t> continuation(const rl::GenerateResult& r) {
  std::vector<int32_t> ids(r.tokens.begin(), r.tokens.end());
  if (r.stop == rl::StopReason::eos) ids.pop_back();
  return ids;
}

nlohmann::json json_report(const std::vector<int64_t>& prompt, const rl::GenerateResult& r,
                           const data::Tokenizer* tokenizer) {
  nlohmann::json j = {
      {"prompt_ids", prompt}, {"generated_ids", r.tokens}, {"stop_reason", rl::stop_reason_name(r.stop)}};
  if (tokenizer) j["text"] = tokenizer->decode(continuation(r));
  j["prefill"] = {{"tokens", r.prompt_tokens},
                  {"seconds", r.prefill_seconds},
                  {"tokens_per_second", r.prefill_tokens_per_second()}};
  j["decode"] = {{"tokens", r.tokens.size()},
                 {"seconds", r.decode_seconds},
                 {"tokens_per_second", r.decode_tokens_per_second()}};
  return j;
}

}  // namespace

int generate_command(const std::vector<std::string>& args) {
  if (is_flux_generate(args)) return flux_generate_command(args);
  if (!args.empty() && (args[0] == "-h" || args[0] == "--help")) {
    std::cout << kGenerateUsage;
    return 0;
  }
  Options o = parse(args);
  rl::validate(o.generate);  // before the model is loaded
  const rl::SavedModel saved = rl::read_saved_model(o.checkpoint);
  const std::optional<std::string> tokenizer_path = o.tokenizer ? o.tokenizer : saved.tokenizer_path;
  const std::shared_ptr<const data::Tokenizer> tokenizer =
      tokenizer_path ? data::load_tokenizer(*tokenizer_path) : nullptr;
  TITAN_CHECK(tokenizer || o.prompt_ids, "titan generate: no tokenizer goes with ", saved.dir.string(),
              " (it holds no tokenizer.json, and no titan training run's config names one), so --prompt "
              "cannot be encoded; pass --tokenizer PATH (a folder holding tokenizer.json), --tokenizer '' for "
              "titan's byte tokenizer (a Hugging Face save of a run that trained with it), or token ids with "
              "--prompt-ids");
  const std::shared_ptr<models::CausalLM> model = rl::load_saved_model(saved);
  const int64_t vocab = model->vocab_size();
  if (tokenizer)
    TITAN_CHECK(tokenizer->vocab_size() <= vocab, "titan generate: the ", tokenizer->description(), " has ",
                tokenizer->vocab_size(), " ids but the model of ", saved.dir.string(), " only ", vocab);
  // Prompt and new tokens share the context, so asking for more than it holds is a mistake (the
  // default, which a small model's context may not hold, stops at its end as any run does).
  config::require(!o.has_max_new_tokens || o.generate.max_new_tokens <= model->max_seq_len(),
                  "titan generate: --max-new-tokens ", o.generate.max_new_tokens,
                  " is more than the model's context of ", model->max_seq_len(),
                  " positions (its max_seq_len), which the prompt and the new tokens share; give at most ",
                  model->max_seq_len(), " (generation stops at the end of the context anyway)");
  std::cerr << "titan: loaded " << saved.dir.string() << " (" << saved.config.name << " "
            << saved.config.flavor << ", context " << model->max_seq_len() << ", "
            << (tokenizer ? tokenizer->description() : std::string("no tokenizer")) << ")\n";

  std::vector<int64_t> prompt;
  if (o.prompt_ids) {
    for (int64_t id : *o.prompt_ids)
      TITAN_CHECK(id < vocab, "titan generate: --prompt-ids: token id ", id,
                  " is not below the vocabulary size ", vocab, " of the model of ", saved.dir.string());
    prompt = *o.prompt_ids;
  } else {
    // A bos first, as training documents start.
    if (auto bos = tokenizer->bos_id()) prompt.push_back(*bos);
    for (int32_t id : tokenizer->encode(o.prompt)) prompt.push_back(id);
  }
  // config.json's eos ids and the tokenizer's: chat models end a turn with ids of their own.
  o.generate.eos_ids = saved.eos_ids;
  if (tokenizer) {
    if (auto eos = tokenizer->eos_id()) o.generate.eos_ids.push_back(*eos);
    o.generate.vocab_size = tokenizer->vocab_size();
  }
  const AutocastGuard precision(o.precision == "bfloat16" ? kBF16 : kF32);
  std::unique_ptr<rl::Decoder> decoder;
  if (o.mode == "graph") {
    graph::RuntimeOptions runtime = graph::parse_runtime_options(o.plugin, o.plugin_options, "--plugin-options");
    runtime.xla_options = graph::parse_xla_options(o.xla_options, "--xla-options");
    decoder = std::make_unique<rl::GraphDecoder>(*model, rl::GraphDecoderOptions{.runtime = runtime}, &std::cerr);
  } else
    decoder = std::make_unique<rl::EagerDecoder>(*model);
  rl::GenerateResult r = rl::generate(*decoder, prompt, o.generate);

  if (o.output == "json") {
    // Replacing what is not UTF-8: a continuation may stop inside a character.
    std::cout << json_report(prompt, r, tokenizer.get())
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << std::endl;
  } else if (tokenizer) {
    const std::vector<int32_t> prompt_ids(prompt.begin(), prompt.end());
    std::cout << (o.prompt_ids ? tokenizer->decode(prompt_ids) : o.prompt)
              << tokenizer->decode(continuation(r)) << std::endl;
  } else {
    for (size_t i = 0; i < r.tokens.size(); ++i) std::cout << (i ? "," : "") << r.tokens[i];
    std::cout << std::endl;
  }
  std::cerr << "titan: prompt " << r.prompt_tokens << " tokens in " << r.prefill_seconds << " s ("
            << r.prefill_tokens_per_second() << " tokens/s); " << r.tokens.size() << " new tokens in "
            << r.decode_seconds << " s (" << r.decode_tokens_per_second() << " tokens/s); stopped at "
            << rl::stop_reason_name(r.stop) << "\n";
  return 0;
}

}  // namespace titan::apps
