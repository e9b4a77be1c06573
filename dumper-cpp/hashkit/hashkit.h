/* hashkit: where each memcached client puts a key, written once in C (docs/placement.md).
 *
 * One small file per hash function behind one table (hashkit.c), the distributions (ketama rings,
 * modula tables, rendezvous and furc) and a placement built from a text description (placement.c,
 * placement.h) that Python writes (cachewarm.placement) and both the populator's C
 * extension and the C++ dumper parse, so the two data paths cannot drift apart.
 *
 * Every function reads its key as the real client does — including twemproxy's and libmemcached's
 * C `char`, signed on x86: their byte hashes sign-extend bytes >= 0x80 (cw_sbyte below). Vectors
 * from the real software pin each one (tests/placement/).
 */
#ifndef CACHEWARM_HASHKIT_H
#define CACHEWARM_HASHKIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The key hashes, by the names the clients' configurations use (twemproxy's `hash:` values first). */
typedef enum {
  CW_HASH_ONE_AT_A_TIME,
  CW_HASH_MD5,     /* first little-endian u32 of the digest (ketama's key hash) */
  CW_HASH_CRC16,   /* twemproxy's crc16 (XMODEM table, unmasked accumulator) */
  CW_HASH_CRC32,   /* libmemcached/twemproxy: ((~crc) >> 16) & 0x7fff */
  CW_HASH_CRC32A,  /* the standard (zlib) crc32: gomemcache */
  CW_HASH_FNV1_64, /* twemproxy's and libmemcached's names; the fnv*_64 return 32 bits */
  CW_HASH_FNV1A_64,
  CW_HASH_FNV1_32,
  CW_HASH_FNV1A_32,
  CW_HASH_HSIEH,
  CW_HASH_MURMUR,  /* twemproxy/libmemcached's MurmurHash2 variant (seed 0xdeadbeef * len) */
  CW_HASH_JENKINS, /* lookup3 hashlittle, initval 13 */
  CW_HASH_MURMUR3, /* MurmurHash3 x86_32, seed 0: pymemcache's rendezvous */
  CW_HASH_CRC32_MCROUTER, /* mcrouter's Crc32: standard crc32 & 0x7fffffff */
  CW_HASH_COUNT
} cw_hash_id;

typedef uint32_t (*cw_hash_fn)(const unsigned char *key, size_t len);

/* The hash named `name` (e.g. "fnv1a_64"), or -1. */
int cw_hash_by_name(const char *name, size_t len);
const char *cw_hash_name(cw_hash_id id);
uint32_t cw_hash(cw_hash_id id, const unsigned char *key, size_t len);

/* The functions behind the table (one file each). */
uint32_t cw_hash_one_at_a_time(const unsigned char *key, size_t len);
uint32_t cw_hash_md5(const unsigned char *key, size_t len);
uint32_t cw_hash_crc16(const unsigned char *key, size_t len);
uint32_t cw_hash_crc32(const unsigned char *key, size_t len);
uint32_t cw_hash_crc32a(const unsigned char *key, size_t len);
uint32_t cw_hash_crc32_mcrouter(const unsigned char *key, size_t len);
uint32_t cw_hash_fnv1_64(const unsigned char *key, size_t len);
uint32_t cw_hash_fnv1a_64(const unsigned char *key, size_t len);
uint32_t cw_hash_fnv1_32(const unsigned char *key, size_t len);
uint32_t cw_hash_fnv1a_32(const unsigned char *key, size_t len);
uint32_t cw_hash_hsieh(const unsigned char *key, size_t len);
uint32_t cw_hash_murmur(const unsigned char *key, size_t len);
uint32_t cw_hash_jenkins(const unsigned char *key, size_t len);
uint32_t cw_hash_murmur3(const unsigned char *key, size_t len);

/* md5 (RFC 1321) of s[0..n). */
void cw_md5(const unsigned char *s, size_t n, unsigned char digest[16]);

/* mcrouter's furc_hash (Ch3): the index in [0, m) of key; m <= CW_FURC_MAX. */
#define CW_FURC_MAX (1u << 23)
uint32_t cw_furc_hash(const unsigned char *key, size_t len, uint32_t m);

/* SpookyHash V2's 32-bit hash (folly's Hash32: both 64-bit seeds = seed). */
uint32_t cw_spooky32(const unsigned char *key, size_t len, uint32_t seed);

/* mcrouter's WeightedCh3: the index in [0, n) of key for these server weights (each in [0, 1]). */
uint32_t cw_wch3_hash(const unsigned char *key, size_t len, const double *weights, uint32_t n);

/* A byte as C `char` on x86 (signed), widened as the clients' `(uint32_t)key[i]` does. */
static inline uint32_t cw_sbyte(unsigned char c) { return (uint32_t)(int32_t)(signed char)c; }

/* Weighted ketama's points for a server of `weight` out of `total` in a pool of `n` servers:
 * floor(float32(w / total * base / 4 * n) + 1e-10) * 4, computed in float as twemproxy and
 * libmemcached do — 156 instead of 160 with equal weights for some n (25, 47, 50, ...). */
uint32_t cw_ketama_weighted_points(uint32_t weight, uint32_t total, uint32_t n, uint32_t base);
/* libmemcached's (hosts.cc): its epsilon is 1e-10F, a float. */
uint32_t cw_libmemcached_weighted_points(uint32_t weight, uint32_t total, uint32_t n, uint32_t base);

#ifdef __cplusplus
}
#endif
#endif
