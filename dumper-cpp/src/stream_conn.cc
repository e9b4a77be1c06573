#include "stream_conn.h"

#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "cachewarm_core.h"
#include "env.h"
#include "net.h"

namespace cachewarm {

namespace {
constexpr size_t kReplyBuffer = 64 << 10;
constexpr int kProbeTimeoutMs = 3000;
constexpr size_t kMaxReplyLine = 4096;

uint16_t Be16(const char* p) { return uint16_t((uint8_t(p[0]) << 8) | uint8_t(p[1])); }
uint32_t Be32(const char* p) {
  return (uint32_t(uint8_t(p[0])) << 24) | (uint32_t(uint8_t(p[1])) << 16) | (uint32_t(uint8_t(p[2])) << 8) |
         uint32_t(uint8_t(p[3]));
}
}  // namespace

const char DestConn::kMetaMark[] = "mn\r\n";

DestConn::DestConn(std::string address, Proto proto)
    : address_(std::move(address)), proto_(proto), rbuf_(new char[kReplyBuffer]) {
  std::memset(noop_, 0, sizeof noop_);
  noop_[0] = char(0x80);
  noop_[1] = char(binstore::kNoop);
  q_.reserve(1024);
}

DestConn::~DestConn() { Close(); }

void DestConn::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  q_.clear();
  qpos_ = 0;
  rfill_ = 0;
  skip_body_ = 0;
  marks_sent_ = marks_answered_ = 0;
  replies_ = Replies();
  adds_.clear();
}

void DestConn::UseFd(int fd) {
  Close();
  fd_ = fd;
  broken_ = false;
  error_.clear();
}

Status DestConn::Connect(const std::string& host, int port) {
  Close();
  Conn c;
  CW_RETURN_IF_ERROR(c.Connect(host, port, kConnectTimeoutMs));
  UseFd(::dup(c.fd()));
  if (fd_ < 0) return Status::IOError(ErrnoMessage("dup", errno));
  if (proto_ == kBinary) {
    // The probe: a NOOP answered by a binary NOOP response.
    const Status refused = Status::Server(
        "destination " + address_ + " does not speak memcached's binary protocol (started with -B ascii?): keys "
        "of 187..250 bytes that are not printable ASCII cannot be written to it");
    CW_RETURN_IF_ERROR(c.SendAll(Slice(noop_, sizeof noop_), kProbeTimeoutMs));
    char head[24];
    size_t have = 0;
    while (have < sizeof head) {
      size_t n = 0;
      Status s = c.Recv(head + have, sizeof head - have, &n, kProbeTimeoutMs);
      if (!s.ok()) return have ? s : refused;
      have += n;
      if (uint8_t(head[0]) != 0x81) return refused;  // e.g. the text protocol's ERROR
    }
    if (uint8_t(head[0]) != 0x81 || uint8_t(head[1]) != binstore::kNoop || Be32(head + 8) != 0) return refused;
  }
  return Status::OK();
}

void DestConn::QueueMark() {
  if (proto_ == kMeta) {
    Queue(kMetaMark, 4);
  } else {
    Queue(noop_, sizeof noop_);
  }
  marks_sent_++;
}

void DestConn::TakeReplies(Replies* r) {
  r->not_stored += replies_.not_stored;
  r->tags.insert(r->tags.end(), replies_.tags.begin(), replies_.tags.end());
  r->stored.insert(r->stored.end(), replies_.stored.begin(), replies_.stored.end());
  replies_ = Replies();
}

Status DestConn::Fail(const std::string& what, int err) {
  broken_ = true;
  return Status::IOError(ErrnoMessage("connection to destination " + address_ + " " + what, err));
}

Status DestConn::TrySend(bool* progressed) {
  while (qpos_ < q_.size()) {
    if (!error_.empty()) return Status::Server(error_);
    const int n = int(std::min<size_t>(q_.size() - qpos_, IOV_MAX));
    struct msghdr m = {};
    m.msg_iov = &q_[qpos_];
    m.msg_iovlen = size_t(n);
    const ssize_t w = ::sendmsg(fd_, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Status::OK();
      return Fail("lost while sending (killed or restarted?)", errno);
    }
    *progressed = true;
    size_t left = size_t(w);
    while (left > 0 && qpos_ < q_.size()) {
      struct iovec& v = q_[qpos_];
      if (left >= v.iov_len) {
        left -= v.iov_len;
        qpos_++;
      } else {
        v.iov_base = static_cast<char*>(v.iov_base) + left;
        v.iov_len -= left;
        left = 0;
      }
    }
  }
  q_.clear();
  qpos_ = 0;
  return Status::OK();
}

