// The adaptive pace (source_guard.h): the controller driven by scripted probe latencies, no clock.
#include <gtest/gtest.h>

#include "options.h"
#include "rate_limiter.h"
#include "source_guard.h"

namespace cachewarm {
namespace {

PaceSettings Settings() {
  PaceSettings s;
  s.target_ratio = 1.5;
  s.slack_us = 100;
  s.start_rate = 50000;
  s.min_rate = 1000;
  s.max_batch = 500;
  s.min_batch = 4;
  s.start_batch = 50;
  s.crawl_sleep_floor_us = 100;
  s.crawl_sleep_max_us = 20000;
  s.hold_windows = 2;
  s.backing_off_windows = 10;
  return s;
}

TEST(PaceController, ThresholdIsBaselineTimesTargetPlusSlack) {
  PaceController c(Settings());
  c.Calibrate(200);
  EXPECT_EQ(c.threshold_us(), 400);
}

TEST(PaceController, SlowStartGrowsWithWhatIsUsedThenBacksOff) {
  PaceController c(Settings());
  c.Calibrate(100);
  EXPECT_EQ(c.state().rate, 50000u);
  EXPECT_EQ(c.state().batch, 50);
  // Quiet probes, workers using the whole limit: x1.5 per window, batch +25%.
  c.Update(120, 50000);
  EXPECT_EQ(c.state().rate, 75000u);
  EXPECT_EQ(c.state().batch, 62);
  // A limit far above the achieved rate does not grow further (1.5 x achieved).
  c.Update(120, 60000);
  EXPECT_EQ(c.state().rate, 90000u);
  EXPECT_TRUE(c.slow_start());
  EXPECT_FALSE(c.state().backing_off);
  // Congested (probe above 250 us): rate x0.7 from what was achieved, batch halved, crawl sleep up.
  c.Update(900, 90000);
  EXPECT_EQ(c.state().rate, 63000u);
  EXPECT_EQ(c.state().batch, 38);
  EXPECT_EQ(c.state().crawl_sleep_us, 200u);
  EXPECT_EQ(c.state().backoffs, 1u);
  EXPECT_TRUE(c.state().backing_off);
  EXPECT_FALSE(c.slow_start());
  EXPECT_EQ(c.state().lowest_rate, 63000u);
}

TEST(PaceController, HoldsAfterABackOffAndRecoversAdditively) {
  PaceController c(Settings());
  c.Calibrate(100);
  c.Update(900, 50000);  // back off: 35000
  EXPECT_EQ(c.state().rate, 35000u);
  // Still congested for the hold windows: no second cut (the first has not taken effect yet).
  c.Update(900, 35000);
  EXPECT_EQ(c.state().rate, 35000u);
  EXPECT_EQ(c.state().backoffs, 1u);
  c.Update(900, 35000);
  EXPECT_EQ(c.state().backoffs, 2u);
  EXPECT_EQ(c.state().rate, 24500u);
  // Quiet again: additive increase (a tenth of the rate, at least min_rate, at least 1/20 of the
  // best achieved), not x1.5.
  c.Update(100, 24500);
  EXPECT_EQ(c.state().rate, 24500u + 2500u);
  EXPECT_TRUE(c.state().backing_off);
  for (int i = 0; i < 10; i++) c.Update(100, c.state().rate);
  EXPECT_FALSE(c.state().backing_off);
}

TEST(PaceController, OneNoisyWindowDoesNotBackOffWhenTwoMustConfirm) {
  PaceSettings s = Settings();
  s.confirm_windows = 2;
  PaceController c(s);
  c.Calibrate(100);  // threshold 250 us
  c.Update(900, 50000);  // congested once: neither a cut nor growth
  EXPECT_EQ(c.state().rate, 50000u);
  EXPECT_EQ(c.state().backoffs, 0u);
  EXPECT_EQ(c.state().congested_windows, 1u);
  c.Update(100, 50000);  // quiet: the run of congested windows starts over
  EXPECT_EQ(c.state().rate, 75000u);
  c.Update(900, 75000);
  EXPECT_EQ(c.state().backoffs, 0u);
  c.Update(900, 75000);  // the second in a row: back off
  EXPECT_EQ(c.state().backoffs, 1u);
  EXPECT_EQ(c.state().rate, 52500u);
  // Far above the threshold (4x) or no answer at all: at once.
  PaceController d(s);
  d.Calibrate(100);
  d.Update(1001, 50000);
  EXPECT_EQ(d.state().backoffs, 1u);
  PaceController e(s);
  e.Calibrate(100);
  e.Update(-1, 50000);
  EXPECT_EQ(e.state().backoffs, 1u);
}

TEST(PaceController, NeverBelowTheFloorsNorAboveTheCeilings) {
  PaceSettings s = Settings();
  s.max_rate = 60000;
  PaceController c(s);
  c.Calibrate(10);
  for (int i = 0; i < 200; i++) c.Update(-1, c.state().rate);  // no probe answered: congested
  EXPECT_EQ(c.state().rate, 1000u);
  EXPECT_EQ(c.state().batch, 4);
  EXPECT_EQ(c.state().crawl_sleep_us, 20000u);
  for (int i = 0; i < 500; i++) c.Update(10, c.state().rate);
  EXPECT_EQ(c.state().rate, 60000u);
  EXPECT_EQ(c.state().batch, 500);
  EXPECT_EQ(c.state().crawl_sleep_us, 100u);  // the server's own setting, never faster
}

TEST(PaceController, CongestionWithoutFetchingPacesOnlyTheCrawl) {
  PaceController c(Settings());
  c.Calibrate(100);
  // The workers fetch nothing (the listing of a recency-ordered dump runs alone).
  c.Update(900, 0);
  EXPECT_EQ(c.state().rate, 50000u);
  EXPECT_EQ(c.state().batch, 50);
  EXPECT_EQ(c.state().crawl_sleep_us, 200u);
  EXPECT_EQ(c.state().backoffs, 1u);
}

TEST(PaceController, StaticCeilingStartsBelowTheDefault) {
  PaceSettings s = Settings();
  s.max_rate = 2000;
  PaceController c(s);
  EXPECT_EQ(c.state().rate, 2000u);
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
}

Status Parse(std::vector<std::string> args, Options* o) {
  args.insert(args.begin(), "cachewarm-dump");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(&a[0]);
  argv.push_back(nullptr);
  return ParseOptions(int(args.size()), argv.data(), o);
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
