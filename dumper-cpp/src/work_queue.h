// The scheduler's queue of key chunks: the crawls push each chunk once its key list is published,
// the workers pop and dump them. It also carries the first error, which stops everyone.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>

#include "status.h"

namespace cachewarm {

struct ChunkTask {
  uint64_t chunk = 0;
  uint64_t start_index = 0;  // first key index not yet in a published part
  uint32_t next_part = 0;
};

class WorkQueue {
 public:
  void Push(const ChunkTask& t);
  // Blocks until a task is available; false once the queue is closed and empty, or aborted.
  bool Pop(ChunkTask* t);
  // A popped task is dumped.
  void Done();
  // Waits until every pushed task is done; the first error if the dump was aborted.
  Status WaitDrained();
  // No more tasks: workers return once the queue is empty.
  void Close();
  // Aborts the dump; the first error is the one reported.
  void Fail(const Status& s);
  bool aborted() const { return aborted_.load(); }
  // No task is waiting (a worker then closes its connections until the next one).
  bool Empty();
  // Tasks waiting for a worker (pushed, not popped).
  size_t Waiting();
  Status error();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChunkTask> queue_;
  uint64_t outstanding_ = 0;  // pushed, not yet done
  bool closed_ = false;
  std::atomic<bool> aborted_{false};
  Status error_;
};

}  // namespace cachewarm
