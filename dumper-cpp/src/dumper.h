// The dump: crawl -> key chunks -> N workers fetching values with pipelined `mg` -> data files,
// then a reconciliation crawl for keys the first crawl missed, then DONE. Resumable from the files
// it has published (docs/data-format.md section 6).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "data_file.h"
#include "env.h"
#include "manifest.h"
#include "net.h"
#include "options.h"
#include "rate_limiter.h"
#include "status.h"

namespace cachewarm {

// Progress counters, shared by all threads and printed as JSON lines.
struct Progress {
  std::atomic<uint64_t> keys_listed{0}, items{0}, bytes{0}, files{0}, misses{0}, skipped_min_ttl{0};
  std::atomic<int> phase{0};  // index into kPhaseNames
};

struct ChunkTask {
  uint64_t chunk = 0;
  uint64_t start_index = 0;  // first key index not yet in a published part
  uint32_t next_part = 0;
};

class Dumper {
 public:
  Dumper(const Options& o, Env* env);
  Status Run();
  const Progress& progress() const { return progress_; }

 private:
  friend class Worker;
  Status Prepare();
  Status ScanPublished();
  Status Crawl(bool pipelined);
  Status FilteredCrawl(uint64_t* new_keys);
  Status CrawlInto(const std::function<Status(const Slice&, int64_t)>& fn);
  Status WaitDrained();
  Status CheckServer(const char* when);
  void Push(const ChunkTask& t);
  bool Pop(ChunkTask* t);
  void ChunkDone();
  void Fail(const Status& s);
  bool aborted() const { return aborted_.load(); }
  void AddPublished(const PublishedFile& f);
  void PrintProgress(const char* event);
  uint64_t CountChunkKeys(uint64_t chunk);

  Options o_;
  Env* env_;
  std::string keys_dir_;
  Progress progress_;
  RateLimiter limiter_;
  ServerStats stats_before_;
  Conn control_;
  uint64_t dump_start_ms_ = 0;
  uint64_t resumes_ = 0;
  int64_t curr_items_before_ = 0;  // at the first run's start (kept in keys/META)
  uint64_t next_chunk_ = 0;
  bool crawl_by_hash_ = true;
  uint64_t crawl_chunks_ = 0;  // chunks [0, crawl_chunks_) came from the first crawl
  std::map<uint64_t, uint64_t> chunk_keys_;  // chunk -> keys
  std::map<uint64_t, ChunkTask> resume_tasks_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChunkTask> queue_;
  uint64_t outstanding_ = 0;
  bool closed_ = false;
  std::atomic<bool> aborted_{false};
  Status error_;
  std::vector<PublishedFile> files_;
  std::mutex out_mu_;
};

}  // namespace cachewarm
