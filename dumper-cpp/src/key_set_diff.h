// The set difference behind reconciliation (docs/data-format.md section 6): which keys of a new crawl
// are not already in the key lists? Memory stays bounded whatever the number of keys: 128-bit key
// hashes (XXH3-128, collisions negligible) are partitioned to scratch files by their top bits and each
// partition is loaded, sorted and compared on its own.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "slice.h"
#include "status.h"

namespace cachewarm {

class KeySetDiff {
 public:
  // expected_keys sizes the partitioning (about 64k keys per partition, 16..256 partitions).
  KeySetDiff(std::string scratch_dir, uint64_t expected_keys);
  ~KeySetDiff();
  KeySetDiff(const KeySetDiff&) = delete;
  KeySetDiff& operator=(const KeySetDiff&) = delete;

  // Phase 1: keys already listed.
  Status AddExisting(const Slice& raw_key);
  // Phase 2: keys of the new crawl (the first call ends phase 1).
  Status AddCandidate(const Slice& raw_key, const Slice& url_key, int64_t exptime);
  // Phase 3: calls fn once for every candidate key that is not an existing key.
  Status Emit(const std::function<Status(const Slice& url_key, int64_t exptime)>& fn);
  int partitions() const { return nparts_; }
  // After Emit: candidates dropped because the crawl had already listed them (a key it saw twice).
  uint64_t duplicates() const { return duplicates_; }

 private:
  Status OpenAll(const char* prefix);
  void RemoveScratch();
  Status CloseAll();
  std::string PartPath(const char* prefix, int p) const;
  int PartOf(uint64_t high64) const { return int(high64 >> (64 - bits_)); }

  std::string dir_;
  int bits_;
  int nparts_;
  int phase_ = 1;
  uint64_t duplicates_ = 0;
  std::vector<FILE*> files_;
};

}  // namespace cachewarm