Status DestConn::TryRecv(bool* progressed) {
  for (;;) {
    if (rfill_ == kReplyBuffer) return Status::Protocol("destination " + address_ + " sent an overlong reply line");
    const ssize_t r = ::recv(fd_, rbuf_.get() + rfill_, kReplyBuffer - rfill_, MSG_DONTWAIT);
    if (r == 0) {
      broken_ = true;
      return Status::IOError("connection closed by destination " + address_ + " (killed or restarted?)");
    }
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Status::OK();
      return Fail("lost (killed or restarted?)", errno);
    }
    *progressed = true;
    rfill_ += size_t(r);
    CW_RETURN_IF_ERROR(Parse());
    if (!error_.empty()) return Status::Server(error_);
  }
}

Status DestConn::Poll() {
  if (fd_ < 0) return Status::OK();
  bool p = false;
  Status s = TryRecv(&p);
  if (s.ok() && !error_.empty()) s = Status::Server(error_);
  return s;
}

Status DestConn::Parse() { return proto_ == kMeta ? ParseMeta() : ParseBinary(); }

Status DestConn::ParseMeta() {
  size_t pos = 0;
  while (pos < rfill_) {
    const char* start = rbuf_.get() + pos;
    const char* nl = static_cast<const char*>(std::memchr(start, '\n', rfill_ - pos));
    if (!nl) {
      if (rfill_ - pos > kMaxReplyLine)
        return Status::Protocol("destination " + address_ + " sent an overlong reply line");
      break;
    }
    size_t len = size_t(nl - start);
    if (len && start[len - 1] == '\r') len--;
    const std::string_view line(start, len);
    pos = size_t(nl - rbuf_.get()) + 1;
    if (line == "NS") {
      replies_.not_stored++;
    } else if (line.substr(0, 3) == "NS ") {
      const size_t o = line.find(" O");
      if (o == std::string_view::npos) {
        replies_.not_stored++;
      } else {
        uint64_t v = 0;
        for (size_t i = o + 2; i < line.size() && line[i] >= '0' && line[i] <= '9'; i++) v = v * 10 + uint64_t(line[i] - '0');
        replies_.tags.push_back(v);
      }
    } else if (line == "MN") {
      marks_answered_++;
    } else if (line == "STORED") {
      PopAdd();
    } else if (line == "NOT_STORED") {
      const uint64_t tag = PopAdd();
      if (tag == kNoTag) replies_.not_stored++;
      else replies_.tags.push_back(tag);
    } else if (line.substr(0, 2) == "HD") {
      // a write that was not quiet (never sent by us): stored
    } else if (line.substr(0, 12) == "SERVER_ERROR" || line.substr(0, 12) == "CLIENT_ERROR" ||
               line.substr(0, 5) == "ERROR") {
      PopAdd();
      if (error_.empty())
        error_ = "destination " + address_ + " answered " + std::string(line.substr(0, 300)) + ": stopped writing to it";
    } else {
      return Status::Protocol("destination " + address_ + " sent an unexpected reply: " +
                              std::string(line.substr(0, 200)));
    }
  }
  std::memmove(rbuf_.get(), rbuf_.get() + pos, rfill_ - pos);
  rfill_ -= pos;
  return Status::OK();
}

