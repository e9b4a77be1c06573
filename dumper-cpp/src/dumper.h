// The dump's phases: crawl -> key chunks -> N workers fetching values with pipelined `mg` -> data
// files, then a reconciliation crawl for keys the first crawl missed, then DONE. Resumable from the
// files it has published (docs/data-format.md section 6).
//   work_queue.h  the chunks waiting for a worker, and the first error
//   key_crawl.h   the crawls that list keys into key chunks
//   worker.h      a worker: one connection, pipelined `mg` batches, data files
//   checkpoint.h  keys/META, keys/CRAWLED, keys/RECONCILED, the published files (resume, manifest)
//   progress.h    the progress counters and their JSON lines
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "checkpoint.h"
#include "env.h"
#include "key_crawl.h"
#include "net.h"
#include "options.h"
#include "progress.h"
#include "rate_limiter.h"
#include "server_clock.h"
#include "source_guard.h"
#include "status.h"
#include "stream.h"
#include "work_queue.h"

namespace cachewarm {

class Dumper {
 public:
  Dumper(const Options& o, Env* env);
  Status Run();
  const Progress& progress() const { return progress_; }
  // The exit status after Run() returned OK: 1 in the stream mode when the destinations do not hold
  // every item for a reason not accepted (DONE and the summary are written all the same).
  int exit_code() const;

 private:
  // Fresh start or --resume: directories, the source's identity, keys/META.
  Status Prepare();
  // Phase 1: the first crawl (pipelined with the workers), unless keys/CRAWLED says it is done.
  Status CrawlPhase(double* crawl_s);
  // Phase 2: reconciliation crawls if the first crawl may have missed keys; keys/RECONCILED.
  Status ReconcilePhase(double* reconcile_s);
  // Runs the phases with the workers and the progress reporter running.
  Status DumpWithWorkers(const std::vector<ChunkTask>& todo, double* crawl_s, double* reconcile_s);
  // Fails if the source restarted since the dump began.
  Status CheckServer(const char* when);
  // The manifest, published last; `t0` is when this run started.
  std::string ProtectionJson(const GuardSummary& g, const ServerStats& after) const;
  Status WriteDone(double crawl_s, double reconcile_s, std::chrono::steady_clock::time_point t0);
  // `stats` on a connection of its own, closed at once: the dumper keeps no idle connection to the
  // source (while the crawl runs nothing of the dumper's waits on a server thread).
  Status SourceStats(ServerStats* out);
  // Starts / stops protecting the source (source_guard.h); keys/CRAWL_SLEEP keeps the server's crawl
  // sleep across a crash.
  Status StartGuard();
  void StopGuard();

  const Options o_;
  Env* env_;
  Progress progress_;
  ProgressReporter reporter_;
  RateLimiter limiter_;
  WorkQueue queue_;
  Checkpoint checkpoint_;
  KeyCrawl crawl_;
  ListingCas listing_cas_;  // the crawl puts, the workers check (binary-protocol keys)
  Conn control_;  // `stats` before, during and after the dump (open only for each look)
  ServerStats stats_before_;
  ServerClock source_clock_;  // the source's clock against this host's (Prepare)
  ClockKeeper source_clocks_;  // and as re-measured while the workers run
  // True while one of the dump's crawls holds the source's crawler (a worker's re-read waits).
  std::atomic<bool> crawling_{false};
  bool source_same_host_ = false;    // the source runs on this host: its clock's ceiling is known
  std::string source_ceiling_why_;   // else why not (DONE's clock.ceiling_unknown)
  uint64_t crawl_chunks_ = 0;  // chunks [0, crawl_chunks_) came from the first crawl
  SourceGuard guard_;
  std::unique_ptr<Stream> stream_;  // the stream mode (--to); null: data files
};

}  // namespace cachewarm
