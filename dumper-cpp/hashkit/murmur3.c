/* MurmurHash3 x86_32 with seed 0: pymemcache's rendezvous hash (its pure-Python murmur3_32). */
#include "hashkit.h"

static uint32_t rotl(uint32_t x, int r) { return x << r | x >> (32 - r); }

uint32_t cw_hash_murmur3(const unsigned char *key, size_t len) {
  const uint32_t c1 = 0xcc9e2d51, c2 = 0x1b873593;
  uint32_t h = 0;
  size_t i = 0;
  for (; i + 4 <= len; i += 4) {
    uint32_t k = (uint32_t)key[i] | (uint32_t)key[i + 1] << 8 | (uint32_t)key[i + 2] << 16 | (uint32_t)key[i + 3] << 24;
    k = rotl(k * c1, 15) * c2;
    h = rotl(h ^ k, 13) * 5 + 0xe6546b64;
  }
  uint32_t k = 0;
  switch (len & 3) {
    case 3:
      k ^= (uint32_t)key[i + 2] << 16;
      /* fall through */
    case 2:
      k ^= (uint32_t)key[i + 1] << 8;
      /* fall through */
    case 1:
      k ^= key[i];
      h ^= rotl(k * c1, 15) * c2;
  }
  h ^= (uint32_t)len;
  h ^= h >> 16;
  h *= 0x85ebca6b;
  h ^= h >> 13;
  h *= 0xc2b2ae35;
  h ^= h >> 16;
  return h;
}
