#include "titan/train/config/checkpoint_config.h"

namespace titan::train {

void declare_keys(config::Keys<CheckpointConfig>& keys) {
  using C = CheckpointConfig;
  keys.add("enable", &C::enable, {}, "save checkpoints and resume from the latest")
      .add("folder", &C::folder, config::non_empty(), "checkpoint folder, under job.dump_folder")
      .add("interval", &C::interval, config::positive(), "save every this many steps")
      .add("initial_load_path", &C::initial_load_path, {},
           "checkpoint, or Hugging Face model folder, to start from when the folder has none; empty: none")
      .add("initial_load_model_only", &C::initial_load_model_only, {},
           "from initial_load_path load the weights only, not optimizer and data state")
      .add("last_save_model_only", &C::last_save_model_only, {},
           "the final save holds the weights only, in export_dtype")
      .add("last_save_in_hf", &C::last_save_in_hf, {},
           "write the final save as a Hugging Face folder: config.json + model.safetensors (needs "
           "last_save_model_only)")
      .add("hf_config_format", &C::hf_config_format, config::one_of({"transformers5", "transformers4"}),
           "config.json's layout in the last_save_in_hf export: transformers5 (rope_parameters, dtype, "
           "num_local_experts, as transformers 5 writes it) or transformers4 (rope_theta, rope_scaling, "
           "torch_dtype, num_experts: transformers 4.x ignores rope_parameters)")
      .add("export_dtype", &C::export_dtype, config::one_of({"float32", "bfloat16", "float16"}),
           "dtype of a model-only final save")
      .add("async_mode", &C::async_mode, config::one_of({"disabled", "async", "async_with_pinned_mem"}),
           "write checkpoints in the background (async_with_pinned_mem: as async, since a CPU run has no "
           "device "
           "copy to pin)")
      .add("keep_latest_k", &C::keep_latest_k, config::non_negative(),
           "delete all but the latest k checkpoints; 0: keep all")
      .add("load_step", &C::load_step, config::or_minus_one(config::non_negative()),
           "step to resume from; -1: the latest")
      .check([](const C& c, config::Problems& problems) {
        if (c.export_dtype == "float16")
          problems.add(
              "checkpoint.export_dtype = \"float16\": titan has no float16 tensors yet; use \"float32\" or "
              "\"bfloat16\"");
        if (!c.last_save_in_hf && c.hf_config_format != C{}.hf_config_format)
          problems.add("checkpoint.hf_config_format = \"" + c.hf_config_format +
                       "\" applies to the Hugging Face export only, and checkpoint.last_save_in_hf is false; set "
                       "--checkpoint.last_save_in_hf=true, or drop hf_config_format");
        if (c.initial_load_path.empty() && c.initial_load_model_only != C{}.initial_load_model_only)
          problems.add(
              "checkpoint.initial_load_model_only = false applies to checkpoint.initial_load_path, which is empty; "
              "set initial_load_path, or drop initial_load_model_only");
        if (c.last_save_in_hf && !c.last_save_model_only)
          problems.add(
              "checkpoint.last_save_in_hf = true needs checkpoint.last_save_model_only = true (safetensors hold "
              "weights only); set one of them");
      });
}

}  // namespace titan::train
