// The adaptive guard's knobs and how they move (source_guard.h decides *when*, this decides *how
// much*). A back-off cuts everything that makes a burst on the source at once: the items/s and the
// bytes/s the workers may fetch (x0.7 of what they really fetched: a cut of an unreached limit would
// change nothing), the keys of one batch and the bytes of one batch (/2: a batch of large values
// occupies the memcached worker thread its connection lives on for as long as it takes to send, so
// a cap on keys alone does nothing for 10 KB values), and the crawl's `lru_crawler sleep` (x2).
// Growth: the rate x1.5 in slow start (until the first back-off), then +1/5 per clean window; the
// batch limits x1.5 per clean window; the caller says when a window was clean.
#pragma once
#include <cstdint>

namespace cachewarm {

struct PaceSettings {
  uint64_t max_rate = 0;        // items/s ceiling (--max-items-per-second), 0 = none
  uint64_t max_bytes_rate = 0;  // bytes/s ceiling (--max-bytes-per-second), 0 = none
  uint64_t start_rate = 100000;  // items/s before the first window (slow start: x1.5 per 250 ms)
  uint64_t min_rate = 200;
  uint64_t min_bytes_rate = 1 << 20;  // 1 MiB/s: 100 items/s of 10 KB
  int max_batch = 500;          // --batch
  int min_batch = 4;            // a one-key batch makes the dump round-trip bound: far below the rate floor
  int start_batch = 50;
  uint64_t max_batch_bytes = 1 << 20;  // the workers' own target per batch (worker.cc)
  uint64_t min_batch_bytes = 16 << 10;
  uint32_t crawl_sleep_floor_us = 0;  // the server's own `lru_crawler_sleep` (or --crawl-sleep-us)
  uint32_t crawl_sleep_max_us = 20000;
};

struct PaceState {
  uint64_t rate = 0;            // items/s the workers may fetch now (0: no limit)
  uint64_t bytes_rate = 0;      // bytes/s the workers may fetch now (0: no limit)
  int batch = 0;                // most keys per batch now
  uint64_t batch_bytes = 0;     // most bytes of values per batch now
  uint32_t crawl_sleep_us = 0;  // what `lru_crawler sleep` should be now
  uint64_t backoffs = 0;        // back-offs so far
  uint64_t lowest_rate = 0;     // the lowest items/s a back-off set (0: none yet)
  uint64_t lowest_bytes_rate = 0;
};

class PaceController {
 public:
  explicit PaceController(const PaceSettings& s);
  // What the workers achieved lately (items/s, bytes/s; 0 items/s: they fetched nothing — a listing
  // running alone, only the crawl's pace can be what hurts; 0 bytes/s: not measured).
  void BackOff(uint64_t achieved_rate, uint64_t achieved_bytes_rate);
  void Grow(uint64_t achieved_rate, uint64_t achieved_bytes_rate);
  const PaceState& state() const { return st_; }
  bool slow_start() const { return slow_start_; }

 private:
  PaceSettings s_;
  PaceState st_;
  bool slow_start_ = true;
  uint64_t peak_rate_ = 0, peak_bytes_ = 0;
};

}  // namespace cachewarm
