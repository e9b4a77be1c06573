#include "net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "env.h"

namespace cachewarm {

Conn::~Conn() { Close(); }

void Conn::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status Conn::Connect(const std::string& host, int port, int timeout_ms) {
  Close();
  peer_ = "memcached at " + host + ":" + std::to_string(port);
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) return Status::IOError("cannot resolve " + host + ": " + gai_strerror(rc));
  Status last = Status::IOError("cannot connect to " + peer_);
  for (struct addrinfo* a = res; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = Status::IOError(ErrnoMessage("cannot connect to " + peer_, errno));
      ::close(fd);
      continue;
    }
    struct pollfd p = {fd, POLLOUT, 0};
    int pr = ::poll(&p, 1, timeout_ms);
    int err = 0;
    socklen_t len = sizeof err;
    if (pr <= 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      last = pr <= 0 ? Status::IOError("timed out connecting to " + peer_)
                     : Status::IOError(ErrnoMessage("cannot connect to " + peer_, err));
      ::close(fd);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fd_ = fd;
    ::freeaddrinfo(res);
    return Status::OK();
  }
  ::freeaddrinfo(res);
  return last;
}

Status Conn::SendAll(const Slice& data, int timeout_ms) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (w > 0) {
      off += size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd p = {fd_, POLLOUT, 0};
      int pr = ::poll(&p, 1, timeout_ms);
      if (pr == 0) return Status::IOError("timed out sending to " + peer_);
      continue;
    }
    return Status::IOError(ErrnoMessage("connection to " + peer_ + " lost (killed or restarted?)", errno));
  }
  return Status::OK();
}

Status Conn::Recv(char* buf, size_t cap, size_t* n, int timeout_ms) {
  for (;;) {
    ssize_t r = ::recv(fd_, buf, cap, 0);
    if (r > 0) {
      *n = size_t(r);
      return Status::OK();
    }
    if (r == 0) return Status::IOError("connection closed by " + peer_ + " (killed or restarted?)");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      struct pollfd p = {fd_, POLLIN, 0};
      int pr = ::poll(&p, 1, timeout_ms);
      if (pr == 0) return Status::IOError("timed out waiting for " + peer_);
      continue;
    }
    return Status::IOError(ErrnoMessage("connection to " + peer_ + " lost (killed or restarted?)", errno));
  }
}

Status Conn::Command(const Slice& cmd, const std::string& terminator, std::string* reply, int timeout_ms) {
  CW_RETURN_IF_ERROR(SendAll(cmd, timeout_ms));
  reply->clear();
  char buf[16384];
  for (;;) {
    size_t n = 0;
    CW_RETURN_IF_ERROR(Recv(buf, sizeof buf, &n, timeout_ms));
    reply->append(buf, n);
    if (reply->size() >= terminator.size() &&
        reply->compare(reply->size() - terminator.size(), terminator.size(), terminator) == 0)
      return Status::OK();
    if (reply->rfind("ERROR", 0) == 0 || reply->rfind("SERVER_ERROR", 0) == 0 ||
        reply->rfind("CLIENT_ERROR", 0) == 0) {
      if (reply->find("\r\n") != std::string::npos)
        return Status::Server(peer_ + " answered: " + reply->substr(0, reply->find("\r\n")));
    }
    if (reply->size() > (1 << 20)) return Status::Protocol("reply from " + peer_ + " too long");
  }
}

Status GetStats(Conn* c, ServerStats* out) {
  std::string reply;
  CW_RETURN_IF_ERROR(c->Command("stats\r\n", "END\r\n", &reply, 10000));
  *out = ServerStats();
  out->received = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  size_t pos = 0;
  bool have_pid = false;
  while (pos < reply.size()) {
    size_t e = reply.find("\r\n", pos);
    if (e == std::string::npos) break;
    std::string line = reply.substr(pos, e - pos);
    pos = e + 2;
    if (line.rfind("STAT ", 0) != 0) continue;
    size_t sp = line.find(' ', 5);
    if (sp == std::string::npos) continue;
    std::string name = line.substr(5, sp - 5), val = line.substr(sp + 1);
    if (name == "pid") {
      out->pid = std::atoll(val.c_str());
      have_pid = true;
    } else if (name == "uptime") {
      out->uptime = std::atoll(val.c_str());
    } else if (name == "time") {
      out->time = std::atoll(val.c_str());
    } else if (name == "curr_items") {
      out->curr_items = std::atoll(val.c_str());
    } else if (name == "lru_crawler_running") {
      out->lru_crawler_running = std::atoll(val.c_str());
    } else if (name == "version") {
      out->version = val;
    } else if (name == "conn_yields") {
      out->conn_yields = std::atoll(val.c_str());
    } else if (name == "rusage_user" || name == "rusage_system") {
      out->rusage_s = std::max(0.0, out->rusage_s) + std::atof(val.c_str());
    }
  }
  if (!have_pid) return Status::Protocol("stats reply from " + c->peer() + " has no pid");
  return Status::OK();
}

bool SameServer(const ServerStats& a, const ServerStats& b) {
  return a.pid == b.pid && std::llabs(a.started() - b.started()) <= 2;
}

}  // namespace cachewarm
