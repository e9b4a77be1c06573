// libFuzzer target: the meta-protocol response side of a dumper worker (ParseMetaHeader and the
// ResponseStream that turns pipelined `mg ... v f t k q` / `mn` replies into data-file records).
//
// Input: byte 0 picks how the stream is cut into receives (the bug class this catches: a response
// split at an unlucky point), the rest is the wire. The sink touches every byte it is handed, so
// AddressSanitizer sees any iovec that points outside the receive buffers; a length field can never
// make the stream allocate (its two buffers are fixed at construction), which -malloc_limit_mb checks.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "meta_parser.h"
#include "response_stream.h"

namespace {

using cachewarm::MetaResponse;
using cachewarm::ParseResult;
using cachewarm::RecordSink;
using cachewarm::ResponseStream;
using cachewarm::Status;

constexpr size_t kBuffer = 64 << 10;  // the dumper's minimum --buffer-size

class TouchingSink : public RecordSink {
 public:
  Status Write(const struct iovec* iov, int iovcnt, uint64_t records) override {
    if (iovcnt <= 0) __builtin_trap();
    for (int i = 0; i < iovcnt; i++) {
      const unsigned char* p = static_cast<const unsigned char*>(iov[i].iov_base);
      for (size_t j = 0; j < iov[i].iov_len; j++) sum_ += p[j];
      bytes_ += iov[i].iov_len;
    }
    records_ += records;
    return Status::OK();
  }
  Status OnBatchEnd(uint64_t hits, uint64_t skipped) override {
    if (skipped > hits) __builtin_trap();  // a batch cannot skip more than it received
    return Status::OK();
  }
  uint64_t sum_ = 0, bytes_ = 0, records_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const char* wire = reinterpret_cast<const char*>(data + 1);
  const size_t n = size - 1;

  // 1. The header parser on the raw bytes: must stay within [0, n) and agree with itself.
  MetaResponse r;
  std::string err;
  if (ParseMetaHeader(wire, n, &r, &err) == ParseResult::kOk) {
    if (r.header_len == 0 || r.header_len > n || r.header_len > cachewarm::kMaxHeaderLine) __builtin_trap();
    if (r.has_key && r.key_offset + r.key_len > r.header_len) __builtin_trap();
  }

  // 2. The stream, fed in pieces whose sizes depend on `mode`.
  // Bit 6 of `mode`: the records of data format 3 (each behind its source stamp: the `c` of the
  // reply and the expiry on the source's clock) instead of version 1's.
  ResponseStream stream(kBuffer, (mode & 0x80) ? 60 : 0,
                        (mode & 0x40) ? cachewarm::kFormatVersion3 : cachewarm::kFormatVersion);
  stream.set_window(1800000002, 1800000002, 2);  // the source's clock 2 s ahead
  TouchingSink sink;
  size_t off = 0;
  uint32_t rng = mode * 2654435761u + 1;
  while (off < n) {
    size_t piece = n - off;
    if (mode & 1) {
      rng = rng * 1103515245u + 12345u;
      piece = 1 + (rng >> 8) % 97;
    }
    if (piece > stream.WritableBytes()) piece = stream.WritableBytes();
    if (piece == 0) __builtin_trap();  // no room and no progress: the stream would hang
    if (piece > n - off) piece = n - off;
    std::memcpy(stream.WritePtr(), wire + off, piece);
    off += piece;
    if (!stream.Commit(piece, &sink).ok()) break;  // a protocol error ends the worker, loudly
  }
  return 0;
}
