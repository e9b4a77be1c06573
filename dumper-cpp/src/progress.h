// Progress counters shared by all threads, and the JSON lines that report them on stdout:
//   {"event": "progress"|"done", "phase", "keys_listed", "items", "bytes", "files", "misses",
//    "skipped_min_ttl", "time_ms"}
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
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace cachewarm
