// The adaptive guard's knobs and how they move (source_guard.h decides *when*, this decides *how
// much*). Bursts first, rates second. A batch of pipelined `mg` occupies the memcached worker
// thread its connection lives on for as long as it takes to answer, and a live request on that
// thread waits behind it: on this project's bench (bench/source_harm.py, 1M x 1 KB, 1.6.18, 2 cores)
// an unthrottled dump in batches of 500 put the client's p99 at 2.2-3.4x alone, the same dump of
// 1 KB values in batches of 20 at 1.3-1.5x — at full speed (250-290k items/s). So the guard runs the
// dump in short batches from the start (at most max_batch keys and max_batch_bytes of values) and a
// back-off halves the batch (keys and bytes, down to min_batch / min_batch_bytes) before it cuts
// any rate; only when the batches are already at their floor does it cut items/s and bytes/s (x0.7
// of what the workers really fetched: a cut of an unreached limit would change nothing). The crawl's
// `lru_crawler sleep` doubles with every back-off.
// Growth after a clean window: the rates first (+1/5, at least a fifth of the start rate: a cut is
// made good in a few seconds), then the batch (x1.5) once no rate of the guard's own binds.
#pragma once
#include <cstdint>

namespace cachewarm {

struct PaceSettings {
  uint64_t max_rate = 0;        // items/s ceiling (--max-items-per-second), 0 = none
  uint64_t max_bytes_rate = 0;  // bytes/s ceiling (--max-bytes-per-second), 0 = none
  uint64_t start_rate = 100000;  // items/s before the first window (slow start: x1.5 per 250 ms)
  uint64_t min_rate = 200;
  uint64_t min_bytes_rate = 1 << 20;  // 1 MiB/s: 100 items/s of 10 KB
  int max_batch = 32;           // the guard's ceiling on a batch (never above --batch): a short burst
  int min_batch = 4;            // a one-key batch makes the dump round-trip bound: far below the rate floor
  int start_batch = 32;
  uint64_t max_batch_bytes = 64 << 10;  // the workers' own target per batch is 1 MiB (worker.cc)
  uint64_t min_batch_bytes = 8 << 10;
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
  uint64_t rate_before_cut_ = 0;  // the items/s limit before the first cut not yet made good
};

}  // namespace cachewarm
