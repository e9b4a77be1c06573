/* What the dumper read of an item (cw_read), as the populator's probes and the stream's keys/STAMPS
 * carry it from the read to the re-check: 24 bytes, little-endian. */
#include "cachewarm_core.h"

static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

void cw_read_pack(unsigned char *out, const cw_read *r) {
  put64(out, r->source_cas);
  put64(out + 8, (uint64_t)r->source_exp);
  put64(out + 16, (uint64_t)r->value_len);
}

void cw_read_unpack(const unsigned char *p, cw_read *out) {
  out->source_cas = get64(p);
  out->source_exp = (int64_t)get64(p + 8);
  out->value_len = (int64_t)get64(p + 16);
}
