/* FNV as twemproxy and libmemcached define it: bytes read as signed `char`; the *_64 variants return
 * 32 bits, and fnv1a_64 even computes in 32 bits (the 64-bit basis and prime truncated). */
#include "hashkit.h"

#define FNV64_BASIS UINT64_C(0xcbf29ce484222325)
#define FNV64_PRIME UINT64_C(0x100000001b3)
#define FNV32_BASIS UINT32_C(2166136261)
#define FNV32_PRIME UINT32_C(16777619)

uint32_t cw_hash_fnv1_64(const unsigned char *key, size_t len) {
  uint64_t h = FNV64_BASIS;
  for (size_t i = 0; i < len; i++) {
    h *= FNV64_PRIME;
    h ^= (uint64_t)(int64_t)(signed char)key[i];
  }
  return (uint32_t)h;
}

uint32_t cw_hash_fnv1a_64(const unsigned char *key, size_t len) {
  uint32_t h = (uint32_t)FNV64_BASIS;
  for (size_t i = 0; i < len; i++) {
    h ^= cw_sbyte(key[i]);
    h *= (uint32_t)FNV64_PRIME;
  }
  return h;
}

uint32_t cw_hash_fnv1_32(const unsigned char *key, size_t len) {
  uint32_t h = FNV32_BASIS;
  for (size_t i = 0; i < len; i++) {
    h *= FNV32_PRIME;
    h ^= cw_sbyte(key[i]);
  }
  return h;
}

uint32_t cw_hash_fnv1a_32(const unsigned char *key, size_t len) {
  uint32_t h = FNV32_BASIS;
  for (size_t i = 0; i < len; i++) {
    h ^= cw_sbyte(key[i]);
    h *= FNV32_PRIME;
  }
  return h;
}
