// The current expiry of keys only the binary protocol can fetch (187..250 bytes holding a space, '\n'
// or NUL: no meta command names them, and GETK returns no TTL). After their values are fetched, their
// slab classes are listed again (`lru_crawler metadump <class>,...`): a key listed there with the cas
// its value was fetched with is that value, and its `exp` is its expiry then — a touch or gat since the
// first listing included. Nothing memcached offers reads a TTL without changing it otherwise (the
// binary protocol's GAT and TOUCH set one; `me` and `mg` take the same key token).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "options.h"
#include "status.h"

namespace cachewarm {

struct Relisted {
  int64_t exptime = -1;  // absolute, on the source's clock; -1 = never
  uint64_t cas = 0;
};

// Lists `classes` ("5,9", or "all") of the source and returns the exp and cas of each of `keys`
// (URL-encoded, as the listing prints them) it lists. Never asks while a crawl holds the crawler
// (memcached's `stats` says so; queued behind one, a hash table expansion can deadlock the server):
// waits and asks again for up to --crawl-busy-timeout, then fails. `aborted`: the dump is stopping.
// One re-read runs at a time in a process (the server runs one crawl at a time).
Status RelistKeys(const Options& o, const std::string& classes, const std::unordered_set<std::string>& keys,
                  const std::function<bool()>& aborted, std::unordered_map<std::string, Relisted>* out);

}  // namespace cachewarm
