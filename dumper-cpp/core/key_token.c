/* How a meta command names a key (docs/data-format.md "Keys"). */
#include <string.h>

#include "cachewarm_core.h"

int cw_key_is_plain(const unsigned char *key, size_t n) {
  if (n < 1 || n > CW_MAX_KEY) return 0;
  for (size_t i = 0; i < n; i++)
    if (key[i] < 0x21 || key[i] > 0x7e) return 0;
  return 1;
}

size_t cw_key_token(char *out, const unsigned char *key, size_t n, int *kind) {
  *kind = CW_KEY_NONE;
  if (n < 1 || n > CW_MAX_KEY) return 0;
  int text = 1;
  for (size_t i = 0; i < n; i++)
    /* a space ends the token, `\n` the line; 1.6.18 and 1.6.38 end the command at a NUL */
    if (key[i] == ' ' || key[i] == '\n' || key[i] == 0) text = 0;
  if (cw_key_is_plain(key, n)) {
    memcpy(out, key, n);
    *kind = CW_KEY_PLAIN;
    return n;
  }
  if (n <= CW_MAX_BASE64_KEY) {
    *kind = CW_KEY_BASE64;
    return cw_base64_encode(out, key, n);
  }
  if (text) {
    memcpy(out, key, n);
    *kind = CW_KEY_RAW;
    return n;
  }
  return 0;
}
