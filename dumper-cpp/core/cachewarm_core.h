/* cachewarm's wire rules, in C99, shared by the dumper (C++, dumper-cpp/) and the populator's Python
 * extension (agent/cachewarm/datapath/): one implementation of each rule, one idea per file.
 *
 *   binary_request.c  memcached's binary protocol requests: the stores (ADD, ADDQ, SETQ), key-only
 *                     requests (GETK, GETKQ, NOOP, DELETE with a CAS)
 *   binary_reply.c    a binary response's header (status, opaque, CAS)
 *   key_token.c       how a meta command names a key (plain, base64 + `b`, raw, or not at all)
 *   text_codec.c      decimal numbers and base64 on a command line
 *   record_v2.c       data format v2/v3 records: the writer's encoding and check 4's reader
 *   store_lines.c     the text commands that store an item: `ms ... MS|ME q[ O<n>]` and `add`
 *   meta_lines.c      the meta commands: `mg <key> <flags>[ O<n>]` (the populator's reads and target
 *                     check; the re-check's `mg <key> c t s q O<n>`, a look without the value),
 *                     `md <key> C<cas> q O<n>` (a CAS-guarded delete), and their replies
 *   recheck.c         the re-check's decisions (docs/reliability.md "Live traffic during the warm")
 *   read_stamp.c      what the dumper read of an item (cw_read) as the re-check receives it: 24 bytes
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
#define CW_BIN_OP_DELETE 0x04
#define CW_BIN_OP_NOOP 0x0a
#define CW_BIN_OP_GETK 0x0c
#define CW_BIN_OP_GETKQ 0x0d
#define CW_BIN_OP_SETQ 0x11
#define CW_BIN_OP_ADDQ 0x12
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
/* The same head for another store opcode (ADDQ: a data file's binary record, with opaque 0; SETQ: the
 * stream's and set mode's store of a key no meta command names). */
void cw_bin_store_head(unsigned char *out, uint8_t opcode, size_t key_len, uint32_t value_len, uint32_t flags,
                       uint32_t expiration, uint32_t opaque);
/* A 24-byte request header with a key of key_len bytes and nothing else (GETK, GETKQ; NOOP: 0). */
void cw_bin_key_request(unsigned char *out, uint8_t opcode, size_t key_len, uint32_t opaque);
/* The same with a CAS (DELETE: deletes the item only while its CAS is still `cas`). */
void cw_bin_cas_request(unsigned char *out, uint8_t opcode, size_t key_len, uint32_t opaque, uint64_t cas);

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

/* ---- text on a command line (text_codec.c) ---------------------------------------------------- */

/* Writes v in decimal (no leading zeros, at most 20 characters); returns the length. */
size_t cw_put_u64(char *out, uint64_t v);
/* The length cw_put_u64 writes for v (inline: the store lines size every item with it). */
static inline size_t cw_u64_len(uint64_t v) {
  size_t n = 1;
  for (;;) { /* four digits per division */
    if (v < 10) return n;
    if (v < 100) return n + 1;
    if (v < 1000) return n + 2;
    if (v < 10000) return n + 3;
    v /= 10000;
    n += 4;
  }
}
/* Standard base64 with `=` padding of s[0..n) (4 * ceil(n / 3) characters); returns the length. */
size_t cw_base64_encode(char *out, const unsigned char *s, size_t n);
/* Decodes canonical base64 (padded, zero pad bits: what cw_base64_encode writes) into out, which may
 * alias src (the output is never longer than the input); returns the length, or -1 if malformed. */
long cw_base64_decode(const char *src, size_t n, unsigned char *out);

/* ---- meta commands ----------------------------------------------------------------------------- */

#define CW_MAX_KEY 250
/* How a meta command names a key: 1..250 bytes of 0x21..0x7E as they are (CW_KEY_PLAIN); others of
 * up to 186 bytes as base64 with the `b` flag (CW_KEY_BASE64); longer ones raw when they hold no space,
 * `\n` or NUL (CW_KEY_RAW: measured on 1.6.18, 1.6.38 and 1.6.45, docs/data-format.md); CW_KEY_NONE:
 * only the binary protocol names it. */
enum { CW_KEY_NONE = 0, CW_KEY_PLAIN = 1, CW_KEY_BASE64 = 2, CW_KEY_RAW = 3 };
/* Whether the key travels as it is (CW_KEY_PLAIN): 1..250 bytes of 0x21..0x7E. */
int cw_key_is_plain(const unsigned char *key, size_t n);
/* Writes the key's token (at most 250 bytes) to out and its kind to *kind; returns the token's length
 * (0 with CW_KEY_NONE). */
size_t cw_key_token(char *out, const unsigned char *key, size_t n, int *kind);

/* The longest line below (a 250-byte token, flags, 20-digit numbers), rounded up. */
#define CW_MAX_META_LINE 320
/* The longest flags cw_mg_line takes (the longest line it writes then fits CW_MAX_META_LINE). */
#define CW_MAX_MG_FLAGS 32
/* `mg <token>[ b][ <flags>][ O<opaque>]\r\n`: a meta get of a key named by its token (cw_key_token;
 * ` b` when it is base64). flags: meta flags apart by spaces ("v f t q"; "" for none); tagged: with
 * O<opaque>, which ties the reply to its request whatever form the echoed key takes. Returns the
 * length. */
size_t cw_mg_token_line(char *out, const char *tok, size_t tok_len, int b64, const char *flags, int tagged,
                        uint64_t opaque);
