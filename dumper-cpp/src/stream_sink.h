// A worker's sink in the stream mode: the records the receive stream hands over (data format v3
// records: the source stamp, then the command that stores the item, whose values still sit in the
// receive buffer) become writes to the destination the key routes to, with no copy of any value:
//   add mode: a non-quiet binary-protocol ADD per item (its answer carries the CAS of the item our
//   write created, c_w; a failed ADD never unlinks the key's live value, on every release; not
//   `ms ... ME`, which does), on the destination's binary connection;
//   set mode: `ms <key> <len> [b] T<expiry> F<flags> MS q[ O<n>]\r\n` + the value + `\r\n`, SETQ for
//   keys no meta command can name;
// queued as iovecs (the command line from a small arena, the value pointing into the receive buffer)
// and sent with writev before AppendRaw returns. Per record, as the Python populator (encode.py)
// decides:
//   - expiry: absolute, kExpiryMargin before the record's (memcached reads T above 30 days as a unix
//     time); never stays never (T0); already expired (less the margin) -> not sent, counted;
//   - size: an item its destination cannot hold (ItemLimit) is never sent, counted and named.
// Finish sends a mark on every connection and waits for its answer: then every write of the part
// has been applied, the EXISTS answers counted (already present: a live write), and in add mode the
// part goes to the re-check (stream_recheck.h) with each stored key's stamp and c_w; it is recorded
// once re-checked. A resend (the part a resumed run redoes, or a part redone after a reconnect) tags
// each write with its ordinal; each EXISTS is then read back and counted as our own earlier write
// when the destination holds exactly our value and flags (and re-checked with c_w unknown).
#pragma once
#include "xxhash_fast.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "part_writer.h"
#include "record_v2.h"
#include "stream.h"
#include "stream_conn.h"
#include "stream_recheck.h"

namespace cachewarm {

class StreamSink : public PartWriter {
 public:
  explicit StreamSink(Stream* stream);
  ~StreamSink() override;

  Status Open(uint64_t chunk, uint32_t part, uint64_t first_key_index) override;
  Status AppendRaw(const struct iovec* iov, int iovcnt, uint64_t records) override;
  Status Finish(uint64_t end_key_index, uint64_t misses, PublishedFile* out,
                const std::function<Status(const PublishedFile&)>& before_publish) override;
  void Abandon() override;
  uint64_t file_bytes() const override;
  bool Recover(Status* s, ChunkTask* again) override;
  // The source's clock the records were written with (data-format section 2.1): the fraction their
  // exptimes were rounded down by.
  void SetSourceClock(int64_t ms, uint16_t /*flags*/) override {
    dropped_ = std::ceil(double(ms) / 1000.0) - double(ms) / 1000.0;
  }

  // Bytes one sink allocates up front for `destinations` (the memory plan).
  static uint64_t PlannedMemory(size_t destinations);
  // A resend part is cut once it holds this many records: each keeps its key and value hash
  // until the part's NS answers are checked.
  static constexpr uint64_t kMaxTaggedRecords = 16384;
  // Waits until every part handed to the re-check is re-checked and recorded.
  void WhenDurable(std::function<void()> fn) override;
  Status FinishThen(uint64_t end_key_index, uint64_t misses, std::function<Status(const PublishedFile&)> before_publish,
                    std::function<void(const PublishedFile&)> after_publish) override;

 private:
  double dropped_ = 0;  // SetSourceClock: the fraction the records' exptimes were rounded down by
  struct Dest {
    Dest(const std::string& address) : meta(address, DestConn::kMeta), bin(address, DestConn::kBinary) {}
    DestConn meta, bin;
    StreamCounts n;          // this part
    uint64_t sent = 0, sent_bin = 0;
    bool crlf_owed = false;  // a value is queued whose "\r\n" is not yet
  };
  enum Action : uint8_t { kSkip, kSend, kSendBinary };
  // A v3 record: the stamp, the meta line or the binary head, the binary record's key, the value,
  // the meta record's "\r\n" after the value.
  enum ParseState : uint8_t { kHeader, kLine, kBinHead, kKey, kValue, kTail };
  struct Tagged {
    uint32_t dest, flags;
    uint64_t value_len, hash;
    std::string key;
    bool binary;
  };

  Status Connect();
  Status StartRecord();
  Status ParseLine();
  // Finish's work once the writes are acknowledged; `then` runs after the part's re-check.
  Status FinishPart(uint64_t end_key_index, uint64_t misses, std::function<Status(const PublishedFile&)> before_publish,
                    std::function<void(const PublishedFile&)> after_publish, PublishedFile* out);
  void Value(const char* p, size_t n);
  void EndRecord();
  // Room for one more command line and a few iovecs; flushes first if there is none.
  Status Reserve();
  Status Flush();
  Status CheckTagged(const std::vector<std::vector<uint64_t>>& tags);
  void ResetPart();
  std::vector<DestConn*> Conns();

  Stream* s_;
  const bool add_;
  std::vector<std::unique_ptr<Dest>> d_;
  std::unique_ptr<char[]> arena_;
  size_t arena_used_ = 0;
  uint64_t pending_items_ = 0, pending_bytes_ = 0;  // queued since the last flush (rate limits)
  int64_t now_ = 0;

  // The open part.
  bool open_ = false, tagged_ = false;
  uint64_t retry_chunk_ = UINT64_MAX;  // after a reconnect: the rest of this chunk is tagged
  uint64_t chunk_ = 0, first_ = 0, records_ = 0, bytes_ = 0;
  uint32_t part_ = 0;
  std::vector<OversizeItem> oversize_;
  std::vector<Tagged> tags_;
  double recover_started_ = -1;

  // The open part's re-check (add mode): one entry per record sent, in send order (the ADD's opaque).
  RecheckPart recheck_;
  std::vector<uint8_t> answered_;  // per entry: 0 not yet, 1 stored (c_w known), 2 exists
  std::unique_ptr<StreamRecheck> rechecker_;

  // The record being parsed.
  ParseState st_ = kHeader;
  char hdr_[kSourceStampSize];
  size_t hdr_have_ = 0;
  char line_[kMaxMetaLineV2 + 2];
  size_t line_have_ = 0;
  std::vector<std::pair<size_t, size_t>> tok_;  // ParseLine's tokens, reused: no allocation per record
  uint64_t stamp_cas_ = 0;
  int64_t stamp_exp_ = -1;
  size_t tail_left_ = 0;
  char key_[256];
  size_t key_have_ = 0, key_len_ = 0;
  uint32_t vlen_ = 0, flags_ = 0;
  int64_t exptime_ = 0;
  uint64_t value_left_ = 0;
  Action action_ = kSkip;
  bool binary_key_ = false;  // the record's key has no text form
  size_t dest_ = 0;
  XXH3_state_t* hash_;
  std::string b64_;
};

}  // namespace cachewarm
