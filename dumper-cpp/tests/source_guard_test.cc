// The adaptive guard (source_guard.h): its decisions on a fake clock with scripted probe latencies.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "options.h"
#include "rate_limiter.h"
#include "guard_core.h"
#include "latency_histogram.h"
#include "pace_controller.h"
#include "source_guard.h"

namespace cachewarm {
namespace {

// A dump under the guard, on a fake clock: a probe falls due every probe interval and is answered
// with the latency the test scripts; the workers fetch at the guard's pace, up to what they could do
// unthrottled (`capacity` items/s of `value_bytes`), nothing while it pauses.
struct Sim {
  GuardConfig cfg;
  GuardCore core;
  int64_t now = 0;
  uint64_t items = 0, bytes = 0;
  uint64_t capacity = 400000, value_bytes = 1000;
  uint64_t fetching_from_us = 0;  // before this, the listing runs alone: no fetches
  std::vector<int64_t> unanswered;

  explicit Sim(const GuardConfig& c = GuardConfig(), const PaceSettings& s = PaceSettings()) : cfg(c), core(c, s) {
    core.Calibrate(std::vector<int64_t>(500, 100));  // a quiet source: p99 100 us
    core.Start(now, items, bytes);
  }
  uint64_t Rate() const {
    if (core.paused() || uint64_t(now) < fetching_from_us) return 0;
    uint64_t r = core.pace().rate ? std::min(core.pace().rate, capacity) : capacity;
    if (core.pace().bytes_rate) r = std::min(r, core.pace().bytes_rate / value_bytes);
    return r;
  }
  template <class F>
  void Run(int64_t us, F latency) {
    for (const int64_t end = now + us; now < end;) {
      now += cfg.probe_interval_us;
      const uint64_t n = Rate() * uint64_t(cfg.probe_interval_us) / 1000000;
      items += n;
      bytes += n * value_bytes;
      core.OnProbe(now, latency(now));
      core.Tick(now, items, bytes, unanswered);
    }
  }
  void Quiet(int64_t us) {
    Run(us, [](int64_t) { return int64_t(100); });
  }
};

int64_t Probe(int64_t t) { return t / 2000; }  // the probe's number

// Batches already at their floor: every back-off cuts the rates (the tests of how a rate is cut).
PaceSettings RatesOnly() {
  PaceSettings p;
  p.min_batch = p.max_batch;
  p.min_batch_bytes = p.max_batch_bytes;
  return p;
}

TEST(GuardCore, ThresholdIsTheBaselineTailTimesTargetWithASmallSlack) {
  Sim s;
  EXPECT_EQ(s.core.baseline_us(), 100);
  EXPECT_EQ(s.core.threshold_us(), 150);
  GuardConfig c;
  c.target_ratio = 1.2;
  Sim t(c);
  EXPECT_EQ(t.core.threshold_us(), 150);  // 120 is within the probes' own noise: baseline + 50 us
}

TEST(GuardCore, OneHiccupBeforeTheDumpDoesNotMakeTheBaseline) {
  // A busy host stalls the probes for 30 ms in the calibration's second quarter: the p99 of the
  // whole half second would be 30 ms (a guard blind to everything below 45 ms); its quarters' lower
  // median is the source's.
  GuardCore c{GuardConfig(), PaceSettings()};
  std::vector<int64_t> probes(500, 100);
  for (int i = 0; i < 30; i++) probes[size_t(150 + i)] = 30000 - i * 1000;
  c.Calibrate(probes);
  EXPECT_EQ(c.baseline_us(), 100);
  EXPECT_EQ(c.Report().probes_before, 500u);
  EXPECT_EQ(c.Report().before_p99_us, 25000);  // the report keeps what was seen
}

TEST(GuardCore, TailOnlyHarmBacksOff) {
  // 2% of the probes slow, the rest as before the dump: the median and the p90 do not move (the
  // old guard's signal), the p99 does — over the 2-s evidence span, early in the second second.
  Sim s;
  s.Run(1000000, [](int64_t t) { return Probe(t) % 50 == 0 ? int64_t(400) : int64_t(100); });
  EXPECT_EQ(s.core.pace().backoffs, 0u);  // 10 of 500: p99 at the threshold, not above
  s.Run(100000, [](int64_t t) { return Probe(t) % 50 == 0 ? int64_t(400) : int64_t(100); });
  EXPECT_GE(s.core.pace().backoffs, 1u);
  EXPECT_TRUE(s.core.backing_off(s.now));
  EXPECT_EQ(s.core.Report().during_p50_us, 100);
}

TEST(GuardCore, OneSlowProbeInTwoHundredIsWithinTheTarget) {
  Sim s;
  s.Run(5000000, [](int64_t t) { return Probe(t) % 200 == 0 ? int64_t(900) : int64_t(100); });
  EXPECT_EQ(s.core.pace().backoffs, 0u);
  EXPECT_GT(s.core.pace().rate, 300000u);  // grew to what the workers can do
}

TEST(GuardCore, BurstsAddUpWithinAWindowWhereverTheyFall) {
  // Three slow probes every 300 ms, clean in between: no 100 ms window is more than 6% slow (the
  // old guard's p90 never moved); the fourth burst within the 2-s span crosses its p99.
  Sim s;
  s.Run(1500000, [](int64_t t) { return Probe(t) % 150 < 3 && Probe(t) > 10 ? int64_t(2000) : int64_t(100); });
  EXPECT_EQ(s.core.pace().backoffs, 1u);
  EXPECT_EQ(s.core.Report().congested_windows, 1u);
}

TEST(GuardCore, AStallCountsBeforeItsProbesAnswer) {
  // Open loop: a server thread that answers nothing leaves probes outstanding; their ages count.
  Sim s;
  s.Quiet(300000);
  const uint64_t before = s.core.pace().backoffs;
  for (int i = 1; i <= 11; i++) s.unanswered.push_back(200 + i * 2000);
  s.core.Tick(s.now + 1, s.items, s.bytes, s.unanswered);
  EXPECT_EQ(s.core.pace().backoffs, before + 1);
}

TEST(GuardCore, LargeValuesCutBatchBytesThenBytesPerSecond) {
  // 10 KB values: 4,000 items/s are 40 MB/s. The first cuts halve a batch's bytes (64 KiB: six
  // values; a burst is as long as its bytes, whatever its keys), then bytes/s.
  Sim s;
  s.capacity = 4000;
  s.value_bytes = 10000;
  s.Quiet(1000000);
  EXPECT_EQ(s.core.pace().batch_bytes, 64u << 10);
  EXPECT_EQ(s.core.pace().bytes_rate, 0u);  // no byte limit before a back-off
  const uint64_t rate = s.core.pace().rate;
  auto harm = [](int64_t t) { return Probe(t) % 10 == 0 ? int64_t(5000) : int64_t(100); };
  s.Run(300000, harm);
  ASSERT_EQ(s.core.pace().backoffs, 1u);
  EXPECT_EQ(s.core.pace().batch_bytes, 32u << 10);
  EXPECT_EQ(s.core.pace().batch, 16);
  EXPECT_EQ(s.core.pace().bytes_rate, 0u);  // the rates stay while a batch can be halved
  EXPECT_EQ(s.core.pace().rate, rate);
  while (s.core.pace().backoffs < 4) s.Run(100000, harm);
  EXPECT_EQ(s.core.pace().batch_bytes, 8u << 10);
  EXPECT_NEAR(double(s.core.pace().bytes_rate), 0.7 * 4000 * 10000, 0.05 * 4000 * 10000);
  // The items/s limit was far above the 4,000 fetched: its cut alone would not bind; the bytes/s does.
  EXPECT_GT(s.core.pace().rate, 4000u);
  EXPECT_LT(s.Rate(), 4000u);  // the workers really slow down
}

TEST(PaceController, BurstsAreHalvedBeforeAnyRateIsCut) {
  PaceController c{PaceSettings()};
  EXPECT_EQ(c.state().batch, 32);
  EXPECT_EQ(c.state().batch_bytes, 64u << 10);
  for (int i = 0; i < 3; i++) c.BackOff(100000, 100000000);
  EXPECT_EQ(c.state().batch, 4);
  EXPECT_EQ(c.state().batch_bytes, 8u << 10);
  EXPECT_EQ(c.state().rate, PaceSettings().start_rate);
  EXPECT_EQ(c.state().bytes_rate, 0u);
  EXPECT_EQ(c.state().crawl_sleep_us, 400u);  // the crawl slows with every back-off
  c.BackOff(100000, 100000000);  // the batches are at their floor: now the rates
  EXPECT_EQ(c.state().rate, 70000u);
  EXPECT_EQ(c.state().bytes_rate, 70000000u);
  // Growth: the rates first while the workers fetch at them (they bind), then the batches.
  c.Grow(70000, 70000000);
  EXPECT_EQ(c.state().rate, 90000u);  // + a fifth of the start rate
  int grows = 1;
  while (c.state().batch == 4) {
    ASSERT_LT(grows++, 10);
    c.Grow(std::min<uint64_t>(c.state().rate, 100000), std::min<uint64_t>(c.state().bytes_rate, 100000000));
  }
  // The batch grew only once the items/s limit was back above what the workers fetch and the byte
  // limit gone (or no longer reached), x1.5.
  EXPECT_GE(c.state().rate, 100000u);
  EXPECT_EQ(c.state().batch, 6);
}

TEST(GuardCore, SettlesAfterABackOffThenCutsAgainIfTheHarmGoesOn) {
  Sim s;
  auto harm = [](int64_t t) { return Probe(t) % 20 == 0 ? int64_t(1000) : int64_t(100); };
  s.Run(500000, harm);  // 5%: the 11th slow probe at 440 ms
  ASSERT_EQ(s.core.pace().backoffs, 1u);
  s.Run(190000, harm);  // the batches in flight finish: the next cut waits for the settle time
  EXPECT_EQ(s.core.pace().backoffs, 1u);
  s.Run(600000, harm);
  EXPECT_GE(s.core.pace().backoffs, 2u);
}

TEST(GuardCore, RecoveryIsAdditiveFromWholeCleanWindows) {
  Sim s(GuardConfig(), RatesOnly());
  s.Quiet(2000000);  // slow start to full speed
  const uint64_t full = s.core.pace().rate;
  EXPECT_GE(full, s.capacity);
  s.Run(300000, [](int64_t t) { return Probe(t) % 10 == 0 ? int64_t(1000) : int64_t(100); });
  ASSERT_EQ(s.core.pace().backoffs, 1u);
  const uint64_t cut = s.core.pace().rate;
  EXPECT_LT(cut, full);
  s.Quiet(700000);  // the rest of the window with the back-off: no growth
  EXPECT_EQ(s.core.pace().rate, cut);
  s.Quiet(1000000);  // one whole clean window: one additive step, not x1.5
  EXPECT_GT(s.core.pace().rate, cut);
  EXPECT_LT(s.core.pace().rate, cut * 3 / 2);
  EXPECT_TRUE(s.core.backing_off(s.now));
  s.Quiet(5000000);
  EXPECT_FALSE(s.core.backing_off(s.now));
  s.core.Finish(s.now);
  const HarmReport r = s.core.Report();
  EXPECT_EQ(r.backed_off_ms, 5000);
  EXPECT_EQ(r.congested_windows, 1u);
}

TEST(GuardCore, TheBaselineFollowsTheSourceInQuietWindows) {
  GuardConfig c;
  c.recalibrate_every_us = 10000000;
  Sim s(c);
  s.Quiet(10000000);
  ASSERT_TRUE(s.core.paused());
  EXPECT_EQ(s.Rate(), 0u);
  // The source's own clients got busier: 400 us with no dump.
  auto busier = [](int64_t) { return int64_t(400); };
  s.Run(1000000, busier);
  EXPECT_FALSE(s.core.paused());
  EXPECT_EQ(s.core.baseline_us(), 250);  // one quiet window of two: halfway
  EXPECT_EQ(s.core.threshold_us(), 375);
  // 400 us > 375: the guard cuts; after three cuts (and 5 s since the last quiet window) it asks
  // the source again rather than wait for the next scheduled quiet window.
  s.Run(7000000, busier);
  EXPECT_GE(s.core.pace().backoffs, 3u);
  EXPECT_EQ(s.core.baseline_us(), 400);
  EXPECT_EQ(s.core.threshold_us(), 600);
  const uint64_t cuts = s.core.pace().backoffs;
  s.Run(5000000, busier);  // the dump no longer takes the blame for the source's own load
  EXPECT_EQ(s.core.pace().backoffs, cuts);
  s.core.Finish(s.now);
  EXPECT_EQ(s.core.Report().recalibrations, 2u);
  EXPECT_GE(s.core.Report().paused_ms, 2000);
}

TEST(GuardCore, ACutRightAfterAPauseStartsFromTheLimitNotFromTheFloor) {
  // A few milliseconds after the workers resume, "what they fetched" means nothing: the cut is from
  // the limit (measured over less than a quarter second, it read as almost nothing: the floor).
  GuardConfig c;
  c.recalibrate_every_us = 3000000;
  Sim s(c, RatesOnly());
  s.Quiet(3000000);
  ASSERT_TRUE(s.core.paused());
  s.Quiet(1000000);
  ASSERT_FALSE(s.core.paused());
  const uint64_t limit = s.core.pace().rate;
  s.Run(30000, [](int64_t) { return int64_t(5000); });
  ASSERT_EQ(s.core.pace().backoffs, 1u);
  EXPECT_EQ(s.core.pace().rate, limit * 7 / 10);
}

TEST(GuardCore, TheListingsIdleTimeIsNotTheWorkersPace) {
  // The listing runs alone for 2 s, then the workers fetch 100,000 items/s; harm 0.6 s later: the
  // cut is from what they fetch (x0.7), not from a trailing second that was 40% idle (x0.6 of it).
  Sim s(GuardConfig(), RatesOnly());
  s.capacity = 100000;
  s.fetching_from_us = 2000000;
  s.Quiet(2600000);
  s.Run(40000, [](int64_t) { return int64_t(5000); });
  ASSERT_EQ(s.core.pace().backoffs, 1u);
  EXPECT_NEAR(double(s.core.pace().rate), 70000, 5000);
}

TEST(GuardCore, AStalledSecondDoesNotSendTheLimitToTheFloor) {
  // Everything stalls (the host, not the dump): the workers fetch almost nothing, the probes are
  // slow. One cut goes to a quarter of the limit at most, each further cut needs its own evidence.
  Sim s(GuardConfig(), RatesOnly());
  s.Quiet(3000000);
  const uint64_t limit = s.core.pace().rate;
  s.capacity = 1000;
  s.Run(1000000, [](int64_t) { return int64_t(100); });
  s.Run(30000, [](int64_t) { return int64_t(5000); });
  ASSERT_EQ(s.core.pace().backoffs, 1u);
  EXPECT_EQ(s.core.pace().rate, limit / 4 * 7 / 10);
}

TEST(GuardCore, TheListingAloneDoesNotEndSlowStart) {
  Sim s;
  s.fetching_from_us = 2000000;
  s.Run(500000, [](int64_t t) { return Probe(t) % 20 == 0 ? int64_t(1000) : int64_t(100); });
  EXPECT_EQ(s.core.pace().backoffs, 1u);
  EXPECT_EQ(s.core.pace().rate, PaceSettings().start_rate);  // not cut: nothing was fetched
  EXPECT_GT(s.core.pace().crawl_sleep_us, 0u);
  s.Quiet(3000000);
  EXPECT_GE(s.core.pace().rate, s.capacity);  // x1.5 steps once the fetches run
}

TEST(GuardCore, ACutOfWorkersStarvedByTheListingDoesNotEndSlowStart) {
  // Recency order: the first keys trickle in (10,000 items/s against a limit of 100,000) when the
  // listing makes the source slow. The cut says nothing of what the fetches can do: once the probes
  // are clean the rate comes back x1.5 per quarter second, not a fifth per second.
  Sim s(GuardConfig(), RatesOnly());
  s.capacity = 10000;
  s.Run(500000, [](int64_t t) { return Probe(t) % 20 == 0 ? int64_t(1000) : int64_t(100); });
  ASSERT_EQ(s.core.pace().backoffs, 1u);
  EXPECT_LE(s.core.pace().rate, 17500u);  // from a quarter of the limit at most (x0.7)
  s.capacity = 400000;  // the listing is done: the workers can fetch at full speed
  s.Quiet(3000000);
  EXPECT_GE(s.core.pace().rate, 100000u);
}

TEST(GuardCore, TheHarmReport) {
  Sim s;
  s.Run(4000000, [](int64_t t) { return Probe(t) % 200 == 0 ? int64_t(900) : int64_t(120); });
  s.core.Finish(s.now);
  const HarmReport r = s.core.Report();
  EXPECT_EQ(r.probes_before, 500u);
  EXPECT_EQ(r.before_p50_us, 100);
  EXPECT_EQ(r.before_p99_us, 100);
  EXPECT_EQ(r.probes_during, 2000u);
  EXPECT_EQ(r.during_p50_us, 120);
  EXPECT_EQ(r.during_p99_us, 120);
  EXPECT_EQ(r.during_max_us, 900);
  EXPECT_EQ(r.during_window_p99_median_us, 120);
  EXPECT_EQ(r.windows, 4u);
  EXPECT_EQ(r.backed_off_ms, 0);
}

TEST(PaceController, NeverBelowTheFloorsNorAboveTheCeilings) {
  PaceSettings s;
  s.max_rate = 60000;
  s.crawl_sleep_floor_us = 100;
  PaceController c(s);
  for (int i = 0; i < 200; i++) c.BackOff(c.state().rate, c.state().rate * 1000);
  // Items/s and bytes/s: a tenth of the best achieved (60,000 items/s, 60 MB/s); a batch: four keys,
  // 8 KiB — the bursts are what is cut to the bone.
  EXPECT_EQ(c.state().rate, 6000u);
  EXPECT_EQ(c.state().bytes_rate, 6000000u);
  EXPECT_EQ(c.state().batch, 4);
  EXPECT_EQ(c.state().batch_bytes, s.min_batch_bytes);
  PaceController d(PaceSettings{});
  for (int i = 0; i < 200; i++) d.BackOff(100, 100000);  // never faster than 100 items/s: the absolute floors
  EXPECT_EQ(d.state().rate, PaceSettings().min_rate);
  EXPECT_EQ(d.state().bytes_rate, PaceSettings().min_bytes_rate);
  EXPECT_EQ(c.state().crawl_sleep_us, 20000u);
  for (int i = 0; i < 2000; i++) c.Grow(c.state().rate, c.state().rate * 1000);
  EXPECT_EQ(c.state().rate, 60000u);
  EXPECT_EQ(c.state().batch, s.max_batch);
  EXPECT_EQ(c.state().batch_bytes, s.max_batch_bytes);
  EXPECT_EQ(c.state().bytes_rate, 0u);  // back to no byte limit of its own
  EXPECT_EQ(c.state().crawl_sleep_us, 100u);  // the server's own setting, never faster
}

TEST(PaceController, StaticCeilingStartsBelowTheDefault) {
  PaceSettings s;
  s.max_rate = 2000;
  PaceController c(s);
  EXPECT_EQ(c.state().rate, 2000u);
}

TEST(LatencyHistogram, Percentiles) {
  LatencyHistogram h;
  EXPECT_EQ(h.Percentile(99), -1);
  for (int i = 1; i <= 100; i++) h.Record(i);
  EXPECT_EQ(h.Percentile(50), 50);
  EXPECT_EQ(h.Percentile(99), 99);
  EXPECT_EQ(h.max(), 100);
  LatencyHistogram g;
  g.Record(123456);  // three significant digits above 1 ms
  g.Record(2500);
  EXPECT_EQ(g.Percentile(100), 123000);
  EXPECT_EQ(g.Percentile(50), 2500);
  h.Add(g);
  EXPECT_EQ(h.count(), 102u);
}

TEST(Percentile, OfAWindow) {
  EXPECT_EQ(Percentile({}, 90), -1);
  EXPECT_EQ(Percentile({5}, 90), 5);
  std::vector<int64_t> v;
  for (int i = 1; i <= 100; i++) v.push_back(101 - i);
  EXPECT_EQ(Percentile(v, 90), 91);
}

TEST(RateLimiter, SettableRateAndBatchCap) {
  RateLimiter r(0, 0);
  r.Acquire(1000000);  // unlimited: returns at once
  r.Charge(1 << 30);
  EXPECT_EQ(r.batch_cap(), 0);
  r.set_batch_cap(20);
  r.set_rate(5000);
  EXPECT_EQ(r.batch_cap(), 20);
  EXPECT_EQ(r.rate(), 5000u);
  RateLimiter b(0, 1 << 20);
  EXPECT_EQ(b.bytes_rate(), 1u << 20);
  b.set_bytes_rate(5000);
  b.set_batch_bytes_cap(1 << 14);
  EXPECT_EQ(b.bytes_rate(), 5000u);
  EXPECT_EQ(b.batch_bytes_cap(), 1u << 14);
  b.set_paused(true);
  EXPECT_TRUE(b.paused());
}

// A paused limiter holds Acquire until it is unpaused, and lets it go when it is (woken, not polled).
TEST(RateLimiter, APauseHoldsAcquireUntilUnpaused) {
  RateLimiter r(0, 0);
  r.set_paused(true);
  std::atomic<int> through{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < 4; i++)
    workers.emplace_back([&] {
      r.Acquire(10);
      through++;
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(through.load(), 0);
  r.set_paused(false);
  for (std::thread& t : workers) t.join();
  EXPECT_EQ(through.load(), 4);
  r.Acquire(10);  // not paused: returns at once
}

// Both limits set: the pace is the tighter of the two, not their sum. 100 batches of 10 items of
// 1,000 bytes under 2,000 items/s and 2 MB/s: each limit alone spaces them 5 ms apart, so the last
// may go 0.495 s after the first; one clock advanced by both (the old limiter) booked it at 0.99 s.
// Booked, not slept: no wall-clock timing in the test.
TEST(RateLimiter, TheTighterLimitBindsNotTheirSum) {
  RateLimiter r(2000, 2 * 1000 * 1000);
  const auto first = r.Reserve(10);
  r.Charge(10 * 1000);
  auto last = first;
  for (int i = 1; i < 100; i++) {
    last = r.Reserve(10);
    r.Charge(10 * 1000);
  }
  EXPECT_NEAR(std::chrono::duration<double>(last - first).count(), 0.495, 0.005);
  // Either limit alone: the same spacing.
  RateLimiter items(2000, 0), bytes(0, 2 * 1000 * 1000);
  auto a0 = items.Reserve(10), a = a0;
  auto b0 = bytes.Reserve(10), b = b0;
  bytes.Charge(10 * 1000);
  for (int i = 1; i < 100; i++) {
    a = items.Reserve(10);
    b = bytes.Reserve(10);
    bytes.Charge(10 * 1000);
  }
  EXPECT_NEAR(std::chrono::duration<double>(a - a0).count(), 0.495, 0.005);
  EXPECT_NEAR(std::chrono::duration<double>(b - b0).count(), 0.495, 0.005);
}

Status Parse(std::vector<std::string> args, Options* o) {
  args.insert(args.begin(), "cachewarm-dump");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(&a[0]);
  argv.push_back(nullptr);
  return ParseOptions(int(args.size()), argv.data(), o);
}

TEST(ProtectOptions, TheGuardsBatchesAreShortAndNeverAboveBatch) {
  Options o;
  ASSERT_TRUE(Parse({"--out", "/x", "--adaptive"}, &o).ok());
  const PaceSettings d = PaceSettingsOf(o);  // --batch 500 by default: the guard's own ceiling, 32
  EXPECT_EQ(d.max_batch, 32);
  EXPECT_EQ(d.start_batch, 32);
  EXPECT_EQ(d.max_batch_bytes, 64u << 10);
  EXPECT_EQ(PaceController(d).state().batch, 32);
  Options small;
  ASSERT_TRUE(Parse({"--out", "/x", "--adaptive", "--batch", "10"}, &small).ok());
  EXPECT_EQ(PaceSettingsOf(small).max_batch, 10);
  EXPECT_EQ(PaceController(PaceSettingsOf(small)).state().batch, 10);
}

TEST(ProtectOptions, FlagsAndDefaults) {
  Options o;
  ASSERT_TRUE(Parse({"--out", "/x"}, &o).ok());
  EXPECT_FALSE(o.adaptive);
  EXPECT_EQ(o.order, "recency");
  EXPECT_EQ(o.crawl_sleep_us, -1);
  Options a;
  ASSERT_TRUE(Parse({"--out", "/x", "--adaptive", "--adaptive-target", "2", "--max-bytes-per-second", "64M",
                     "--crawl-sleep-us", "500", "--order", "crawl"},
                    &a)
                  .ok());
  EXPECT_TRUE(a.adaptive);
  EXPECT_EQ(a.adaptive_target, 2.0);
  EXPECT_EQ(a.max_bytes_per_second, 64ULL << 20);
  EXPECT_EQ(a.crawl_sleep_us, 500);
  EXPECT_EQ(a.order, "crawl");
  Options lru;  // an LRU crawl cannot be ordered: crawl order
  ASSERT_TRUE(Parse({"--out", "/x", "--crawl", "all"}, &lru).ok());
  EXPECT_EQ(lru.order, "crawl");
  Options bad;
  EXPECT_NE(Parse({"--out", "/x", "--order", "hot"}, &bad).message().find("--order must be"), std::string::npos);
  EXPECT_NE(Parse({"--out", "/x", "--adaptive-target", "1"}, &bad).message().find("--adaptive-target 1 is out"),
            std::string::npos);
  EXPECT_NE(Parse({"--out", "/x", "--crawl-sleep-us", "2000000"}, &bad).message().find("--crawl-sleep-us"),
            std::string::npos);
}

}  // namespace
}  // namespace cachewarm
