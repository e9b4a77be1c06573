// Hot items first (--order recency): the first crawl's keys, sorted into recency tiers by the time of
// their last access (`la=` in `lru_crawler metadump`, unix seconds), then handed to the key lists
// most recent tier first, so the workers fetch — and a populator, which applies files in chunk order,
// writes — the items clients asked for last before the cold ones. A new replica serves most of its
// hits long before the last cold item lands.
//
// Memory stays bounded whatever the number of keys: each tier is a scratch file in
// keys/.tmp-tiers/ ("<URL-encoded key> <exptime>\n" lines, like a key list) behind a
// kRecencyTierBuffer write buffer (kRecencyTiers of them: options.h kRecencyMemory); emitting reads
// them back one at a time through a fixed buffer. Within a tier the crawl's order is kept.
//
// Keys can be taken out while the crawl still adds (TakeHottest: the hottest tiers' oldest unread
// keys, read back from the scratch files at a per-tier read offset), so the workers fetch while the
// listing runs (hot_first.h) and Emit hands out only what is left. Tiers by age: 0 s, then half powers of two (1, 1.4, 2, 2.8, 4 ... s) up to ~68
// years (memcached's clock ticks once a second); within an age, items ever fetched (`fetch=yes`)
// before the others.
//
// What `la` means (memcached 1.6, segmented LRU, the default): a fetch sets an item's time only when
// it makes the item active — its second fetch since the LRU maintainer last moved it — and a store
// sets it. So `la` is coarse: the time of the access that last made an item active (or of its
// store); the items a workload keeps hitting have recent ones, items nobody read keep their store
// time, items read once only say fetch=yes.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "slice.h"
#include "status.h"

namespace cachewarm {

constexpr int kRecencyAges = 64;
constexpr int kRecencyTiers = 2 * kRecencyAges;
constexpr size_t kRecencyTierBuffer = 16 << 10;
// Reading tiers back (taking and emitting): one buffer.
constexpr size_t kRecencyReadBuffer = 256 << 10;

// The tier of an item last accessed at unix time `la` when the crawl started at `now`: 0 is the most
// recent. An `la` in the future (clocks) counts as now.
int RecencyTier(int64_t now, int64_t la, bool fetched);

class RecencyTiers {
 public:
  // `dir` is created, and emptied of a killed run's files.
  RecencyTiers(std::string dir, int64_t now);
  ~RecencyTiers();  // removes the scratch files
  RecencyTiers(const RecencyTiers&) = delete;
  RecencyTiers& operator=(const RecencyTiers&) = delete;

  using KeyFn = std::function<Status(const Slice& url_key, int64_t exptime)>;

  Status Open();
  Status Add(const Slice& url_key, int64_t exptime, int64_t la, bool fetched);
  // While keys are still being added: calls fn for up to max_keys keys not yet taken, most recent
  // tier first (within a tier in the order added); *taken = how many.
  Status TakeHottest(uint64_t max_keys, const KeyFn& fn, uint64_t* taken);
  // Calls fn for every key added and not taken, most recent tier first; the files are removed as
  // they are read.
  Status Emit(const KeyFn& fn);
  // Keys per tier (taken or not).
  const std::vector<uint64_t>& counts() const { return counts_; }
  // Keys added and not yet taken or emitted.
  uint64_t pending() const { return pending_; }

 private:
  void RemoveScratch();
  std::string TierPath(int t) const;
  // Reads tier t from its read offset: up to max_keys whole lines to fn; *taken = how many.
  Status ReadTier(int t, uint64_t max_keys, const KeyFn& fn, uint64_t* taken);

  std::string dir_;
  int64_t now_;
  std::vector<FILE*> files_;
  std::vector<std::vector<char>> buffers_;
  std::vector<uint64_t> counts_;
  std::vector<uint64_t> written_;   // bytes added to each tier's file
  std::vector<uint64_t> read_off_;  // bytes of each tier's file already handed out
  std::vector<uint64_t> unread_;    // keys of each tier not yet handed out
  uint64_t pending_ = 0;
  std::unique_ptr<char[]> read_buf_;  // kRecencyReadBuffer
};

}  // namespace cachewarm
