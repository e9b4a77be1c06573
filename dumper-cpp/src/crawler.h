// Reads the output of `lru_crawler metadump hash` (or `all`): key lines, then END / BUSY / an error.
//   key=<URL-encoded key> exp=<absolute unix time, -1 = never> la=... cas=... fetch=... cls=... size=...
// and a final "END\r\n". Fed in arbitrary pieces.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "slice.h"
#include "status.h"

namespace cachewarm {

class CrawlReader {
 public:
  using KeyFn = std::function<Status(const Slice& url_key, int64_t exptime)>;
  explicit CrawlReader(KeyFn fn) : fn_(std::move(fn)) {}

  Status Feed(const char* data, size_t n);
  bool done() const { return done_; }
  // The crawler answered "BUSY ..." (another crawl is running): retry later.
  bool busy() const { return busy_; }
  uint64_t keys() const { return keys_; }

 private:
  Status Line(const char* p, size_t n);
  KeyFn fn_;
  std::string partial_;
  bool done_ = false, busy_ = false;
  uint64_t keys_ = 0;
};

// Parses one metadump line (without its "\n"); exposed for tests.
bool ParseMetadumpLine(const char* p, size_t n, Slice* url_key, int64_t* exptime);

}  // namespace cachewarm
