// Progress counters shared by all threads, and the JSON lines that report them on stdout:
//   {"event": "progress"|"done", "phase", "keys_listed", "items", "bytes", "files", "misses",
//    "skipped_min_ttl", "items_per_s", "limit_items_per_s", "batch_cap", "backing_off", "backoffs",
//    "probe_us", "probe_p99_us", "probe_baseline_us", "backed_off_ms", "time_ms"}
// items_per_s: measured over the last interval; limit_items_per_s / batch_cap: the pace now (0 = none);
// backing_off / backoffs / probe_us: the adaptive guard's state (source_guard.h); probe_p99_us: its
// probes' p99 in the last whole window, probe_baseline_us: the same with no dump (the baseline);
// backed_off_ms: the time spent backed off so far.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>

namespace cachewarm {

enum Phase { kStart, kCrawl, kDump, kReconcile, kDone };

struct Progress {
  std::atomic<uint64_t> keys_listed{0}, items{0}, bytes{0}, files{0}, misses{0}, skipped_min_ttl{0};
  std::atomic<int> phase{kStart};  // a Phase
  // The pace (rate_limiter.h, source_guard.h): set by the guard, or once from the static limits.
  std::atomic<uint64_t> pace_rate{0}, pace_batch{0}, backoffs{0}, probe_us{0}, probe_baseline_us{0};
  std::atomic<uint64_t> probe_p99_us{0}, backed_off_ms{0};
  std::atomic<bool> backing_off{false};
};

// Prints progress lines (one at a time), on demand and, between Start() and Stop(), every interval.
class ProgressReporter {
 public:
  explicit ProgressReporter(const Progress* p) : p_(p) {}
  ~ProgressReporter() { Stop(); }
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  void Print(const char* event);
  // Prints a "progress" line every interval_s seconds on a thread of its own.
  void Start(double interval_s);
  void Stop();

 private:
  const Progress* p_;
  std::mutex out_mu_;
  uint64_t last_items_ = 0, last_ms_ = 0;  // for items_per_s (under out_mu_)
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace cachewarm
