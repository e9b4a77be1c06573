// The receive side of a worker: turns the byte stream of pipelined `mg <key> v f t q u O<i>` / `mn`
// responses into data-file records without copying values. The record's key is the one the sink
// names for the response (the worker knows it by the opaque), or else the response's `k` token:
// memcached echoes a key raw when the item was stored through the binary protocol, and such a key
// may hold "\r\n" or spaces, which would break the response's framing.
//
// A `stats` reply in the stream (STAT lines, END) writes nothing: its `time` raises the floor the
// next values' `mg t` count from (set_window).
//
// Two fixed buffers of `buffer_size` bytes are allocated up front. Bytes are received into the
// current buffer; each complete VA response becomes three iovecs (a 20-byte record header from a
// preallocated array, the key and the value, both pointing into the buffer) handed to the sink in
// one writev. The unfinished tail (at most one response) is moved to the other buffer, which then
// becomes current. A value too large for a buffer is streamed to the sink in pieces.
// With data format version 2 (docs/data-format.md section 7) the record header is the item's meta
// command line instead (`ms <key> <len>[ b] T<expiry> F<flags> ME q O<offset>\r\n`, from a
// preallocated array too) and the value's iovec takes the `\r\n` that follows it in the buffer; for a
// key with no meta form (fetched with a raw-key `mg`) the record is the binary ADDQ head, key, value.
#pragma once
#include <sys/uio.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "data_file.h"
#include "format.h"
#include "meta_parser.h"
#include "status.h"

namespace cachewarm {

class RecordSink {
 public:
  virtual ~RecordSink() = default;
  // Record bytes; `records` = records begun in these bytes.
  virtual Status Write(const struct iovec* iov, int iovcnt, uint64_t records) = 0;
  // A VA response's header, before its record's bytes go to Write (whether kept or skipped). The
  // sink may name the item's key (*key: raw bytes that stay valid until the batch's OnBatchEnd);
  // if it leaves *key empty, the response's own `k` token is the key.
  virtual Status OnValue(const MetaResponse&, Slice* /*key*/) { return Status::OK(); }
  // An `MN` arrived: the batch sent before it is complete. `hits` = VA responses in the batch
  // (written or skipped), `skipped` = those dropped by --min-ttl.
  virtual Status OnBatchEnd(uint64_t hits, uint64_t skipped) = 0;
  // Version 2 only: the offset in the output at which the next byte given to Write lands (a v2
  // record names its own offset).
  virtual uint64_t NextRecordOffset() { return 0; }
};

class ResponseStream {
 public:
  // min_ttl > 0: items whose remaining TTL is below it (and not "never") are skipped.
  // format: the data format version of the records emitted (kFormatVersion, 2 or 3).
  ResponseStream(size_t buffer_size, int64_t min_ttl, uint16_t format = kFormatVersion);
  ResponseStream(const ResponseStream&) = delete;
  ResponseStream& operator=(const ResponseStream&) = delete;

  // The source's time (its `stats time`, unix seconds on its clock) when the next values' `mg` ran:
  // at least `floor` (a time the server has already shown: its clock never goes back) and at most
  // `most` (the ceiling of its clock at the receipt, or its measured upper bound). An `mg t` counts
  // from that time; `ahead` moves a source time onto the records' clock, never later
  // (ServerClock::WholeAhead). The floor only rises: a value whose listing agrees raises it, and so
  // does a `stats` reply's time (the worker asks for one ahead of a batch about once a second, so the
  // floor stays fresh when no listing has an expiry to agree with).
  void set_window(int64_t floor, int64_t most, int64_t ahead) {
    floor_ = std::max(floor_, floor);
    most_ = most;
    ahead_ = ahead;
  }
  // Tests: the source's clock is the records' and stands at `now`.
  void set_now(int64_t now) {
    floor_ = now;
    set_window(now, now, 0);
  }
  // The next value's expiry as the listing gave it, on the source's clock (kNeverExpires: none),
  // set by RecordSink::OnValue for each value. An unchanged item's `mg t` is exactly its listed
  // expiry less the server's time: listed - t within [floor, most] is that time (the listing's
  // expiry is then the exact one, and the floor rises to it); outside it the TTL changed since the
  // listing (a touch): the expiry counts from the floor, never later.
  void set_listed(int64_t exptime) { listed_ = exptime; }
  // The floor as the values so far raised it.
  int64_t floor() const { return floor_; }
  // Values since the last TakeWindowCounts whose listing agreed, and those whose listing put the
  // server's time past `most` (a TTL shortened since the listing, or a clock ahead of the one
  // measured: when no listing agrees, the clock is measured again).
  void TakeWindowCounts(uint64_t* agreed, uint64_t* above) {
    *agreed = agreed_;
    *above = above_;
    agreed_ = above_ = 0;
  }
  char* WritePtr() { return cur_ + filled_; }
  size_t WritableBytes() const { return cap_ - filled_; }
  // `n` bytes were received at WritePtr(): parse, emit records to the sink.
  Status Commit(size_t n, RecordSink* sink);
  // True when no response is partially received.
  bool AtBoundary() const { return filled_ == 0 && stream_left_ == 0 && crlf_left_ == 0; }
  void Reset();
  size_t buffer_size() const { return cap_; }

 private:
  static constexpr int kMaxPending = 256;  // records per writev
  // A command record's slot: version 3's stamp, then the meta line or the binary head.
  static constexpr size_t kLineSlot = kSourceStampSize + kMaxMetaLineV2;
  Status Flush(RecordSink* sink);
  Status EndStreamedValue(RecordSink* sink);
  Status StartRecord(const MetaResponse& r, char* line, Slice* key, bool* skip, size_t* key_len, RecordSink* sink);
  // The record header slot `i` of the pending writev: (pointer, length).
  struct iovec RecordHead(int i, size_t key_len) const;

  size_t cap_;
  int64_t min_ttl_;
  int64_t floor_ = 0, most_ = 0, ahead_ = 0;
  int64_t listed_ = kNeverExpires;
  uint64_t agreed_ = 0, above_ = 0;
  std::unique_ptr<char[]> buf_[2];
  char* cur_;
  int cur_idx_ = 0;
  size_t filled_ = 0;
  size_t pos_ = 0;
  // streaming a large value
  uint64_t stream_left_ = 0;
  bool stream_skip_ = false;
  int crlf_left_ = 0;
  // batch counters
  uint64_t hits_ = 0, skipped_ = 0;
  // pending writev
  char hdrs_[kMaxPending][kRecordHeaderSize];
  struct iovec iov_[kMaxPending * 3];
  int niov_ = 0;
  int nrec_ = 0;
  // Version 2: the records' command lines, and where the pending records start in the output.
  uint16_t format_;
  std::unique_ptr<char[]> lines_;
  size_t line_len_[kMaxPending];
  bool binary_rec_[kMaxPending] = {};  // the slot holds a binary record's head (the key follows)
  bool stream_binary_ = false;         // the value being streamed ends a binary record (no \r\n)
  uint64_t pending_base_ = 0, pending_bytes_ = 0;
};

}  // namespace cachewarm
