/* The text commands that store an item on a destination: `ms` (the data files' records, the stream,
 * set mode) and `add` (add mode to a destination without the binary protocol). Each has a writer and
 * its length, so a caller can size a buffer before it writes. */
#include <string.h>

#include "cachewarm_core.h"

size_t cw_ms_line_len(const cw_ms *m) {
  return 3 + m->tok_len + 1 + cw_u64_len(m->value_len) + (m->b64 ? 2 : 0) + 2 + cw_u64_len(m->expiry) + 2 +
         cw_u64_len(m->flags) + 5 + (m->tagged ? 2 + cw_u64_len(m->opaque) : 0) + 2;
}

size_t cw_ms_line(char *out, const cw_ms *m) {
  char *p = out;
  memcpy(p, "ms ", 3);
  p += 3;
  memcpy(p, m->tok, m->tok_len);
  p += m->tok_len;
  *p++ = ' ';
  p += cw_put_u64(p, m->value_len);
  if (m->b64) {
    memcpy(p, " b", 2);
    p += 2;
  }
  memcpy(p, " T", 2);
  p += 2;
  p += cw_put_u64(p, m->expiry);
  memcpy(p, " F", 2);
  p += 2;
  p += cw_put_u64(p, m->flags);
  memcpy(p, m->add ? " ME q" : " MS q", 5);
  p += 5;
  if (m->tagged) {
    memcpy(p, " O", 2);
    p += 2;
    p += cw_put_u64(p, m->opaque);
  }
  memcpy(p, "\r\n", 2);
  return (size_t)(p + 2 - out);
}

size_t cw_add_line_len(size_t key_len, uint32_t flags, uint64_t expiry, uint64_t value_len) {
  return 4 + key_len + 1 + cw_u64_len(flags) + 1 + cw_u64_len(expiry) + 1 + cw_u64_len(value_len) + 2;
}

size_t cw_add_line(char *out, const char *key, size_t key_len, uint32_t flags, uint64_t expiry, uint64_t value_len) {
  char *p = out;
  memcpy(p, "add ", 4);
  p += 4;
  memcpy(p, key, key_len);
  p += key_len;
  *p++ = ' ';
  p += cw_put_u64(p, flags);
  *p++ = ' ';
  p += cw_put_u64(p, expiry);
  *p++ = ' ';
  p += cw_put_u64(p, value_len);
  memcpy(p, "\r\n", 2);
  return (size_t)(p + 2 - out);
}
