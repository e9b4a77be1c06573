/* cachewarm's wire rules, in C99, shared by the dumper (C++, dumper-cpp/) and the populator's Python
 * extension (agent/cachewarm/datapath/): one implementation of each rule, one idea per file.
 *
 *   binary_request.c  memcached's binary protocol requests: the ADD that stores an item, key-only
 *                     requests (GETK, NOOP)
 *   binary_reply.c    a binary response's header (status, opaque, CAS)
 *   key_token.c       how a meta command names a key (plain, base64 + `b`, raw, or not at all)
 *   meta_lines.c      the re-check's meta commands: `mg <key> c t s q O<n>` (a look without the
 *                     value), `md <key> C<cas> q O<n>` (a CAS-guarded delete), and their replies
 *   recheck.c         the re-check's decisions (docs/reliability.md "Live traffic during the warm")
 *
 * tests/vectors/core/ pins every function; dumper-cpp/tests/core_test.cc and
 * tests/datapath/test_core.py read the same files. */
#ifndef CACHEWARM_CORE_H
#define CACHEWARM_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- binary protocol (memcached's protocol_binary.h) ------------------------------------------- */

#define CW_BIN_HEADER 24
/* An ADD's header and extras (flags, expiration); the key and the value follow. */
#define CW_BIN_ADD_HEAD 32
#define CW_BIN_REQUEST 0x80
#define CW_BIN_RESPONSE 0x81
#define CW_BIN_OP_GET 0x00
#define CW_BIN_OP_ADD 0x02
#define CW_BIN_OP_NOOP 0x0a
#define CW_BIN_OP_GETK 0x0c
#define CW_BIN_OP_GETKQ 0x0d
/* Response statuses the populator tells apart; any other is an error that fails the file. */
#define CW_BIN_OK 0x0000
#define CW_BIN_NOT_FOUND 0x0001
#define CW_BIN_EXISTS 0x0002
#define CW_BIN_NOT_STORED 0x0005

/* The 32-byte head of a non-quiet ADD of a key of key_len bytes and a value of value_len: memcached
 * answers it (status 0 with the new item's CAS, or EXISTS), never unlinks the key's item when it
 * fails, and echoes `opaque`. expiration: 0 = never, else memcached's (absolute above 30 days). */
void cw_bin_add_head(unsigned char *out, size_t key_len, uint32_t value_len, uint32_t flags, uint32_t expiration,
                     uint32_t opaque);
/* A 24-byte request header with a key of key_len bytes and nothing else (GETK, GETKQ; NOOP: 0). */
void cw_bin_key_request(unsigned char *out, uint8_t opcode, size_t key_len, uint32_t opaque);

typedef struct {
  uint8_t opcode;
  uint8_t extras_len;
  uint16_t key_len;
  uint16_t status;
  uint32_t body_len; /* extras + key + value */
  uint32_t opaque;
  uint64_t cas;
} cw_bin_reply;

/* Parses a response header at p[0..n): 1 = parsed (the body's body_len bytes follow), 0 = fewer than
 * 24 bytes, -1 = not a response (magic != 0x81: e.g. a text `ERROR` from a server that does not
 * speak the protocol). */
int cw_bin_reply_parse(const unsigned char *p, size_t n, cw_bin_reply *out);
/* Whether an ADD answered with `status` stored the item (1), found the key there (0: a live value,
 * kept), or failed (-1: SERVER_ERROR-class, e.g. out of memory or too large; fails the file). */
int cw_bin_add_outcome(uint16_t status);
/* A failed status as the text protocol says it ("SERVER_ERROR out of memory", ...; "SERVER_ERROR" for
 * one it has no words for), so a failure reads the same whichever protocol answered it. */
const char *cw_bin_status_text(uint16_t status);

/* ---- meta commands ----------------------------------------------------------------------------- */

#define CW_MAX_KEY 250
/* How a meta command names a key: 1..250 bytes of 0x21..0x7E as they are (CW_KEY_PLAIN); others of
 * up to 186 bytes as base64 with the `b` flag (CW_KEY_BASE64); longer ones raw when they hold no space,
 * `\n` or NUL (CW_KEY_RAW: measured on 1.6.18, 1.6.38 and 1.6.45, docs/data-format.md); CW_KEY_NONE:
 * only the binary protocol names it. */
enum { CW_KEY_NONE = 0, CW_KEY_PLAIN = 1, CW_KEY_BASE64 = 2, CW_KEY_RAW = 3 };
/* Writes the key's token (at most 250 bytes) to out and its kind to *kind; returns the token's length
 * (0 with CW_KEY_NONE). */
size_t cw_key_token(char *out, const unsigned char *key, size_t n, int *kind);

