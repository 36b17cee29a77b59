#include "titan/models/flux/train_spec.h"
#include "titan/models/hf/train_spec.h"
#include "titan/models/llama3/train_spec.h"
#include "titan/models/qwen3/train_spec.h"
#include "titan/models/registry.h"

namespace titan::models {

void register_builtin_models() {
  register_train_spec(llama3::train_spec());
  register_train_spec(qwen3::dense_train_spec());
  register_train_spec(qwen3::moe_train_spec());
  register_train_spec(hf::train_spec());
  register_train_spec(flux::train_spec());
}

}  // namespace titan::models
