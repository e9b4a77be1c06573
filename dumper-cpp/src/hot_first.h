// Hot first without the stall (--order recency): the workers fetch while the crawl still lists.
// Every listed key goes into the recency tiers (recency.h); whenever the workers are about to run
// dry, the hottest keys listed so far are taken out and handed to them (the key lists), and after
// the listing the rest follow in recency order. So the dump runs at crawl order's speed (the fetch
// overlaps the listing, as with --order crawl) and still fetches the hottest tier seen so far first.
//
// The hand-out waits until a pool of keys has been listed (kHotFirstMinPool) so that the first keys
// are the hottest of a sample, not simply the first listed. Each hand-out is the hottest quarter of
// the keys waiting (kHotFirstTake..kHotFirstMaxTake keys) and ends its key list at once: a key list
// of --key-file-size filled a few keys at a time would hand the workers tens of thousands of keys
// in nearly the crawl's order before the pool has grown. Small lists come only while the pool is
// small; once the listing is ahead, hand-outs are kHotFirstMaxTake keys. Memory: nothing beyond the
// tiers' own buffers.
#pragma once
#include <cstdint>
#include <functional>

#include "recency.h"
#include "slice.h"
#include "status.h"

namespace cachewarm {

// Keys listed before the first hand-out (~5 ms of a listing on 2 cores; a larger pool stalls the
// workers of a small dump, which may not list that many keys at all).
constexpr uint64_t kHotFirstMinPool = 4096;
// Keys taken out per hand-out at least, and listed keys between two looks at the workers.
constexpr uint64_t kHotFirstTake = 1024;
// Keys per hand-out at most.
constexpr uint64_t kHotFirstMaxTake = 16384;

class HotFirstListing {
 public:
  // `workers_need_keys`: true when the workers would soon have nothing to fetch (few key lists
  // waiting). `out`: where keys go, in fetch order (the key lists); `cut` ends the key list being
  // filled (publishes it). All outlive this.
  HotFirstListing(RecencyTiers* tiers, std::function<bool()> workers_need_keys, RecencyTiers::KeyFn out,
                  std::function<Status()> cut, uint64_t min_pool = kHotFirstMinPool, uint64_t take = kHotFirstTake,
                  uint64_t max_take = kHotFirstMaxTake);
  // One key of the listing.
  Status Add(const Slice& url_key, int64_t exptime, int64_t la, bool fetched);
  // The listing ended: everything not yet handed out, most recent tier first.
  Status Finish();
  // Keys handed out while the listing ran.
  uint64_t while_listing() const { return while_listing_; }

 private:
  RecencyTiers* tiers_;
  std::function<bool()> need_;
  RecencyTiers::KeyFn out_;
  std::function<Status()> cut_;
  const uint64_t min_pool_, take_, max_take_;
  uint64_t listed_ = 0, while_listing_ = 0;
};

}  // namespace cachewarm
