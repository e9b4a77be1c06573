// When the adaptive guard backs off, and what it reports: the decisions of source_guard.h, pure
// (every call carries the time, in microseconds on any monotonic clock: tests drive it with a fake
// clock and scripted probe latencies).
//
// The signal is the tail a live client feels. Probes are open-loop (probe_conns.h): one falls due
// every probe interval whatever happened to the last, and its latency counts from when it was due,
// so a stall of D ms shows in every probe due during it, as in a client sending on its own clock.
// A window (1 s: long enough that its p99 is not its maximum) is congested when more than 1% of
// the probes it should hold were slower than the threshold — its p99 is above it — counted as they
// come, so a back-off does not wait for the window's end, and together with the window before
// (evidence_windows): bursts add up wherever they fall in those 2 s (no "twice in a row" to slip
// through), and one noisy second alone must be twice as bad. Probes still unanswered count at their
// age so far: a server thread that answers nothing is the worst case, not a missing sample.
// The threshold is the baseline's p99 x --adaptive-target (at least baseline + min_slack_us). The
// baseline is the probes' p99 with no dump: measured before the dump, then again in a quiet window
// every recalibrate_every_us (the workers paused: RateLimiter::set_paused) — sooner while the guard
// keeps cutting — the median of the last few: it follows the source's own load, and one noisy quiet
// window moves it only halfway.
// A back-off is followed by a settle time (the batches in flight finish) in which slow probes are
// reported but do not back off again; growth needs a whole clean window — except in slow start
// (before the first back-off), which grows every quarter window while no probe at all was slow.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "latency_histogram.h"
#include "pace_controller.h"

namespace cachewarm {

struct GuardConfig {
  int64_t probe_interval_us = 2000;
  int64_t window_us = 1000000;
  double tail_percentile = 99;            // the statistic: congested when its value > threshold
  // The slow probes of the open window and the one before it count together: a 2-s span's p99. One
  // noisy second (another process on the core) must be twice as bad to cut alone; bursts that come
  // less often than every 2 s are not what the p99 of a window can see anyway.
  int evidence_windows = 2;
  double target_ratio = 1.5;              // --adaptive-target
  int64_t min_slack_us = 50;              // threshold >= baseline + this (same-host probes vary by tens of us)
  int64_t settle_us = 200000;             // after a back-off or a pause begins
  int64_t recalibrate_every_us = 30000000;
  // Sooner when the guard keeps cutting: after this many back-offs since the last quiet window (at
  // most one every min_quiet_spacing_us), is the source slow with no dump as well? Then the baseline
  // was too low (a lucky calibration on a busy host) and the dump is not to blame.
  uint64_t remeasure_after_backoffs = 3;
  int64_t min_quiet_spacing_us = 5000000;
  int64_t quiet_us = 1000000;             // a quiet window: settle_us, then the rest measures the baseline
  size_t baseline_samples = 5;            // the baseline: median of the last this many quiet p99s
  int64_t backed_off_us = 5000000;        // "backing off" for this long after a back-off
};

// A window's verdict, kept for the tests and the report.
struct WindowStats {
  uint64_t probes = 0, slow = 0;
  int64_t p99_us = -1;
};

// The harm report (DONE's source_protection): the probes with no dump (the calibration and the
// quiet windows) and during the dump (everything else), and what the guard did.
struct HarmReport {
  int64_t before_p50_us = -1, before_p99_us = -1;    // with no dump (calibration + quiet windows)
  int64_t during_p50_us = -1, during_p99_us = -1;    // all probes while dumping
  int64_t during_window_p99_median_us = -1;          // the median of the 1-s windows' p99s
  int64_t during_max_us = -1;
  uint64_t probes_before = 0, probes_during = 0;
  int64_t baseline_us = 0, threshold_us = 0;         // at the end
  uint64_t windows = 0, congested_windows = 0, recalibrations = 0;
  int64_t backed_off_ms = 0, paused_ms = 0;
};

class GuardCore {
 public:
  GuardCore(const GuardConfig& c, const PaceSettings& s);
  // The probes of the calibration before the dump (their latencies from due time, in the order they
  // fell due). The baseline: the median of the p99s of its quarters — one hiccup of a busy host in
  // that half second does not make the baseline (the quiet windows refine it later).
  void Calibrate(const std::vector<int64_t>& probe_us);
  // The dump begins (items, bytes: the workers' counters now).
  void Start(int64_t now_us, uint64_t items, uint64_t bytes);
  // A probe answered, `latency_us` after it fell due.
  void OnProbe(int64_t now_us, int64_t latency_us);
  // Every probe interval or so: the probes still unanswered (their ages), the workers' counters.
  // Decides; returns true when the pace or the pause changed (the caller applies pace()/paused()).
  bool Tick(int64_t now_us, uint64_t items, uint64_t bytes, const std::vector<int64_t>& unanswered_ages_us);
  // The dump ended: closes the time accounts.
  void Finish(int64_t now_us);

  const PaceState& pace() const { return controller_.state(); }
  bool paused() const { return paused_; }
  bool backing_off(int64_t now_us) const;
  int64_t baseline_us() const { return baseline_us_; }
  int64_t threshold_us() const;
  const WindowStats& last_window() const { return last_; }
  uint64_t windows() const { return windows_; }
  HarmReport Report() const;

 private:
  void OpenWindow(int64_t now_us, uint64_t items, uint64_t bytes);
  // The workers' counters over the last second (fetches paused excluded): what a cut starts from.
  void Trail(int64_t now_us, uint64_t items, uint64_t bytes);
  void Achieved(int64_t now_us, uint64_t items, uint64_t bytes, uint64_t* rate, uint64_t* bytes_rate) const;
  void Rebaseline(int64_t p99_us);
  uint64_t AllowedSlow() const;

  GuardConfig c_;
  PaceController controller_;
  int64_t baseline_us_ = 0;
  std::deque<int64_t> baseline_samples_;
  // The open window.
  int64_t win_start_ = 0, ignore_until_ = 0;
  int64_t last_grow_ = 0;
  int64_t rate_from_ = 0;  // achieved rates count from here (the window's start or the last back-off)
  uint64_t win_items_ = 0, win_bytes_ = 0, slow_ = 0, win_slow_ = 0;
  uint64_t prev_slow_ = 0;  // the slow probes counted in the window before (0 after a back-off or a pause)
  LatencyHistogram win_;
  bool clean_ = true;  // no back-off in this window
  struct Sample {
    int64_t t;
    uint64_t items, bytes;
  };
  std::deque<Sample> trail_;
  // Quiet windows (the baseline), and the time accounts.
  bool paused_ = false;
  int64_t last_quiet_ = 0, pause_start_ = 0, paused_us_ = 0;
  uint64_t backoffs_at_quiet_ = 0;  // the controller's back-offs when the last quiet window ended
  int64_t last_backoff_ = -1, backed_off_us_ = 0, backed_off_from_ = -1;
  bool finished_ = false;
  int64_t last_now_ = 0;
  // The report.
  LatencyHistogram before_, during_;
  std::vector<int64_t> window_p99s_;
  uint64_t windows_ = 0, congested_ = 0, recalibrations_ = 0;
  WindowStats last_;
};

}  // namespace cachewarm
