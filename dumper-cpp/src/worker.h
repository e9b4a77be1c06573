// A worker: one connection to the source, pipelined `mg` batches for the keys of one chunk at a
// time, the responses written to data files by the receive stream without copies. Two receive
// buffers, one key list and one data file open at a time: its memory is fixed at start.
// Each `mg` carries its key's index as opaque (`O<i>`): a record's key is taken from the key list
// (never from memcached's echo, which is raw for items stored through the binary protocol), and a
// batch's misses are known by key and explained: expired (the listing's exp has passed) or gone. Keys no meta
// command can name (187 bytes or more, no base64 form, and a space, '\n' or NUL: codec.h IsTextKey)
// are fetched with the binary protocol (binary_get.h) at the batch's end, their values kept in a
// scratch file until the part ends, when their TTL is read again (reread.h) and they are written; a
// key that cannot be fetched at all, or whose TTL cannot be read, is named in keys/UNDUMPED, never an
// abort.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "binary_get.h"
#include "crawler.h"
#include "checkpoint.h"
#include "data_file.h"
#include "part_writer.h"
#include "env.h"
#include "net.h"
#include "options.h"
#include "progress.h"
#include "rate_limiter.h"
#include "response_stream.h"
#include "server_clock.h"
#include "status.h"
#include "work_queue.h"

namespace cachewarm {

class Stream;

class Worker : public RecordSink {
 public:
  // Everything passed must outlive the worker; the checkpoint must be open. With `stream` (the
  // stream mode) records go to the destinations instead of data files.
  Worker(const Options& o, Env* env, Checkpoint* checkpoint, WorkQueue* queue, RateLimiter* limiter,
         Progress* progress, Stream* stream = nullptr);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Dumps chunks from the queue until it is closed and empty; the first error fails the queue.
  void Run();

  // RecordSink: the receive stream's records and batch ends.
  Status Write(const struct iovec* iov, int iovcnt, uint64_t records) override;
  Status OnValue(const MetaResponse& r, Slice* key) override;
  Status OnBatchEnd(uint64_t hits, uint64_t skipped) override;
  uint64_t NextRecordOffset() override { return writer_->file_bytes(); }

 private:
  struct Batch {
    uint64_t start;                // first key index of the batch
    uint64_t end;                  // one past the last key index of the batch
    uint64_t mg_keys;              // keys asked with `mg`
    std::vector<uint64_t> binary;  // keys to fetch with the binary protocol at the batch's end
    std::string raw;               // the batch's raw keys, back to back (records point into it)
    std::vector<uint32_t> raw_end; // end of key i - start in raw
    double built_at = 0;           // this host's wall clock before it was sent (WallNow)
  };
  struct Key {
    uint32_t offset, length;  // of the URL-encoded key in keys_
    int64_t exptime;          // the listing's
  };
  // What became of a key of the batch in flight.
  enum KeyState : uint8_t { kMissed = 0, kGot = 1, kUndumped = 2 };

  Status DoChunk(const ChunkTask& t);
  Status LoadKeys(uint64_t chunk);
  // Appends "mg <key> [b] v f t q u O<i>\r\n" (the key plain, base64, or raw: codec.h) for key index i (no `k`: the key is known by the
  // opaque), or queues it for the binary protocol; keeps the raw key for the record.
  Status AppendGet(uint64_t i, Batch* b);
  Status FetchBinary(const Batch& b);
  // The part's keys FetchBinary fetched: their TTL read again, then written (or named, or gone).
  Status Reread();
  Status Stash(const Slice& piece);
  Status WriteDeferred(uint64_t i, uint32_t flags, uint32_t value_len, uint64_t at, int64_t exptime,
                       const SourceStamp& stamp);
  void Undumped(uint64_t i, const std::string& why);
  // Names key i in keys/UNDUMPED (and stderr) and counts it; Undumped also marks it in the batch.
  void NameUndumped(uint64_t i, const std::string& why);
  Status FinishPart(uint64_t end);

