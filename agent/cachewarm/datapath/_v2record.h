/* Data format v2 records (docs/data-format.md section 7.1) for the populator's C walk (_v2plan.c):
 * the strict parser of check 4 (section 7.2), and version 3's (section 8: a source stamp, then a v2
 * record). The Python twin is format_v2.parse_at, with the same rules and the same messages; the C++
 * writer's reader is dumper-cpp/src/record_v2.cc. Header-only (static): included by _v2plan.c,
 * _probes.c and _recheck.c. */
#ifndef CACHEWARM_V2RECORD_H
#define CACHEWARM_V2RECORD_H
#include <stddef.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define V2_MAX_KEY 250
#define V2_MAX_WIRE_KEY 250
#define V2_MAX_BASE64_KEY 186
#define V2_MAX_RELATIVE_TTL 2592000LL
#define V2_MAX_EXPIRY 2147483647LL
#define V2_BINARY_HEAD 32
#define V3_STAMP 16
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
static inline uint32_t v2_be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
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

typedef struct {
  const unsigned char *key; /* the raw key: into the data, or the caller's buffer (base64 decoded) */
  size_t key_len;
  uint64_t value_len;
  uint32_t flags;
  long long expiry;  /* T: 0 = never, else absolute */
  Py_ssize_t mode_at; /* meta records: offset of the E of ME */
  Py_ssize_t next;    /* the next record's offset */
  Py_ssize_t value_at; /* meta records: the value's first byte */
  int binary;
  int b64; /* meta records: the key is base64 on the line (` b`) */
  const unsigned char *tok; /* meta records: the key token on the line (raw or base64) */
  size_t tok_len;
  /* Version 3: the source stamp (section 8.1); 0 / -1 for version 2 */
  uint64_t source_cas;
  long long source_exp;
} V2Record;

static inline int v2_plain(const unsigned char *k, size_t n) {
  if (n < 1 || n > V2_MAX_KEY) return 0;
  for (size_t i = 0; i < n; i++)
    if (k[i] < 0x21 || k[i] > 0x7e) return 0;
  return 1;
}

static const char kV2B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static inline int v2_b64val(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Canonical base64 (padded, zero pad bits) of 1..186 bytes into out; returns the length or -1. */
static inline long v2_b64decode(const unsigned char *s, size_t n, unsigned char *out) {
  if (n == 0 || n % 4) return -1;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    const int last = i + 4 == n;
    const int pad2 = last && s[i + 2] == '=' && s[i + 3] == '=';
    const int pad1 = last && !pad2 && s[i + 3] == '=';
    const int a = v2_b64val(s[i]), b = v2_b64val(s[i + 1]);
    const int c = pad2 ? 0 : v2_b64val(s[i + 2]), d = (pad1 || pad2) ? 0 : v2_b64val(s[i + 3]);
    if (a < 0 || b < 0 || c < 0 || d < 0) return -1;
    if ((pad2 && (b & 15)) || (pad1 && (c & 3))) return -1; /* non-zero pad bits: not canonical */
    const uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)d;
    if (o + 3 > V2_MAX_BASE64_KEY + 2) return -1;
    out[o++] = (unsigned char)(v >> 16);
    if (!pad2) out[o++] = (unsigned char)(v >> 8);
    if (!pad1 && !pad2) out[o++] = (unsigned char)v;
  }
  return (long)o;
}

/* A decimal of 1..20 digits without leading zeros at p[*i..end) (format_v2's regex), saturating at
 * ULLONG_MAX (the callers' range checks then fail as Python's do). */
