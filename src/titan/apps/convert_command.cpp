#include "titan/apps/convert_command.h"

#include <chrono>
#include <iostream>

#include "titan/core/error.h"
#include "titan/train/hf_interop.h"

namespace titan::apps {

namespace {

using models::common::hf::ConfigLayout;

constexpr const char* kConvertUsage =
    "usage: titan convert --to hf --checkpoint STEP_DIR --out DIR [--dtype float32|bfloat16]\n"
    "                     [--hf-config-format transformers5|transformers4]\n"
    "       titan convert --to titan --hf DIR --out STEP_DIR\n"
    "  --to hf         writes the model of a titan checkpoint (a step-<N> folder of titan train, or\n"
    "                  one written by convert --to titan) as a Hugging Face folder: config.json and\n"
    "                  model.safetensors with transformers' names and layouts (default float32)\n"
    "  --hf-config-format\n"
    "                  config.json's layout: transformers5 (default; rope_parameters, dtype,\n"
    "                  num_local_experts, as transformers 5 writes it) or transformers4 (rope_theta,\n"
    "                  rope_scaling, torch_dtype, num_experts), for transformers 4.x, which ignores\n"
    "                  rope_parameters and would run with rope_theta 10000 and no RoPE scaling\n"
    "  --to titan      reads a Hugging Face folder (model.safetensors, or shards listed by\n"
    "                  model.safetensors.index.json; config.json of transformers 4 or 5) into a\n"
    "                  model-only titan checkpoint, to start training from with\n"
    "                  checkpoint.initial_load_path (which also takes the HF folder itself)\n";

struct Options {
  // dtype and config_format: --to hf only, float32 and transformers5 unless given.
  std::string to, checkpoint, hf, out, dtype, config_format;
  ConfigLayout layout = ConfigLayout::transformers5;
};

Options parse(const std::vector<std::string>& args) {
  Options o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::string* target = a == "--to"                 ? &o.to
                          : a == "--checkpoint"       ? &o.checkpoint
                          : a == "--hf"               ? &o.hf
                          : a == "--out"              ? &o.out
                          : a == "--dtype"            ? &o.dtype
                          : a == "--hf-config-format" ? &o.config_format
                                                      : nullptr;
    TITAN_CHECK(target, "titan convert: unknown argument '", a, "'\n", kConvertUsage);
    TITAN_CHECK(i + 1 < args.size(), "titan convert: ", a, " needs a value\n", kConvertUsage);
    *target = args[++i];
  }
  TITAN_CHECK(o.to == "hf" || o.to == "titan", "titan convert: --to must be hf or titan, got '", o.to, "'\n",
              kConvertUsage);
  TITAN_CHECK(!o.out.empty(), "titan convert: no --out given\n", kConvertUsage);
  if (o.to == "hf") {
    TITAN_CHECK(!o.checkpoint.empty() && o.hf.empty(),
                "titan convert --to hf: needs --checkpoint STEP_DIR (and no --hf)\n", kConvertUsage);
    if (o.dtype.empty()) o.dtype = "float32";
    TITAN_CHECK(o.dtype == "float32" || o.dtype == "bfloat16",
                "titan convert: --dtype must be float32 or bfloat16, got '", o.dtype, "'");
    if (!o.config_format.empty())
      o.layout = models::common::hf::parse_layout(o.config_format, "titan convert --hf-config-format");
  } else {
    TITAN_CHECK(!o.hf.empty() && o.checkpoint.empty(),
                "titan convert --to titan: needs --hf DIR (and no --checkpoint)\n", kConvertUsage);
    TITAN_CHECK(o.dtype.empty(),
                "titan convert --to titan: --dtype does not apply; the checkpoint keeps the ",
                "folder's dtype, and training casts it to the model's");
    TITAN_CHECK(o.config_format.empty(),
                "titan convert --to titan: --hf-config-format does not apply; config.json is read in ",
                "either layout, and --to hf chooses the one it writes");
  }
  return o;
}

}  // namespace

int convert_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::cout << kConvertUsage;
    return args.empty() ? 2 : 0;
  }
  const Options o = parse(args);
  const auto t0 = std::chrono::steady_clock::now();
  if (o.to == "hf")
    train::export_hf_checkpoint(o.checkpoint, o.out, o.dtype == "bfloat16" ? kBF16 : kF32, o.layout);
  else
    train::import_hf_checkpoint(o.hf, o.out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "titan: " << (o.to == "hf" ? o.checkpoint : o.hf) << " -> " << o.out
            << (o.to == "hf"
                    ? " (Hugging Face, " + o.dtype + ", " + models::common::hf::layout_name(o.layout) + ")"
                    : std::string(" (titan checkpoint)"))
            << " in " << seconds << " s\n";
  return 0;
}

}  // namespace titan::apps
