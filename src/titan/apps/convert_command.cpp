#include "titan/apps/convert_command.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>

#include "titan/checkpoint/checkpoint.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/core/error.h"
#include "titan/data/tokenizer_files.h"
#include "titan/train/hf_interop.h"

namespace titan::apps {

namespace {

namespace fs = std::filesystem;
using models::common::hf::ConfigLayout;

constexpr const char* kConvertUsage =
    "usage: titan convert --to hf --checkpoint STEP_DIR --out DIR [--dtype float32|bfloat16]\n"
    "                     [--hf-config-format transformers5|transformers4] [--overwrite]\n"
    "       titan convert --to titan --hf DIR --out STEP_DIR [--overwrite]\n"
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
    "                  checkpoint.initial_load_path (which also takes the HF folder itself)\n"
    "  --overwrite     replace what --out holds when it is a folder titan convert or titan train\n"
    "                  wrote (a titan checkpoint or a Hugging Face model folder, holding nothing\n"
    "                  else); without it, an --out that holds anything is refused\n"
    "Either way, the tokenizer files of the folder read (tokenizer.json, tokenizer_config.json)\n"
    "are copied beside the weights, so that titan generate finds them. --out must be a new or\n"
    "empty folder (or, with --overwrite, an earlier output): a file there, or a folder holding\n"
    "anything else, is never replaced.\n";

struct Options {
  // dtype and config_format: --to hf only, float32 and transformers5 unless given.
  std::string to, checkpoint, hf, out, dtype, config_format;
  ConfigLayout layout = ConfigLayout::transformers5;
  bool overwrite = false;
};

Options parse(const std::vector<std::string>& args) {
  Options o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--overwrite") {
      o.overwrite = true;
      continue;
    }
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

// What a folder titan writes holds: a checkpoint's metadata.json and shard files, or a Hugging
// Face folder's config.json and model.safetensors; either with the tokenizer files convert copies.
bool titan_writes(const std::string& name) {
  return name == checkpoint::kMetadataFile || name == checkpoint::kHfConfigFile ||
         name == checkpoint::kHfWeightsFile ||
         std::find(data::kTokenizerFiles.begin(), data::kTokenizerFiles.end(), name) !=
             data::kTokenizerFiles.end() ||
         (name.starts_with("shard-") && name.ends_with(".safetensors"));
}

// "" when `dir` is a titan checkpoint (its metadata.json reads as one) or a Hugging Face model
// folder (config.json and model.safetensors), holding nothing but the files such a folder holds;
// else what does not fit, for the message. Recognised by content rather than by a marker file,
// so that the outputs of every titan version qualify, and a folder holding anything of the
// user's (notes, other weights, subfolders) never does.
std::string not_titan_output(const fs::path& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || e.is_symlink() || !titan_writes(name))
      return "'" + name + "' is none of the files titan writes there";
  }
  if (ec) return "it cannot be listed (" + ec.message() + ")";
  if (fs::exists(dir / checkpoint::kMetadataFile)) {
    try {
      checkpoint::read_metadata(dir);
      return "";
    } catch (const Error&) {
      return std::string("its ") + checkpoint::kMetadataFile + " is not a titan checkpoint's";
    }
  }
  if (checkpoint::is_hf_dir(dir) && fs::is_regular_file(dir / checkpoint::kHfWeightsFile)) return "";
  return std::string("it holds neither a titan checkpoint's ") + checkpoint::kMetadataFile + " nor " +
         checkpoint::kHfConfigFile + " and " + checkpoint::kHfWeightsFile;
}

// The output replaces whatever is at `out` in one rename, and the old content is deleted: only
// nothing, an empty folder, or (with --overwrite) an earlier output of titan may be there.
void check_out(const Options& o) {
  const fs::path out = o.out;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(out, ec);
  if (!fs::exists(st)) return;
  const std::string& in = o.to == "hf" ? o.checkpoint : o.hf;
  TITAN_CHECK(!fs::equivalent(out, in, ec), "titan convert: --out ", o.out,
              " is the folder being converted (", in, "); pass --out a new folder's path");
  TITAN_CHECK(fs::is_directory(st), "titan convert: --out ", o.out, " is ",
              fs::is_symlink(st) ? "a symbolic link" : "a file",
              ", not a folder; convert would replace it with the output folder and delete it. Pass --out the "
              "path of a new or empty folder");
  if (fs::is_empty(out, ec) && !ec) return;
  const std::string foreign = not_titan_output(out);
  TITAN_CHECK(
      foreign.empty(), "titan convert: --out ", o.out,
      " is a folder that holds files, and not a titan checkpoint or Hugging Face model folder (", foreign,
      "); convert replaces the whole folder and would delete them, so it is left untouched. Pass --out "
      "the path of a new or empty folder");
  TITAN_CHECK(o.overwrite, "titan convert: --out ", o.out,
              " already holds a converted model (a titan checkpoint or Hugging Face model folder); pass "
              "--overwrite to replace it, or --out the path of a new folder");
}

}  // namespace

int convert_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::cout << kConvertUsage;
    return args.empty() ? 2 : 0;
  }
  const Options o = parse(args);
  check_out(o);
  const auto t0 = std::chrono::steady_clock::now();
  if (o.to == "hf")
    train::export_hf_checkpoint(o.checkpoint, o.out, o.dtype == "bfloat16" ? kBF16 : kF32, o.layout);
  else
    train::import_hf_checkpoint(o.hf, o.out);
  const bool tokenizer = data::holds_tokenizer(o.out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "titan: " << (o.to == "hf" ? o.checkpoint : o.hf) << " -> " << o.out
            << (o.to == "hf"
                    ? " (Hugging Face, " + o.dtype + ", " + models::common::hf::layout_name(o.layout) + ")"
                    : std::string(" (titan checkpoint)"))
            << (tokenizer ? " with its tokenizer" : "") << " in " << seconds << " s\n";
  return 0;
}

}  // namespace titan::apps
