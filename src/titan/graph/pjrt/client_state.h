#pragma once
// What a Client's buffers and executables share with it (graph/pjrt/'s sources only: it exposes
// the C API's types). Each Buffer and Executable holds the state, so the PJRT client outlives
// every object made from it, whatever order the caller drops them in.
#include <pjrt_c_api.h>

#include <memory>
#include <string>
#include <vector>

#include "titan/core/dtype.h"
#include "titan/core/key_value_store.h"
#include "titan/graph/pjrt/plugin.h"

namespace titan::graph::pjrt::detail {

struct ClientState {
  const Plugin* plugin = nullptr;
  PJRT_Client* client = nullptr;
  std::vector<PJRT_Device*> devices = {};  // addressable, in the plugin's order
  std::string platform_name = {};
  // The key-value store the plugin's callbacks reach (a client over several processes); it is
  // dropped after the client is destroyed.
  std::shared_ptr<KeyValueStore> store = {};

  ClientState(const Plugin& plugin, PJRT_Client* client);
  ~ClientState();
  ClientState(const ClientState&) = delete;
  ClientState& operator=(const ClientState&) = delete;

  const PJRT_Api* api() const { return plugin->api(); }
  void check(PJRT_Error* error, const char* call) const { plugin->check(error, call); }
  // Blocks until `event` is ready, destroys it, and throws the plugin's error naming `call`.
  void await(PJRT_Event* event, const char* call) const;
};

PJRT_Buffer_Type to_pjrt(DType dtype);
// Throws, naming `what` ("output 2 of x"), for an element type titan has no DType for.
DType from_pjrt(PJRT_Buffer_Type type, const std::string& what);

}  // namespace titan::graph::pjrt::detail
