#include "hot_first.h"

#include <algorithm>
#include <utility>

namespace cachewarm {

HotFirstListing::HotFirstListing(RecencyTiers* tiers, std::function<bool()> workers_need_keys,
                                 RecencyTiers::KeyFn out, std::function<Status()> cut, uint64_t min_pool,
                                 uint64_t take, uint64_t max_take)
    : tiers_(tiers), need_(std::move(workers_need_keys)), out_(std::move(out)), cut_(std::move(cut)),
      min_pool_(min_pool), take_(take), max_take_(std::max(take, max_take)) {}

Status HotFirstListing::Add(const Slice& url_key, int64_t exptime, int64_t la, bool fetched) {
  CW_RETURN_IF_ERROR(tiers_->Add(url_key, exptime, la, fetched));
  listed_++;
  // Look at the workers every take_ keys (a look takes a lock); before min_pool_ keys are listed
  // there is no sample to pick the hottest from.
  if (listed_ % take_ != 0 || listed_ < min_pool_) return Status::OK();
  while (tiers_->pending() > 0 && need_()) {
    const uint64_t want = std::clamp<uint64_t>(tiers_->pending() / 4, take_, max_take_);
    uint64_t n = 0;
    CW_RETURN_IF_ERROR(tiers_->TakeHottest(want, out_, &n));
    while_listing_ += n;
    CW_RETURN_IF_ERROR(cut_());
  }
  return Status::OK();
}

Status HotFirstListing::Finish() { return tiers_->Emit(out_); }

}  // namespace cachewarm
