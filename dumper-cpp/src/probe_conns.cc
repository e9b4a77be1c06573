#include "probe_conns.h"

#include <poll.h>
#include <time.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "clock.h"

namespace cachewarm {

namespace {
// An outstanding probe older than this: its connection is given up (and reconnected).
constexpr int64_t kGiveUpUs = 5000000;
}  // namespace

ProbeConns::ProbeConns(std::string host, int port, std::string cmd, std::string answer)
    : host_(std::move(host)), port_(port), cmd_(std::move(cmd)), answer_(std::move(answer)) {}

Status ProbeConns::Open(size_t n) {
  for (size_t i = 0; i < n; i++) {
    conns_.emplace_back(new P);
    CW_RETURN_IF_ERROR(conns_.back()->conn.Connect(host_, port_, kConnectTimeoutMs));
  }
  return Status::OK();
}

void ProbeConns::Close() {
  for (auto& p : conns_) p->conn.Close();
  conns_.clear();
}

void ProbeConns::Fail(P* p, const std::string& why, std::vector<std::pair<int64_t, int64_t>>* answered) {
  if (last_error_.empty()) last_error_ = why;
  const int64_t now = MonotonicUs();
  for (int64_t due : p->due) answered->push_back({due, std::max(now, due + kFailedAfterUs)});
  p->due.clear();
  p->buf.clear();
  p->conn.Close();
}

void ProbeConns::Send(int64_t due_us) {
  if (conns_.empty()) return;
  P* p = conns_[next_++ % conns_.size()].get();
  if (p->conn.fd() < 0) {
    Status s = p->conn.Connect(host_, port_, kConnectTimeoutMs);
    if (!s.ok()) {
      if (last_error_.empty()) last_error_ = s.message();
      failed_.push_back({due_us, std::max(MonotonicUs(), due_us + kFailedAfterUs)});
      return;
    }
  }
  // A few bytes into an almost empty socket buffer: a short or failed write is a broken connection.
  const ssize_t w = ::send(p->conn.fd(), cmd_.data(), cmd_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  p->due.push_back(due_us);
  if (w != ssize_t(cmd_.size())) Fail(p, "probe send failed", &failed_);
}

void ProbeConns::Poll(int64_t timeout_us, std::vector<std::pair<int64_t, int64_t>>* answered) {
  answered->insert(answered->end(), failed_.begin(), failed_.end());
  failed_.clear();
  std::vector<struct pollfd> fds;
  std::vector<P*> who;
  for (auto& p : conns_)
    if (p->conn.fd() >= 0 && !p->due.empty()) {
      fds.push_back({p->conn.fd(), POLLIN, 0});
      who.push_back(p.get());
    }
  timeout_us = std::max<int64_t>(0, timeout_us);
  const struct timespec ts = {time_t(timeout_us / 1000000), long(timeout_us % 1000000) * 1000};
  const int r = ::ppoll(fds.empty() ? nullptr : fds.data(), fds.size(), &ts, nullptr);
  if (r <= 0) return;
  const int64_t now = MonotonicUs();
  char tmp[4096];
  for (size_t i = 0; i < fds.size(); i++) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    P* p = who[i];
    const ssize_t n = ::recv(p->conn.fd(), tmp, sizeof tmp, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      Fail(p, "probe connection to " + p->conn.peer() + " lost", answered);
      continue;
    }
    if (n < 0) continue;
    p->buf.append(tmp, size_t(n));
    size_t pos;
    while ((pos = p->buf.find("\r\n")) != std::string::npos) {
      const bool ok = p->buf.compare(0, pos + 2, answer_) == 0 && !p->due.empty();
      if (!ok) {
        Fail(p, "probe answered: " + p->buf.substr(0, std::min<size_t>(pos, 100)), answered);
        break;
      }
      answered->push_back({p->due.front(), now});
      p->due.pop_front();
      p->buf.erase(0, pos + 2);
    }
  }
  for (auto& p : conns_)
    if (!p->due.empty() && now - p->due.front() > kGiveUpUs) Fail(p.get(), "probe unanswered for 5 s", answered);
}

void ProbeConns::Unanswered(int64_t now_us, std::vector<int64_t>* ages) const {
  ages->clear();
  for (const auto& p : conns_)
    for (int64_t due : p->due) ages->push_back(now_us - due);
}

}  // namespace cachewarm
