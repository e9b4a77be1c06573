// Little-endian fixed-width encoding used by data format v1 (docs/data-format.md).
#pragma once
#include <cstdint>
#include <cstring>

namespace cachewarm {

inline void EncodeFixed16(char* d, uint16_t v) { for (int i = 0; i < 2; i++) d[i] = char(v >> (8 * i)); }
inline void EncodeFixed32(char* d, uint32_t v) { for (int i = 0; i < 4; i++) d[i] = char(v >> (8 * i)); }
inline void EncodeFixed64(char* d, uint64_t v) { for (int i = 0; i < 8; i++) d[i] = char(v >> (8 * i)); }

inline uint16_t DecodeFixed16(const char* p) {
  return uint16_t(uint8_t(p[0]) | (uint16_t(uint8_t(p[1])) << 8));
}
inline uint32_t DecodeFixed32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | uint8_t(p[i]);
  return v;
}
inline uint64_t DecodeFixed64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | uint8_t(p[i]);
  return v;
}

}  // namespace cachewarm
