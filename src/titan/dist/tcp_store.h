#pragma once
// titan's key-value store for PJRT clients that span processes (core/key_value_store.h): process
// 0 of the job serves it over TCP, and every process, process 0 included, is a client. MPI only
// brings it up (start_kv_store sends the server's addresses to every rank): PJRT calls the store
// from its own threads, while a step runs (NCCL's clique ids), and titan's MPI is FUNNELED, so the
// store cannot be MPI messages; it is the TCP rendezvous that torch.distributed's TCPStore and
// JAX's coordination service also use.
//
// Each request is one connection. A get for a key nobody has put yet waits at the server, which
// answers it as soon as the key arrives, or with "timed out" at its deadline.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/core/key_value_store.h"
#include "titan/dist/process_group.h"

namespace titan::dist {

// The server: listens on every interface at a port the system picks, on its own thread. Destroying
// it waits until `clients` clients have said they are done (TcpStore::done), or 30 s, so that a
// process that leaves first (an error raised on rank 0 before the others reach it) does not take
// the store from processes still reading it.
class TcpStoreServer {
 public:
  explicit TcpStoreServer(int clients = 0);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  // This host's IPv4 addresses, the loopback last: where other processes may reach the server.
  static std::vector<std::string> host_addresses();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

class TcpStore final : public KeyValueStore {
 public:
  // A client of the server at `host`:`port`; `serving`, where this process runs the server, keeps
  // it alive as long as the client.
  TcpStore(std::string host, int port, std::shared_ptr<TcpStoreServer> serving = nullptr);

  void put(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;

  // "host:port", for messages.
  std::string address() const;
  // Whether the server answers within `timeout` (a connection and a try_get).
  bool reachable(std::chrono::milliseconds timeout) const;
  // Tells the server this client will make no more requests (see TcpStoreServer).
  void done();

 private:
  enum class Status : uint8_t { found = 0, not_found = 1, timed_out = 2 };
  struct Reply {
    Status status = Status::not_found;
    std::string value = {};
  };
  // One request on a new connection: `wait` is how long the server may hold it.
  Reply request(char op, const std::string& key, const std::string& value, std::chrono::milliseconds wait,
                std::chrono::milliseconds connect_timeout) const;

  std::string host_;
  int port_ = 0;
  std::shared_ptr<TcpStoreServer> serving_;
};

// Brings the store up for `group`: its rank 0 serves, and sends the port and its addresses to the
// others over MPI; each takes the first address it can reach. Collective over `group`. An error
// names the addresses tried when a rank reaches none. Each rank's store says it is done when
// dropped, and rank 0's server lasts until all have.
std::shared_ptr<TcpStore> start_kv_store(ProcessGroup& group);

}  // namespace titan::dist
