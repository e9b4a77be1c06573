// Parses one meta-protocol response *header line* (`VA <len> <flags>*`, `HD`, `EN`, `MN`, errors), or
// a line of a `stats` reply (`STAT <name> <value>`, `END`: a worker's look at the source's clock).
// Values are never scanned: the caller skips exactly `value_len` + 2 bytes after a VA line, so a
// value containing "VALUE ...\r\n" or "EN\r\n" cannot confuse it. Only the header line is searched
// for its "\r\n", and only within kMaxHeaderLine bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "slice.h"

namespace cachewarm {

constexpr size_t kMaxHeaderLine = 4096;

struct MetaResponse {
  enum Type { kValue, kHit, kMiss, kNoop, kServerError, kClientError, kError, kStat, kEnd, kOther };
  Type type = kOther;
  size_t header_len = 0;  // bytes of the header line including "\r\n"
  uint32_t value_len = 0;  // VA only
  bool has_flags = false;
  uint32_t flags = 0;
  bool has_ttl = false;
  int64_t ttl = 0;  // remaining seconds, -1 = never expires
  bool has_key = false;
  size_t key_offset = 0;  // key token position within the header line
  size_t key_len = 0;
  bool key_base64 = false;  // response carried the `b` flag: the key token is base64
  bool has_cas = false;  // `c<cas>`: the item's CAS (version 3 records carry it)
  uint64_t cas = 0;
  bool has_opaque = false;  // `O<number>`: the dumper's key index, echoed
  uint64_t opaque = 0;
  bool has_time = false;  // `STAT time <t>`: the server's clock (unix seconds) when it answered
  int64_t time = 0;
  std::string message;  // error text, or the unexpected line
};

enum class ParseResult { kOk, kNeedMore, kBad };

// Parses the header at data[0..n). kNeedMore: no complete line yet. kBad: *err says why.
ParseResult ParseMetaHeader(const char* data, size_t n, MetaResponse* r, std::string* err);

}  // namespace cachewarm
