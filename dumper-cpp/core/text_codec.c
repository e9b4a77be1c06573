/* How numbers and binary keys are spelled on a command line: decimal, and standard base64 (RFC 4648
 * section 4, `=` padding), the one table both sides use. */
#include "cachewarm_core.h"

#include <string.h>

static const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* "00".."99": two digits per division (every store line and record writes four numbers). */
static const char kDigitPairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

size_t cw_put_u64(char *out, uint64_t v) {
  const size_t n = cw_u64_len(v);
  char *p = out + n;
  while (v >= 100) {
    const unsigned r = (unsigned)(v % 100);
    v /= 100;
    p -= 2;
    memcpy(p, kDigitPairs + 2 * r, 2);
  }
  if (v >= 10) {
    memcpy(p - 2, kDigitPairs + 2 * v, 2);
  } else {
    p[-1] = (char)('0' + v);
  }
  return n;
}

size_t cw_base64_encode(char *out, const unsigned char *s, size_t n) {
  size_t o = 0, i = 0;
  for (; i + 2 < n; i += 3) {
    const uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
    out[o++] = kB64[v >> 18];
    out[o++] = kB64[(v >> 12) & 63];
    out[o++] = kB64[(v >> 6) & 63];
    out[o++] = kB64[v & 63];
  }
  if (i < n) {
    const uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
    out[o++] = kB64[v >> 18];
    out[o++] = kB64[(v >> 12) & 63];
    out[o++] = i + 1 < n ? kB64[(v >> 6) & 63] : '=';
    out[o++] = '=';
  }
  return o;
}

static int b64val(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

long cw_base64_decode(const char *src, size_t n, unsigned char *out) {
  if (n % 4) return -1;
  const unsigned char *s = (const unsigned char *)src;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    const int last = i + 4 == n;
    const int pad2 = last && s[i + 2] == '=' && s[i + 3] == '=';
    const int pad1 = last && !pad2 && s[i + 3] == '=';
    const int a = b64val(s[i]), b = b64val(s[i + 1]);
    const int c = pad2 ? 0 : b64val(s[i + 2]), d = (pad1 || pad2) ? 0 : b64val(s[i + 3]);
    if (a < 0 || b < 0 || c < 0 || d < 0) return -1;
    /* Non-zero pad bits: another spelling of the same bytes, which the encoder never writes. */
    if ((pad2 && (b & 15)) || (pad1 && (c & 3))) return -1;
    const uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)d;
    /* At most 3 bytes at o <= i: never past the unread input at i + 4 (out may alias src). */
    out[o++] = (unsigned char)(v >> 16);
    if (!pad2) out[o++] = (unsigned char)(v >> 8);
    if (!pad1 && !pad2) out[o++] = (unsigned char)v;
  }
  return (long)o;
}
