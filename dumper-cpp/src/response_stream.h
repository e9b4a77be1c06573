// The receive side of a worker: turns the byte stream of pipelined `mg <key> v f t q u O<i>` / `mn`
// responses into data-file records without copying values. The record's key is the one the sink
// names for the response (the worker knows it by the opaque), or else the response's `k` token:
// memcached echoes a key raw when the item was stored through the binary protocol, and such a key
// may hold "\r\n" or spaces, which would break the response's framing.
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

  // Unix time (seconds) used to turn mg's remaining TTL into an absolute exptime: the earliest the
  // `mg` can have run (never later), and the latest (now_high, at the receipt), both on the clock
  // the records use. Equal unless the source's clock may have ticked in between.
  void set_now(int64_t now, int64_t now_high) {
    now_ = now;
    now_high_ = now_high;
  }
  void set_now(int64_t now) { set_now(now, now); }
  // Version 3's stamp: the source's own time (its `stats time`) at the earliest the `mg` can have run
  // (ServerClock::TimeAtMost of the batch's build): an `mg t` plus it is the item's expiry on the
  // source's clock, never later. Kept apart from set_now's, which are on the records' (this host's)
  // clock moved by the source clock of the part open when they were set.
  void set_source_now(int64_t t) { source_now_ = t; }
  // The next value's expiry as the listing gave it, on the records' clock (kNeverExpires: none):
  // when the `mg t` agrees with it within [now, now_high], it is the exact one (RecordSink::OnValue
  // sets it for each value).
  void set_listed(int64_t exptime) { set_listed(exptime, exptime); }
  // The same, and the listing's own exp on the source's clock (version 3's stamp when it is the one).
  void set_listed(int64_t exptime, int64_t source_exp) {
    listed_ = exptime;
    listed_source_ = source_exp;
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
  int64_t now_ = 0, now_high_ = 0;
  int64_t listed_ = kNeverExpires, listed_source_ = kNeverExpires;
  int64_t source_now_ = 0;
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
