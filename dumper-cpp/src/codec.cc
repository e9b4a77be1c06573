#include "codec.h"

#include <cctype>
#include <cstdint>

#include "cachewarm_core.h"

namespace cachewarm {

static int HexVal(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool UrlDecode(const Slice& in, std::string* out) {
  // Written through a pointer into a buffer sized for the input (the decoded key is never longer):
  // no per-byte capacity check (every key is decoded once per fetch).
  out->resize(in.size());
  char* const o = &(*out)[0];
  char* w = o;
  const char* p = in.data();
  const char* const end = p + in.size();
  while (p < end) {
    const char c = *p;
    if (c != '%') {
      *w++ = c;
      p++;
      continue;
    }
    if (end - p <= 2) return false;
    const int h = HexVal(p[1]), l = HexVal(p[2]);
    if (h < 0 || l < 0) return false;
    *w++ = char(h * 16 + l);
    p += 3;
  }
  out->resize(size_t(w - o));
  return true;
}

std::string HexEncode(const Slice& in) {
  static const char d[] = "0123456789abcdef";
  std::string o;
  o.reserve(2 * in.size());
  for (size_t i = 0; i < in.size(); i++) {
    const unsigned char c = uint8_t(in[i]);
    o += d[c >> 4];
    o += d[c & 15];
  }
  return o;
}

std::string UrlEncode(const Slice& in) {
  static const char* hex = "0123456789ABCDEF";
  std::string o;
  for (size_t i = 0; i < in.size(); i++) {
    unsigned char c = uint8_t(in[i]);
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      o.push_back(char(c));
    } else {
      o.push_back('%');
      o.push_back(hex[c >> 4]);
      o.push_back(hex[c & 15]);
    }
  }
  return o;
}

bool IsPlainKey(const Slice& key) {
  for (size_t i = 0; i < key.size(); i++) {
    unsigned char c = uint8_t(key[i]);
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

bool IsTextKey(const Slice& key) {
  for (size_t i = 0; i < key.size(); i++) {
    const char c = key[i];
    if (c == ' ' || c == '\n' || c == '\0') return false;
  }
  return true;
}

// Base64 is core/text_codec.c's (one table, shared with the populator).
void Base64Encode(const Slice& in, std::string* out) {
  out->resize((in.size() + 2) / 3 * 4);
  if (!out->empty())
    cw_base64_encode(&(*out)[0], reinterpret_cast<const unsigned char*>(in.data()), in.size());
}

long Base64DecodeInPlace(const char* src, size_t n, char* dst) {
  return cw_base64_decode(src, n, reinterpret_cast<unsigned char*>(dst));
}

}  // namespace cachewarm
