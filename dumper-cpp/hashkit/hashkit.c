/* The table of key hashes by name, and weighted ketama's point count. */
#include <math.h>
#include <string.h>

#include "hashkit.h"

static const struct {
  const char *name;
  cw_hash_fn fn;
} kHashes[CW_HASH_COUNT] = {
    [CW_HASH_ONE_AT_A_TIME] = {"one_at_a_time", cw_hash_one_at_a_time},
    [CW_HASH_MD5] = {"md5", cw_hash_md5},
    [CW_HASH_CRC16] = {"crc16", cw_hash_crc16},
    [CW_HASH_CRC32] = {"crc32", cw_hash_crc32},
    [CW_HASH_CRC32A] = {"crc32a", cw_hash_crc32a},
    [CW_HASH_FNV1_64] = {"fnv1_64", cw_hash_fnv1_64},
    [CW_HASH_FNV1A_64] = {"fnv1a_64", cw_hash_fnv1a_64},
    [CW_HASH_FNV1_32] = {"fnv1_32", cw_hash_fnv1_32},
    [CW_HASH_FNV1A_32] = {"fnv1a_32", cw_hash_fnv1a_32},
    [CW_HASH_HSIEH] = {"hsieh", cw_hash_hsieh},
    [CW_HASH_MURMUR] = {"murmur", cw_hash_murmur},
    [CW_HASH_JENKINS] = {"jenkins", cw_hash_jenkins},
    [CW_HASH_MURMUR3] = {"murmur3", cw_hash_murmur3},
    [CW_HASH_CRC32_MCROUTER] = {"crc32_mcrouter", cw_hash_crc32_mcrouter},
};

int cw_hash_by_name(const char *name, size_t len) {
  for (int i = 0; i < CW_HASH_COUNT; i++)
    if (strlen(kHashes[i].name) == len && memcmp(kHashes[i].name, name, len) == 0) return i;
  return -1;
}

const char *cw_hash_name(cw_hash_id id) { return (unsigned)id < CW_HASH_COUNT ? kHashes[id].name : "?"; }

uint32_t cw_hash(cw_hash_id id, const unsigned char *key, size_t len) { return kHashes[id].fn(key, len); }

uint32_t cw_ketama_weighted_points(uint32_t weight, uint32_t total, uint32_t n, uint32_t base) {
  /* The clients' own expression, float by float: the float32 roundings are the point. */
  const float pct = (float)weight / (float)total;
  return (uint32_t)floorf((float)(pct * (float)base / 4 * (float)n + 0.0000000001)) * 4;
}

uint32_t cw_libmemcached_weighted_points(uint32_t weight, uint32_t total, uint32_t n, uint32_t base) {
  /* libmemcached's: the same but its epsilon is a float literal (twemproxy's is a double) */
  const float pct = (float)weight / (float)total;
  return (uint32_t)floor((float)(pct * (float)base / 4 * (float)n + 0.0000000001F)) * 4;
}
