// Fetch while listing (hot_first.h) with fake listings: what the workers get while the crawl runs,
// and in what order the rest follows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "hot_first.h"
#include "recency.h"
#include "testutil.h"

namespace cachewarm {
namespace {

constexpr int64_t kNow = 1700000000;

struct Listed {
  std::string key;
  int64_t la;
  bool fetched;
};

// Runs a fake listing; `need_at(i)` says whether the workers need keys after key i was listed.
struct Outcome {
  std::vector<std::string> out;        // keys in the order handed to the workers
  std::vector<size_t> listed_when;     // for each key out: how many keys had been listed then
  uint64_t while_listing = 0;
  std::vector<size_t> cuts;            // keys out when each key list was ended
};

template <typename NeedAt>
Outcome Feed(const std::string& dir, const std::vector<Listed>& listing, NeedAt need_at, uint64_t min_pool, uint64_t take,
             uint64_t max_take = 0) {
  Outcome r;
  RecencyTiers tiers(dir, kNow);
  EXPECT_TRUE(tiers.Open().ok());
  size_t listed = 0;
  HotFirstListing hot(
      &tiers, [&] { return need_at(listed, r.out.size()); },
      [&](const Slice& k, int64_t) {
        r.out.push_back(k.ToString());
        r.listed_when.push_back(listed);
        return Status::OK();
      },
      [&] {
        r.cuts.push_back(r.out.size());
        return Status::OK();
      },
      min_pool, take, max_take ? max_take : take);
  for (const Listed& l : listing) {
    listed++;
    EXPECT_TRUE(hot.Add(Slice(l.key), -1, l.la, l.fetched).ok());
  }
  listed = SIZE_MAX;  // the listing ended
  EXPECT_TRUE(hot.Finish().ok());
  r.while_listing = hot.while_listing();
  return r;
}

int TierOf(const std::vector<Listed>& listing, const std::string& key) {
  for (const Listed& l : listing)
    if (l.key == key) return RecencyTier(kNow, l.la, l.fetched);
  return -1;
}

std::vector<Listed> Mixed(int n) {
  std::vector<Listed> v;
  for (int i = 0; i < n; i++) {
    // Every 10th key hot (just read), the rest cold by age, in crawl (hash) order.
    const bool hot = i % 10 == 3;
    v.push_back({"k" + std::to_string(i), hot ? kNow : kNow - 3600 * (1 + i % 5), hot});
  }
  return v;
}

TEST(HotFirst, WorkersThatNeverAskGetEverythingAfterTheListingInRecencyOrder) {
  TempDir d;
  const std::vector<Listed> listing = Mixed(5000);
  Outcome r = Feed(d.path() + "/tiers", listing, [](size_t, size_t) { return false; }, 64, 16);
  ASSERT_EQ(r.out.size(), listing.size());
  EXPECT_EQ(r.while_listing, 0u);
  int last = -1;
  for (const std::string& k : r.out) {
    const int t = TierOf(listing, k);
    EXPECT_GE(t, last);
    last = t;
  }
}

TEST(HotFirst, HungryWorkersGetTheHottestListedSoFarWhileTheListingRuns) {
  TempDir d;
  const std::vector<Listed> listing = Mixed(5000);
  // The workers always want more: every look hands out keys until none is left.
  Outcome r = Feed(d.path() + "/tiers", listing, [](size_t, size_t) { return true; }, 64, 16);
  ASSERT_EQ(r.out.size(), listing.size());
  EXPECT_GT(r.while_listing, 4000u);  // nearly all before the listing's end: no stall
  // Nothing is handed out before the pool is listed.
  EXPECT_GE(r.listed_when[0], 64u);
  // Each hand-out takes the hottest keys listed so far: a key goes out only when no hotter key
  // listed before that moment is still waiting.
  std::set<std::string> gone;
  for (size_t i = 0; i < r.out.size(); i++) {
    const size_t listed = r.listed_when[i];
    const int t = TierOf(listing, r.out[i]);
    for (size_t j = 0; j < listed && j < listing.size(); j++) {
      if (gone.count(listing[j].key) || listing[j].key == r.out[i]) continue;
      ASSERT_LE(t, RecencyTier(kNow, listing[j].la, listing[j].fetched))
          << r.out[i] << " went out while hotter " << listing[j].key << " waited";
    }
    gone.insert(r.out[i]);
  }
  // Every key exactly once.
  EXPECT_EQ(gone.size(), listing.size());
}

TEST(HotFirst, PartlyHungryWorkersGetHotKeysEarlyAndTheRestInRecencyOrder) {
  TempDir d;
  const std::vector<Listed> listing = Mixed(20000);
  // The workers take 50 keys per 1000 listed (a dump slower than its listing).
  Outcome r = Feed(
      d.path() + "/tiers", listing, [](size_t listed, size_t out) { return listed != SIZE_MAX && out * 20 < listed; },
      1024, 32);  // a pool of 1,024 holds ~100 hot keys: more than one hand-out
  ASSERT_EQ(r.out.size(), listing.size());
  EXPECT_GE(r.while_listing, 950u);
  EXPECT_LE(r.while_listing, 1032u);
  // What went out while listing is all hot (2,000 hot keys are listed, twice what was asked for).
  const int hot_tier = RecencyTier(kNow, kNow, true);
  for (uint64_t i = 0; i < r.while_listing; i++) EXPECT_EQ(TierOf(listing, r.out[i]), hot_tier) << i;
  // After the listing: the rest in recency order, every key once.
  int last = -1;
  for (size_t i = r.while_listing; i < r.out.size(); i++) {
    const int t = TierOf(listing, r.out[i]);
    EXPECT_GE(t, last);
    last = t;
  }
  EXPECT_EQ(std::set<std::string>(r.out.begin(), r.out.end()).size(), listing.size());
}

TEST(HotFirst, AHandOutIsAQuarterOfThePoolAndEndsItsKeyList) {
  TempDir d;
  const std::vector<Listed> listing = Mixed(5000);
  // Hungry once, at the first look (64 keys listed): 16 keys, the hottest, in a key list of their own.
  Outcome r = Feed(d.path() + "/tiers", listing, [](size_t, size_t out) { return out == 0; }, 64, 8, 1000);
  EXPECT_EQ(r.while_listing, 16u);
  ASSERT_FALSE(r.cuts.empty());
  EXPECT_EQ(r.cuts[0], 16u);
  EXPECT_EQ(r.out.size(), listing.size());
  // Workers taking half of what is listed: the pool grows, and the hand-outs with it, up to the most
  // allowed.
  TempDir d2;
  Outcome h = Feed(
      d2.path() + "/tiers", listing, [](size_t listed, size_t out) { return listed != SIZE_MAX && out * 2 < listed; },
      64, 8, 100);
  size_t prev = 0, biggest = 0;
  for (size_t c : h.cuts) {
    EXPECT_LE(c - prev, 100u);
    biggest = std::max(biggest, c - prev);
    prev = c;
  }
  EXPECT_EQ(biggest, 100u);
}

TEST(Recency, TakeHottestReadsWhileTheTiersGrow) {
  TempDir d;
  RecencyTiers t(d.path() + "/tiers", kNow);
  ASSERT_TRUE(t.Open().ok());
  std::vector<std::string> got;
  const RecencyTiers::KeyFn keep = [&](const Slice& k, int64_t) {
    got.push_back(k.ToString());
    return Status::OK();
  };
  ASSERT_TRUE(t.Add(Slice("cold1"), -1, kNow - 86400, false).ok());
  ASSERT_TRUE(t.Add(Slice("hot1"), 7, kNow, true).ok());
  ASSERT_TRUE(t.Add(Slice("hot2"), -1, kNow, true).ok());
  uint64_t n = 0;
  ASSERT_TRUE(t.TakeHottest(1, keep, &n).ok());
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(t.pending(), 2u);
  ASSERT_TRUE(t.Add(Slice("hot3"), -1, kNow, true).ok());
  ASSERT_TRUE(t.Add(Slice("cold2"), -1, kNow - 86400, false).ok());
  ASSERT_TRUE(t.TakeHottest(3, keep, &n).ok());
  EXPECT_EQ(n, 3u);
  ASSERT_TRUE(t.Emit(keep).ok());
  EXPECT_EQ(t.pending(), 0u);
  EXPECT_EQ(got, (std::vector<std::string>{"hot1", "hot2", "hot3", "cold1", "cold2"}));
}

}  // namespace
}  // namespace cachewarm

namespace cachewarm {
namespace {

// The integer tier (once per listed key) is the float formula 1 + floor(2 log2(age)).
TEST(Recency, IntegerTierMatchesTheFormula) {
  for (int64_t age = 1; age < kNow - 2; age = age * 9 / 8 + 1) {  // la = now - age stays >= 0
    for (int64_t d : {int64_t(-1), int64_t(0), int64_t(1)}) {
      const int64_t a = age + d;
      if (a < 1) continue;
      const int want = std::min(kRecencyAges - 1, 1 + int(std::floor(2.0 * std::log2(double(a)))));
      ASSERT_EQ(RecencyTier(kNow, kNow - a, true), 2 * want) << a;
    }
  }
}

}  // namespace
}  // namespace cachewarm
