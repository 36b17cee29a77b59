#include "titan/apps/generate_command.h"

#include <charconv>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "titan/core/error.h"
#include "titan/data/byte_tokenizer.h"
#include "titan/data/tokenizer/bpe_tokenizer.h"
#include "titan/rl/generate.h"
#include "titan/rl/trained_model.h"

namespace titan::apps {

namespace {

constexpr const char* kGenerateUsage =
    "usage: titan generate --checkpoint PATH --prompt TEXT [options]\n"
    "  --checkpoint PATH     a checkpoint of titan train (.../step-N), or a checkpoint folder, of\n"
    "                        which the latest complete step is read\n"
    "  --prompt TEXT         the text to continue; bos goes before it, as before every training\n"
    "                        document\n"
    "  --max-new-tokens N    generate at most N tokens (default 64); eos and the end of the\n"
    "                        model's context (training.seq_len) stop it earlier\n"
    "  --temperature T       divides the logits; 0: greedy (default 0.8)\n"
    "  --top-k K             draw among the K most likely tokens; 0: all (default 40)\n"
    "  --top-p P             then among the fewest most likely whose probability reaches P,\n"
    "                        in (0, 1]; 1: all (default 0.95)\n"
    "  --seed S              seed of the draws (default 0): the same seed gives the same text\n"
    "Prints the prompt and its continuation on stdout; what was loaded and the speed (tokens/s)\n"
    "on stderr.\n";

struct Options {
  std::string checkpoint, prompt;
  bool has_prompt = false;
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
    } else if (a == "--max-new-tokens") {
      o.generate.max_new_tokens = number<int64_t>(a, value(i));
    } else if (a == "--temperature") {
      s.temperature = number<double>(a, value(i));
    } else if (a == "--top-k") {
      s.top_k = number<int64_t>(a, value(i));
    } else if (a == "--top-p") {
      s.top_p = number<double>(a, value(i));
    } else if (a == "--seed") {
      s.seed = number<uint64_t>(a, value(i));
    } else {
      TITAN_CHECK(false, "titan generate: unknown argument '", a, "'\n", kGenerateUsage);
    }
  }
  TITAN_CHECK(!o.checkpoint.empty() && o.has_prompt, "titan generate: needs --checkpoint and --prompt\n",
              kGenerateUsage);
  return o;
}

// Text to ids and back, as the model was trained.
struct Codec {
  std::string name;
  int32_t vocab_size = 0;
  std::optional<int32_t> eos;
  std::function<std::vector<int32_t>(std::string_view)> encode;  // bos first, as training documents
  std::function<std::string(std::span<const int32_t>)> decode;
};

// The trainer's choice: model.tokenizer_path when set (a Hugging Face tokenizer.json), else the
// byte tokenizer. The one place to follow the trainer as it learns other tokenizers.
Codec tokenizer_for(const train::JobConfig& cfg) {
  const std::string& path = cfg.model.tokenizer_path;
  if (!path.empty()) {
    auto bpe = std::make_shared<data::BpeTokenizer>(data::BpeTokenizer::load(path));
    return {"BPE " + path, bpe->vocab_size(), bpe->eos_id(),
            [bpe](std::string_view text) {
              std::vector<int32_t> ids = bpe->encode(text);
              if (auto bos = bpe->bos_id()) ids.insert(ids.begin(), *bos);
              return ids;
            },
            [bpe](std::span<const int32_t> ids) { return bpe->decode(ids); }};
  }
  data::ByteTokenizer bytes;
  return {"bytes", bytes.vocab_size(), bytes.eos_id(),
          [bytes](std::string_view text) { return bytes.encode(text, /*add_bos=*/true, /*add_eos=*/false); },
          [bytes](std::span<const int32_t> ids) { return bytes.decode(ids); }};
}

}  // namespace

int generate_command(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "-h" || args[0] == "--help")) {
    std::cout << kGenerateUsage;
    return 0;
  }
  Options o = parse(args);
  rl::validate(o.generate);  // before the model is loaded
  rl::TrainedModel trained = rl::load_trained_model(o.checkpoint);
  const train::JobConfig& cfg = trained.config;
  Codec codec = tokenizer_for(cfg);
  TITAN_CHECK(codec.vocab_size <= trained.model->vocab_size(), "titan generate: the tokenizer (", codec.name,
              ") has ", codec.vocab_size, " ids but the model of ", trained.dir.string(), " only ",
              trained.model->vocab_size());
  std::cerr << "titan: loaded " << trained.dir.string() << " (" << cfg.model.name << " " << cfg.model.flavor
            << ", context " << trained.model->max_seq_len() << ", tokenizer " << codec.name << ")\n";

  const std::vector<int32_t> ids = codec.encode(o.prompt);
  o.generate.eos_id = codec.eos;
  o.generate.vocab_size = codec.vocab_size;
  const std::vector<int64_t> prompt(ids.begin(), ids.end());
  rl::GenerateResult r = rl::generate(*trained.model, prompt, o.generate);

  std::vector<int32_t> text(r.tokens.begin(), r.tokens.end());
  if (r.stop == rl::StopReason::eos) text.pop_back();
  std::cout << o.prompt << codec.decode(text) << std::endl;
  std::cerr << "titan: prompt " << r.prompt_tokens << " tokens in " << r.prefill_seconds << " s ("
            << r.prefill_tokens_per_second() << " tokens/s); " << r.tokens.size() << " new tokens in "
            << r.decode_seconds << " s (" << r.decode_tokens_per_second() << " tokens/s); stopped at "
            << rl::stop_reason_name(r.stop) << "\n";
  return 0;
}

}  // namespace titan::apps