  const Options& o_;
  Env* env_;
  Checkpoint* checkpoint_;
  WorkQueue* queue_;
  RateLimiter* limiter_;
  Progress* progress_;
  Conn conn_;
  const uint16_t format_;  // the records' data format version
  ResponseStream stream_;
  std::unique_ptr<PartWriter> writer_;  // data files, or the stream mode's sink
  BinaryGetter binary_;
  const ListingCas* listing_cas_ = nullptr;
  ServerClock source_clock_;
  ClockKeeper* clocks_ = nullptr;
  // Opens the next part with the source's clock as it is now (every record of a part uses one clock).
  Status OpenPart(uint64_t first_key_index) {
    if (clocks_) set_source_clock(clocks_->Get());
    return writer_->Open(chunk_, part_, first_key_index);
  }
  // The source's time when the `mg`s received now ran there (ResponseStream::set_window): at least
  // what the server last showed (its `stats time` when measured, the time a value's listing gave, or
  // that of the `stats` a batch begins with about once a second, read in the stream), at most its
  // clock's ceiling now (or, on another host, its measured upper bound); moved onto this host's clock
  // rounded down (ServerClock::WholeAhead).
  // `built`: when the batch in flight was sent (a look at the clock ended after it proves nothing
  // about that batch).
  void SetWindow(double built) {
    int64_t seen = source_clock_.seen;
    if (clocks_) {
      const ServerClock now = clocks_->Get();
      if (now.seen_at <= built) seen = std::max(seen, now.seen);
    }
    stream_.set_window(seen, source_clock_.TimeAtLeast(WallNow()), source_clock_.WholeAhead());
  }

 public:
  // The listing's cas of keys that may need the binary protocol (KeyCrawl fills it).
  void set_listing_cas(const ListingCas* c) { listing_cas_ = c; }
  // The source's clock against this host's (MeasureClock): an `mg t` and a listing's exp are on the
  // source's clock; the records hold its expiry on this host's, rounded down (ServerClock), and the
  // data files' headers say by how much.
  void set_source_clock(const ServerClock& c) {
    source_clock_ = c;
    writer_->SetSourceClock(c.MillisAtLeast(), HeaderClockFlags(c));
  }
  // Where each part takes the source's clock from when it opens (re-measured while the dump runs).
  void set_clock_keeper(ClockKeeper* k) { clocks_ = k; }
  // True while the dump's own crawl holds the source's crawler (a re-read waits for it to end).
  void set_crawling(const std::atomic<bool>* c) { crawling_ = c; }

 private:
  std::string keys_, send_, raw_, b64_;
  std::vector<Key> lines_;
  std::deque<Batch> inflight_;
  std::vector<uint8_t> state_;  // KeyState of each key of the front batch
  int batch_;
  int adaptive_batch_ = 0;  // set from batch_ in the constructor, then from the values' sizes
  uint64_t batch_bytes_ = 0;
  // When a batch last began with a `stats` (this host's wall clock): the look at the source's clock
  // that keeps the floor of a touched key's `mg t` fresh (ResponseStream::set_window).
  double clock_look_at_ = 0;
  uint64_t chunk_ = 0, nkeys_ = 0, file_misses_ = 0;
  uint32_t part_ = 0;
  // FetchBinary's keys waiting for Reread: which key, its flags, value length, the CAS it was fetched
  // with, and where its value is in the scratch file (stash_fd_, unlinked; in --spill-dir).
  struct Deferred {
    uint64_t index;
    uint32_t flags, value_len;
    uint64_t cas, at;
  };
  std::vector<Deferred> deferred_;
  int stash_fd_ = -1;
  uint64_t stash_bytes_ = 0;
  const std::atomic<bool>* crawling_ = nullptr;
  PartStats part_stats_;       // the open part's explained misses
  std::string undumped_lines_;  // the open part's keys/UNDUMPED lines
};

}  // namespace cachewarm
