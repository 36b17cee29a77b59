#include "titan/dist/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>

#include "titan/core/error.h"
#include "titan/core/tensor.h"

namespace titan::dist {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A request: op ('P' put, 'G' get, 'T' try_get, 'D' done), the key, the value (put's), and how long a get
// may wait in milliseconds; lengths are 4-byte and the wait 8-byte, little-endian as the hosts.
// A reply: a status byte, the value's length, the value.
constexpr size_t kMaxKey = size_t{1} << 20;
constexpr size_t kMaxValue = size_t{1} << 30;

void append_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

template <typename T>
T read_at(const std::string& in, size_t at) {
  T v{};
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

std::string encode_request(char op, const std::string& key, const std::string& value, int64_t wait_ms) {
  std::string out(1, op);
  append_u32(out, static_cast<uint32_t>(key.size()));
  out += key;
  append_u32(out, static_cast<uint32_t>(value.size()));
  out += value;
  out.append(reinterpret_cast<const char*>(&wait_ms), sizeof wait_ms);
  return out;
}

struct Request {
  char op = 0;
  std::string key, value;
  int64_t wait_ms = 0;
};

enum class Parse { incomplete, done, malformed };

// Parses a whole request from `in`, if it has arrived.
Parse parse_request(const std::string& in, Request& r) {
  if (in.size() < 5) return Parse::incomplete;
  const auto key_size = static_cast<size_t>(read_at<uint32_t>(in, 1));
  if ((in[0] != 'P' && in[0] != 'G' && in[0] != 'T' && in[0] != 'D') || key_size > kMaxKey) return Parse::malformed;
  if (in.size() < 5 + key_size + 4) return Parse::incomplete;
  const auto value_size = static_cast<size_t>(read_at<uint32_t>(in, 5 + key_size));
  if (value_size > kMaxValue) return Parse::malformed;
  const size_t total = 5 + key_size + 4 + value_size + 8;
  if (in.size() < total) return Parse::incomplete;
  if (in.size() > total) return Parse::malformed;  // one request per connection
  r.op = in[0];
  r.key = in.substr(5, key_size);
  r.value = in.substr(9 + key_size, value_size);
  r.wait_ms = read_at<int64_t>(in, 9 + key_size + value_size);
  return Parse::done;
}

bool send_all(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

std::string encode_reply(uint8_t status, const std::string& value) {
  std::string out(1, static_cast<char>(status));
  append_u32(out, static_cast<uint32_t>(value.size()));
  return out + value;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

struct TcpStoreServer::Impl {
  int listener = -1;
  int wake[2] = {-1, -1};
  std::thread thread;
  int clients = 0;  // the clients that say they are done before the server may stop
  int done = 0;
  bool stopping = false;
  Clock::time_point stop_deadline = {};

  struct Connection {
    int fd = -1;
    std::string in = {};
    bool waiting = false;  // a get parked until its key arrives
    std::string key = {};
    Clock::time_point deadline = {};
  };
  std::map<std::string, std::string> values;
  std::vector<Connection> connections;

  // Answers and closes connection `c`.
  static void reply(Connection& c, uint8_t status, const std::string& value) {
    send_all(c.fd, encode_reply(status, value));
    close_fd(c.fd);
  }

  void handle(Connection& c, const Request& r) {
    if (r.op == 'D') {
      ++done;
      return reply(c, 0, "");
    }
    if (r.op == 'P') {
      values[r.key] = r.value;
      reply(c, 0, "");
      for (Connection& other : connections)
        if (other.fd >= 0 && other.waiting && other.key == r.key) reply(other, 0, r.value);
      return;
    }
    if (const auto it = values.find(r.key); it != values.end()) return reply(c, 0, it->second);
    if (r.op == 'T') return reply(c, 1, "");
    c.waiting = true;
    c.key = r.key;
    c.deadline = Clock::now() + milliseconds(std::max<int64_t>(r.wait_ms, 0));
  }

  void serve() {
    std::vector<pollfd> fds;
    for (;;) {
      const Clock::time_point now = Clock::now();
      if (stopping && (done >= clients || now >= stop_deadline)) return;
      // The wake pipe is watched until it has rung once.
      fds.assign({pollfd{stopping ? -1 : wake[0], POLLIN, 0}, pollfd{listener, POLLIN, 0}});
      int timeout_ms = -1;
      const auto until = [&](Clock::time_point t) {
        const int64_t left = std::max<int64_t>(std::chrono::duration_cast<milliseconds>(t - now).count() + 1, 0);
        timeout_ms = timeout_ms < 0 ? static_cast<int>(std::min<int64_t>(left, 1 << 30))
                                    : std::min(timeout_ms, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
      };
      if (stopping) until(stop_deadline);
      for (Connection& c : connections) {
        fds.push_back(pollfd{c.fd, POLLIN, 0});
        if (c.waiting) until(c.deadline);
      }
      if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) return;
      if (fds[0].revents != 0) {
        stopping = true;
        stop_deadline = Clock::now() + std::chrono::seconds(30);
      }
      for (size_t i = 0; i < connections.size(); ++i) {
        Connection& c = connections[i];
        if (c.fd < 0 || fds[i + 2].revents == 0) continue;
        char buffer[65536];
        const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
        if (n <= 0 || c.waiting) {  // closed, or bytes after a whole request
          close_fd(c.fd);
          continue;
        }
        c.in.append(buffer, static_cast<size_t>(n));
        Request r;
        const Parse p = parse_request(c.in, r);
        if (p == Parse::malformed) close_fd(c.fd);
        if (p == Parse::done) handle(c, r);
      }
      const Clock::time_point after = Clock::now();
      for (Connection& c : connections)
        if (c.fd >= 0 && c.waiting && c.deadline <= after) reply(c, 2, "");
      if (fds[1].revents != 0) {
        const int fd = ::accept(listener, nullptr, nullptr);
        if (fd >= 0) connections.push_back(Connection{.fd = fd});
      }
      std::erase_if(connections, [](const Connection& c) { return c.fd < 0; });
    }
  }
};

TcpStoreServer::TcpStoreServer(int clients) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.clients = clients;
  s.listener = ::socket(AF_INET, SOCK_STREAM, 0);
  TITAN_CHECK(s.listener >= 0, "kv store: could not open a TCP socket: ", errno_text());
  const int one = 1;
  ::setsockopt(s.listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = 0;
  TITAN_CHECK(::bind(s.listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::listen(s.listener, 1024) == 0,
              "kv store: could not listen on a TCP port: ", errno_text());
  socklen_t length = sizeof address;
  ::getsockname(s.listener, reinterpret_cast<sockaddr*>(&address), &length);
  port_ = ntohs(address.sin_port);
  TITAN_CHECK(::pipe(s.wake) == 0, "kv store: could not make the server's wake-up pipe: ", errno_text());
  s.thread = std::thread([&s] { s.serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  Impl& s = *impl_;
  const char stop = 1;
  if (::write(s.wake[1], &stop, 1) != 1) std::terminate();  // the thread would never end
  s.thread.join();
  for (Impl::Connection& c : s.connections) close_fd(c.fd);
  close_fd(s.listener);
  close_fd(s.wake[0]);
  close_fd(s.wake[1]);
}

std::vector<std::string> TcpStoreServer::host_addresses() {
  std::vector<std::string> outside, loopback;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || (a->ifa_flags & IFF_UP) == 0) continue;
      char text[INET_ADDRSTRLEN] = {};
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
      ((a->ifa_flags & IFF_LOOPBACK) != 0 ? loopback : outside).emplace_back(text);
    }
    ::freeifaddrs(list);
  }
  if (loopback.empty()) loopback.emplace_back("127.0.0.1");
  outside.insert(outside.end(), loopback.begin(), loopback.end());
  return outside;
}

TcpStore::TcpStore(std::string host, int port, std::shared_ptr<TcpStoreServer> serving)
    : host_(std::move(host)), port_(port), serving_(std::move(serving)) {}

std::string TcpStore::address() const { return host_ + ":" + std::to_string(port_); }

namespace {

// A connected socket to host:port, or -1 after `timeout`.
int connect_to(const std::string& host, int port, milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) return -1;
  int fd = ::socket(found->ai_family, found->ai_socktype, found->ai_protocol);
  if (fd >= 0) {
    const int flags = ::fcntl(fd, F_GETFL, 0);
    ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    int error = ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 ? 0 : errno;
    if (error == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      socklen_t size = sizeof error;
      error = ::poll(&p, 1, static_cast<int>(timeout.count())) == 1 &&
                      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0
                  ? error
                  : ETIMEDOUT;
    }
    ::fcntl(fd, F_SETFL, flags);
    if (error != 0) close_fd(fd);
  }
  ::freeaddrinfo(found);
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

// Reads exactly `size` bytes, waiting at most until `deadline`.
bool recv_all(int fd, char* out, size_t size, Clock::time_point deadline) {
  size_t got = 0;
  while (got < size) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30))) != 1) return false;
    const ssize_t n = ::recv(fd, out + got, size - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

// What a client waits for the server beyond a get's own wait before it calls the server gone.
constexpr milliseconds kServerSlack{30000};

}  // namespace

TcpStore::Reply TcpStore::request(char op, const std::string& key, const std::string& value, milliseconds wait,
                                  milliseconds connect_timeout) const {
  TITAN_CHECK(key.size() <= kMaxKey && value.size() <= kMaxValue, "kv store: key \"", key.substr(0, 64),
              "\" (", key.size(), " bytes) or its value (", value.size(), " bytes) is larger than the store takes (",
              kMaxKey, " and ", kMaxValue, " bytes)");
  int fd = connect_to(host_, port_, connect_timeout);
  TITAN_CHECK(fd >= 0, "kv store: could not reach the store at ", address(), " for key \"", key,
              "\": is process 0 of the job still running?");
  const Clock::time_point deadline = Clock::now() + wait + kServerSlack;
  char head[5];
  Reply reply;
  bool ok = send_all(fd, encode_request(op, key, value, wait.count())) && recv_all(fd, head, sizeof head, deadline);
  if (ok) {
    reply.status = static_cast<Status>(head[0]);
    reply.value.resize(read_at<uint32_t>(std::string(head, sizeof head), 1));
    ok = recv_all(fd, reply.value.data(), reply.value.size(), deadline);
  }
  close_fd(fd);
  TITAN_CHECK(ok, "kv store: the store at ", address(), " did not answer for key \"", key,
              "\": is process 0 of the job still running?");
  return reply;
}

void TcpStore::put(const std::string& key, const std::string& value) {
  request('P', key, value, milliseconds(0), kServerSlack);
}

std::string TcpStore::get(const std::string& key, milliseconds timeout) {
  Reply reply = request('G', key, "", timeout, kServerSlack);
  TITAN_CHECK(reply.status == Status::found, "kv store: no process put key \"", key, "\" within ", timeout.count(),
              " ms (store at ", address(), ")");
  return std::move(reply.value);
}

std::optional<std::string> TcpStore::try_get(const std::string& key) {
  Reply reply = request('T', key, "", milliseconds(0), kServerSlack);
  if (reply.status != Status::found) return std::nullopt;
  return std::move(reply.value);
}

void TcpStore::done() { request('D', "", "", milliseconds(0), milliseconds(5000)); }

bool TcpStore::reachable(milliseconds timeout) const {
  try {
    request('T', "titan/kv/probe", "", milliseconds(0), timeout);
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::shared_ptr<TcpStore> start_kv_store(ProcessGroup& group) {
  std::shared_ptr<TcpStoreServer> server;
  std::string offer;
  if (group.rank() == 0) {
    server = std::make_shared<TcpStoreServer>(group.size());
    std::ostringstream text;
    text << server->port();
    for (const std::string& a : TcpStoreServer::host_addresses()) text << ' ' << a;
    offer = text.str();
  }
  // The offer travels as one int per character, a fixed 1024 of them.
  constexpr int64_t kOffer = 1024;
  Tensor message = Tensor::zeros({kOffer}, {.dtype = kI32});
  TITAN_CHECK(static_cast<int64_t>(offer.size()) < kOffer, "kv store: rank 0's addresses (", offer,
              ") do not fit the ", kOffer, " characters sent");
  for (size_t i = 0; i < offer.size(); ++i) message.data<int32_t>()[i] = static_cast<unsigned char>(offer[i]);
  group.broadcast(message, 0).wait();
  offer.clear();
  for (int64_t i = 0; i < kOffer && message.data<int32_t>()[i] != 0; ++i)
    offer.push_back(static_cast<char>(message.data<int32_t>()[i]));
  std::istringstream fields(offer);
  int port = 0;
  fields >> port;
  std::vector<std::string> hosts;
  for (std::string host; fields >> host;) hosts.push_back(host);
  std::shared_ptr<TcpStore> store;
  // Dropping a rank's store tells the server; a server already gone has nobody left to tell.
  const auto say_done = [](TcpStore* s) {
    try {
      s->done();
    } catch (const Error&) {
    }
    delete s;
  };
  for (const std::string& host : hosts) {
    std::shared_ptr<TcpStore> candidate(new TcpStore(host, port, server), say_done);
    if (candidate->reachable(milliseconds(5000))) {
      store = std::move(candidate);
      break;
    }
  }
  const double missed = group.all_reduce(store != nullptr ? 0.0 : 1.0, ReduceOp::max);
  TITAN_CHECK(missed == 0.0, "kv store: rank ", group.rank(), store != nullptr ? " reached" : " could not reach",
              " the store that rank 0 serves (port ", port, " at ", offer.substr(offer.find(' ') + 1),
              "), and some rank could not: open that port between the job's hosts");
  return store;
}

}  // namespace titan::dist
