// The file mode's writes, fsyncs and publication on a thread of their own, so a worker's fetching
// never waits on the disk: AppendRaw copies the record bytes into one of a few fixed buffers and
// hands full ones to the writer thread, which writes them (and hashes them) into the data file;
// a part's Finish (trailer, fsync, the checkpoint's keys/PARTS, rename, directory fsync) runs there
// too, in order, and so does what the worker wants done once a part or a chunk is durable (the
// checkpoint's record, the work queue's Done).
//
// Memory is fixed: kAsyncWriteBuffers buffers of kAsyncWritePiece bytes per worker (options.h,
// counted in PlannedMemory). Only when all of them wait for the disk does AppendRaw wait — the
// disk is then slower than the source for longer than the buffers last.
//
// Crash safety is unchanged: parts are published in the order they were written and a part is
// recorded only once it is durable, so --resume redoes exactly the parts not yet published. The
// first error of the writer thread fails the dump (`on_error`) and is returned by the next call.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "options.h"
#include "part_writer.h"
#include "status.h"

namespace cachewarm {

class AsyncPartWriter : public PartWriter {
 public:
  // `inner` does the writing (on the writer thread); `header_bytes` is the size of the header its
  // Open writes (file_bytes() must be known at once). `on_error` runs once, on the writer thread,
  // with the first error.
  AsyncPartWriter(std::unique_ptr<PartWriter> inner, uint64_t header_bytes, std::function<void(const Status&)> on_error);
  ~AsyncPartWriter() override;

  Status Open(uint64_t chunk, uint32_t part, uint64_t first_key_index) override;
  Status AppendRaw(const struct iovec* iov, int iovcnt, uint64_t records) override;
  // Queues the part's end: `out` is not filled (use FinishThen's callback).
  Status Finish(uint64_t end_key_index, uint64_t misses, PublishedFile* out,
                const std::function<Status(const PublishedFile&)>& before_publish) override;
  Status FinishThen(uint64_t end_key_index, uint64_t misses, std::function<Status(const PublishedFile&)> before_publish,
                    std::function<void(const PublishedFile&)> after_publish) override;
  void WhenDurable(std::function<void()> fn) override;
  // Queued like the rest (the inner writer is the writer thread's): it applies to the parts opened
  // after it, as it would without the thread.
  void SetSourceClock(int64_t ms, uint16_t flags) override;
  // Waits until everything queued is done, then drops the open part (if any).
  void Abandon() override;
  uint64_t file_bytes() const override { return bytes_; }

 private:
  struct Op {
    enum Kind { kOpen, kData, kFinish, kCall };
    explicit Op(Kind k) : kind(k) {}
    Kind kind;
    uint64_t chunk = 0, end_key_index = 0, misses = 0, records = 0;
    uint32_t part = 0;
    int buffer = -1;  // kData: which buffer, and how many bytes of it
    size_t len = 0;
    std::function<Status(const PublishedFile&)> before;
    std::function<void(const PublishedFile&)> after;
    std::function<void()> call;
  };
  Status Push(Op op);
  // Queues the fill buffer (if it holds anything).
  Status Flush();
  // Waits for a free buffer to fill.
  Status TakeBuffer();
  void Loop();
  Status Run(Op& op);

  std::unique_ptr<PartWriter> inner_;
  const uint64_t header_bytes_;
  std::function<void(const Status&)> on_error_;
  uint64_t bytes_ = 0;  // file_bytes of the open part, as the worker sees it
  std::vector<std::unique_ptr<char[]>> buffers_;
  int fill_ = -1;             // the buffer AppendRaw fills (-1: none taken)
  size_t fill_len_ = 0;
  uint64_t fill_records_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> ops_;
  std::vector<int> free_;  // buffers neither filled nor queued
  bool busy_ = false, stop_ = false;
  Status error_;
  std::thread thread_;
};

// The file mode's writer for a worker: a FilePartWriter behind an AsyncPartWriter.
std::unique_ptr<PartWriter> NewAsyncFilePartWriter(Env* env, const std::string& dir, const std::string& node,
                                                   uint64_t dump_start_ms, uint16_t version,
                                                   std::function<void(const Status&)> on_error);

}  // namespace cachewarm
