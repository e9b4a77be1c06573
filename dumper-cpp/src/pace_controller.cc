#include "pace_controller.h"

#include <algorithm>

namespace cachewarm {

namespace {
uint64_t Ceil(uint64_t v, uint64_t ceiling) { return ceiling ? std::min(v, ceiling) : v; }
}  // namespace

PaceController::PaceController(const PaceSettings& s) : s_(s) {
  s_.min_batch = std::max(1, std::min(s_.min_batch, s_.max_batch));
  s_.min_batch_bytes = std::min(s_.min_batch_bytes, s_.max_batch_bytes);
  st_.batch = std::clamp(s_.start_batch, s_.min_batch, s_.max_batch);
  st_.rate = Ceil(std::max(s_.start_rate, s_.min_rate), s_.max_rate);
  st_.bytes_rate = s_.max_bytes_rate;  // no byte limit of its own until the first back-off
  st_.batch_bytes = s_.max_batch_bytes;
  rate_before_cut_ = st_.rate;
  st_.crawl_sleep_us = s_.crawl_sleep_floor_us;
}

void PaceController::BackOff(uint64_t achieved_rate, uint64_t achieved_bytes_rate) {
  peak_rate_ = std::max(peak_rate_, achieved_rate);
  peak_bytes_ = std::max(peak_bytes_, achieved_bytes_rate);
  // Workers that fetched nothing (the listing runs alone): only the crawl's pace can be what hurts.
  const bool fetching = achieved_rate > 0;
  const uint64_t limit_before = st_.rate ? st_.rate : achieved_rate;
  st_.crawl_sleep_us = std::min(s_.crawl_sleep_max_us, std::max<uint32_t>(st_.crawl_sleep_us * 2, 100));
  st_.crawl_sleep_us = std::max(st_.crawl_sleep_us, s_.crawl_sleep_floor_us);
  st_.backoffs++;
  if (!fetching) return;  // the listing alone does not end slow start: the fetches have not been tried
  // Slow start ends with a cut of workers that were running at their pace. Workers starved by the
  // listing (recency order: the first keys trickle in) fetched far below it: that tells nothing of
  // the rate the source can bear.
  if (achieved_rate * 2 >= limit_before) slow_start_ = false;
  // Bursts first: while a batch can still be halved, the rates stay (a shorter burst costs little
  // speed and takes away most of the harm).
  if (st_.batch > s_.min_batch || st_.batch_bytes > s_.min_batch_bytes) {
    st_.batch = std::max(s_.min_batch, st_.batch / 2);
    st_.batch_bytes = std::max(s_.min_batch_bytes, st_.batch_bytes / 2);
    return;
  }
  // Never below a tenth of the best the workers did (nor the absolute floors): by then a batch is
  // four keys or 8 KiB, the bursts are gone, and a source still slow is slow for another reason (on a
  // busy 2-core host, cut after cut for its own noise held a smoke run at 200 items/s, 0.04x).
  const uint64_t floor = std::max(s_.min_rate, peak_rate_ / 10);
  const uint64_t bytes_floor = std::max(s_.min_bytes_rate, peak_bytes_ / 10);
  // The limit to make good before the batches grow again (the first of a run of cuts sets it).
  if (st_.rate >= rate_before_cut_) rate_before_cut_ = std::max(st_.rate, achieved_rate);
  // From what was fetched, but one cut goes at most to a quarter of the limit (x0.7): a second in
  // which a busy host stalled everything read as "fetching almost nothing" and sent the limit to
  // the floor, a minute from where it was (smoke runs: 0.06x). Deeper takes another cut.
  const uint64_t from = std::min(st_.rate, std::max(achieved_rate, st_.rate / 4));
  st_.rate = Ceil(std::max<uint64_t>(floor, from * 7 / 10), s_.max_rate);
  // No bytes/s measured (0): the byte limit, if any, is cut from itself.
  const uint64_t bytes_from = achieved_bytes_rate == 0 ? st_.bytes_rate
                              : st_.bytes_rate ? std::min(st_.bytes_rate, std::max(achieved_bytes_rate, st_.bytes_rate / 4))
                                               : std::max(achieved_bytes_rate, peak_bytes_ / 4);
  if (bytes_from) st_.bytes_rate = Ceil(std::max<uint64_t>(bytes_floor, bytes_from * 7 / 10), s_.max_bytes_rate);
  st_.lowest_rate = st_.lowest_rate ? std::min(st_.lowest_rate, st_.rate) : st_.rate;
  st_.lowest_bytes_rate = st_.lowest_bytes_rate ? std::min(st_.lowest_bytes_rate, st_.bytes_rate) : st_.bytes_rate;
}

void PaceController::Grow(uint64_t achieved_rate, uint64_t achieved_bytes_rate) {
  peak_rate_ = std::max(peak_rate_, achieved_rate);
  peak_bytes_ = std::max(peak_bytes_, achieved_bytes_rate);
  st_.crawl_sleep_us = std::max(st_.crawl_sleep_us * 3 / 4, s_.crawl_sleep_floor_us);
  // A cut rate that still binds (the workers fetch at 80% of it or more) grows back first.
  const bool rates_first =
      (st_.rate && st_.rate < rate_before_cut_ && achieved_rate * 5 >= st_.rate * 4) ||
      (st_.bytes_rate && st_.bytes_rate != s_.max_bytes_rate && achieved_bytes_rate * 5 >= st_.bytes_rate * 4);
  // Grow, but not far past what is used: a limit far above the achieved rate means nothing, and
  // jumping back from it is one burst.
  const uint64_t cap_by_use = std::max<uint64_t>(s_.start_rate, achieved_rate * 3 / 2);
  // A fifth of the rate per clean window, at least a fifth of the start rate: a cut (x0.7) is made
  // good in two clean seconds. Slower (a tenth, TCP-like) let the noise of a busy host — cuts for
  // windows the dump did not spoil — hold the dump near its floor (a smoke run on 2 loaded cores:
  // 1,215 items/s); a step of a fifth of a low cut took 16 s back to 100k items/s.
  const uint64_t step = std::max({s_.min_rate, st_.rate / 5, peak_rate_ / 20, s_.start_rate / 5});
  uint64_t next = slow_start_ ? st_.rate * 3 / 2 : st_.rate + step;
  st_.rate = Ceil(std::max(st_.rate, std::min(next, cap_by_use)), s_.max_rate);
  if (st_.bytes_rate && st_.bytes_rate != s_.max_bytes_rate) {
    const uint64_t bstep = std::max({s_.min_bytes_rate, st_.bytes_rate / 5, peak_bytes_ / 20});
    const uint64_t bcap = std::max<uint64_t>(s_.min_bytes_rate, achieved_bytes_rate * 3 / 2);
    uint64_t b = std::max(st_.bytes_rate, std::min(st_.bytes_rate + bstep, bcap));
    // At the static ceiling (or, with none, half again the most ever fetched): no byte limit of our own.
    if (s_.max_bytes_rate ? b >= s_.max_bytes_rate : (peak_bytes_ && b >= peak_bytes_ * 3 / 2)) b = s_.max_bytes_rate;
    st_.bytes_rate = b;
  }
  if (rates_first) return;
  // Then the bursts (x1.5 up to their ceiling of a few dozen keys): with batches this short the
  // workers are round-trip bound, so a halved batch is about half the speed (bench: batches of 10-16
  // fetched 70-86k items/s, of 22-27 130-160k); x1.25 took five clean seconds to come back.
  st_.batch = std::min(s_.max_batch, st_.batch + std::max(1, st_.batch / 2));
  st_.batch_bytes = std::min(s_.max_batch_bytes, st_.batch_bytes + std::max<uint64_t>(s_.min_batch_bytes, st_.batch_bytes / 2));
}

}  // namespace cachewarm
