#include "guard_core.h"

#include <algorithm>
#include <cmath>

namespace cachewarm {

namespace {
uint64_t PerSecond(uint64_t n, int64_t us) { return us > 0 ? uint64_t(double(n) * 1e6 / double(us)) : 0; }
}  // namespace

GuardCore::GuardCore(const GuardConfig& c, const PaceSettings& s) : c_(c), controller_(s) {}

int64_t GuardCore::threshold_us() const {
  return std::max(int64_t(std::ceil(double(baseline_us_) * c_.target_ratio)), baseline_us_ + c_.min_slack_us);
}

uint64_t GuardCore::AllowedSlow() const {
  // The probes a window should hold, and how many of them may be above the threshold with the
  // window's tail percentile still below it.
  const double expected = double(c_.window_us) / double(std::max<int64_t>(1, c_.probe_interval_us));
  return uint64_t(std::floor(expected * (100.0 - c_.tail_percentile) / 100.0));
}

void GuardCore::Rebaseline(int64_t p99_us) {
  baseline_samples_.push_back(p99_us);
  while (baseline_samples_.size() > std::max<size_t>(1, c_.baseline_samples)) baseline_samples_.pop_front();
  std::vector<int64_t> v(baseline_samples_.begin(), baseline_samples_.end());
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  baseline_us_ = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void GuardCore::Calibrate(const std::vector<int64_t>& probe_us) {
  constexpr size_t kParts = 4;
  std::vector<int64_t> p99s;
  for (size_t k = 0; k < kParts; k++) {
    LatencyHistogram h;
    for (size_t i = k * probe_us.size() / kParts; i < (k + 1) * probe_us.size() / kParts; i++) h.Record(probe_us[i]);
    before_.Add(h);
    if (h.count() > 0) p99s.push_back(h.Percentile(c_.tail_percentile));
  }
  if (p99s.empty()) return;
  std::sort(p99s.begin(), p99s.end());
  const size_t n = p99s.size();
  Rebaseline(n % 2 ? p99s[n / 2] : (p99s[n / 2 - 1] + p99s[n / 2]) / 2);
}

void GuardCore::OpenWindow(int64_t now_us, uint64_t items, uint64_t bytes) {
  win_start_ = rate_from_ = now_us;
  win_items_ = items;
  win_bytes_ = bytes;
  slow_ = win_slow_ = 0;
  win_.Clear();
  clean_ = true;
}

void GuardCore::Trail(int64_t now_us, uint64_t items, uint64_t bytes) {
  if (trail_.empty() || now_us - trail_.back().t >= 50000) trail_.push_back({now_us, items, bytes});
  while (trail_.size() > 1 && now_us - trail_[1].t >= c_.window_us) trail_.pop_front();
  // Nothing fetched yet at the head (the listing ran alone, or the workers waited): not their pace.
  // Counted in, the first cut after the listing began from a fraction of the real rate (a smoke run:
  // five cuts to the floor, 0.04x of the unthrottled speed).
  while (trail_.size() > 1 && trail_[1].items == trail_.front().items) trail_.pop_front();
}

void GuardCore::Achieved(int64_t now_us, uint64_t items, uint64_t bytes, uint64_t* rate, uint64_t* bytes_rate) const {
  // A quarter second at least: right after a pause or at the start a few milliseconds between two
  // batches would read as "fetching nothing" and cut to the floor. Shorter: the limit itself is
  // what to cut from (when anything was fetched since the window or the last change began).
  const int64_t span = trail_.empty() ? 0 : now_us - trail_.front().t;
  if (span >= c_.window_us / 4) {
    *rate = PerSecond(items - trail_.front().items, span);
    *bytes_rate = PerSecond(bytes - trail_.front().bytes, span);
    return;
  }
  *rate = items > win_items_ ? controller_.state().rate : 0;
  *bytes_rate = 0;
}

void GuardCore::Start(int64_t now_us, uint64_t items, uint64_t bytes) {
  last_quiet_ = last_now_ = now_us;
  OpenWindow(now_us, items, bytes);
}

void GuardCore::OnProbe(int64_t now_us, int64_t latency_us) {
  if (finished_) return;
  if (paused_) {
    // A quiet window: once the batches in flight have finished, the source with no dump.
    if (now_us >= ignore_until_) {
      win_.Record(latency_us);
      before_.Record(latency_us);
    }
    return;
  }
  win_.Record(latency_us);
  during_.Record(latency_us);
  if (latency_us > threshold_us()) {
    win_slow_++;
    if (now_us >= ignore_until_) slow_++;
  }
}

bool GuardCore::backing_off(int64_t now_us) const {
  return last_backoff_ >= 0 && now_us - last_backoff_ < c_.backed_off_us;
}

bool GuardCore::Tick(int64_t now_us, uint64_t items, uint64_t bytes, const std::vector<int64_t>& unanswered_ages_us) {
  if (finished_) return false;
  last_now_ = now_us;
  if (paused_) {
    if (now_us - pause_start_ < c_.quiet_us) return false;
    if (win_.count() > 0) {
      Rebaseline(win_.Percentile(c_.tail_percentile));
      recalibrations_++;
    }
    paused_us_ += now_us - pause_start_;
    paused_ = false;
    last_quiet_ = now_us;
    backoffs_at_quiet_ = controller_.state().backoffs;
    OpenWindow(now_us, items, bytes);
    return true;
  }
  Trail(now_us, items, bytes);
  bool changed = false;
  if (now_us >= ignore_until_) {
    const int64_t threshold = threshold_us();
    uint64_t pending = 0;
    for (int64_t age : unanswered_ages_us) pending += age > threshold ? 1 : 0;
    if (slow_ + prev_slow_ + pending > AllowedSlow() * uint64_t(std::max(1, c_.evidence_windows))) {
      uint64_t rate = 0, bytes_rate = 0;
      Achieved(now_us, items, bytes, &rate, &bytes_rate);
      controller_.BackOff(rate, bytes_rate);
      if (clean_) congested_++;
      clean_ = false;
      // Time backed off: the union of [back-off, back-off + backed_off_us).
      if (last_backoff_ < 0 || now_us >= last_backoff_ + c_.backed_off_us) {
        if (backed_off_from_ >= 0) backed_off_us_ += last_backoff_ + c_.backed_off_us - backed_off_from_;
        backed_off_from_ = now_us;
      }
      last_backoff_ = now_us;
      ignore_until_ = now_us + c_.settle_us;
      slow_ = prev_slow_ = 0;
      rate_from_ = now_us;
      win_items_ = items;
      win_bytes_ = bytes;
      changed = true;
    }
  }
  // Slow start: from a cautious start to full speed in a second or two, not in a window per step.
  if (!changed && controller_.slow_start() && win_slow_ == 0 && now_us >= ignore_until_ &&
      now_us - std::max(last_grow_, rate_from_) >= c_.window_us / 4 && now_us - win_start_ < c_.window_us) {
    const int64_t span = now_us - rate_from_;
    controller_.Grow(PerSecond(items - win_items_, span), PerSecond(bytes - win_bytes_, span));
    last_grow_ = rate_from_ = now_us;
    win_items_ = items;
    win_bytes_ = bytes;
    changed = true;
  }
  if (now_us - win_start_ < c_.window_us) return changed;
  windows_++;
  const int64_t p99 = win_.Percentile(c_.tail_percentile);
  if (win_.count() > 0) window_p99s_.push_back(p99);
  last_ = WindowStats{win_.count(), win_slow_, p99};
  // Grow only from a whole clean window: no back-off in it and none settling into it.
  const bool settled = last_backoff_ < 0 || win_start_ - last_backoff_ >= c_.settle_us;
  if (clean_ && settled) {
    const int64_t span = now_us - rate_from_;
    controller_.Grow(PerSecond(items - win_items_, span), PerSecond(bytes - win_bytes_, span));
    last_grow_ = now_us;
    changed = true;
  }
  prev_slow_ = c_.evidence_windows > 1 ? slow_ : 0;
  const bool cutting = controller_.state().backoffs >= backoffs_at_quiet_ + c_.remeasure_after_backoffs &&
                       now_us - last_quiet_ >= c_.min_quiet_spacing_us;
  if (now_us - last_quiet_ >= c_.recalibrate_every_us || cutting) {
    prev_slow_ = 0;
    trail_.clear();  // the pause is not the workers' pace
    paused_ = true;
    pause_start_ = now_us;
    ignore_until_ = now_us + c_.settle_us;
    win_.Clear();
    return true;
  }
  OpenWindow(now_us, items, bytes);
  return changed;
}

void GuardCore::Finish(int64_t now_us) {
  if (finished_) return;
  last_now_ = now_us;
  // The last, partial window counts when it holds a quarter of a window's probes (a short dump may
  // have no whole window).
  const double expected = double(c_.window_us) / double(std::max<int64_t>(1, c_.probe_interval_us));
  if (!paused_ && double(win_.count()) >= expected / 4) window_p99s_.push_back(win_.Percentile(c_.tail_percentile));
  if (paused_) paused_us_ += now_us - pause_start_;
  paused_ = false;
  finished_ = true;
}

HarmReport GuardCore::Report() const {
  HarmReport r;
  r.before_p50_us = before_.Percentile(50);
  r.before_p99_us = before_.Percentile(c_.tail_percentile);
  r.during_p50_us = during_.Percentile(50);
  r.during_p99_us = during_.Percentile(c_.tail_percentile);
  r.during_max_us = during_.max();
  r.probes_before = before_.count();
  r.probes_during = during_.count();
  if (!window_p99s_.empty()) {
    std::vector<int64_t> v = window_p99s_;
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    r.during_window_p99_median_us = v[v.size() / 2];
  }
  r.baseline_us = baseline_us_;
  r.threshold_us = threshold_us();
  r.windows = windows_;
  r.congested_windows = congested_;
  r.recalibrations = recalibrations_;
  int64_t backed = backed_off_us_;
  if (backed_off_from_ >= 0) backed += std::min(last_backoff_ + c_.backed_off_us, last_now_) - backed_off_from_;
  r.backed_off_ms = backed / 1000;
  r.paused_ms = (paused_us_ + (paused_ ? last_now_ - pause_start_ : 0)) / 1000;
  return r;
}

}  // namespace cachewarm
