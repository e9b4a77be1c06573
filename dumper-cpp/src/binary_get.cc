#include "binary_get.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cachewarm_core.h"
#include "env.h"
#include "format.h"

namespace cachewarm {

namespace {
// A server that speaks the binary protocol answers the probe's NOOP at once; one started with
// `-B ascii` reads the bytes as the start of a text line and answers nothing.
constexpr int kProbeTimeoutMs = 3000;
// Requests per round trip: small enough that the requests always fit the socket buffers (no
// deadlock with a server that stops reading while its responses are not read).
constexpr size_t kGroup = 32;
}  // namespace

BinaryGetter::BinaryGetter(std::string host, int port, size_t buffer_bytes)
    : host_(std::move(host)), port_(port), buf_(new char[std::max<size_t>(buffer_bytes, 4096)]),
      cap_(std::max<size_t>(buffer_bytes, 4096)) {}

BinaryGetter::~BinaryGetter() {
  if (fd_ >= 0) ::close(fd_);
}

void BinaryGetter::UseFd(int fd) {
  fd_ = fd;
  opened_ = false;
}

Status BinaryGetter::Fill(int timeout_ms) {
  if (pos_ == filled_) pos_ = filled_ = 0;
  if (filled_ == cap_) return Status::OK();
  size_t n = 0;
  const int fd = Fd();
  for (;;) {
    ssize_t r = ::recv(fd, buf_.get() + filled_, cap_ - filled_, 0);
    if (r > 0) {
      n = size_t(r);
      break;
    }
    if (r == 0) return Status::IOError("connection closed by memcached at " + host_ + ":" + std::to_string(port_) +
                                       " (binary protocol connection)");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      struct pollfd p = {fd, POLLIN, 0};
      int pr = ::poll(&p, 1, timeout_ms);
      if (pr == 0) return Status::IOError("timed out waiting for memcached at " + host_ + ":" + std::to_string(port_) +
                                          " (binary protocol connection)");
      continue;
    }
    return Status::IOError(ErrnoMessage("binary protocol connection to memcached at " + host_ + ":" +
                                            std::to_string(port_) + " lost",
                                        errno));
  }
  filled_ += n;
  return Status::OK();
}

Status BinaryGetter::Send(const Slice& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = ::send(Fd(), data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (w > 0) {
      off += size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd p = {Fd(), POLLOUT, 0};
      if (::poll(&p, 1, kIoTimeoutMs) == 0)
        return Status::IOError("timed out sending to memcached at " + host_ + " (binary protocol connection)");
      continue;
    }
    return Status::IOError(ErrnoMessage("binary protocol connection to memcached at " + host_ + " lost", errno));
  }
  return Status::OK();
}

Status BinaryGetter::ReadExact(char* dst, size_t n, int timeout_ms) {
  while (n > 0) {
    if (pos_ == filled_) CW_RETURN_IF_ERROR(Fill(timeout_ms));
    const size_t take = std::min(n, filled_ - pos_);
    std::memcpy(dst, buf_.get() + pos_, take);
    pos_ += take;
    dst += take;
    n -= take;
  }
  return Status::OK();
}

Status BinaryGetter::Open() {
  opened_ = true;
  if (fd_ < 0) CW_RETURN_IF_ERROR(conn_.Connect(host_, port_, kConnectTimeoutMs));
  unsigned char probe[CW_BIN_HEADER];
  cw_bin_key_request(probe, CW_BIN_OP_NOOP, 0, 0xffffffffu);
  unsigned char h[CW_BIN_HEADER] = {0};
  Status s = Send(Slice(reinterpret_cast<const char*>(probe), sizeof probe));
  if (s.ok()) s = ReadExact(reinterpret_cast<char*>(h), sizeof h, kProbeTimeoutMs);
  cw_bin_reply r;
  if (!s.ok() || cw_bin_reply_parse(h, sizeof h, &r) != 1 || r.opcode != CW_BIN_OP_NOOP || r.body_len != 0) {
    unavailable_ = "memcached at " + host_ + ":" + std::to_string(port_) +
                   " does not answer the binary protocol (started with -B ascii?)" +
                   (s.ok() ? std::string(": unexpected answer to a NOOP") : ": " + s.message()) +
                   "; a binary key of 187 bytes or more has no other way to be read";
    conn_.Close();
  }
  return Status::OK();
}

