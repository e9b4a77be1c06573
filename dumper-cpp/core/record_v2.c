/* Data format v2 and v3 records (docs/data-format.md sections 7 and 8): each record is the command
 * that stores its item — `ms <key> <len>[ b] T<expiry> F<flags> ME q O<offset>\r\n<value>\r\n`, or for
 * a key no meta command can name a binary-protocol ADDQ — and version 3 puts a 16-byte source stamp
 * in front of it. The writer's encoding and check 4's strict reader (sections 7.2 and 8.2). */
#include <stdio.h>
#include <string.h>

#include "cachewarm_core.h"

static inline uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline uint64_t le64(const unsigned char *p) {
  return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 |
         (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

static inline int plain(const unsigned char *k, size_t n) {
  if (n < 1 || n > CW_MAX_KEY) return 0;
  for (size_t i = 0; i < n; i++)
    if (k[i] < 0x21 || k[i] > 0x7e) return 0;
  return 1;
}

int cw_record_valid_expiry(int64_t t) { return t == 0 || (t > CW_MAX_RELATIVE_TTL && t <= CW_MAX_EXPIRY); }

/* ---- writing ------------------------------------------------------------------------------------ */

size_t cw_record_meta_line(char *out, const unsigned char *key, size_t n, uint32_t value_len, uint32_t flags,
                           uint32_t expiry, uint64_t offset) {
  int kind;
  char tok[CW_MAX_KEY];
  const size_t t = cw_key_token(tok, key, n, &kind);
  if (kind != CW_KEY_PLAIN && kind != CW_KEY_BASE64) return 0;
  const cw_ms m = {tok, t, kind == CW_KEY_BASE64, value_len, expiry, flags, 1, 1, offset};
  return cw_ms_line(out, &m);
}

void cw_record_binary_head(unsigned char *out, size_t key_len, uint32_t value_len, uint32_t flags, uint32_t expiry) {
  cw_bin_store_head(out, CW_BIN_OP_ADDQ, key_len, value_len, flags, expiry, 0);
}

void cw_record_stamp(unsigned char *out, uint64_t source_cas, int64_t source_exp) {
  for (int i = 0; i < 8; i++) out[i] = (unsigned char)(source_cas >> (8 * i));
  for (int i = 0; i < 8; i++) out[8 + i] = (unsigned char)((uint64_t)source_exp >> (8 * i));
}

/* ---- reading (check 4) -------------------------------------------------------------------------- */

/* A decimal of 1..20 digits without leading zeros at p[*i..end), saturating at UINT64_MAX (the
 * callers' range checks then fail). */
static inline int number(const unsigned char *p, size_t *i, size_t end, uint64_t *v) {
  size_t j = *i;
  if (j >= end || p[j] < '0' || p[j] > '9') return -1;
  if (p[j] == '0' && j + 1 < end && p[j + 1] >= '0' && p[j + 1] <= '9') return -1;
  uint64_t x = 0;
  for (; j < end && p[j] >= '0' && p[j] <= '9'; j++) {
    if (j - *i >= 20) return -1;
    const unsigned d = (unsigned)(p[j] - '0');
    x = x > (UINT64_MAX - d) / 10 ? UINT64_MAX : x * 10 + d;
  }
  *v = x;
  *i = j;
  return 0;
}

static inline int lit(const unsigned char *p, size_t *i, size_t end, const char *s, size_t n) {
  if (end - *i < n || memcmp(p + *i, s, n) != 0) return -1;
  *i += n;
  return 0;
}
#define LIT(s) lit(p, &i, lend, s, sizeof s - 1)

#define BAD(msg)                              \
  do {                                        \
    snprintf(why, CW_RECORD_WHY, "%s", msg);  \
    return -1;                                \
  } while (0)

/* The command at pos whose meta line's O must be o_expect. */
static inline int command(const unsigned char *p, size_t pos, size_t end, size_t o_expect, cw_record *r,
                   unsigned char *keybuf, char *why) {
  if (pos >= end) BAD("no record");
  if (p[pos] == CW_BIN_REQUEST) {
    if (end - pos < CW_BIN_ADD_HEAD) BAD("binary record runs past the records");
    const unsigned char *h = p + pos;
    const size_t klen = (size_t)h[2] << 8 | h[3];
    const uint32_t body = be32(h + 8);
    if (h[1] != CW_BIN_OP_ADDQ || h[4] != 8 || h[5] || h[6] || h[7] || be32(h + 12) || be32(h + 16) || be32(h + 20))
      BAD("not an ADDQ request");
    if (klen <= CW_MAX_BASE64_KEY || klen > CW_MAX_KEY || body < 8 + klen) BAD("bad binary key length");
    if ((uint64_t)(end - pos - CW_BIN_ADD_HEAD) < (uint64_t)body - 8) BAD("binary record runs past the records");
    r->expiry = (int64_t)be32(h + 28);
    if (!cw_record_valid_expiry(r->expiry)) BAD("bad expiration");
    r->key = h + CW_BIN_ADD_HEAD;
    r->key_len = klen;
    if (plain(r->key, klen)) BAD("a printable key in a binary record");
    r->flags = be32(h + 24);
    r->value_len = body - 8 - klen;
    r->value_at = pos + CW_BIN_ADD_HEAD + klen;
    r->next = pos + CW_BIN_ADD_HEAD + body - 8;
    r->mode_at = 0;
    r->binary = 1;
    r->b64 = 0;
    r->tok = NULL;
    r->tok_len = 0;
    return 0;
  }
  if (p[pos] != 'm') BAD("neither a meta set nor a binary record");
  /* The whole line first, then the numbers' ranges, in this order. */
  const size_t lend = end - pos > CW_RECORD_MAX_LINE ? pos + CW_RECORD_MAX_LINE : end;
  size_t i = pos, o_at = 0;
  uint64_t vlen, t, flags, off;
  if (LIT("ms ") < 0) BAD("not a meta set line");
  const size_t k0 = i;
  while (i < lend && i - k0 <= CW_MAX_KEY && p[i] >= 0x21 && p[i] <= 0x7e) i++;
  const size_t ktok = i - k0;
  if (ktok == 0 || ktok > CW_MAX_KEY || LIT(" ") < 0 || number(p, &i, lend, &vlen) < 0) BAD("not a meta set line");
  const int b64 = LIT(" b") == 0;
  if (LIT(" T") < 0 || number(p, &i, lend, &t) < 0 || LIT(" F") < 0 || number(p, &i, lend, &flags) < 0 ||
      LIT(" ME q O") < 0 || (o_at = i, number(p, &i, lend, &off)) < 0 || LIT("\r\n") < 0)
    BAD("not a meta set line");
  if (vlen > UINT32_MAX) BAD("bad value length");
  if (t > (uint64_t)CW_MAX_EXPIRY || !cw_record_valid_expiry((int64_t)t)) BAD("bad T");
  if (flags > UINT32_MAX) BAD("bad F");
  if (off != (uint64_t)o_expect) BAD("O is not the record's offset");
  const size_t vstart = i;
  if ((uint64_t)(end - vstart) < vlen + 2 || p[vstart + vlen] != '\r' || p[vstart + vlen + 1] != '\n')
    BAD("value not followed by \\r\\n within the records");
  if (b64) {
    /* Canonical: base64 only for a key that needs it, spelled as the writer spells it. */
    const long d = cw_base64_decode((const char *)p + k0, ktok, keybuf);
    if (d < 1 || d > CW_MAX_BASE64_KEY || plain(keybuf, (size_t)d)) BAD("bad base64 key");
    r->key = keybuf;
    r->key_len = (size_t)d;
  } else {
    r->key = p + k0;
    r->key_len = ktok;
  }
  r->value_len = vlen;
  r->flags = (uint32_t)flags;
  r->expiry = (int64_t)t;
  r->mode_at = o_at - 5; /* the E of " ME q O" */
  r->value_at = vstart;
  r->next = vstart + vlen + 2;
  r->binary = 0;
  r->b64 = b64;
  r->tok = p + k0;
  r->tok_len = ktok;
  return 0;
}

int cw_record_parse(const unsigned char *p, size_t pos, size_t end, int stamped, cw_record *r,
                    unsigned char *keybuf, char *why) {
  r->source_cas = 0;
  r->source_exp = CW_NEVER;
  if (!stamped) return command(p, pos, end, pos, r, keybuf, why);
  if (pos > end || end - pos < CW_RECORD_STAMP) BAD("source stamp runs past the records");
  const uint64_t cas = le64(p + pos);
  const int64_t exp = (int64_t)le64(p + pos + 8);
  if (exp != CW_NEVER && exp <= 0) {
    snprintf(why, CW_RECORD_WHY, "source_exp %lld", (long long)exp);
    return -1;
  }
  if (command(p, pos + CW_RECORD_STAMP, end, pos, r, keybuf, why) < 0) return -1;
  r->source_cas = cas;
  r->source_exp = exp;
  return 0;
}