/* The longest line below (a 250-byte token, flags, 20-digit numbers), rounded up. */
#define CW_MAX_META_LINE 320
/* `mg <token>[ b] c t s q O<opaque>\r\n`: the item's CAS, remaining TTL and value size, no value;
 * a miss says nothing (q), a hit `HD c<cas> t<ttl> s<size> O<opaque>`. Returns the length, 0 when no
 * meta command names the key. */
size_t cw_mg_look_line(char *out, const unsigned char *key, size_t n, uint64_t opaque);
/* `md <token>[ b] C<cas> q O<opaque>\r\n`: deletes the item only if its CAS is still `cas`; success
 * says nothing (q), `EX O<opaque>` = another CAS, `NF O<opaque>` = no such key. Returns the length,
 * 0 when no meta command names the key. */
size_t cw_md_cas_line(char *out, const unsigned char *key, size_t n, uint64_t cas, uint64_t opaque);

/* A meta reply line (without its \r\n), e.g. `HD c5 t-1 s3 O7`, `EX O7`, `NF O7`, `MN`. */
typedef struct {
  char code[3]; /* "HD", "VA", "EN", "NF", "EX", "NS", "MN"; "" for anything else (an error line) */
  int has_cas, has_ttl, has_size, has_opaque, has_flags;
  uint64_t cas, opaque, size;
  int64_t ttl; /* -1 = never expires */
  uint32_t flags;
  uint64_t value_len; /* VA only */
} cw_meta_reply;
/* Parses one reply line; 0 = parsed, -1 = malformed (a bad number). Unknown flags are ignored. */
int cw_meta_reply_parse(const char *line, size_t n, cw_meta_reply *out);

/* ---- the re-check (docs/reliability.md) -------------------------------------------------------- */

#define CW_NEVER (-1)

/* What the dumper read (the record's source stamp, docs/data-format.md section 8.1). */
typedef struct {
  uint64_t source_cas;
  int64_t source_exp; /* on the source's clock; CW_NEVER */
  int64_t value_len;
} cw_read;

/* What the source holds now. exp_lo..exp_hi: its expiry on its own clock (the `stats time`s before and
 * after the look plus `mg t`; equal when the two were equal); CW_NEVER in both = never expires.
 * size: the value's length (mg s), -1 = not known. */
typedef struct {
  int present;
  uint64_t cas;
  int64_t exp_lo, exp_hi;
  int64_t size;
} cw_source_now;

enum {
  CW_SOURCE_UNCHANGED = 0, /* the same item, ending no earlier than when it was read: keep our copy */
  CW_SOURCE_CHANGED = 1,   /* gone, rewritten (CAS, size) or ending earlier: our copy is stale */
  CW_SOURCE_UNSURE = 2     /* its expiry straddles the read's across a tick of its clock: look again */
};
int cw_source_verdict(const cw_read *r, const cw_source_now *s);

/* What the reply to `md <key> C<c_w> q` (our own write's CAS) says: */
enum {
  CW_MD_DELETED = 0, /* no reply: our stale copy is gone */
  CW_MD_GONE = 1,    /* NF: the key was already gone (a client's delete reached it after our write) */
  CW_MD_NOT_OURS = 2, /* EX: a client wrote the key after us: compare values (cw_compare_verdict) */
  CW_MD_ERROR = 3     /* anything else */
};
int cw_md_outcome(const cw_meta_reply *reply);

/* One key as `mg <key> c f t v` shows it on one server. */
typedef struct {
  int present;
  uint64_t cas;
  uint32_t flags;
  int64_t ttl; /* remaining seconds on that server; CW_NEVER */
  const unsigned char *value;
  size_t value_len;
} cw_item;

enum {
  CW_CMP_KEEP = 0,     /* the destination holds what the source holds: a client's write, kept */
  CW_CMP_GONE = 1,     /* the destination no longer holds the key */
  CW_CMP_WAIT = 2,     /* they differ: look again after the settle delay */
  CW_CMP_DELETE = 3,   /* still different on the same destination CAS: derived from our stale copy
                        * (a client's incr, append or touch on it): delete it guarded by that CAS */
  CW_CMP_UNSETTLED = 4 /* still changing after max_rounds looks: leave it, report it */
};
/* s: the source, d: the destination, looked at together; d_cas_before: the destination's CAS at the
 * previous look (0 = this is the first); round: looks so far including this one. Equal = the same
 * value and flags, and the destination's item ending no later than settle_s + 1 s after the source's
 * (a client's write reaches the two replicas up to settle_s apart). */
int cw_compare_verdict(const cw_item *s, const cw_item *d, uint64_t d_cas_before, int round, int max_rounds,
                       int64_t settle_s);

#ifdef __cplusplus
}
#endif
#endif
