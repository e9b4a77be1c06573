// A worker: one connection to the source, pipelined `mg` batches for the keys of one chunk at a
// time, the responses written to data files by the receive stream without copies. Two receive
// buffers, one key list and one data file open at a time: its memory is fixed at start.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint.h"
#include "data_file.h"
#include "env.h"
#include "net.h"
#include "options.h"
#include "progress.h"
#include "rate_limiter.h"
#include "response_stream.h"
#include "status.h"
#include "work_queue.h"

namespace cachewarm {

class Worker : public RecordSink {
 public:
  // Everything passed must outlive the worker; the checkpoint must be open.
  Worker(const Options& o, Env* env, Checkpoint* checkpoint, WorkQueue* queue, RateLimiter* limiter,
         Progress* progress);

  // Dumps chunks from the queue until it is closed and empty; the first error fails the queue.
  void Run();

  // RecordSink: the receive stream's records and batch ends.
  Status Write(const struct iovec* iov, int iovcnt, uint64_t records) override;
  Status OnBatchEnd(uint64_t hits, uint64_t skipped) override;

 private:
  struct Batch {
    uint64_t end;   // one past the last key index of the batch
    uint64_t size;  // keys in the batch
  };

  Status DoChunk(const ChunkTask& t);
  Status LoadKeys(uint64_t chunk);
  Status AppendGet(uint64_t i);
  Status FinishPart(uint64_t end);

  const Options& o_;
  Env* env_;
  Checkpoint* checkpoint_;
  WorkQueue* queue_;
  RateLimiter* limiter_;
  Progress* progress_;
  Conn conn_;
  ResponseStream stream_;
  DataFileWriter writer_;
  std::string keys_, send_, raw_, b64_;
  std::vector<std::pair<uint32_t, uint32_t>> lines_;  // (offset, length) of each key in keys_
  std::deque<Batch> inflight_;
  int batch_;
  int adaptive_batch_ = 0;  // set from batch_ in the constructor, then from the values' sizes
  uint64_t batch_bytes_ = 0;
  uint64_t chunk_ = 0, nkeys_ = 0, file_misses_ = 0;
  uint32_t part_ = 0;
};

}  // namespace cachewarm
