#pragma once
// PJRT_Client_Create's key-value callbacks over a titan::KeyValueStore (graph/pjrt/'s sources and
// their tests only: it exposes the C API's types). A plugin that spans processes calls them from
// any of its threads; a failure (a get that timed out, an unreachable store) reaches the plugin as
// its own PJRT_Error (through the callback_error it passes), with the store's message.
#include <pjrt_c_api.h>

#include "titan/core/key_value_store.h"

namespace titan::graph::pjrt::detail {

// Sets args' kv_get, kv_try_get and kv_put callbacks to `store`'s, which must outlive the client.
// Every key is prefixed "pjrt/" so that the plugin's keys cannot meet titan's own.
void set_kv_callbacks(PJRT_Client_Create_Args& args, KeyValueStore& store);

}  // namespace titan::graph::pjrt::detail
