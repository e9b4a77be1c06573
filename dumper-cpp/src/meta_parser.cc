#include "meta_parser.h"

#include <cstring>

namespace cachewarm {

namespace {

bool ParseU64(const char* p, size_t n, uint64_t max, uint64_t* out) {
  if (n == 0 || n > 20) return false;
  // Up to 19 digits cannot overflow 64 bits: no check per digit (this runs for every number of
  // every response line); a 20th digit is checked.
  const size_t fast = n < 19 ? n : 19;
  uint64_t v = 0;
  for (size_t i = 0; i < fast; i++) {
    const unsigned d = unsigned(static_cast<unsigned char>(p[i])) - '0';
    if (d > 9) return false;
    v = v * 10 + d;
  }
  if (n == 20) {
    const unsigned d = unsigned(static_cast<unsigned char>(p[19])) - '0';
    if (d > 9 || __builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, d, &v)) return false;
  }
  if (v > max) return false;
  *out = v;
  return true;
}

bool ParseI64(const char* p, size_t n, int64_t* out) {
  if (n > 0 && p[0] == '-') {
    uint64_t v;
    if (!ParseU64(p + 1, n - 1, uint64_t(INT64_MAX), &v)) return false;
    *out = -int64_t(v);
    return true;
  }
  uint64_t v;
  if (!ParseU64(p, n, uint64_t(INT64_MAX), &v)) return false;
  *out = int64_t(v);
  return true;
}

std::string Printable(const char* p, size_t n) {
  std::string o;
  for (size_t i = 0; i < n && i < 200; i++) {
    unsigned char c = static_cast<unsigned char>(p[i]);
    o += (c >= 0x20 && c < 0x7f) ? char(c) : '?';
  }
  return o;
}

// The token at line[pos..end) read as a number (ParseU64's rules) in the same pass that finds its
// end (the next space or `end`): *tok_end is set either way.
bool TokenU64(const char* line, size_t pos, size_t end, uint64_t max, uint64_t* out, size_t* tok_end) {
  uint64_t v = 0;
  size_t e = pos;
  for (; e < end; e++) {
    const unsigned d = unsigned(static_cast<unsigned char>(line[e])) - '0';
    if (d > 9) break;
    v = v * 10 + d;  // wraps past 19 digits: such a token is read again by ParseU64 below
  }
  if (e < end && line[e] != ' ') {  // not all digits
    while (e < end && line[e] != ' ') e++;
    *tok_end = e;
    return false;
  }
  *tok_end = e;
  if (e - pos > 19) return ParseU64(line + pos, e - pos, max, out);
  if (e == pos || v > max) return false;
  *out = v;
  return true;
}

// Parses the flag tokens of VA/HD lines: "f123 t-1 kfoo b ...".
bool ParseFlags(const char* line, size_t pos, size_t end, MetaResponse* r, std::string* err) {
  while (pos < end) {
    if (line[pos] == ' ') {
      pos++;
      continue;
    }
    const char f = line[pos];
    const size_t v = pos + 1;
    size_t e = v;
    uint64_t u;
    switch (f) {
      case 'f':
        if (!TokenU64(line, v, end, 0xffffffffULL, &u, &e)) {
          *err = "bad client flags in response";
          return false;
        }
        r->has_flags = true;
        r->flags = uint32_t(u);
        break;
      case 't': {
        const bool neg = v < end && line[v] == '-';
        if (!TokenU64(line, neg ? v + 1 : v, end, uint64_t(INT64_MAX), &u, &e) || (neg && u > 1)) {
          *err = "bad TTL in response";
          return false;
        }
        r->ttl = neg ? -int64_t(u) : int64_t(u);
        r->has_ttl = true;
        break;
      }
      case 'k':
        while (e < end && line[e] != ' ') e++;
        if (e == v) {
          *err = "empty key in response";
          return false;
        }
        r->has_key = true;
        r->key_offset = v;
        r->key_len = e - v;
        break;
      case 'b':
        while (e < end && line[e] != ' ') e++;
        r->key_base64 = true;
        break;
      case 'c':
        if (!TokenU64(line, v, end, UINT64_MAX, &u, &e)) {
          *err = "bad CAS in response";
          return false;
        }
        r->has_cas = true;
        r->cas = u;
        break;
      case 'O':
        // The dumper sends numbers; anything else is some other client's and ignored.
        r->has_opaque = TokenU64(line, v, end, UINT64_MAX, &u, &e);
        r->opaque = r->has_opaque ? u : 0;
        break;
      default:
        while (e < end && line[e] != ' ') e++;
        break;  // flags we did not ask for (s, ...) are ignored
    }
    pos = e;
  }
  return true;
}

}  // namespace