static inline int v2_number(const unsigned char *p, Py_ssize_t *i, Py_ssize_t end, unsigned long long *v) {
  Py_ssize_t j = *i;
  if (j >= end || p[j] < '0' || p[j] > '9') return -1;
  if (p[j] == '0' && j + 1 < end && p[j + 1] >= '0' && p[j + 1] <= '9') return -1;
  unsigned long long x = 0;
  for (; j < end && p[j] >= '0' && p[j] <= '9'; j++) {
    if (j - *i >= 20) return -1;
    const unsigned d = (unsigned)(p[j] - '0');
    x = x > (ULLONG_MAX - d) / 10 ? ULLONG_MAX : x * 10 + d;
  }
  *v = x;
  *i = j;
  return 0;
}

static inline int v2_lit(const unsigned char *p, Py_ssize_t *i, Py_ssize_t end, const char *lit) {
  const size_t n = strlen(lit);
  if ((size_t)(end - *i) < n || memcmp(p + *i, lit, n) != 0) return -1;
  *i += (Py_ssize_t)n;
  return 0;
}

static inline int v2_valid_expiry(long long t) { return t == 0 || (t > V2_MAX_RELATIVE_TTL && t <= V2_MAX_EXPIRY); }

/* The T to send a destination whose clock is `offset` seconds ahead of this host's (its `stats time`
 * minus ours, rounded down): the record's T moved onto that clock (memcached converts an absolute T
 * with its own idea of the time). 0 stays 0 (never); above 2^31-1 it is clamped (memcached parses T
 * as a signed 32-bit number; clamping only shortens); -1 when it would not be an absolute time on
 * that clock (not sent: expired). format_v2.dest_expiry is the Python twin. */
static inline long long v2_dest_expiry(long long expiry, long long offset) {
  if (expiry == 0) return 0;
  long long t = expiry + offset;
  if (t > V2_MAX_EXPIRY) t = V2_MAX_EXPIRY;
  return t > V2_MAX_RELATIVE_TTL ? t : -1;
}

#define V2_BAD(msg)                         \
  do {                                      \
    snprintf(why, 96, "%s", msg);           \
    return -1;                              \
  } while (0)

/* Parses the record at pos (checks of section 7.2) whose meta line's O must be o_expect; -1 with `why`
 * (96 bytes) on a bad record. A base64 key is decoded into keybuf. */
