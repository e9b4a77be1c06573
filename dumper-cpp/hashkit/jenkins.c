/* Bob Jenkins' lookup3 `hashlittle` with initval 13, as libmemcached and twemproxy call it (on a
 * little-endian machine their word-at-a-time paths equal this byte-at-a-time one). */
#include "hashkit.h"

#define ROT(x, k) (((x) << (k)) | ((x) >> (32 - (k))))

uint32_t cw_hash_jenkins(const unsigned char *k, size_t len) {
  uint32_t a, b, c;
  a = b = c = 0xdeadbeef + (uint32_t)len + 13;
  for (; len > 12; len -= 12, k += 12) {
    a += (uint32_t)k[0] | (uint32_t)k[1] << 8 | (uint32_t)k[2] << 16 | (uint32_t)k[3] << 24;
    b += (uint32_t)k[4] | (uint32_t)k[5] << 8 | (uint32_t)k[6] << 16 | (uint32_t)k[7] << 24;
    c += (uint32_t)k[8] | (uint32_t)k[9] << 8 | (uint32_t)k[10] << 16 | (uint32_t)k[11] << 24;
    a -= c; a ^= ROT(c, 4);  c += b;
    b -= a; b ^= ROT(a, 6);  a += c;
    c -= b; c ^= ROT(b, 8);  b += a;
    a -= c; a ^= ROT(c, 16); c += b;
    b -= a; b ^= ROT(a, 19); a += c;
    c -= b; c ^= ROT(b, 4);  b += a;
  }
  if (len == 0) return c;
  unsigned char t[12] = {0};
  for (size_t i = 0; i < len; i++) t[i] = k[i];
  a += (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
  b += (uint32_t)t[4] | (uint32_t)t[5] << 8 | (uint32_t)t[6] << 16 | (uint32_t)t[7] << 24;
  c += (uint32_t)t[8] | (uint32_t)t[9] << 8 | (uint32_t)t[10] << 16 | (uint32_t)t[11] << 24;
  c ^= b; c -= ROT(b, 14);
  a ^= c; a -= ROT(c, 11);
  b ^= a; b -= ROT(a, 25);
  c ^= b; c -= ROT(b, 16);
  a ^= c; a -= ROT(c, 4);
  b ^= a; b -= ROT(a, 14);
  c ^= b; c -= ROT(b, 24);
  return c;
}
