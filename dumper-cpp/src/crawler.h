// Parses the output of `lru_crawler metadump hash` (or `all`): key lines, then END / BUSY / an error.
//   OK                                     (memcached >= 1.6.43: a line of its own before the keys)
//   key=<URL-encoded key> exp=<absolute unix time, -1 = never> la=... cas=... fetch=... cls=... size=...
//        (1.6.38+ add flags=..., 1.6.45 a trailing space; unknown fields are ignored)
//   END\r\n
// Key lines end in a bare "\n"; every other line in "\r\n". Fed in arbitrary pieces.
#pragma once
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "slice.h"
#include "status.h"

namespace cachewarm {

// The listing's cas and slab class of every key that may need the binary protocol (a URL-encoded key
// longer than 186 characters: only a binary key of 187..250 bytes does). Such a key's TTL cannot be
// read with its value (GETK returns none): the fetch's CAS equal to the listing's says the item is
// still the one listed, another says it was rewritten in between (not copied, named); its TTL is read
// again by listing its class after the fetch (reread.h). The first listing of a key wins.
// Thread-safe: the crawl puts, the workers get.
class ListingCas {
 public:
  void Put(const Slice& url_key, uint64_t cas, int64_t cls = -1);
  // 0 when the key was not listed by this run (a resumed dump's earlier crawl).
  uint64_t Get(const Slice& url_key) const;
  // Its slab class (`cls=`); -1 when not known.
  int64_t Class(const Slice& url_key) const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::pair<uint64_t, int64_t>> m_;
};

class CrawlReader {
 public:
  using KeyFn = std::function<Status(const Slice& url_key, int64_t exptime)>;
  // The same with each key's last access (`la=`, unix seconds; -1 if the line has none) and whether
  // it was ever fetched (`fetch=yes`).
  using KeyLaFn = std::function<Status(const Slice& url_key, int64_t exptime, int64_t la, bool fetched)>;
  struct WithLastAccess {};
  explicit CrawlReader(KeyFn fn)
      : fn_([f = std::move(fn)](const Slice& k, int64_t exp, int64_t, bool) { return f(k, exp); }) {}
  CrawlReader(KeyLaFn fn, WithLastAccess) : fn_(std::move(fn)) {}

  Status Feed(const char* data, size_t n);
  bool done() const { return done_; }
  // The crawler could not start now and asks to be asked again: "BUSY ..." (another crawl is
  // running, possibly memcached's own background crawler) or "ERROR locked try again later" (the
  // hash table is being expanded). Only before any key; busy_line() is what it answered.
  bool busy() const { return busy_; }
  const std::string& busy_line() const { return busy_line_; }
  // Busy without asking the server (its `stats` said a crawl is running); done() from now on.
  void SetBusy(const std::string& line) {
    busy_ = done_ = true;
    busy_line_ = line;
  }
  // The server does not know the crawl mode ("BADCLASS ...": a memcached without `metadump hash`
  // reads "hash" as a slab class id). Feed returned a server error naming the line.
  bool unsupported_mode() const { return unsupported_mode_; }
  uint64_t keys() const { return keys_; }
  // Where to put the cas of the keys that may need the binary protocol (none: not kept).
  void set_listing_cas(ListingCas* c) { cas_ = c; }

 private:
  Status Line(const char* p, size_t n);
  KeyLaFn fn_;
  std::string partial_;
  bool done_ = false, busy_ = false, unsupported_mode_ = false, saw_line_ = false;
  std::string busy_line_;
  uint64_t keys_ = 0;
  ListingCas* cas_ = nullptr;
};

// Parses one metadump line (without its "\n"); exposed for tests.
// `la`, if given, receives the line's la= (-1 if absent), `fetched` whether it says fetch=yes.
// `cas`, if given, receives its cas= (0 if absent); `cls` its cls= (-1 if absent).
bool ParseMetadumpLine(const char* p, size_t n, Slice* url_key, int64_t* exptime, int64_t* la = nullptr,
                       bool* fetched = nullptr, uint64_t* cas = nullptr, int64_t* cls = nullptr);

}  // namespace cachewarm