static inline int v2_command(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t o_expect, V2Record *r,
                             unsigned char *keybuf, char *why) {
  r->source_cas = 0;
  r->source_exp = -1;
  if (pos >= end) V2_BAD("no record");
  if (p[pos] == 0x80) {
    if (end - pos < V2_BINARY_HEAD) V2_BAD("binary record runs past the records");
    const unsigned char *h = p + pos;
    const size_t klen = (size_t)h[2] << 8 | h[3];
    const uint32_t body = v2_be32(h + 8);
    if (h[1] != 0x12 || h[4] != 8 || h[5] || h[6] || h[7] || v2_be32(h + 12) || v2_be32(h + 16) || v2_be32(h + 20))
      V2_BAD("not an ADDQ request");
    if (klen <= V2_MAX_BASE64_KEY || klen > V2_MAX_KEY || body < 8 + klen) V2_BAD("bad binary key length");
    if ((uint64_t)(end - pos - V2_BINARY_HEAD) < (uint64_t)body - 8) V2_BAD("binary record runs past the records");
    r->expiry = (long long)v2_be32(h + 28);
    if (!v2_valid_expiry(r->expiry)) V2_BAD("bad expiration");
    r->key = h + V2_BINARY_HEAD;
    r->key_len = klen;
    if (v2_plain(r->key, klen)) V2_BAD("a printable key in a binary record");
    r->flags = v2_be32(h + 24);
    r->value_len = body - 8 - klen;
    r->next = pos + V2_BINARY_HEAD + (Py_ssize_t)body - 8;
    r->mode_at = -1;
    r->binary = 1;
    r->b64 = 0;
    r->tok = NULL;
    r->tok_len = 0;
    r->value_at = pos + V2_BINARY_HEAD + (Py_ssize_t)klen;
    return 0;
  }
  if (p[pos] != 'm') V2_BAD("neither a meta set nor a binary record");
  /* As format_v2's regex: the whole line first, then the numbers' ranges, in this order. */
  const Py_ssize_t lend = end - pos > V2_MAX_LINE ? pos + V2_MAX_LINE : end;
  Py_ssize_t i = pos;
  unsigned long long vlen, t, flags, off;
  int b64 = 0;
  if (v2_lit(p, &i, lend, "ms ") < 0) V2_BAD("not a meta set line");
  const Py_ssize_t k0 = i;
  while (i < lend && i - k0 <= V2_MAX_WIRE_KEY && p[i] >= 0x21 && p[i] <= 0x7e) i++;
  const size_t ktok = (size_t)(i - k0);
  if (ktok == 0 || ktok > V2_MAX_WIRE_KEY || v2_lit(p, &i, lend, " ") < 0 || v2_number(p, &i, lend, &vlen) < 0)
    V2_BAD("not a meta set line");
  if (v2_lit(p, &i, lend, " b") == 0) b64 = 1;
  Py_ssize_t o_at = 0;
  if (v2_lit(p, &i, lend, " T") < 0 || v2_number(p, &i, lend, &t) < 0 || v2_lit(p, &i, lend, " F") < 0 ||
      v2_number(p, &i, lend, &flags) < 0 || v2_lit(p, &i, lend, " ME q O") < 0 ||
      (o_at = i, v2_number(p, &i, lend, &off)) < 0 || v2_lit(p, &i, lend, "\r\n") < 0)
    V2_BAD("not a meta set line");
  if (vlen > 0xFFFFFFFFULL) V2_BAD("bad value length");
  if (t > (unsigned long long)V2_MAX_EXPIRY || !v2_valid_expiry((long long)t)) V2_BAD("bad T");
  if (flags > 0xFFFFFFFFULL) V2_BAD("bad F");
  if (off != (unsigned long long)o_expect) V2_BAD("O is not the record's offset");
  const Py_ssize_t vstart = i;
  if ((unsigned long long)(end - vstart) < vlen + 2 || p[vstart + (Py_ssize_t)vlen] != '\r' ||
      p[vstart + (Py_ssize_t)vlen + 1] != '\n')
    V2_BAD("value not followed by \\r\\n within the records");
  if (b64) {
    const long d = v2_b64decode(p + k0, ktok, keybuf);
    if (d < 1 || d > V2_MAX_BASE64_KEY || v2_plain(keybuf, (size_t)d)) V2_BAD("bad base64 key");
    r->key = keybuf;
    r->key_len = (size_t)d;
  } else {
    r->key = p + k0;
    r->key_len = ktok;
  }
  r->value_len = vlen;
  r->flags = (uint32_t)flags;
  r->expiry = (long long)t;
  r->mode_at = o_at - 5;
  r->next = vstart + (Py_ssize_t)vlen + 2;
  r->binary = 0;
  r->b64 = b64;
  r->value_at = vstart;
  r->tok = p + k0;
  r->tok_len = ktok;
  return 0;
}

/* The record at pos of a file of version 2 (stamped = 0) or 3 (stamped = 1: section 8.2). */
static inline int v2_parse(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end, int stamped, V2Record *r,
                           unsigned char *keybuf, char *why) {
  if (!stamped) return v2_command(p, pos, end, pos, r, keybuf, why);
  if (end - pos < V3_STAMP) V2_BAD("source stamp runs past the records");
  const uint64_t cas = v2_le64(p + pos);
  const long long exp = (long long)v2_le64(p + pos + 8);
  if (exp != -1 && exp <= 0) {
    snprintf(why, 96, "source_exp %lld", exp);
    return -1;
  }
  if (v2_command(p, pos + V3_STAMP, end, pos, r, keybuf, why) < 0) return -1;
  r->source_cas = cas;
  r->source_exp = exp;
  return 0;
}
#endif
