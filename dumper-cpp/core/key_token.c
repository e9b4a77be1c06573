/* How a meta command names a key (docs/data-format.md "Keys"). */
#include <string.h>

#include "cachewarm_core.h"

/* Base64's longest key token is 250 characters: 186 raw bytes. */
#define CW_MAX_BASE64_KEY 186

static const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static size_t base64(char *out, const unsigned char *s, size_t n) {
  size_t o = 0, i = 0;
  for (; i + 2 < n; i += 3) {
    const uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
    out[o++] = kB64[v >> 18];
    out[o++] = kB64[(v >> 12) & 63];
    out[o++] = kB64[(v >> 6) & 63];
    out[o++] = kB64[v & 63];
  }
  if (i < n) {
    const uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
    out[o++] = kB64[v >> 18];
    out[o++] = kB64[(v >> 12) & 63];
    out[o++] = i + 1 < n ? kB64[(v >> 6) & 63] : '=';
    out[o++] = '=';
  }
  return o;
}

size_t cw_key_token(char *out, const unsigned char *key, size_t n, int *kind) {
  *kind = CW_KEY_NONE;
  if (n < 1 || n > CW_MAX_KEY) return 0;
  int plain = 1, text = 1;
  for (size_t i = 0; i < n; i++) {
    if (key[i] < 0x21 || key[i] > 0x7e) plain = 0;
    /* a space ends the token, `\n` the line; 1.6.18 and 1.6.38 end the command at a NUL */
    if (key[i] == ' ' || key[i] == '\n' || key[i] == 0) text = 0;
  }
  if (plain) {
    memcpy(out, key, n);
    *kind = CW_KEY_PLAIN;
    return n;
  }
  if (n <= CW_MAX_BASE64_KEY) {
    *kind = CW_KEY_BASE64;
    return base64(out, key, n);
  }
  if (text) {
    memcpy(out, key, n);
    *kind = CW_KEY_RAW;
    return n;
  }
  return 0;
}
