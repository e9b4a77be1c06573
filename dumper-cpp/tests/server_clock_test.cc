#include "server_clock.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace cachewarm
