/* Bob Jenkins' one-at-a-time: libmemcached's default hash. Bytes are signed `char`. */
#include "hashkit.h"

uint32_t cw_hash_one_at_a_time(const unsigned char *key, size_t len) {
  uint32_t h = 0;
  for (size_t i = 0; i < len; i++) {
    h += cw_sbyte(key[i]);
    h += h << 10;
    h ^= h >> 6;
  }
  h += h << 3;
  h ^= h >> 11;
  h += h << 15;
  return h;
}
