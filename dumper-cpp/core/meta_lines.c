/* The meta commands (mg, md) and their replies (memcached's proto_text.c / proto_parser.c). */
#include <stdio.h>
#include <string.h>

#include "cachewarm_core.h"

static size_t put(char *d, const char *s) {
  const size_t n = strlen(s);
  memcpy(d, s, n);
  return n;
}

/* "<cmd> <token>[ b]" */
static size_t command(char *out, const char *cmd, const unsigned char *key, size_t n) {
  int kind;
  size_t o = put(out, cmd);
  const size_t t = cw_key_token(out + o, key, n, &kind);
  if (kind == CW_KEY_NONE) return 0;
  o += t;
  if (kind == CW_KEY_BASE64) o += put(out + o, " b");
  return o;
}

size_t cw_mg_token_line(char *out, const char *tok, size_t tok_len, int b64, const char *flags, int tagged,
                        uint64_t opaque) {
  size_t o = put(out, "mg ");
  memcpy(out + o, tok, tok_len);
  o += tok_len;
  if (b64) o += put(out + o, " b");
  if (flags[0]) {
    out[o++] = ' ';
    o += put(out + o, flags);
  }
  if (tagged) {
    o += put(out + o, " O");
    o += cw_put_u64(out + o, opaque);
  }
  o += put(out + o, "\r\n");
  return o;
}

size_t cw_mg_line(char *out, const unsigned char *key, size_t n, const char *flags, int tagged, uint64_t opaque) {
  char tok[CW_MAX_KEY];
  int kind;
  const size_t t = cw_key_token(tok, key, n, &kind);
  if (kind == CW_KEY_NONE) return 0;
  return cw_mg_token_line(out, tok, t, kind == CW_KEY_BASE64, flags, tagged, opaque);
}

size_t cw_mg_look_line(char *out, const unsigned char *key, size_t n, uint64_t opaque) {
  return cw_mg_line(out, key, n, "c t s q", 1, opaque);
}

size_t cw_md_cas_line(char *out, const unsigned char *key, size_t n, uint64_t cas, uint64_t opaque) {
  size_t o = command(out, "md ", key, n);
  if (o == 0) return 0;
  o += put(out + o, " C");
  o += cw_put_u64(out + o, cas);
  o += put(out + o, " q O");
  o += cw_put_u64(out + o, opaque);
  o += put(out + o, "\r\n");
  return o;
}

static int parse_u64(const char *p, size_t n, uint64_t *v) {
  if (n == 0 || n > 20) return -1;
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return -1;
    const uint64_t d = (uint64_t)(p[i] - '0');
    if (x > (UINT64_MAX - d) / 10) return -1;
    x = x * 10 + d;
  }
  *v = x;
  return 0;
}

int cw_meta_reply_parse(const char *line, size_t n, cw_meta_reply *out) {
  memset(out, 0, sizeof *out);
  if (n < 2 || (n > 2 && line[2] != ' ')) return 0; /* not a two-letter reply: code "" */
  static const char *const kCodes[] = {"HD", "VA", "EN", "NF", "EX", "NS", "MN"};
  int known = 0;
  for (size_t i = 0; i < sizeof kCodes / sizeof *kCodes; i++)
    if (line[0] == kCodes[i][0] && line[1] == kCodes[i][1]) known = 1;
  if (!known) return 0;
  out->code[0] = line[0];
  out->code[1] = line[1];
  size_t i = 2;
  int first = 1;
  while (i < n) {
    while (i < n && line[i] == ' ') i++;
    size_t e = i;
    while (e < n && line[e] != ' ') e++;
    if (e == i) break;
    const char f = line[i];
    const char *v = line + i + 1;
    const size_t vn = e - i - 1;
    uint64_t u;
    if (first && out->code[0] == 'V') { /* VA <length> */
      if (parse_u64(line + i, e - i, &out->value_len) < 0) return -1;
    } else if (f == 'c') {
      if (parse_u64(v, vn, &out->cas) < 0) return -1;
      out->has_cas = 1;
    } else if (f == 's') {
      if (parse_u64(v, vn, &out->size) < 0) return -1;
      out->has_size = 1;
    } else if (f == 'O') {
      if (parse_u64(v, vn, &out->opaque) < 0) return -1;
      out->has_opaque = 1;
    } else if (f == 'f') {
      if (parse_u64(v, vn, &u) < 0 || u > 0xFFFFFFFFu) return -1;
      out->flags = (uint32_t)u;
      out->has_flags = 1;
    } else if (f == 't') {
      if (vn == 2 && v[0] == '-' && v[1] == '1') {
        out->ttl = CW_NEVER;
      } else {
        if (parse_u64(v, vn, &u) < 0 || u > (uint64_t)INT64_MAX) return -1;
        out->ttl = (int64_t)u;
      }
      out->has_ttl = 1;
    }
    first = 0;
    i = e;
  }
  return 0;
}
