#include "codec.h"

#include <cctype>
#include <cstdint>

namespace cachewarm {

static int HexVal(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool UrlDecode(const Slice& in, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); i++) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return false;
      int h = HexVal(in[i + 1]), l = HexVal(in[i + 2]);
      if (h < 0 || l < 0) return false;
      out->push_back(char(h * 16 + l));
      i += 2;
    } else {
      out->push_back(c);
    }
  }
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

static const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void Base64Encode(const Slice& in, std::string* out) {
  out->clear();
  size_t i = 0;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(in.data());
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint32_t(p[i]) << 16) | (uint32_t(p[i + 1]) << 8) | p[i + 2];
    out->push_back(kB64[v >> 18]);
    out->push_back(kB64[(v >> 12) & 63]);
    out->push_back(kB64[(v >> 6) & 63]);
    out->push_back(kB64[v & 63]);
  }
  if (i < in.size()) {
    uint32_t v = uint32_t(p[i]) << 16;
    if (i + 1 < in.size()) v |= uint32_t(p[i + 1]) << 8;
    out->push_back(kB64[v >> 18]);
    out->push_back(kB64[(v >> 12) & 63]);
    out->push_back(i + 1 < in.size() ? kB64[(v >> 6) & 63] : '=');
    out->push_back('=');
  }
}

static int B64Val(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

long Base64DecodeInPlace(const char* src, size_t n, char* dst) {
  if (n % 4 != 0) return -1;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    int a = B64Val(src[i]), b = B64Val(src[i + 1]);
    if (a < 0 || b < 0) return -1;
    const bool last = i + 4 == n;
    const bool pad2 = last && src[i + 2] == '=' && src[i + 3] == '=';
    const bool pad1 = last && !pad2 && src[i + 3] == '=';
    int c = pad2 ? 0 : B64Val(src[i + 2]);
    int d = (pad1 || pad2) ? 0 : B64Val(src[i + 3]);
    if (c < 0 || d < 0) return -1;
    uint32_t v = (uint32_t(a) << 18) | (uint32_t(b) << 12) | (uint32_t(c) << 6) | uint32_t(d);
    // Writing at most 3 bytes at o <= i never overtakes the unread input at i + 4.
    dst[o++] = char(v >> 16);
    if (!pad2) dst[o++] = char((v >> 8) & 0xff);
    if (!pad1 && !pad2) dst[o++] = char(v & 0xff);
  }
  return long(o);
}

}  // namespace cachewarm
