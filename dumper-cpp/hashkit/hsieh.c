/* Paul Hsieh's SuperFastHash as libmemcached and twemproxy ship it: 16-bit words little-endian; the
 * third byte of a 3-byte tail is read as signed `char` (the others unsigned). */
#include "hashkit.h"

static uint32_t get16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }

uint32_t cw_hash_hsieh(const unsigned char *key, size_t len) {
  if (len == 0) return 0;
  uint32_t h = 0, tmp;
  const size_t rem = len & 3;
  for (len >>= 2; len > 0; len--, key += 4) {
    h += get16(key);
    tmp = (get16(key + 2) << 11) ^ h;
    h = (h << 16) ^ tmp;
    h += h >> 11;
  }
  switch (rem) {
    case 3:
      h += get16(key);
      h ^= h << 16;
      h ^= cw_sbyte(key[2]) << 18;
      h += h >> 11;
      break;
    case 2:
      h += get16(key);
      h ^= h << 11;
      h += h >> 17;
      break;
    case 1:
      h += key[0];
      h ^= h << 10;
      h += h >> 1;
  }
  h ^= h << 3;
  h += h >> 5;
  h ^= h << 4;
  h += h >> 17;
  h ^= h << 25;
  h += h >> 6;
  return h;
}
