// Recency tiers (recency.h) and the metadump fields they read.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "crawler.h"
#include "recency.h"
#include "testutil.h"

namespace cachewarm {
namespace {

TEST(Recency, TierByAgeThenFetched) {
  const int64_t now = 1700000000;
  EXPECT_EQ(RecencyTier(now, now, true), 0);
  EXPECT_EQ(RecencyTier(now, now, false), 1);
  EXPECT_EQ(RecencyTier(now, now + 5, true), 0);  // clocks: the future is now
  EXPECT_EQ(RecencyTier(now, now - 1, true), 2);
  EXPECT_EQ(RecencyTier(now, now - 2, true), 6);
  EXPECT_EQ(RecencyTier(now, now - 3, true), 8);
  EXPECT_EQ(RecencyTier(now, now - 4, true), 10);
  EXPECT_EQ(RecencyTier(now, -1, false), 2 * kRecencyAges - 1);  // no la: oldest
  // Monotonic in age.
  int last = 0;
  for (int64_t age = 0; age < 100000000; age = age * 5 / 4 + 1) {
    const int t = RecencyTier(now, now - age, true);
    EXPECT_GE(t, last);
    EXPECT_LT(t, kRecencyTiers);
    last = t;
  }
}

TEST(Recency, EmitsMostRecentFirstKeepingCrawlOrderWithinATier) {
  TempDir d;
  const int64_t now = 1700000000;
  std::vector<std::string> got;
  {
    RecencyTiers t(d.path() + "/tiers", now);
    ASSERT_TRUE(t.Open().ok());
    ASSERT_TRUE(t.Add(Slice("cold1"), -1, now - 86400, false).ok());
    ASSERT_TRUE(t.Add(Slice("hot1"), 1700003600, now, true).ok());
    ASSERT_TRUE(t.Add(Slice("warm"), -1, now - 60, true).ok());
    ASSERT_TRUE(t.Add(Slice("hot2"), -1, now, true).ok());
    ASSERT_TRUE(t.Add(Slice("warm-unread"), -1, now - 60, false).ok());
    ASSERT_TRUE(t.Add(Slice("cold2"), -1, now - 86400, false).ok());
    std::vector<int64_t> exps;
    ASSERT_TRUE(t.Emit([&](const Slice& k, int64_t exp) {
                   got.push_back(k.ToString());
                   exps.push_back(exp);
                   return Status::OK();
                 })
                    .ok());
    EXPECT_EQ(exps[0], 1700003600);
    uint64_t total = 0;
    for (uint64_t c : t.counts()) total += c;
    EXPECT_EQ(total, 6u);
  }
  EXPECT_EQ(got, (std::vector<std::string>{"hot1", "hot2", "warm", "warm-unread", "cold1", "cold2"}));
  EXPECT_NE(system(("test -e '" + d.path() + "/tiers'").c_str()), 0);  // scratch removed
}

TEST(Recency, ManyKeysThroughSmallBuffers) {
  TempDir d;
  const int64_t now = 1700000000;
  RecencyTiers t(d.path() + "/tiers", now);
  ASSERT_TRUE(t.Open().ok());
  const int n = 200000;  // several tier buffers and read buffers worth
  for (int i = 0; i < n; i++) {
    const std::string k = "key-" + std::to_string(i) + std::string(size_t(i % 40), 'x');
    ASSERT_TRUE(t.Add(Slice(k), i, now - (i % 7) * 1000, i % 3 == 0).ok());
  }
  int count = 0;
  int last_tier = -1;
  ASSERT_TRUE(t.Emit([&](const Slice& k, int64_t exp) {
                 const int i = int(exp);
                 EXPECT_EQ(k.ToString(), "key-" + std::to_string(i) + std::string(size_t(i % 40), 'x'));
                 const int tier = RecencyTier(now, now - (i % 7) * 1000, i % 3 == 0);
                 EXPECT_GE(tier, last_tier);
                 last_tier = tier;
                 count++;
                 return Status::OK();
               })
                  .ok());
  EXPECT_EQ(count, n);
}

TEST(Recency, MetadumpLineFields) {
  const std::string line = "key=a%20b exp=-1 la=1700000123 cas=5 fetch=yes cls=1 size=70";
  Slice k;
  int64_t exp = 0, la = 0;
  bool fetched = false;
  ASSERT_TRUE(ParseMetadumpLine(line.data(), line.size(), &k, &exp, &la, &fetched));
  EXPECT_EQ(k.ToString(), "a%20b");
  EXPECT_EQ(exp, -1);
  EXPECT_EQ(la, 1700000123);
  EXPECT_TRUE(fetched);
  const std::string bare = "key=x exp=5";
  ASSERT_TRUE(ParseMetadumpLine(bare.data(), bare.size(), &k, &exp, &la, &fetched));
  EXPECT_EQ(la, -1);
  EXPECT_FALSE(fetched);
  // A key that looks like a field does not fool it (keys are URL-encoded: no spaces).
  const std::string tricky = "key=la=5 exp=1 la=7 cas=1 fetch=no cls=1 size=1";
  ASSERT_TRUE(ParseMetadumpLine(tricky.data(), tricky.size(), &k, &exp, &la, &fetched));
  EXPECT_EQ(la, 7);
  EXPECT_FALSE(fetched);
  // The reader hands both on.
  std::vector<std::pair<int64_t, bool>> seen;
  CrawlReader r(
      [&](const Slice&, int64_t, int64_t l, bool f) {
        seen.push_back({l, f});
        return Status::OK();
      },
      CrawlReader::WithLastAccess());
  const std::string dump = line + "\n" + tricky + "\nEND\r\n";
  ASSERT_TRUE(r.Feed(dump.data(), dump.size()).ok());
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, bool>>{{1700000123, true}, {7, false}}));
}

}  // namespace
}  // namespace cachewarm