Status BinaryGetter::Group(const std::vector<std::string>& keys, size_t begin, size_t end, const ValueFn& on_value,
                           const PieceFn& on_piece, const FailedFn& on_failed) {
  std::string req;
  unsigned char h[CW_BIN_HEADER];
  for (size_t i = begin; i < end; i++) {
    cw_bin_key_request(h, CW_BIN_OP_GETKQ, keys[i].size(), uint32_t(i));
    req.append(reinterpret_cast<const char*>(h), sizeof h);
    req += keys[i];
  }
  cw_bin_key_request(h, CW_BIN_OP_NOOP, 0, 0xffffffffu);
  req.append(reinterpret_cast<const char*>(h), sizeof h);
  CW_RETURN_IF_ERROR(Send(req));
  for (;;) {
    CW_RETURN_IF_ERROR(ReadExact(reinterpret_cast<char*>(h), sizeof h, kIoTimeoutMs));
    cw_bin_reply r;
    if (cw_bin_reply_parse(h, sizeof h, &r) != 1)
      return Status::Protocol("binary protocol response with magic " + std::to_string(h[0]));
    const uint8_t op = r.opcode;
    const uint16_t keylen = r.key_len;
    const uint8_t extlen = r.extras_len;
    const uint16_t status = r.status;
    const uint32_t body = r.body_len;
    const uint32_t opaque = r.opaque;
    const uint64_t cas = r.cas;
    if (uint64_t(extlen) + keylen > body) return Status::Protocol("binary protocol response with a short body");
    if (op == CW_BIN_OP_NOOP) {
      if (body != 0) return Status::Protocol("binary protocol NOOP response with a body");
      return Status::OK();
    }
    if (op != CW_BIN_OP_GETKQ || opaque < begin || opaque >= end)
      return Status::Protocol("unexpected binary protocol response (opcode " + std::to_string(op) + ", opaque " +
                              std::to_string(opaque) + ")");
    if (status != 0) {
      // An error answer carries a short message as its value.
      std::string msg(std::min<uint32_t>(body, 4096), '\0');
      CW_RETURN_IF_ERROR(ReadExact(&msg[0], msg.size(), kIoTimeoutMs));
      for (uint32_t left = body - uint32_t(msg.size()); left > 0;) {
        char skip[4096];
        const uint32_t k = std::min<uint32_t>(left, sizeof skip);
        CW_RETURN_IF_ERROR(ReadExact(skip, k, kIoTimeoutMs));
        left -= k;
      }
      if (status == CW_BIN_NOT_FOUND) continue;  // GETKQ is quiet on a miss; tolerate it anyway
      char code[16];
      std::snprintf(code, sizeof code, "0x%04x", status);
      for (char& c : msg)
        if (uint8_t(c) < 0x20 || uint8_t(c) > 0x7e) c = '?';
      CW_RETURN_IF_ERROR(on_failed(opaque, std::string("binary GETK answered status ") + code + " (" + msg + ")"));
      continue;
    }
    if (extlen != 4) return Status::Protocol("binary GETK hit without 4 bytes of flags");
    unsigned char head[4 + 255];
    CW_RETURN_IF_ERROR(ReadExact(reinterpret_cast<char*>(head), size_t(extlen) + keylen, kIoTimeoutMs));
    if (Slice(reinterpret_cast<const char*>(head) + 4, keylen) != Slice(keys[opaque]))
      return Status::Protocol("binary GETK answered another key than the one asked for");
    const uint32_t vlen = body - extlen - keylen;
    const uint32_t flags = uint32_t(head[0]) << 24 | uint32_t(head[1]) << 16 | uint32_t(head[2]) << 8 | head[3];
    CW_RETURN_IF_ERROR(on_value(opaque, flags, vlen, cas));
    for (uint32_t left = vlen; left > 0;) {
      if (pos_ == filled_) CW_RETURN_IF_ERROR(Fill(kIoTimeoutMs));
      const size_t take = std::min<size_t>(left, filled_ - pos_);
      CW_RETURN_IF_ERROR(on_piece(Slice(buf_.get() + pos_, take)));
      pos_ += take;
      left -= uint32_t(take);
    }
  }
}

Status BinaryGetter::Get(const std::vector<std::string>& keys, const ValueFn& on_value, const PieceFn& on_piece,
                         const FailedFn& on_failed, std::string* unavailable) {
  unavailable->clear();
  for (const std::string& k : keys)
    if (k.empty() || k.size() > kMaxKeyLen) return Status::InvalidArgument("key length out of range for GETK");
  if (!opened_) CW_RETURN_IF_ERROR(Open());
  if (!unavailable_.empty()) {
    *unavailable = unavailable_;
    return Status::OK();
  }
  for (size_t b = 0; b < keys.size(); b += kGroup)
    CW_RETURN_IF_ERROR(Group(keys, b, std::min(keys.size(), b + kGroup), on_value, on_piece, on_failed));
  return Status::OK();
}

}  // namespace cachewarm
