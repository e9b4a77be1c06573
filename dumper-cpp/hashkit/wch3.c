/* mcrouter's WeightedCh3: Ch3 (furc) retried with salted keys until a SpookyHash V2 draw falls
 * under the chosen server's weight (weights in [0, 1]; all 1.0 is plain Ch3). The salts are the
 * decimal digits of 0, 1, 2, ... written backwards, appended to the key; after 32 tries the last
 * index stands. */
#include <stdlib.h>
#include <string.h>

#include "hashkit.h"

#define WCH3_SEED 0xface2014u
#define WCH3_TRIES 32
#define WCH3_MAX_SALT 20

uint32_t cw_wch3_hash(const unsigned char *key, size_t len, const double *weights, uint32_t n) {
  unsigned char stack[512];
  unsigned char *buf = NULL;
  const unsigned char *k = key;
  size_t klen = len;
  uint32_t index = 0;
  uint64_t salt = 0;
  for (int t = 0; t < WCH3_TRIES; t++) {
    index = cw_furc_hash(k, klen, n);
    const uint64_t p = cw_spooky32(k, klen, WCH3_SEED);
    const uint64_t w = (uint64_t)(weights[index] * (double)UINT32_MAX);
    if (p < w) break;
    if (!buf) {
      buf = len + WCH3_MAX_SALT <= sizeof stack ? stack : malloc(len + WCH3_MAX_SALT);
      if (!buf) break; /* out of memory: the index so far */
      memcpy(buf, key, len);
    }
    uint64_t s = salt++;
    klen = len;
    do {
      buf[klen++] = (unsigned char)('0' + s % 10);
      s /= 10;
    } while (s > 0);
    k = buf;
  }
  if (buf && buf != stack) free(buf);
  return index;
}
