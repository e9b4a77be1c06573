// libFuzzer target: the `lru_crawler metadump` reader (CrawlReader, ParseMetadumpLine) and the key
// decoders the dumper applies to what memcached sends (URL-decoding, base64 in place).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "codec.h"
#include "crawler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const char* p = reinterpret_cast<const char*>(data + 1);
  const size_t n = size - 1;
  const size_t step = 1 + data[0] % 64;

  uint64_t keys = 0;
  cachewarm::CrawlReader reader([&](const cachewarm::Slice& url_key, int64_t) {
    std::string key;
    if (cachewarm::UrlDecode(url_key, &key)) {
      if (key.size() > url_key.size()) __builtin_trap();  // decoding never grows
    }
    keys++;
    return cachewarm::Status::OK();
  });
  for (size_t off = 0; off < n && !reader.done(); off += step) {
    const size_t piece = n - off < step ? n - off : step;
    if (!reader.Feed(p + off, piece).ok()) break;
  }
  if (reader.keys() != keys) __builtin_trap();

  std::string copy(p, n);
  const long d = cachewarm::Base64DecodeInPlace(copy.data(), copy.size(), copy.data());
  if (d > long(n)) __builtin_trap();
  return 0;
}