ParseResult ParseMetaHeader(const char* data, size_t n, MetaResponse* r, std::string* err) {
  *r = MetaResponse();
  const size_t lim = n < kMaxHeaderLine ? n : kMaxHeaderLine;
  const void* nl = lim ? std::memchr(data, '\n', lim) : nullptr;
  if (!nl) {
    if (n >= kMaxHeaderLine) {
      *err = "response line longer than " + std::to_string(kMaxHeaderLine) + " bytes: " + Printable(data, 64);
      return ParseResult::kBad;
    }
    return ParseResult::kNeedMore;
  }
  const size_t lf = size_t(static_cast<const char*>(nl) - data);
  if (lf == 0 || data[lf - 1] != '\r') {
    *err = "response line not ended by \\r\\n: " + Printable(data, lf);
    return ParseResult::kBad;
  }
  const size_t end = lf - 1;  // line content is data[0..end)
  r->header_len = lf + 1;
  auto is = [&](const char* word) {
    size_t w = std::strlen(word);
    return end >= w && std::memcmp(data, word, w) == 0 && (end == w || data[w] == ' ');
  };
  if (is("VA")) {
    size_t p = 3, e = 3;
    while (e < end && data[e] != ' ') e++;
    uint64_t len;
    if (end < 4 || !ParseU64(data + p, e - p, 0xffffffffULL, &len)) {
      *err = "bad value length in: " + Printable(data, end);
      return ParseResult::kBad;
    }
    r->type = MetaResponse::kValue;
    r->value_len = uint32_t(len);
    return ParseFlags(data, e, end, r, err) ? ParseResult::kOk : ParseResult::kBad;
  }
  if (is("HD")) {
    r->type = MetaResponse::kHit;
    return ParseFlags(data, 2, end, r, err) ? ParseResult::kOk : ParseResult::kBad;
  }
  if (is("EN")) {
    r->type = MetaResponse::kMiss;
    return ParseResult::kOk;
  }
  if (is("MN")) {
    r->type = MetaResponse::kNoop;
    return ParseResult::kOk;
  }
  if (is("STAT")) {
    r->type = MetaResponse::kStat;
    static constexpr char kTime[] = "STAT time ";
    constexpr size_t n = sizeof kTime - 1;
    if (end > n && std::memcmp(data, kTime, n) == 0) {
      if (!ParseI64(data + n, end - n, &r->time) || r->time <= 0) {
        *err = "bad server time in: " + Printable(data, end);
        return ParseResult::kBad;
      }
      r->has_time = true;
    }
  } else if (is("END")) {
    r->type = MetaResponse::kEnd;
  } else if (is("SERVER_ERROR")) {
    r->type = MetaResponse::kServerError;
  } else if (is("CLIENT_ERROR")) {
    r->type = MetaResponse::kClientError;
  } else if (is("ERROR")) {
    r->type = MetaResponse::kError;
  } else {
    r->type = MetaResponse::kOther;
  }
  r->message = Printable(data, end);
  return ParseResult::kOk;
}

}  // namespace cachewarm
