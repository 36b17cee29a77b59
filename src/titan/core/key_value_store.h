#pragma once
// A key-value store that every process of a job reads and writes: how a PJRT plugin's client
// exchanges what its processes must agree on (topology, NCCL's clique ids) when it spans several
// of them. PJRT asks its caller for one (PJRT_Client_Create's kv callbacks); dist/tcp_store.h
// holds titan's, brought up over MPI. Every call must be safe from any thread: plugins call from
// their own.
#include <chrono>
#include <optional>
#include <string>

namespace titan {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  // Sets `key` (an existing value is replaced) and returns once every process can read it.
  virtual void put(const std::string& key, const std::string& value) = 0;
  // The value of `key`, waiting until some process puts it; throws titan::Error naming the key
  // after `timeout`.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // The value of `key` if some process has put it, without waiting.
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
};

}  // namespace titan
