// Fetching keys that no meta text command can name. `mg` takes a key token of at most 250 bytes; a
// key with bytes outside 0x21..0x7E must go base64-encoded, so a binary key of 187 bytes or more
// (base64: 252 characters or more) cannot be requested that way. memcached 1.6 still speaks the
// binary protocol on the same port (it tells the protocols apart by a connection's first byte), whose
// keys are raw bytes: such keys are fetched with pipelined GETKQ + NOOP on a connection of their own,
// opened on first use and probed with a NOOP (a server started with `-B ascii` does not answer it).
// The binary protocol cannot read an item's TTL: the caller takes it from the crawl's listing.
// Values are streamed to the caller in pieces through one fixed buffer (kBinaryRecvBytes).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "net.h"
#include "slice.h"
#include "status.h"

namespace cachewarm {

class BinaryGetter {
 public:
  // A hit: keys[i] has this value (its bytes follow through PieceFn) and this CAS (the item's
  // version: equal to a listing's cas= it is the item listed).
  using ValueFn = std::function<Status(size_t i, uint32_t flags, uint32_t value_len, uint64_t cas)>;
  using PieceFn = std::function<Status(const Slice& piece)>;
  // The server refused keys[i] (a non-zero status other than "not found"): `why` says how.
  using FailedFn = std::function<Status(size_t i, const std::string& why)>;

  BinaryGetter(std::string host, int port, size_t buffer_bytes);
  // For tests: talk over an already connected socket (owned from now on).
  void UseFd(int fd);
  ~BinaryGetter();

  // Fetches `keys` (1..250 raw bytes each); misses are silent. If the server does not speak the
  // binary protocol, returns OK with *unavailable saying why, and fetches nothing (then and later).
  // Other errors (connection lost, a malformed response) fail.
  Status Get(const std::vector<std::string>& keys, const ValueFn& on_value, const PieceFn& on_piece,
             const FailedFn& on_failed, std::string* unavailable);
  // Closes the connection while there is nothing to fetch (Get opens it again); keeps the verdict of
  // a server that does not speak the protocol.
  void CloseIdle() {
    if (fd_ >= 0 || !unavailable_.empty()) return;
    conn_.Close();
    opened_ = false;
    pos_ = filled_ = 0;
  }

 private:
  int Fd() const { return conn_.fd() >= 0 ? conn_.fd() : fd_; }
  Status Send(const Slice& data);
  Status Open();
  Status ReadExact(char* dst, size_t n, int timeout_ms);
  Status Fill(int timeout_ms);
  Status Group(const std::vector<std::string>& keys, size_t begin, size_t end, const ValueFn& on_value,
               const PieceFn& on_piece, const FailedFn& on_failed);

  const std::string host_;
  const int port_;
  Conn conn_;
  int fd_ = -1;
  bool opened_ = false;
  std::string unavailable_;
  std::unique_ptr<char[]> buf_;
  size_t cap_, pos_ = 0, filled_ = 0;
};

}  // namespace cachewarm
