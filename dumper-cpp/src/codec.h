// Key encodings: the crawler prints keys URL-encoded; mg needs base64 (+ the `b` flag) for keys with
// bytes outside 0x21..0x7E.
#pragma once
#include <cstddef>
#include <string>

#include "slice.h"

namespace cachewarm {

// Decodes %XX escapes; false on a malformed escape.
bool UrlDecode(const Slice& in, std::string* out);
// Percent-encodes every byte that is not alphanumeric or one of "-._~" (what the key files hold).
std::string UrlEncode(const Slice& in);
// True if the key can be sent to memcached as is (every byte in 0x21..0x7E).
bool IsPlainKey(const Slice& key);
// True if a meta command can carry the key raw, as its own token: no space (the token separator),
// no '\n' (the line's end) and no NUL (1.6.18 and 1.6.38 end the command there). Measured against
// memcached 1.6.18, 1.6.38 and 1.6.45 (a 200-byte key stored through the binary protocol, read back
// with a pipelined `mg <raw key> v f t q u O<i>`): every other byte, '\r', tab, other control bytes
// and 0x80..0xFF included, at the key's start, middle and end, reads back exact. The dumper sends
// a key of 187..250 bytes that has no base64 form this way (tests/dumper/test_text_keys.py).
bool IsTextKey(const Slice& key);
void Base64Encode(const Slice& in, std::string* out);
// Decodes canonical standard base64 (with padding, zero pad bits) into dst (which may alias src: output
// is never longer than input). Returns the decoded length, or -1 if the input is malformed.
long Base64DecodeInPlace(const char* src, size_t n, char* dst);
// Lower-case hex, two digits a byte (hashkit descriptions, the stream's routing record).
std::string HexEncode(const Slice& in);

}  // namespace cachewarm
