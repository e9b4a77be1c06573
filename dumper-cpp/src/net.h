// TCP connections to memcached (blocking helpers for small commands; the workers drive their own
// non-blocking poll loop on the fd). SIGPIPE never fires: every send uses MSG_NOSIGNAL.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "slice.h"
#include "status.h"

namespace cachewarm {

// The dumper's timeouts: to connect, and for a connection that owes bytes to send some.
constexpr int kConnectTimeoutMs = 5000;
constexpr int kIoTimeoutMs = 60000;

class Conn {
 public:
  Conn() = default;
  ~Conn();
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  Status Connect(const std::string& host, int port, int timeout_ms);
  void Close();
  int fd() const { return fd_; }
  bool connected() const { return fd_ >= 0; }
  const std::string& peer() const { return peer_; }
  // Blocking send of all bytes (poll for writability, timeout_ms per wait).
  Status SendAll(const Slice& data, int timeout_ms);
  // Waits up to timeout_ms for bytes; *n = bytes read (> 0). EOF / reset are errors naming the peer.
  Status Recv(char* buf, size_t cap, size_t* n, int timeout_ms);
  // Sends `cmd` and reads until the reply ends with `terminator` (small replies only).
  Status Command(const Slice& cmd, const std::string& terminator, std::string* reply, int timeout_ms);

 private:
  int fd_ = -1;
  std::string peer_;
};

// The parts of `stats` the dumper needs: to detect a restarted server and report curr_items.
struct ServerStats {
  int64_t pid = 0;
  int64_t uptime = 0;
  int64_t time = 0;
  int64_t curr_items = 0;
  // What memcached says about its own load (the source guard's report): connections that yielded
  // their worker thread after reqs_per_event requests in one go (a pipelined batch does), and the
  // server's CPU seconds. -1: not reported.
  int64_t conn_yields = -1;
  double rusage_s = -1;
  // 1 while a crawl (another client's, or memcached's own autoexpire) holds the crawler; -1: not reported.
  int64_t lru_crawler_running = -1;
  std::string version;
  // This host's wall clock when the answer arrived (seconds).
  double received = 0;
  // Unix time the server started (time - uptime): with pid, identifies one server lifetime.
  int64_t started() const { return time - uptime; }
};
Status GetStats(Conn* c, ServerStats* out);
// Same server lifetime (pid equal and start times within 2 s: uptime is sampled at a second's grain).
bool SameServer(const ServerStats& a, const ServerStats& b);

}  // namespace cachewarm
