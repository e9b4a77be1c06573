#include "server_clock.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <utility>

namespace cachewarm {
namespace {

// A server whose clock lags this host's by 0.4 s (the usual case) and one 0.3 s ahead (memcached's
// process_started and its monotonic start are rounded separately: beta lies anywhere in (-1, 1)).
TEST(ServerClock, LaggingServer) {
  const ServerClock c{-0.412, -0.409};
  EXPECT_EQ(c.TimeAtMost(1000.5), 1000);  // floor(1000.088)
  EXPECT_EQ(c.TimeAtMost(1000.3), 999);
  EXPECT_EQ(c.MillisAtLeast(), -409);
  EXPECT_EQ(c.WholeAhead(), 0);
  EXPECT_NEAR(c.DroppedFraction(), 0.409, 1e-9);
  // An item ending at server time E ends at this host's E - beta >= (E - WholeAhead) + fraction.
  const double e = 2000, end_here = e - (-0.41);
  EXPECT_LE(double(e - c.WholeAhead()) + c.DroppedFraction(), end_here);
  EXPECT_GT(double(e - c.WholeAhead()) + c.DroppedFraction(), end_here - 0.01);
}

TEST(ServerClock, ServerAhead) {
  const ServerClock c{0.257, 0.259};
  EXPECT_EQ(c.TimeAtMost(1000.8), 1001);
  EXPECT_EQ(c.MillisAtLeast(), 259);
  EXPECT_EQ(c.WholeAhead(), 1);
  EXPECT_NEAR(c.DroppedFraction(), 0.741, 1e-9);
  const double e = 2000, end_here = e - 0.258;
  EXPECT_LE(double(e - c.WholeAhead()) + c.DroppedFraction(), end_here);
}

TEST(ServerClock, WholeSecondsAndTheFractionAgreeWithTheHeadersMilliseconds) {
  // The populator recovers the fraction from source_clock_ms alone: ceil(ms / 1000) - ms / 1000.
  for (double hi : {-1.5004, -1.0, -0.9991, -0.0001, 0.0, 0.0004, 0.999, 1.2}) {
    const ServerClock c{hi - 0.003, hi};
    const double ms = double(c.MillisAtLeast());
    EXPECT_EQ(double(c.WholeAhead()), std::ceil(ms / 1000.0)) << hi;
    EXPECT_NEAR(c.DroppedFraction(), std::ceil(ms / 1000.0) - ms / 1000.0, 1e-12) << hi;
    EXPECT_GE(c.DroppedFraction(), 0.0) << hi;
    EXPECT_LT(c.DroppedFraction(), 1.0) << hi;
  }
}

// A memcached whose `stats time` is floor(w + beta) at this host's wall time w, on a scripted clock:
// a reading costs `before` until the server reads its clock and `after` until the answer is in (a
// host that deschedules the reader after the server answered has a large `after`).
struct ScriptedServer {
  double beta, t;
  std::function<std::pair<double, double>(double)> cost;
  ClockSource Source() {
    ClockSource src;
    src.read = [this](int64_t* out) {
      const auto [before, after] = cost(t);
      t += before;
      *out = int64_t(std::floor(t + beta));
      t += after;
      return Status::OK();
    };
    src.wall = [this] { return t; };
    src.sleep = [this](double s) { t += s; };
    return src;
  }
};

std::pair<double, double> Quiet(double) { return {0.0005, 0.0005}; }

TEST(WatchClock, QuietHostBoundsTheOffsetToAFewMsWithinOneTick) {
  ScriptedServer s{-0.4123, 1e6 + 0.25, Quiet};
  ServerClock c;
  ASSERT_TRUE(WatchClock(s.Source(), &c).ok());
  EXPECT_LE(c.lo, s.beta);
  EXPECT_GE(c.hi, s.beta);
  EXPECT_LE(c.hi - c.lo, 0.004);
  EXPECT_LE(s.t - (1e6 + 0.25), 1.0);
}

TEST(WatchClock, AWideFirstTickIsWatchedAgainAndTheTightOneKept) {
  const double start = 1e6 + 0.25;
  // Descheduled for 300 ms after each answer during the first second (the first tick falls there).
  ScriptedServer s{-0.4123, start, [start](double w) {
                     return w < start + 1.0 ? std::pair<double, double>{0.0005, 0.3} : Quiet(w);
                   }};
  ServerClock c;
  ASSERT_TRUE(WatchClock(s.Source(), &c).ok());
  EXPECT_LE(c.lo, s.beta);
  EXPECT_GE(c.hi, s.beta);
  EXPECT_LE(c.hi - c.lo, kClockTightS);
  EXPECT_GT(s.t - start, 1.0);
  EXPECT_LE(s.t - start, 2.2);
}

TEST(WatchClock, AHostAlwaysSlowKeepsTheTightestBoundAndGivesUpInTime) {
  const double start = 1e6 + 0.9;
  ScriptedServer s{0.2571, start, [](double) { return std::pair<double, double>{0.001, 0.05}; }};
  ServerClock c;
  ASSERT_TRUE(WatchClock(s.Source(), &c).ok());
  EXPECT_LE(c.lo, s.beta);
  EXPECT_GE(c.hi, s.beta);
  EXPECT_GT(c.hi - c.lo, kClockTightS);
  EXPECT_LE(c.hi - c.lo, 0.11);  // two readings and a pause
  EXPECT_LE(s.t - start, kClockPatienceS + 0.11);
}

TEST(WatchClock, TheBoundAlwaysHoldsTheTrueOffset) {
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < 50; ++i) {
    ScriptedServer s{-1.9 + 2.89 * u(rng), 1e6 + u(rng), [&](double) {
                       const bool slow = u(rng) < 0.2;
                       return std::pair<double, double>{0.002 * u(rng), (slow ? 0.4 : 0.002) * u(rng)};
                     }};
    ServerClock c;
    ASSERT_TRUE(WatchClock(s.Source(), &c).ok());
    EXPECT_LE(c.lo, s.beta) << i;
    EXPECT_GE(c.hi, s.beta) << i;
  }
}

TEST(WatchClock, AFailedReadingFailsTheMeasurement) {
  ClockSource src;
  int n = 0;
  double t = 1e6;
  src.read = [&](int64_t* out) {
    *out = 5;
    return ++n < 3 ? Status::OK() : Status::IOError("connection closed");
  };
  src.wall = [&] { return t; };
  src.sleep = [&](double s) { t += s; };
  ServerClock c;
  EXPECT_FALSE(WatchClock(src, &c).ok());
}

}  // namespace
}  // namespace cachewarm
