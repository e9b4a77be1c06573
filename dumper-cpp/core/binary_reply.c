/* A binary protocol response's header (protocol_binary.h), and what an ADD's status means. */
#include "cachewarm_core.h"

static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

int cw_bin_reply_parse(const unsigned char *p, size_t n, cw_bin_reply *out) {
  if (n < CW_BIN_HEADER) return 0;
  if (p[0] != CW_BIN_RESPONSE) return -1;
  out->opcode = p[1];
  out->key_len = (uint16_t)(p[2] << 8 | p[3]);
  out->extras_len = p[4];
  out->status = (uint16_t)(p[6] << 8 | p[7]);
  out->body_len = get32(p + 8);
  out->opaque = get32(p + 12);
  out->cas = (uint64_t)get32(p + 16) << 32 | get32(p + 20);
  return 1;
}

int cw_bin_add_outcome(uint16_t status) {
  if (status == CW_BIN_OK) return 1;
  /* memcached answers an ADD of an existing key EXISTS (NOT_STORED on other store paths): kept */
  if (status == CW_BIN_EXISTS || status == CW_BIN_NOT_STORED) return 0;
  return -1;
}

const char *cw_bin_status_text(uint16_t status) {
  switch (status) {
    case 0x0001: return "NOT_FOUND";
    case 0x0002: return "EXISTS";
    case 0x0003: return "SERVER_ERROR object too large for cache";
    case 0x0004: return "CLIENT_ERROR invalid arguments";
    case 0x0005: return "NOT_STORED";
    case 0x0081: return "ERROR unknown command";
    case 0x0082: return "SERVER_ERROR out of memory";
    default: return "SERVER_ERROR";
  }
}
