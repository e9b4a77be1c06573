/* What the populator's C walk (_v2plan.c) shares with _probes.c and _recheck.c: its plan's pieces, a
 * growable buffer, the T moved onto a destination's clock. Reading a record is the core's
 * (dumper-cpp/core/record_v2.c). Header-only (static). */
#ifndef CACHEWARM_V2PLAN_H
#define CACHEWARM_V2PLAN_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cachewarm_core.h"

#define V2_MAX_LINE 400 /* a meta line is at most ~340 bytes */
/* Pieces other than file ranges (see _v2plan.c). */
#define V2_PIECE_MN (-1)
#define V2_PIECE_S (-2)
/* (V2_PIECE_LINE - k, n): n bytes of the plan's generated lines from offset k (add mode: the text
 * `add` line sent in place of a meta record's line). */
#define V2_PIECE_LINE (-3)

static inline uint32_t v2_le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t v2_le64(const unsigned char *p) {
  return (uint64_t)v2_le32(p) | (uint64_t)v2_le32(p + 4) << 32;
}
/* A growable byte buffer. */
typedef struct {
  unsigned char *data;
  size_t len, cap;
} V2Buf;

static inline int v2buf_put(V2Buf *b, const void *p, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->len + n) cap *= 2;
    unsigned char *d = realloc(b->data, cap);
    if (!d) return -1;
    b->data = d;
    b->cap = cap;
  }
  memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}
static inline void v2buf_free(V2Buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

/* The T to send a destination whose clock is `offset` seconds ahead of this host's (its `stats time`
 * minus ours, rounded down): the record's T moved onto that clock (memcached converts an absolute T
 * with its own idea of the time). 0 stays 0 (never); above 2^31-1 it is clamped (memcached parses T
 * as a signed 32-bit number; clamping only shortens); -1 when it would not be an absolute time on
 * that clock (not sent: expired). format_v2.dest_expiry is the Python twin. */
static inline long long v2_dest_expiry(long long expiry, long long offset) {
  if (expiry == 0) return 0;
  long long t = expiry + offset;
  if (t > CW_MAX_EXPIRY) t = CW_MAX_EXPIRY;
  return t > CW_MAX_RELATIVE_TTL ? t : -1;
}

#endif