/* The same for a key; 0 when no meta command names it. */
size_t cw_mg_line(char *out, const unsigned char *key, size_t n, const char *flags, int tagged, uint64_t opaque);
/* `mg <token>[ b] c t s q O<opaque>\r\n`: the item's CAS, remaining TTL and value size, no value;
 * a miss says nothing (q), a hit `HD c<cas> t<ttl> s<size> O<opaque>`. Returns the length, 0 when no
 * meta command names the key. */
size_t cw_mg_look_line(char *out, const unsigned char *key, size_t n, uint64_t opaque);
/* `md <token>[ b] C<cas> q O<opaque>\r\n`: deletes the item only if its CAS is still `cas`; success
 * says nothing (q), `EX O<opaque>` = another CAS, `NF O<opaque>` = no such key. Returns the length,
 * 0 when no meta command names the key. */
size_t cw_md_cas_line(char *out, const unsigned char *key, size_t n, uint64_t cas, uint64_t opaque);

/* `ms <tok> <value_len>[ b] T<expiry> F<flags> MS|ME q[ O<opaque>]\r\n`: a quiet meta set (MS) or add
 * (ME) of a key named by its token (cw_key_token; ` b` when it is base64); at most 339 bytes
 * (CW_RECORD_MAX_LINE holds it). expiry: memcached's T (0 = never; above 30 days an absolute time). */
typedef struct {
  const char *tok;
  size_t tok_len;
  int b64;
  uint64_t value_len;
  uint64_t expiry;
  uint32_t flags;
  int add;    /* ME rather than MS */
  int tagged; /* with O<opaque> */
  uint64_t opaque;
} cw_ms;
size_t cw_ms_line(char *out, const cw_ms *m);
/* What cw_ms_line writes for m, without writing it. */
size_t cw_ms_line_len(const cw_ms *m);
/* `add <key> <flags> <expiry> <value_len>\r\n` (a key of 1..250 printable bytes; memcached answers
 * every one, and a failed one never unlinks the key's live value). Returns the length. */
size_t cw_add_line(char *out, const char *key, size_t key_len, uint32_t flags, uint64_t expiry, uint64_t value_len);
size_t cw_add_line_len(size_t key_len, uint32_t flags, uint64_t expiry, uint64_t value_len);

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

/* ---- data files: v2 and v3 records (docs/data-format.md sections 7 and 8; record_v2.c) ------------ */

/* The longest key a base64 key token (at most 250 characters) carries. */
#define CW_MAX_BASE64_KEY 186
/* memcached reads a T above 30 days as an absolute unix time, and parses it as a signed 32-bit number. */
#define CW_MAX_RELATIVE_TTL 2592000
#define CW_MAX_EXPIRY 2147483647
/* Version 3's source stamp in front of each record: source_cas u64, source_exp i64 (little-endian). */
#define CW_RECORD_STAMP 16
/* A meta record's line is at most ~340 bytes: the reader looks no further for its end. */
#define CW_RECORD_MAX_LINE 400
/* The room a reader's message needs. */
#define CW_RECORD_WHY 96

/* A record's T: 0 (never expires), or an absolute time memcached reads as one. */
int cw_record_valid_expiry(int64_t t);
/* Writes a meta record's line (everything before its value; at most 352 bytes) for a key a meta
 * command names plainly or as base64 (1..186 bytes); 0 for any other key (a binary record). `expiry`:
 * its T; `offset`: the record's first byte in the file (version 3: its stamp's). */
size_t cw_record_meta_line(char *out, const unsigned char *key, size_t n, uint32_t value_len, uint32_t flags,
                           uint32_t expiry, uint64_t offset);
/* A binary record's 32-byte head (ADDQ, opaque 0); the key and the value follow. */
void cw_record_binary_head(unsigned char *out, size_t key_len, uint32_t value_len, uint32_t flags, uint32_t expiry);
/* Version 3's 16-byte stamp. */
void cw_record_stamp(unsigned char *out, uint64_t source_cas, int64_t source_exp);

/* One record as read: positions are offsets into the data. */
typedef struct {
  const unsigned char *key; /* the raw key: in the data, or in the caller's keybuf (base64 decoded) */
  size_t key_len;
  uint64_t value_len;
  uint32_t flags;
  int64_t expiry;  /* T: 0 = never, else absolute */
  size_t value_at; /* the value's first byte */
  size_t next;     /* the next record's offset */
  size_t mode_at;  /* meta records: the E of ME (set mode sends an S there) */
  int binary;      /* a binary-protocol record */
  int b64;         /* meta records: the key is base64 on the line (` b`) */
  const unsigned char *tok; /* meta records: the key token on the line */
  size_t tok_len;
  uint64_t source_cas; /* version 3: the stamp; 0 and CW_NEVER in version 2 */
  int64_t source_exp;
} cw_record;

/* Parses and checks the record at p[pos..end) exactly as check 4 says (section 7.2; `stamped`: a
 * version 3 record, section 8.2); keybuf: CW_MAX_KEY bytes for a base64 key. 0, or -1 with the
 * problem in why (CW_RECORD_WHY bytes). */
int cw_record_parse(const unsigned char *p, size_t pos, size_t end, int stamped, cw_record *r, unsigned char *keybuf,
                    char *why);

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
/* A cw_read as the populator's probes and the stream's keys/STAMPS hold it: source_cas u64,
 * source_exp i64, value_len i64 (-1: not known), little-endian. */
#define CW_READ_STAMP 24
void cw_read_pack(unsigned char *out, const cw_read *r);
void cw_read_unpack(const unsigned char *p, cw_read *out);

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
