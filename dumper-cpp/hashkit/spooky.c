/* SpookyHash V2 (Bob Jenkins, public domain), 32-bit result: mcrouter's WeightedCh3 draws its
 * per-key probability with it (folly::hash::SpookyHashV2::Hash32). Words are little-endian. The
 * twelve- and four-variable rounds are written as loops over their rotation tables. */
#include <string.h>

#include "hashkit.h"

#define SC_CONST UINT64_C(0xdeadbeefdeadbeef)
#define BLOCK 96 /* 12 words */

static uint64_t rot(uint64_t x, int k) { return x << k | x >> (64 - k); }

static uint64_t r64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static uint64_t r32(const unsigned char *p) {
  return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
}

/* The short message rounds over (h0, h1, h2, h3). */
static void short_mix(uint64_t h[4]) {
  static const int k[12] = {50, 52, 30, 41, 54, 48, 38, 37, 62, 34, 5, 36};
  for (int i = 0; i < 12; i++) {
    const int a = i % 4, x = (a + 2) % 4;
    h[x] = rot(h[x], k[i]);
    h[x] += h[(a + 3) % 4];
    h[a] ^= h[x];
  }
}

static void short_end(uint64_t h[4]) {
  static const int k[11] = {15, 52, 26, 51, 28, 9, 47, 54, 32, 25, 63};
  for (int i = 0; i < 11; i++) {
    const int x = (i + 3) % 4, y = (i + 2) % 4;
    h[x] ^= h[y];
    h[y] = rot(h[y], k[i]);
    h[x] += h[y];
  }
}

static void short_hash(const unsigned char *p, size_t len, uint64_t *h1, uint64_t *h2) {
  uint64_t h[4] = {*h1, *h2, SC_CONST, SC_CONST};
  size_t rem = len % 32;
  if (len > 15) {
    for (size_t b = 0; b < len / 32; b++, p += 32) {
      h[2] += r64(p);
      h[3] += r64(p + 8);
      short_mix(h);
      h[0] += r64(p + 16);
      h[1] += r64(p + 24);
    }
    if (rem >= 16) {
      h[2] += r64(p);
      h[3] += r64(p + 8);
      short_mix(h);
      p += 16;
      rem -= 16;
    }
  }
  h[3] += (uint64_t)len << 56;
  if (rem >= 12) {
    for (size_t i = 12; i < rem; i++) h[3] += (uint64_t)p[i] << (8 * (i - 8));
    h[3] += r32(p + 8);
    h[2] += r64(p);
  } else if (rem >= 8) {
    for (size_t i = 8; i < rem; i++) h[3] += (uint64_t)p[i] << (8 * (i - 8));
    h[2] += r64(p);
  } else if (rem >= 4) {
    for (size_t i = 4; i < rem; i++) h[2] += (uint64_t)p[i] << (8 * i);
    h[2] += r32(p);
  } else if (rem > 0) {
    for (size_t i = 0; i < rem; i++) h[2] += (uint64_t)p[i] << (8 * i);
  } else {
    h[2] += SC_CONST;
    h[3] += SC_CONST;
  }
  short_end(h);
  *h1 = h[0];
  *h2 = h[1];
}

/* The long message rounds over twelve variables. */
static void mix(const unsigned char *data, uint64_t s[12]) {
  static const int k[12] = {11, 32, 43, 31, 17, 28, 39, 57, 55, 54, 22, 46};
  for (int i = 0; i < 12; i++) {
    s[i] += r64(data + 8 * i);
    s[(i + 2) % 12] ^= s[(i + 10) % 12];
    s[(i + 11) % 12] ^= s[i];
    s[i] = rot(s[i], k[i]);
    s[(i + 11) % 12] += s[(i + 1) % 12];
  }
}

static void end_partial(uint64_t h[12]) {
  static const int k[12] = {44, 15, 34, 21, 38, 33, 10, 13, 38, 53, 42, 54};
  for (int j = 0; j < 12; j++) {
    h[(j + 11) % 12] += h[(j + 1) % 12];
    h[(j + 2) % 12] ^= h[(j + 11) % 12];
    h[(j + 1) % 12] = rot(h[(j + 1) % 12], k[j]);
  }
}

uint32_t cw_spooky32(const unsigned char *key, size_t len, uint32_t seed) {
  uint64_t h1 = seed, h2 = seed;
  if (len < 2 * BLOCK) {
    short_hash(key, len, &h1, &h2);
    return (uint32_t)h1;
  }
  uint64_t h[12];
  for (int i = 0; i < 12; i++) h[i] = i % 3 == 0 ? h1 : i % 3 == 1 ? h2 : SC_CONST;
  const size_t blocks = len / BLOCK;
  for (size_t b = 0; b < blocks; b++) mix(key + b * BLOCK, h);
  const size_t rem = len - blocks * BLOCK;
  unsigned char last[BLOCK] = {0};
  memcpy(last, key + blocks * BLOCK, rem);
  last[BLOCK - 1] = (unsigned char)rem;
  for (int i = 0; i < 12; i++) h[i] += r64(last + 8 * i);
  end_partial(h);
  end_partial(h);
  end_partial(h);
  return (uint32_t)h[0];
}
