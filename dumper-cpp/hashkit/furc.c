/* mcrouter's Ch3 (furc_hash): a consistent hash to [0, m) from the bits of a chain of
 * MurmurHash64A values (the first over the key, each next over the previous value). */
#include "hashkit.h"

#define FURC_SEED UINT64_C(4193360111)
#define FURC_SHIFT 23
#define FURC_TRIES 32
#define FURC_CACHE 1024 /* > FURC_TRIES * (FURC_SHIFT + 1) / 64 words */

static const uint64_t kM = UINT64_C(0xc6a4a7935bd1e995);

static uint64_t murmur64a(const unsigned char *key, size_t len, uint64_t seed) {
  uint64_t h = seed ^ ((uint64_t)len * kM);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t k = 0;
    for (int b = 7; b >= 0; b--) k = k << 8 | key[i + (size_t)b];
    k *= kM;
    k ^= k >> 47;
    k *= kM;
    h ^= k;
    h *= kM;
  }
  const size_t rest = len & 7;
  if (rest) {
    for (size_t b = rest; b > 0; b--) h ^= (uint64_t)key[i + b - 1] << (8 * (b - 1));
    h *= kM;
  }
  h ^= h >> 47;
  h *= kM;
  h ^= h >> 47;
  return h;
}

typedef struct {
  const unsigned char *key;
  size_t len;
  int32_t ord; /* the last word computed */
  uint64_t words[FURC_CACHE];
} bits_t;

static uint32_t bit(bits_t *b, uint32_t idx) {
  const int32_t ord = (int32_t)(idx >> 6);
  for (; b->ord < ord; b->ord++) {
    if (b->ord < 0) {
      b->words[0] = murmur64a(b->key, b->len, FURC_SEED);
    } else {
      unsigned char prev[8];
      for (int i = 0; i < 8; i++) prev[i] = (unsigned char)(b->words[b->ord] >> (8 * i));
      b->words[b->ord + 1] = murmur64a(prev, 8, FURC_SEED);
    }
  }
  return (uint32_t)(b->words[ord] >> (idx & 63)) & 1;
}

uint32_t cw_furc_hash(const unsigned char *key, size_t len, uint32_t m) {
  if (m <= 1) return 0;
  bits_t b;
  b.key = key;
  b.len = len;
  b.ord = -1;
  uint32_t d = 32u - (uint32_t)__builtin_clz(m - 1u);
  uint32_t a = d;
  for (int t = 0; t < FURC_TRIES; t++) {
    while (!bit(&b, a)) {
      if (--d == 0) return 0;
      a = d;
    }
    a += FURC_SHIFT;
    uint32_t num = 1;
    for (uint32_t i = 0; i + 1 < d; i++) {
      num = num << 1 | bit(&b, a);
      a += FURC_SHIFT;
    }
    if (num < m) return num;
  }
  return 0;
}
