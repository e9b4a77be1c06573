// The source guard's probes on the wire, open loop: a probe is sent when it falls due, whatever the
// ones before it are doing (several may be outstanding on one connection: pipelined), and each
// answer is paired with its due time, so its latency counts from then — a stall of D ms shows in
// every probe due during it, as in a live client sending on its own clock (bench/zipf_client.py).
// Round robin over a few connections of their own: memcached hands new connections to its worker
// threads in turn, so they sample a few threads (a live client may sit on any of them).
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "net.h"
#include "status.h"

namespace cachewarm {

class ProbeConns {
 public:
  // `cmd`: one request whose whole answer is one line (a miss `mg`: "EN").
  ProbeConns(std::string host, int port, std::string cmd, std::string answer);
  Status Open(size_t n);
  void Close();
  // Sends the probe that fell due at due_us (microseconds, MonotonicUs) on the next connection. A
  // connection that fails is reconnected at its next turn; its outstanding probes are answered as failed.
  void Send(int64_t due_us);
  // Waits up to timeout_us for answers; appends (due_us, answered_us) per answered probe. A probe
  // lost with its connection is answered at least kFailedAfterUs after its due time. Microseconds,
  // not poll()'s milliseconds: a probe sent late counts its lateness (open loop), so the wait for
  // the next due time must not overshoot it by up to a millisecond.
  void Poll(int64_t timeout_us, std::vector<std::pair<int64_t, int64_t>>* answered);
  // The ages of the probes still unanswered at now_us.
  void Unanswered(int64_t now_us, std::vector<int64_t>* ages) const;
  // The first connection error seen (reported, not fatal: the workers report a dead server).
  const std::string& last_error() const { return last_error_; }

  static constexpr int64_t kFailedAfterUs = 1000000;

 private:
  struct P {
    Conn conn;
    std::deque<int64_t> due;  // outstanding probes, oldest first
    std::string buf;
  };
  void Fail(P* p, const std::string& why, std::vector<std::pair<int64_t, int64_t>>* answered);

  std::string host_;
  int port_;
  std::string cmd_, answer_;
  std::vector<std::unique_ptr<P>> conns_;
  std::vector<std::pair<int64_t, int64_t>> failed_;  // answered as failed at the next Poll
  size_t next_ = 0;
  std::string last_error_;
};

}  // namespace cachewarm
