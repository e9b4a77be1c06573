// Protecting the source's live clients while the dump runs (--adaptive, --crawl-sleep-us).
//
// What hurts them (FACTS.md, bench/source_harm.py): on a few cores, the dump's bursts — a batch of
// pipelined `mg` occupies a memcached worker thread and, with the dumper's receive, whole cores for
// as long as it takes — and the crawl's CPU. A fixed --max-items-per-second paces the average, not the
// bursts. The harm is in the tail: 1-5% of a client's requests wait behind a burst, the median does
// not move. So the guard watches the tail a client feels and steers everything that makes bursts:
//   - the dump's items/s and bytes/s (RateLimiter), never above --max-items/bytes-per-second;
//   - the keys and the bytes of one batch (RateLimiter::set_batch_cap / set_batch_bytes_cap);
//   - the crawl's own pace: memcached's `lru_crawler sleep <us>` (every release sleeps that long
//     every 1000 items — 1.6.18: every 1000 hash buckets — between buckets, holding no item lock),
//     never below the server's own setting, which is restored at the end (also on failure).
// The signal and the decisions: guard_core.h (open-loop probes, each window's p99 against the
// baseline's, a baseline re-measured in quiet windows). The probes: probe_conns.h — a miss `mg` (a
// key that never exists) every 2 ms, round robin over 4 connections of their own.
// The crawl is never paced by not reading its socket (memcached 1.6.18 would hold a bucket lock).
//
//   PaceController  how far each knob moves (pace_controller.h)
//   GuardCore       when, and the harm report (guard_core.h; tests drive it with a fake clock)
//   ProbeConns      the probes on the wire (probe_conns.h)
//   SourceGuard     the thread that ties them together and applies the decisions
#pragma once
#include <atomic>
#include <cstdio>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "guard_core.h"
#include "net.h"
#include "options.h"
#include "pace_controller.h"
#include "probe_conns.h"
#include "progress.h"
#include "rate_limiter.h"
#include "status.h"

namespace cachewarm {

// The latency percentile of a window's samples (microseconds); -1 if there are none.
int64_t Percentile(std::vector<int64_t> samples, double p);

// What the guard did, for DONE and the done line.
struct GuardSummary {
  bool adaptive = false;
  uint64_t backoffs = 0, lowest_rate = 0, lowest_bytes_rate = 0;
  HarmReport harm;
  int64_t crawl_sleep_original_us = -1;  // the server's lru_crawler_sleep before the dump (-1: unknown)
  uint32_t crawl_sleep_max_us = 0;       // the highest the dump set
};

// The guard's settings from the options (the tests build the same).
GuardConfig GuardConfigOf(const Options& o);
PaceSettings PaceSettingsOf(const Options& o);

class SourceGuard {
 public:
  // Everything passed must outlive the guard.
  SourceGuard(const Options& o, RateLimiter* limiter, Progress* progress);
  ~SourceGuard();
  SourceGuard(const SourceGuard&) = delete;
  SourceGuard& operator=(const SourceGuard&) = delete;

  // Reads the server's crawl sleep; sets --crawl-sleep-us if given; with --adaptive, opens the probe
  // connections, measures the baseline (one window of probes) and starts the guard's thread.
  Status Start(int64_t saved_crawl_sleep_us);
  // Stops the thread, closes the probes, restores the server's crawl sleep. Idempotent.
  void Stop();
  const GuardSummary& summary() const { return summary_; }
  // The server's crawl sleep before the dump (keys/CRAWL_SLEEP keeps it for a resumed dump).
  int64_t original_crawl_sleep_us() const { return summary_.crawl_sleep_original_us; }

 private:
  Status SetCrawlSleep(Conn* c, uint32_t us);
  void Apply();
  void Loop();
  // CACHEWARM_GUARD_TRACE=<file>: one JSON line per decision and per window (a diagnostic for tuning
  // the guard on a real host; nothing reads it).
  void Trace(int64_t now_us, const char* what);

  const Options& o_;
  RateLimiter* limiter_;
  Progress* progress_;
  GuardConfig config_;
  std::unique_ptr<GuardCore> core_;
  std::unique_ptr<ProbeConns> probes_;
  Conn control_;  // `lru_crawler sleep` while the dump runs
  std::string probe_cmd_;
  bool can_pace_crawl_ = false;
  uint32_t crawl_sleep_max_us_ = 0;
  uint32_t crawl_sleep_set_ = 0;
  bool crawl_sleep_changed_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  GuardSummary summary_;
  std::FILE* trace_ = nullptr;
  int64_t trace_t0_ = 0;
};

// `stats settings`' lru_crawler_sleep; -1 if the server does not report it.
Status GetCrawlSleep(Conn* c, int64_t* us);

}  // namespace cachewarm