Status DestConn::ParseBinary() {
  size_t pos = 0;
  for (;;) {
    if (skip_body_) {
      const size_t n = size_t(std::min<uint64_t>(skip_body_, rfill_ - pos));
      pos += n;
      skip_body_ -= n;
      if (skip_body_) break;
    }
    if (rfill_ - pos < binstore::kHeader) break;
    const char* h = rbuf_.get() + pos;
    if (uint8_t(h[0]) != 0x81)
      return Status::Protocol("destination " + address_ + " sent a reply that is not a binary-protocol response");
    const uint8_t op = uint8_t(h[1]);
    const uint16_t status = Be16(h + 6);
    const uint32_t body = Be32(h + 8);
    const uint32_t opaque = Be32(h + 12);
    if (op == binstore::kNoop) {
      marks_answered_++;
    } else if (op == binstore::kAdd && status == 0) {
      replies_.stored.emplace_back(opaque, (uint64_t(Be32(h + 16)) << 32) | Be32(h + 20));
    } else if (status == binstore::kKeyExists || status == binstore::kNotStored) {
      replies_.tags.push_back(opaque);
    } else if (status != 0 && error_.empty()) {
      // The message is the body's text; take what is already here.
      const size_t have = std::min<size_t>(body, rfill_ - pos - binstore::kHeader);
      char code[8];
      std::snprintf(code, sizeof code, "%#06x", status);
      // Said as the text protocol says it (cw_bin_status_text), whichever protocol answered.
      error_ = "destination " + address_ + " answered " + cw_bin_status_text(status) + " (binary-protocol status " +
               code + " '" + std::string(h + binstore::kHeader, std::min<size_t>(have, 200)) +
               "'): stopped writing to it";
    }
    pos += binstore::kHeader;
    skip_body_ = body;
  }
  std::memmove(rbuf_.get(), rbuf_.get() + pos, rfill_ - pos);
  rfill_ -= pos;
  return Status::OK();
}

namespace {
using Clock = std::chrono::steady_clock;

// Sends on and reads from every live connection until `done` says so; fails on no progress for
// timeout_ms.
template <typename Done>
Status Drive(DestConn* const* conns, size_t n, int timeout_ms, Done done, int (*fd_of)(DestConn*)) {
  auto last = Clock::now();
  std::vector<struct pollfd> pfd;
  std::vector<DestConn*> who;
  for (;;) {
    bool progressed = false;
    pfd.clear();
    who.clear();
    for (size_t i = 0; i < n; i++) {
      DestConn* c = conns[i];
      if (!c || !c->connected()) continue;
      pfd.push_back({fd_of(c), short(POLLIN | (c->queued_iovecs() ? POLLOUT : 0)), 0});
      who.push_back(c);
    }
    if (done()) return Status::OK();
    if (pfd.empty()) return Status::OK();
    const int pr = ::poll(pfd.data(), pfd.size(), 1000);
    if (pr < 0 && errno != EINTR) return Status::IOError(ErrnoMessage("poll", errno));
    for (size_t i = 0; pr > 0 && i < pfd.size(); i++) {
      if (!pfd[i].revents) continue;
      progressed = true;
      CW_RETURN_IF_ERROR(who[i]->Poll());  // replies first: they may say stop
      if (pfd[i].revents & (POLLOUT | POLLERR | POLLHUP)) CW_RETURN_IF_ERROR(who[i]->Flush());
    }
    if (progressed) {
      last = Clock::now();
    } else if (std::chrono::duration<double, std::milli>(Clock::now() - last).count() > timeout_ms) {
      std::string names;
      for (DestConn* c : who) names += (names.empty() ? "" : ", ") + c->address();
      return Status::IOError("timed out: destination(s) " + names + " accepted and answered nothing for " +
                             std::to_string(timeout_ms / 1000) + " s");
    }
  }
}
}  // namespace

Status DestConn::Flush() {
  if (fd_ < 0) return Status::OK();
  bool p = false;
  return TrySend(&p);
}

Status DestConn::FlushAll(DestConn* const* conns, size_t n, int timeout_ms) {
  for (size_t i = 0; i < n; i++)
    if (conns[i] && conns[i]->connected()) CW_RETURN_IF_ERROR(conns[i]->Flush());
  return Drive(
      conns, n, timeout_ms,
      [&] {
        for (size_t i = 0; i < n; i++)
          if (conns[i] && conns[i]->connected() && conns[i]->queued_iovecs()) return false;
        return true;
      },
      [](DestConn* c) { return c->fd_; });
}

Status DestConn::AwaitMarks(DestConn* const* conns, size_t n, int timeout_ms) {
  CW_RETURN_IF_ERROR(FlushAll(conns, n, timeout_ms));
  return Drive(
      conns, n, timeout_ms,
      [&] {
        for (size_t i = 0; i < n; i++)
          if (conns[i] && conns[i]->connected() &&
              (conns[i]->queued_iovecs() || conns[i]->marks_answered_ < conns[i]->marks_sent_))
            return false;
        return true;
      },
      [](DestConn* c) { return c->fd_; });
}

}  // namespace cachewarm
