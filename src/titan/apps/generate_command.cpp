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
#include "titan/data/tokenizer.h"
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
  // The tokenizer the run trained with (the byte tokenizer when model.tokenizer_path is empty).
  std::shared_ptr<const data::Tokenizer> tokenizer = data::load_tokenizer(cfg.model.tokenizer_path);
  TITAN_CHECK(tokenizer->vocab_size() <= trained.model->vocab_size(), "titan generate: the ",
              tokenizer->description(), " has ", tokenizer->vocab_size(), " ids but the model of ",
              trained.dir.string(), " only ", trained.model->vocab_size());
  std::cerr << "titan: loaded " << trained.dir.string() << " (" << cfg.model.name << " " << cfg.model.flavor
            << ", context " << trained.model->max_seq_len() << ", " << tokenizer->description() << ")\n";

  // A bos first, as training documents start.
  std::vector<int64_t> prompt;
  if (auto bos = tokenizer->bos_id()) prompt.push_back(*bos);
  for (int32_t id : tokenizer->encode(o.prompt)) prompt.push_back(id);
  o.generate.eos_id = tokenizer->eos_id();
  o.generate.vocab_size = tokenizer->vocab_size();
  rl::GenerateResult r = rl::generate(*trained.model, prompt, o.generate);

  std::vector<int32_t> text(r.tokens.begin(), r.tokens.end());
  if (r.stop == rl::StopReason::eos) text.pop_back();
  std::cout << o.prompt << tokenizer->decode(text) << std::endl;
  std::cerr << "titan: prompt " << r.prompt_tokens << " tokens in " << r.prefill_seconds << " s ("
            << r.prefill_tokens_per_second() << " tokens/s); " << r.tokens.size() << " new tokens in "
            << r.decode_seconds << " s (" << r.decode_tokens_per_second() << " tokens/s); stopped at "
            << rl::stop_reason_name(r.stop) << "\n";
  return 0;
}

}  // namespace titan::apps
