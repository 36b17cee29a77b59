#pragma once
// The [attention] section: splash attention's tiles and document masking.
#include <cstdint>

#include "titan/attention/block_mask.h"
#include "titan/core/config_schema.h"

namespace titan::attention {

struct AttentionConfig {
  int64_t block_q = kDefaultBlockQ;    // queries per tile
  int64_t block_kv = kDefaultBlockKv;  // keys per tile
  // Packed documents attend only within themselves: the trainer hands the model each batch's
  // document ids.
  bool document_masking = false;
};

void declare_keys(config::Keys<AttentionConfig>& keys);

}  // namespace titan::attention
