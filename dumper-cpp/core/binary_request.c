/* memcached's binary protocol requests (protocol_binary.h): big-endian header fields. */
#include <string.h>

#include "cachewarm_core.h"

static void put16(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 8);
  p[1] = (unsigned char)v;
}

static void put32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

static void header(unsigned char *out, uint8_t opcode, size_t key_len, uint8_t extras, uint32_t body, uint32_t opaque) {
  memset(out, 0, CW_BIN_HEADER);
  out[0] = CW_BIN_REQUEST;
  out[1] = opcode;
  put16(out + 2, (uint32_t)key_len);
  out[4] = extras;
  put32(out + 8, body);
  put32(out + 12, opaque);
  /* vbucket, data type and CAS 0: a non-zero CAS would make the ADD a compare-and-swap */
}

void cw_bin_store_head(unsigned char *out, uint8_t opcode, size_t key_len, uint32_t value_len, uint32_t flags,
                       uint32_t expiration, uint32_t opaque) {
  header(out, opcode, key_len, 8, (uint32_t)(8 + key_len + value_len), opaque);
  put32(out + 24, flags);
  put32(out + 28, expiration);
}

void cw_bin_add_head(unsigned char *out, size_t key_len, uint32_t value_len, uint32_t flags, uint32_t expiration,
                     uint32_t opaque) {
  cw_bin_store_head(out, CW_BIN_OP_ADD, key_len, value_len, flags, expiration, opaque);
}

void cw_bin_key_request(unsigned char *out, uint8_t opcode, size_t key_len, uint32_t opaque) {
  header(out, opcode, key_len, 0, (uint32_t)key_len, opaque);
}

void cw_bin_cas_request(unsigned char *out, uint8_t opcode, size_t key_len, uint32_t opaque, uint64_t cas) {
  cw_bin_key_request(out, opcode, key_len, opaque);
  put32(out + 16, (uint32_t)(cas >> 32));
  put32(out + 20, (uint32_t)cas);
}
