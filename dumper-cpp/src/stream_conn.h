// One connection from a stream sink to a destination memcached. Bytes to send are queued as iovecs
// that point into the caller's buffers (values stay in the receive buffer they arrived in: no copy)
// and go out with writev; replies are read whenever the socket is readable, also while a send waits
// for room, so neither side can fill its buffers and wait for the other (quiet writes answer only
// NS and errors, but an add into a warm destination answers NS for many items).
//   meta:   `ms ... q` writes (set mode); replies NS (or `NS O<n>` for a tagged write), MN (a mark),
//           SERVER_ERROR / CLIENT_ERROR / ERROR (a failure: nothing more is sent here);
//           text `add` writes (add mode: a failed `ms` unlinks the key's live value, a failed `add`
//           does not): one reply per item, in order — STORED, NOT_STORED (its tag is the one
//           ExpectAdd queued for it) or an error
//   binary: non-quiet ADDs (add mode: every key; status 0 answers the new item's CAS, kept per
//           opaque), SETQ writes (set mode: keys no meta command can name); refused stores answer
//           status 2 "exists" / 5 "not stored" with the request's opaque; errors; NOOP marks
// A mark (`mn`, NOOP) answered means every write before it has been applied.
#pragma once
#include <sys/uio.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "status.h"

namespace cachewarm {

class DestConn {
 public:
  enum Proto { kMeta, kBinary };
  DestConn(std::string address, Proto proto);
  ~DestConn();
  DestConn(const DestConn&) = delete;
  DestConn& operator=(const DestConn&) = delete;

  // Connects (a binary connection is probed with a NOOP: a server started with `-B ascii` does
  // not answer it, and that fails the stream: its keys would be dropped silently).
  Status Connect(const std::string& host, int port);
  // For tests: an already connected socket (owned from now on).
  void UseFd(int fd);
  void Close();
  bool connected() const { return fd_ >= 0; }
  // The connection was lost (reset, closed): a reconnect may help. Not set by an error answer.
  bool broken() const { return broken_; }
  const std::string& address() const { return address_; }
  Proto proto() const { return proto_; }

  // Queues n bytes at p (no copy: p must stay valid until Flush returns).
  void Queue(const void* p, size_t n) {
    if (n) q_.push_back({const_cast<void*>(p), n});
  }
  size_t queued_iovecs() const { return q_.size() - qpos_; }
  // A text `add` was queued: its reply (in order) carries `tag` (kNoTag: counted, not tagged).
  static constexpr uint64_t kNoTag = UINT64_MAX;
  void ExpectAdd(uint64_t tag) { adds_.push_back(tag); }
  // The first error answer read ("" if none).
  const std::string& error() const { return error_; }
  // Queues a mark (`mn`, or a binary NOOP); AwaitMarks waits for its answer.
  void QueueMark();

  // Sends everything queued on each connection of `conns` (null entries skipped), reading replies
  // meanwhile. Fails on a lost connection, an error answer, or no progress for timeout_ms.
  static Status FlushAll(DestConn* const* conns, size_t n, int timeout_ms);
  // Flushes, then waits until every mark sent has been answered.
  static Status AwaitMarks(DestConn* const* conns, size_t n, int timeout_ms);
  // Reads the replies already in the socket / sends what the socket takes (never waits).
  Status Poll();
  Status Flush();

  // What the replies said since the last TakeReplies.
  struct Replies {
    uint64_t not_stored = 0;            // NS / exists without a tag
    std::vector<uint64_t> tags;         // NS O<n> / the opaque of a refused binary store
    // (opaque, CAS) of each binary ADD that stored its item: the CAS of our own write (c_w)
    std::vector<std::pair<uint64_t, uint64_t>> stored;
  };
  void TakeReplies(Replies* r);
  uint64_t marks_sent() const { return marks_sent_; }
  uint64_t marks_answered() const { return marks_answered_; }

 private:
  Status Fail(const std::string& what, int err);
  Status TrySend(bool* progressed);
  Status TryRecv(bool* progressed);
  Status Parse();
  Status ParseMeta();
  Status ParseBinary();

  const std::string address_;
  const Proto proto_;
  int fd_ = -1;
  bool broken_ = false;
  std::string error_;  // the first error answer: nothing more is sent
  std::vector<struct iovec> q_;
  size_t qpos_ = 0;
  static const char kMetaMark[];
  char noop_[24];
  std::unique_ptr<char[]> rbuf_;
  size_t rfill_ = 0;
  uint64_t skip_body_ = 0;  // binary: body bytes of a response still to skip
  uint64_t marks_sent_ = 0, marks_answered_ = 0;
  Replies replies_;
  std::deque<uint64_t> adds_;  // the tags of the text adds not answered yet, in order
  uint64_t PopAdd() {
    if (adds_.empty()) return kNoTag;
    const uint64_t t = adds_.front();
    adds_.pop_front();
    return t;
  }
};

// Binary protocol constants for stores (memcached's protocol_binary.h; binary_get.h has the reads).
namespace binstore {
constexpr uint8_t kAddQ = 0x12, kAdd = 0x02, kNoop = 0x0a;
constexpr uint16_t kKeyExists = 0x0002, kNotStored = 0x0005;
constexpr size_t kHeader = 24;
}  // namespace binstore

}  // namespace cachewarm
