// Key lists (OUT/keys/<chunk:08>.keys, docs/data-format.md section 6): one line per key,
// "<URL-encoded key> <exptime>\n". The crawl cuts its key stream into chunks of about
// --key-file-size bytes and publishes each atomically; the callback hands it to the workers.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "env.h"
#include "slice.h"
#include "status.h"

namespace cachewarm {

std::string KeyChunkName(uint64_t chunk);
bool ParseKeyChunkName(const std::string& name, uint64_t* chunk);

class KeyChunkWriter {
 public:
  using PublishedFn = std::function<void(uint64_t chunk, uint64_t keys)>;
  // async_depth > 0: chunks are fsynced and published by a background thread (so the crawl never
  // waits on the disk), at most async_depth chunks queued (bounded memory); `fn` runs on that thread.
  KeyChunkWriter(Env* env, std::string keys_dir, uint64_t max_bytes, uint64_t next_chunk, PublishedFn fn,
                 int async_depth = 0);
  ~KeyChunkWriter();
  Status Add(const Slice& url_key, int64_t exptime);
  // Publishes the last, partly filled chunk and waits until every chunk is published.
  Status Flush();
  // Ends the chunk being filled (if any) without waiting for its publication (async: waits only
  // while async_depth chunks are queued).
  Status CutNow() { return Cut(); }
  uint64_t next_chunk() const { return next_chunk_; }
  uint64_t keys() const { return keys_; }
  // Chunks cut and not yet published (async only).
  size_t queued();

 private:
  struct Pending {
    uint64_t chunk, keys;
    std::string contents;
  };
  Status Cut();
  Status Publish(const Pending& p);
  void Loop();

  Env* env_;
  std::string dir_;
  uint64_t max_bytes_;
  uint64_t next_chunk_;
  PublishedFn fn_;
  std::string buf_;
  uint64_t buf_keys_ = 0, keys_ = 0;
  // async publishing
  int depth_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool busy_ = false, stop_ = false;
  Status error_;
  std::thread thread_;
};

// Splits a key list into lines; calls fn(url_key, exptime) for each. Corruption on a bad line.
Status ForEachKeyLine(const Slice& contents, const std::function<Status(const Slice&, int64_t)>& fn);

}  // namespace cachewarm
