/* MurmurHash2 as libmemcached and twemproxy seed it (0xdeadbeef * len); words little-endian. */
#include "hashkit.h"

uint32_t cw_hash_murmur(const unsigned char *key, size_t len) {
  const uint32_t m = 0x5bd1e995;
  const uint32_t n = (uint32_t)len;
  uint32_t h = (0xdeadbeef * n) ^ n;
  for (; len >= 4; key += 4, len -= 4) {
    uint32_t k = (uint32_t)key[0] | (uint32_t)key[1] << 8 | (uint32_t)key[2] << 16 | (uint32_t)key[3] << 24;
    k *= m;
    k ^= k >> 24;
    k *= m;
    h = h * m ^ k;
  }
  switch (len) {
    case 3:
      h ^= (uint32_t)key[2] << 16;
      /* fall through */
    case 2:
      h ^= (uint32_t)key[1] << 8;
      /* fall through */
    case 1:
      h ^= key[0];
      h *= m;
  }
  h ^= h >> 13;
  h *= m;
  h ^= h >> 15;
  return h;
}
