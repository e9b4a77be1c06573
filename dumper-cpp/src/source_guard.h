// Protecting the source's live clients while the dump runs (--adaptive, --crawl-sleep-us).
//
// What hurts them (FACTS.md, bench/source_harm.py): on a few cores, the dump's bursts — a batch of
// pipelined `mg` occupies a memcached worker thread and, with the dumper's receive, whole cores for
// as long as it takes — and the crawl's CPU. A fixed --max-items-per-second paces the average, not the
// bursts. So the guard steers three things with one signal:
//   - the dump's rate (items/s, RateLimiter::set_rate), never above --max-items-per-second;
//   - the keys per batch (RateLimiter::set_batch_cap), never above --batch;
//   - the crawl's own pace: memcached's `lru_crawler sleep <us>` (every release sleeps that long
//     every 1000 items — 1.6.18: every 1000 hash buckets — between buckets, holding no item lock),
//     never below the server's own setting, which is restored at the end (also on failure).
// The signal: the latency of the guard's own probes — a miss `mg` (a key that never exists) on
// connections of its own, one every --probe-interval, as a live client would send — compared
// with the same probes' latency before the dump began. Above the target the guard backs off
// multiplicatively (rate x0.7, batch /2, crawl sleep x2) once two windows in a row are above it (one
// noisy window is not the dump's doing; no answer, or 4x the threshold, backs off at once); below
// it, it speeds up again (slow start x1.5 per interval until the first back-off, then additively):
// AIMD, like TCP's congestion control. The threshold: baseline x --adaptive-target + 200 us.
// The crawl is never paced by not reading its socket (memcached 1.6.18 would hold a bucket lock).
//
//   PaceController  the decisions, pure (tests drive it with scripted probe latencies: no clock)
//   SourceGuard     the probes, on a thread of its own, applying the controller's decisions
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "net.h"
#include "options.h"
#include "progress.h"
#include "rate_limiter.h"
#include "status.h"

namespace cachewarm {

struct PaceSettings {
  double target_ratio = 1.5;    // congested: a window's probe latency > baseline x this + slack
  int64_t slack_us = 100;       // absolute slack (a fast, idle server's probes vary by tens of us)
  uint64_t max_rate = 0;        // items/s ceiling (--max-items-per-second), 0 = none
  uint64_t start_rate = 50000;  // items/s before the first window
  uint64_t min_rate = 1000;
  int max_batch = 500;          // --batch (as the workers reduced it)
  int min_batch = 4;
  int start_batch = 50;
  uint32_t crawl_sleep_floor_us = 0;  // the server's own `lru_crawler_sleep` (or --crawl-sleep-us)
  uint32_t crawl_sleep_max_us = 20000;
  int hold_windows = 2;        // after a back-off, the windows that may not back off again
  // Consecutive congested windows before a back-off (1 = at once). A probe that got no answer, or a
  // window above 4x the threshold, backs off at once whatever this says.
  int confirm_windows = 1;
  int backing_off_windows = 10;  // "backing off" until this many windows pass without one
};

struct PaceState {
  uint64_t rate = 0;            // items/s the workers may fetch now
  int batch = 0;                // most keys per batch now
  uint32_t crawl_sleep_us = 0;  // what `lru_crawler sleep` should be now
  bool backing_off = false;
  uint64_t backoffs = 0;        // back-offs so far
  uint64_t windows = 0, congested_windows = 0;
  uint64_t lowest_rate = 0;     // the lowest rate a back-off set (0: none yet)
};

class PaceController {
 public:
  explicit PaceController(const PaceSettings& s);
  // The probes' latency before the dump (a high percentile, microseconds).
  void Calibrate(int64_t baseline_us);
  // One window: its probes' latency (the same percentile; < 0 when no probe answered within the
  // window: congested) and the items/s the workers achieved in it (rate growth follows what is used).
  void Update(int64_t probe_us, uint64_t achieved_rate);
  const PaceState& state() const { return st_; }
  int64_t baseline_us() const { return baseline_us_; }
  int64_t threshold_us() const;
  bool slow_start() const { return slow_start_; }

 private:
  PaceSettings s_;
  PaceState st_;
  int64_t baseline_us_ = 0;
  bool slow_start_ = true;
  int hold_ = 0;
  int since_backoff_ = 1 << 30;
  int congested_run_ = 0;
  uint64_t peak_achieved_ = 0;
};

// The latency percentile of a window's samples (microseconds); -1 if there are none.
int64_t Percentile(std::vector<int64_t> samples, double p);

// What the guard did, for DONE and the done line.
struct GuardSummary {
  bool adaptive = false;
  int64_t baseline_us = 0, threshold_us = 0;
  uint64_t backoffs = 0, windows = 0, congested_windows = 0, lowest_rate = 0;
  int64_t crawl_sleep_original_us = -1;  // the server's lru_crawler_sleep before the dump (-1: unknown)
  uint32_t crawl_sleep_max_us = 0;       // the highest the dump set
};

class SourceGuard {
 public:
  // Everything passed must outlive the guard.
  SourceGuard(const Options& o, RateLimiter* limiter, Progress* progress);
  ~SourceGuard();
  SourceGuard(const SourceGuard&) = delete;
  SourceGuard& operator=(const SourceGuard&) = delete;

  // Reads the server's crawl sleep; sets --crawl-sleep-us if given; with --adaptive, opens the probe
  // connections, measures the baseline and starts the guard's thread.
  Status Start(int64_t saved_crawl_sleep_us);
  // Stops the thread, closes the probes, restores the server's crawl sleep. Idempotent.
  void Stop();
  const GuardSummary& summary() const { return summary_; }
  // The server's crawl sleep before the dump (keys/CRAWL_SLEEP keeps it for a resumed dump).
  int64_t original_crawl_sleep_us() const { return summary_.crawl_sleep_original_us; }

 private:
  Status Probe(size_t i, int64_t* us);
  Status SetCrawlSleep(Conn* c, uint32_t us);
  void Loop();

  const Options& o_;
  RateLimiter* limiter_;
  Progress* progress_;
  PaceController controller_;
  std::vector<std::unique_ptr<Conn>> probes_;
  std::string probe_cmd_;
  uint32_t crawl_sleep_set_ = 0;
  bool crawl_sleep_changed_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  GuardSummary summary_;
};

// `stats settings`' lru_crawler_sleep; -1 if the server does not report it.
Status GetCrawlSleep(Conn* c, int64_t* us);

}  // namespace cachewarm
